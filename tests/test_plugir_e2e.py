"""One real PlugIR round on flickr8k-dev photos with the offline embedder and offline LLM.

Slow (real models on CPU); indexes the first 100 images into a temporary gallery (never the user's
cache: a changed offline embedder must not meet stale vectors).
"""

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_one_real_round_with_offline_models(flickr_dir, tmp_path, offline_llm):
    import torch

    from pictrieve.agents.plugir.simulated_user import CaptionAnswerer
    from pictrieve.evaluation.interactive import open_eval_gallery
    from pictrieve.graphs.plugir import build_plugir_graph

    torch.manual_seed(0)
    gallery, captions = open_eval_gallery(flickr_dir, "offline", location=tmp_path / "g", limit=100)
    assert gallery.count() == 100
    target, texts = sorted(captions.items())[7]
    llm = offline_llm
    graph = build_plugir_graph(gallery, llm=llm, answerer=CaptionAnswerer(llm, texts[1:]))
    state = graph.invoke(
        {"description": texts[0]},  # the paper's arm: the offline model alone would get the offline questioner
        context={"arm": "cr+rce+f", "max_rounds": 1, "questions_per_round": 3, "filter_attempts": 1,
                 "reformulation_max_tokens": 96},
    )
    assert len(state["queries"]) == 2 and state["queries"][0] == texts[0]
    (turn,) = state["dialogue"]
    assert turn["question"].endswith("?") and turn["answer"]
    assert len(state["shown"]) == 10 and all(Path(h["path"]).is_file() for h in state["shown"])
    assert 1 <= len(state["retrieval_context"]) <= 10
    assert {t["node"] for t in state["timings"]} == {"reformulation", "retrieval", "rce",
                                                     "questioner", "filter"}
