"""tools.core: what every model needs and no model in particular (imports nothing else of tools).

Names chosen from registries (:mod:`.registry`), the process-wide model cache (:mod:`.model_cache`),
seeded blocks (:mod:`.seeding`), devices (:mod:`.devices`), atomic writes (:mod:`.files`), image
files (:mod:`.images`), image arguments from outside the process (:mod:`.image_inputs`), JPEG thumbnails
(:mod:`.thumbnails`), packaged weights and their cache folder (:mod:`.pypi_assets`,
:mod:`.downloads`), quiet model loading (:mod:`.loading`), time budgets (:mod:`.time_budget`) and the
torch/torchvision pairing check (:mod:`.torch_stack`).
"""
