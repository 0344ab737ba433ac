"""`pictrieve chat` line-by-line protocol on a real gallery (tiny random CLIP over a few photos); only the
chat model is scripted (control flow, not quality)."""

import pytest
from click.testing import CliRunner

from helpers.plugir_fakes import ScriptedChatModel

from pictrieve.cli.chat import chat
from pictrieve.tools.models.chat_models import create_chat_model as REAL_CREATE_CHAT_MODEL

QUESTIONS = ["What color is the dog?", "Where is the dog running?", "Is the dog alone?"]


@pytest.fixture
def fakes(monkeypatch, tmp_path, photo_folder, tiny_clip_embedder):
    from pictrieve.vectorstore.gallery import Gallery

    gallery = Gallery.open(tmp_path / "g", tiny_clip_embedder)
    gallery.add(photo_folder, progress=False)
    monkeypatch.setattr("pictrieve.tools.models.chat_models.create_chat_model",
                        lambda *a, **k: ScriptedChatModel(questions=QUESTIONS))
    return gallery


def run(args, answers, tmp_path):
    db = tmp_path / "s.sqlite"
    # The scripted chat model stands in for an LLM, so the LLM's arm is named (auto picks the offline
    # questioner for the bundled model; a later --arm in args wins).
    return CliRunner().invoke(chat, ["-g", str(tmp_path / "g"), "--checkpoint", str(db), "--top-n", "20",
                                     "--arm", "cr+rce+f", *args], input=answers)


def test_piped_answers_then_found(fakes, tmp_path):
    result = run(["a dog in the snow", "-k", "3"], "brown\nfound 1\n", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Q1: " in result.output and "Q2: " in result.output
    assert "Round 1 query: a brown dog in the snow" in result.output
    # each step reports itself as it finishes, so a slow CPU round shows signs of life
    assert "[retrieval " in result.output and "writing questions..." in result.output
    first_shown = result.output.split("Round 1 query")[1].splitlines()[1].split()[2]
    assert f"Found: {first_shown}" in result.output and first_shown.startswith(str(fakes.location.rsplit("/", 1)[0]))


def test_a_pick_of_no_photo_shown_is_refused_and_the_question_asked_again(fakes, tmp_path):
    # 3 photos shown: "found 11" and "found 0" pick nothing, so the session goes on with the same question
    result = run(["a dog in the snow", "-k", "3"], "found 11\nfound 0\nfound 2\n", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Found: 11" not in result.output and "Found: 0" not in result.output
    assert "There is no photo 11 here: say found 1 to found 3" in result.output
    assert "There is no photo 0 here" in result.output
    asked = [line for line in result.output.splitlines() if line.startswith("Q1: ")]
    assert len(asked) == 3 and all(line.endswith(asked[0][len("Q1: "):]) for line in asked)  # the same question, each time
    second_shown = result.output.split("Round 0 query")[1].splitlines()[2].split()[2]
    assert f"Found: {second_shown}" in result.output


def test_end_of_input_keeps_session_and_resume_continues(fakes, tmp_path):
    first = run(["a dog in the snow", "--session", "s1"], "brown\n", tmp_path)
    assert first.exit_code == 0 and "End of input; session s1 saved" in first.output
    resumed = run(["--session", "s1"], "stop\n", tmp_path)
    assert resumed.exit_code == 0, resumed.output
    assert "Resuming session s1" in resumed.output and "Q2: " in resumed.output
    assert "Stopped." in resumed.output


def test_budget_and_html_contact_sheets(fakes, tmp_path):
    html = tmp_path / "sheets"
    result = run(["a dog in the snow", "--rounds", "1", "--html", str(html)], "brown\n", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Question budget spent" in result.output
    assert sorted(p.name for p in html.iterdir()) == ["round-00.html", "round-01.html"]
    assert "data:image/jpeg;base64," in (html / "round-00.html").read_text()  # real thumbnails


def test_the_bundled_model_gets_the_offline_questioner_and_is_never_loaded(fakes, tmp_path, monkeypatch):
    def no_llm(*args, **kwargs):
        raise AssertionError("the offline arm must not load a language model")

    # the bundled model itself (the fixture's is scripted), made as its need makes it; its weights never load
    monkeypatch.setattr("pictrieve.tools.models.chat_models.create_chat_model", REAL_CREATE_CHAT_MODEL)
    monkeypatch.setattr("pictrieve.tools.models.causal_lm.shared_causal_lm", no_llm)
    result = run(["a dog in the snow", "--arm", "auto", "--rounds", "2"], "yes\nno\n", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Q1: " in result.output and "Q2: " in result.output and "Question budget spent" in result.output
    assert not any(q in result.output for q in QUESTIONS)  # none of the scripted LLM's questions


def test_a_missing_gallery_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setattr("pictrieve.tools.models.chat_models.create_chat_model",
                        lambda *a, **k: ScriptedChatModel(questions=QUESTIONS))
    result = CliRunner().invoke(chat, ["-g", str(tmp_path / "nowhere"), "a dog"], input="")
    assert result.exit_code != 0
    assert "no gallery at" in str(result.exception or result.output)


def test_missing_description_is_a_usage_error(fakes, tmp_path):
    result = run([], "", tmp_path)
    assert result.exit_code == 2 and "DESCRIPTION" in result.output


def test_resuming_a_finished_session_says_so(fakes, tmp_path):
    done = run(["a dog in the snow", "--session", "s2"], "stop\n", tmp_path)
    assert done.exit_code == 0 and "Stopped." in done.output
    again = run(["--session", "s2"], "", tmp_path)
    assert again.exit_code == 0, again.output
    assert "has already ended" in again.output and "Stopped." in again.output
    assert "Q1:" not in again.output  # nothing pending: no question is asked again


def test_eval_interactive_writes_the_plot_and_the_dialogues(tmp_path, tiny_clip_name, monkeypatch):
    import json

    from helpers import make_photo
    from pictrieve.cli.eval_interactive import interactive

    monkeypatch.setattr("pictrieve.tools.models.chat_models.create_chat_model",
                        lambda *a, **k: ScriptedChatModel(questions=QUESTIONS))
    folder = tmp_path / "set"
    lines = []
    for i, text in enumerate(["a dog in the snow", "a cat on a sofa", "a man on a bike", "two kids at a beach"]):
        make_photo(folder / "images" / f"{i}.png", seed=i)
        lines.append(json.dumps({"image": f"images/{i}.png", "captions": [text, text + " today", "photo of " + text]}))
    (folder / "captions.jsonl").write_text("\n".join(lines) + "\n")
    plot, dialogues = tmp_path / "plot.png", tmp_path / "dialogues.json"
    result = CliRunner().invoke(interactive, [str(folder), "--targets", "2", "--rounds", "1", "--arms", "zs,cr,offline",
                                              "--embedder", tiny_clip_name, "--gallery", str(tmp_path / "g"),
                                              "--plot", str(plot), "--dialogues", str(dialogues), "--json"])
    assert result.exit_code == 0, result.output
    assert plot.stat().st_size > 1000
    written = json.loads(dialogues.read_text())
    assert set(written["dialogues"]) == {"zs", "cr", "offline"}
    assert all(len(v) == 2 for v in written["dialogues"].values())
    assert all("spec" in turn for d in written["dialogues"]["offline"] for turn in d["turns"])
    assert set(json.loads(result.stdout)["arms"]) == {"zs", "cr", "offline"}
    assert written["config"]["user"] == "captions"
