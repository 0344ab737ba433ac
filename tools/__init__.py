"""tools: the models and services that agents and graphs call, in three subpackages.

- :mod:`pictrieve.tools.core`: plumbing every model needs and no model in particular: the name
  :class:`~pictrieve.tools.core.registry.Registry`, the process-wide model cache, seeding, devices,
  atomic files, image decoding, packaged-weight downloads, quiet loading, time budgets.
- :mod:`pictrieve.tools.models`: the model families, each behind one protocol and one registry:
  embedders, detectors, captioners (and zero-shot tags), chat models and the one policy for calling
  them, VLMs, visualizers (text-to-image, exemplars, guide images on disk), sentence encoder,
  ImageNet classifier, quality scorers.
- :mod:`pictrieve.tools.web`: search backends (the web, a local folder of pages), fetching pages
  safely, page text.

Imports inside tools go one way: ``web`` -> ``models`` -> ``core`` (``web`` may use ``core``
directly); nothing in ``core`` imports ``models`` or ``web``, nothing in ``models`` imports ``web``,
and no module of tools depends on itself through others, not even through an import inside a
function. A family may name a builder of a lower module as a ``"module:attribute"`` string
(registries load those on first use). ``tests/test_import_layers.py`` checks all of this.
"""
