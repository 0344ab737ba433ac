"""Prompts are package data read by one loader (:mod:`pictrieve.prompts`), never by a path beside a source file."""

import ast
from pathlib import Path

import pytest

from pictrieve import prompts

ROOT = Path(__file__).resolve().parents[1]
INSTALLED = ["agents", "graphs", "tools", "vectorstore", "ui", "mcp_server", "cli", "evaluation"]


def test_every_prompt_file_loads_with_the_one_loader():
    folder = ROOT / "prompts"
    files = [p for p in folder.rglob("*") if p.suffix in {".txt", ".yaml"}]
    assert len(files) >= 15
    for path in files:
        parts = path.relative_to(folder).with_suffix("").parts
        loaded = prompts.text(*parts) if path.suffix == ".txt" else prompts.data(*parts)
        assert loaded, path


def test_chat_prompts_split_into_turns_and_a_missing_prompt_says_so():
    turns = prompts.chat_turns("plugir", "reformulate")
    assert turns[0][0] == "system" and turns[-1][0] == "user"
    assert not any(body.startswith("###") for _, body in turns)
    with pytest.raises(prompts.PromptError, match="vsa/no_such_prompt.txt"):
        prompts.text("vsa", "no_such_prompt")
    with pytest.raises(prompts.PromptError, match="no '### <role>' turns"):
        prompts.chat_turns("vsa", "planner")


def test_no_module_reads_the_prompts_folder_except_the_loader():
    """Issue 29: five loaders, one of them reading a path beside its source file, became one."""
    readers = []
    for top in INSTALLED:
        for path in (ROOT / top).rglob("*.py"):
            source = path.read_text(encoding="utf-8")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Constant) and node.value in ("pictrieve.prompts", "prompts"):
                    readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == []
