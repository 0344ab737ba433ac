"""tools.models: the model families behind their protocols (:mod:`.protocols`), each chosen by name.

Embedders (:mod:`.embedders`), detectors (:mod:`.detectors`, the SSD model in :mod:`.object_detector`),
captioners (:mod:`.captioners`, :mod:`.image_tags`, :mod:`.vlm`), chat models (:mod:`.chat_models`,
:mod:`.causal_lm`) and the one policy for calling them (:mod:`.llm_calls`), visualizers
(:mod:`.visualizers`, :mod:`.text_to_image`, :mod:`.guide_images`), the sentence encoder and ImageNet
classifier the offline models are built from, and quality scorers. Imports only :mod:`pictrieve.tools.core`
besides its own modules.
"""
