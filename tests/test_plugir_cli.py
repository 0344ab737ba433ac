"""`pictrieve chat` line-by-line protocol, with the gallery and chat model swapped for fakes."""

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from plugir_fakes import ScriptedChatModel, make_gallery  # noqa: E402

from pictrieve.cli.chat import chat  # noqa: E402

QUESTIONS = ["What color is the dog?", "Where is the dog running?", "Is the dog alone?"]


@pytest.fixture
def fakes(monkeypatch):
    gallery = make_gallery()
    monkeypatch.setattr("pictrieve.vectorstore.gallery.Gallery.open",
                        classmethod(lambda cls, *a, **k: gallery))
    monkeypatch.setattr("pictrieve.tools.chat_models.create_chat_model",
                        lambda *a, **k: ScriptedChatModel(questions=QUESTIONS))
    return gallery


def run(args, answers, tmp_path):
    db = tmp_path / "s.sqlite"
    return CliRunner().invoke(chat, ["-g", "unused", "--checkpoint", str(db), "--top-n", "20", *args],
                              input=answers)


def test_piped_answers_then_found(fakes, tmp_path):
    result = run(["a dog in the snow", "-k", "3"], "brown\nfound 1\n", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Q1: " in result.output and "Q2: " in result.output
    assert "Round 1 query: a brown dog in the snow" in result.output
    assert "Found: /photos/" in result.output


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


def test_missing_description_is_a_usage_error(fakes, tmp_path):
    result = run([], "", tmp_path)
    assert result.exit_code == 2 and "DESCRIPTION" in result.output
