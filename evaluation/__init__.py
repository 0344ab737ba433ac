"""evaluation: measuring pictrieve's methods on captioned folders.

Importing it registers the planted control embedders (:mod:`pictrieve.evaluation.controls`), so an
evaluation can name ``random-projection:SEED`` like any embedder.
"""

from pictrieve.evaluation.controls import register_controls

register_controls()
