"""QC2 on a pictrieve gallery: train from its annotations, load for it, retrieve with completions.

The graph that runs completion then retrieval, and the one-call ``quality_search``, live in
:mod:`pictrieve.graphs.qc2` (agents never import graphs).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

from pictrieve.agents.qc2.annotation import annotated_score_keys, build_training_data, fingerprint_of
from pictrieve.agents.qc2.bundle import QC2Model, load_qc2_model
from pictrieve.agents.qc2.errors import QC2ModelError
from pictrieve.agents.qc2.training import QC2TrainConfig, TrainReport, train_completion_model
from pictrieve.vectorstore.fusion import fuse_hits

logger = logging.getLogger(__name__)

MODEL_DIR_NAME = "qc2"
# With several sampled completions, each one retrieves this many candidates before fusion.
FUSION_POOL = 50


def default_model_dir(gallery: Any) -> Path:
    """``<gallery folder>/qc2``; a gallery on a Chroma server has no folder, so ask for one."""
    location = str(gallery.location)
    if location.startswith(("http://", "https://")):
        raise QC2ModelError(
            f"gallery {location} is on a server: say where the QC2 model lives with --out/--model DIR"
        )
    return Path(location) / MODEL_DIR_NAME


def preferred_quality_keys(items: Sequence[Any]) -> list[str]:
    """The annotated quality scores to train on: LAION aesthetics when present, else all annotated."""
    keys = annotated_score_keys(items)
    if not keys:
        raise QC2ModelError("the gallery has no quality scores yet: run `pictrieve quality annotate --gallery GALLERY`")
    return ["laion_aesthetic"] if "laion_aesthetic" in keys else keys


def train_on_gallery(
    gallery: Any,
    *,
    quality_keys: Sequence[str] | None = None,
    base_model: str | None = None,
    n_levels: int = 3,
    config: QC2TrainConfig | None = None,
    out: str | Path | None = None,
    random_levels: bool = False,
    save: bool = True,
    progress: bool = True,
    portable: bool = False,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    max_seconds: float | None = None,
    budget: Any = None,
    heldout: Any = None,
    probe_size: int | None = 250,
) -> tuple[QC2Model, TrainReport, Path | None]:
    """Fit levels on the gallery's annotations, fine-tune the completion model, save it next to the gallery.

    ``portable``: the model is for searching *other* galleries (its training gallery is a separate
    captioned collection): it is saved without the gallery fingerprint, so any gallery may load it,
    and it records where it was trained. ``checkpoint_dir`` / ``checkpoint_every`` / ``max_seconds`` or
    ``budget`` (a :class:`~pictrieve.tools.core.time_budget.TimeBudget` that also covers loading the model):
    resumable training (see :func:`train_completion_model`); a run stopped before its first training
    step saves no model (``directory`` is None). The level-usage check runs after every
    epoch on ``probe_size`` of the training captions (in-sample) and, with ``heldout`` (another
    annotated gallery, e.g. held-out rows of the same collection), on up to ``probe_size`` of its
    captions with levels assigned by the training thresholds; results land in ``report.probe_losses``.
    """
    from pictrieve.agents.qc2.level_check import level_variants, sample_examples
    from pictrieve.tools.core.time_budget import TimeBudget
    from pictrieve.tools.models.causal_lm import OFFLINE_DEFAULT_LM, load_causal_lm

    budget = budget if budget is not None else TimeBudget(max_seconds)
    base_model = base_model or OFFLINE_DEFAULT_LM
    config = config or QC2TrainConfig()
    items = list(gallery.items())
    keys = list(quality_keys) if quality_keys else preferred_quality_keys(items)
    examples, axes = build_training_data(items, keys, n_levels=n_levels, random_levels=random_levels,
                                         seed=config.seed)
    probes: dict[str, list] = {}
    if probe_size:
        if not random_levels:  # in-sample: captions it trains on (their true levels)
            true_axes = axes
            in_sample = sample_examples(examples, probe_size, seed=config.seed)
        else:  # FT-random trains on random levels: the check asks about the gallery's real ones
            real, true_axes = build_training_data(items, keys, n_levels=n_levels)
            in_sample = sample_examples(real, probe_size, seed=config.seed)
        for name, variant in level_variants(in_sample, true_axes, seed=config.seed, per_axis=False).items():
            probes[f"train_{name}"] = variant
        if heldout is not None:
            held, _ = build_training_data(list(heldout.items()), keys, axes=true_axes)
            held = sample_examples(held, probe_size, seed=config.seed)
            for name, variant in level_variants(held, true_axes, seed=config.seed).items():
                probes[f"heldout_{name}"] = variant
    logger.info("training QC2 on %d captions, axes %s, base %s", len(examples), [a.axis for a in axes], base_model)
    model, tokenizer = load_causal_lm(base_model, device="cpu")
    model, report, allowed = train_completion_model(
        model, tokenizer, examples, [a.axis for a in axes], config, progress=progress,
        checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, budget=budget, probes=probes,
    )
    source = {"location": str(gallery.location), "embedder": gallery.embedder_name, "count": gallery.count()}
    if heldout is not None:
        source["heldout"] = {"location": str(heldout.location), "count": heldout.count()}
    bundle = QC2Model(
        model=model,
        tokenizer=tokenizer,
        base_model=base_model,
        axes=axes,
        fingerprint=None if portable else fingerprint_of(gallery),
        allowed_token_ids=allowed,
        training={**report.to_dict(), "random_levels": random_levels, "config": vars(config),
                  "portable": portable},
        gallery=source,
    )
    directory = None
    if save and (report.steps or not report.stopped_early):  # nothing trained yet: no model to save
        directory = bundle.save(out or default_model_dir(gallery))
    return bundle, report, directory


def load_for_gallery(gallery: Any, model_dir: str | Path | None = None) -> QC2Model:
    """The QC2 model trained for this gallery (refused if it was trained for another one).

    Loading takes seconds (the base language model, its trained weights merged in), so it is announced
    (:func:`~pictrieve.tools.core.model_cache.announcing_model_loads`) and kept for the process: a server, or a
    second search, reuses it until the model folder is saved again (its ``qc2.json`` changes) or the gallery
    changes. Callers only read it (completions run under ``torch.no_grad``)."""
    from pictrieve.agents.qc2.bundle import BUNDLE_FILE, read_bundle_info
    from pictrieve.tools.core.model_cache import shared_model

    directory = Path(model_dir or default_model_dir(gallery))
    fingerprint = fingerprint_of(gallery)
    meta = read_bundle_info(directory)  # no model there: one line saying to train one, before anything loads
    saved = (directory / BUNDLE_FILE).stat().st_mtime_ns
    return shared_model(("qc2-model", str(directory.resolve()), saved, fingerprint),
                        lambda: load_qc2_model(directory, fingerprint=fingerprint, device="cpu"),
                        label=f"the QC2 model in {directory} ({meta.get('base_model')} and its trained weights)")


def retrieve_for_completions(gallery: Any, completions: Sequence[str], k: int = 10) -> list[Any]:
    """Search with one completion, or fuse several completions' rankings by RRF."""
    completions = [c for c in completions if c and c.strip()]
    if not completions:
        raise ValueError("no completed query to search with")
    if len(completions) == 1:
        return gallery.search_text(completions[0], k=k)
    pool = max(k, FUSION_POOL)
    # The fused hits' score is the RRF score, not a cosine.
    return fuse_hits([gallery.search_text(text, k=pool) for text in completions], k=k)
