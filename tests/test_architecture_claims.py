"""docs/architecture.md says what the code is: the claims a test can check, checked against the source.

- every file, folder and ``pictrieve.…`` name the page names exists (a module, and the class, function or
  attribute after it), and every function it shows called (```run_search(store, request)```) is defined;
- the layer drawing is the order ``tests/test_import_layers.py`` enforces;
- its MCP tool list is the server's (``helpers.mcp.TOOLS``, which tests/test_mcp_server.py checks against the
  running server), its LangChain tool list the tools ``integrations/langchain_tools.py`` makes, and
  ``langgraph.json`` serves every built-in method from ``graphs/serving.py``;
- run settings never sit in a method's input (its state), and the search request has the fields it lists.

Read from the source where it can be (nothing imported but the registry and the search request).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from helpers.mcp import TOOLS
from test_import_layers import LAYERS, ROOT

DOC = ROOT / "docs" / "architecture.md"
PLACEHOLDERS = {"m", "<m>", "*", "m.py", "<m>.py"}
"""Path parts that stand for any method (``agents/m/``, ``graphs/<m>.py``, ``agents/*/__init__.py``)."""
ENTRY_POINT_GROUPS = {"pictrieve.methods"}
"""Dotted names that are entry-point groups, not modules."""


def doc() -> str:
    return DOC.read_text()


def prose() -> str:
    """The page's text with its line breaks and runs of spaces as one space (a sentence may wrap anywhere)."""
    return " ".join(doc().split())


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def defined_names(path: Path) -> set[str]:
    """Names a module defines or imports at its top level, and the names defined inside its classes."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for inner in node.body:
                    if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(inner.name)
                    elif isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                        names.add(inner.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def module_file(parts: list[str]) -> Path | None:
    path = ROOT.joinpath(*parts)
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def missing_dotted(name: str) -> str | None:
    """Why ``pictrieve.a.b.C.d`` names nothing (the longest module prefix, then attributes it defines), else None."""
    parts = name.split(".")[1:]
    for cut in range(len(parts), -1, -1):
        path = module_file(parts[:cut]) if cut else ROOT / "__init__.py"
        if path is not None:
            rest = parts[cut:]
            if rest and rest[0] not in defined_names(path):
                return f"{name}: {path.relative_to(ROOT)} defines no {rest[0]}"
            return None
    return f"{name}: no such module"


def all_defined_functions() -> set[str]:
    """What the package defines (functions, classes) or calls from its dependencies (``interrupt``, ``Field``)."""
    names: set[str] = set()
    for path in ROOT.rglob("*.py"):
        if path.relative_to(ROOT).parts[0] in {"tests", ".git"}:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("pictrieve"):
                names.update(a.asname or a.name for a in node.names)
    return names


def test_every_file_folder_and_name_the_page_gives_exists():
    missing = []
    known_files = {p.name for p in ROOT.rglob("*") if ".git" not in p.parts and "node_modules" not in p.parts}
    functions = all_defined_functions()
    for span in code_spans(doc()):
        for name in re.findall(r"pictrieve(?:\.[A-Za-z_][A-Za-z0-9_]*)+", span):
            why = None if name in ENTRY_POINT_GROUPS else missing_dotted(name)
            if why:
                missing.append(why)
        token = span.strip()
        if re.fullmatch(r"[\w./<>*-]+/|[\w./<>*-]+\.(py|json|md)", token):
            parts = token.rstrip("/").split("/")
            if PLACEHOLDERS & set(parts) or token.startswith("."):
                continue
            if len(parts) == 1:  # a file named by itself: somewhere in the repository
                if parts[0] not in known_files:
                    missing.append(f"{token}: no such file")
            elif not ROOT.joinpath(*parts).exists():
                missing.append(f"{token}: no such path")
        call = re.fullmatch(r"(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)\(.*\)", token)
        if call and "_m_" not in token and not token.startswith("graph.") and call.group(1) not in functions:
            missing.append(f"{token}: nothing defines {call.group(1)}")
    assert not missing, "docs/architecture.md names what is not there:\n" + "\n".join(missing)


def drawn_layers() -> list[list[str]]:
    """The layer drawing's rows, top (the command line) to bottom: the package names each row starts with."""
    section = doc().split("## The layers", 1)[1]
    drawing = section.split("```", 2)[1]
    rows = []
    for line in drawing.splitlines():
        packages = []
        for word in line.split():
            if word not in LAYERS:
                break
            packages.append(word)
        if packages:
            rows.append(packages)
    return rows


def test_the_layer_drawing_is_the_order_the_import_test_enforces():
    rows = drawn_layers()
    assert sorted(p for row in rows for p in row) == sorted(LAYERS), rows
    levels = [{LAYERS[p] for p in row} for row in rows]
    assert all(len(level) == 1 for level in levels), f"a drawn row mixes layers: {rows}"
    assert [level.pop() for level in levels] == sorted({LAYERS[p] for p in LAYERS}, reverse=True), rows


def listed_after(text: str, lead: str) -> set[str]:
    """The backticked names in the parenthesis that follows ``lead``."""
    start = text.index(lead) + len(lead)
    return set(re.findall(r"`(\w+)`", text[start:text.index(")", start)]))


def test_the_mcp_and_langchain_tool_lists_are_the_real_ones():
    text = prose()
    assert listed_after(text, "the server's tools (") == TOOLS
    tree = ast.parse((ROOT / "integrations" / "langchain_tools.py").read_text())
    made = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.endswith("_tool"):
            for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
                if arg.arg == "name" and isinstance(default, ast.Constant):
                    made.add(default.value)
    assert listed_after(text, "the tools (") == made


def test_langgraph_json_serves_every_method_from_serving():
    from pictrieve.graphs.registry import available_methods

    graphs = json.loads((ROOT / "langgraph.json").read_text())["graphs"]
    assert set(graphs) == set(available_methods())
    assert all(target == f"./graphs/serving.py:{name}" for name, target in graphs.items())
    assert "`langgraph.json` names one factory per method in `graphs/serving.py`" in prose()


def test_run_settings_never_sit_in_a_methods_input():
    """"Run settings travel as LangGraph context, never in state": no method's input schema has a field of its
    settings."""
    from typing import get_type_hints

    from pictrieve.graphs.registry import available_methods, get_method

    assert "travel as LangGraph context (`graph.invoke(input, context={\"k\": 5})`), never in state" in prose()
    for name in available_methods():
        method = get_method(name)
        settings = set(method.settings_class().names())
        inputs = set(get_type_hints(method.input_class()))
        assert not settings & inputs, f"{name}: {sorted(settings & inputs)} are both settings and input"


def test_the_search_request_has_the_fields_the_page_lists():
    from pictrieve.vectorstore.hits import ImageHit
    from pictrieve.vectorstore.search_request import SearchAnswer, SearchRequest

    text = prose()
    lead = "A plain search is one **`SearchRequest`** (`vectorstore/search_request.py`: "
    start = text.index(lead) + len(lead)
    listed = set(re.findall(r"`(\w+)`", text[start:text.index("the defaults are there", start)]))
    assert listed == set(SearchRequest.model_fields)
    answer = text[text.index("one **`SearchAnswer`** ("):]
    answer = answer[: answer.index("A bad value")]
    named = set(re.findall(r"`(\w+)`", answer)) - {"SearchAnswer", "vector", "words", "both", "filters"}
    offered = set(SearchAnswer.model_fields) | {n for n in dir(SearchAnswer) if not n.startswith("_")}
    assert named <= offered | set(ImageHit.model_fields), named  # the answer's, or its hits' ("each with ...")
