"""Dependencies point one way, and no module imports itself in a circle.

Read from the source (no module is imported): every ``import pictrieve...`` of every installed module.

- **Layers**: ``cli`` -> ``ui``/``mcp_server``/``integrations``/``evaluation`` -> ``graphs`` -> ``agents`` -> ``vectorstore`` -> ``tools``/``prompts``
  -> ``errors``. No import, at the top of a module or inside a function, goes to a higher layer: a method's
  folder (``agents/<m>/``) names its graph builder as a ``"module:attribute"`` string, never an import.
- **No circle**: the imports made when a module loads (top level, outside ``if TYPE_CHECKING``) form no
  cycle, so no module depends on the order in which others are imported.
- **No circle inside vectorstore**: the modules of ``vectorstore`` reach none of themselves through others, counting
  imports inside functions and those made for type checking only (a store core, the service above it, indexing and
  the indexes derived from a gallery are layers too: issue 39).
- **tools shows its parts**: every module of ``tools`` lives in ``tools/core``, ``tools/models`` or
  ``tools/web``; imports inside tools go ``web`` -> ``models`` -> ``core`` and never back, and no module of
  tools reaches itself through others, counting imports inside functions and ``importlib.import_module``
  of a literal name too (a registry's ``"module:attribute"`` string is a name, not an import).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_INSTALLED = {"tests", "benchmarks", "examples", "docs", "build", "dist"}
TOOLS_PARTS = {"core": 0, "models": 1, "web": 2}
LAYERS = {"errors": 0, "tools": 1, "prompts": 1, "vectorstore": 2, "agents": 3, "graphs": 4,
          "evaluation": 5, "ui": 5, "mcp_server": 5, "integrations": 5, "cli": 6}


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in NOT_INSTALLED or relative.parts[0].startswith(".") or relative == Path("setup.py"):
            continue
        parts = list(relative.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(["pictrieve", *parts])] = path
    return found


def imports(name: str, path: Path, *, top_level_only: bool, type_checking: bool = False) -> set[str]:
    """The pictrieve modules ``name`` imports (a ``from X import y`` counts X and X.y when that is a module); with
    ``type_checking`` those under ``if TYPE_CHECKING`` too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit([*node.body, *node.orelse] if type_checking else node.orelse)
                continue
            if isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                out.add(base)
                out.update(f"{base}.{alias.name}" for alias in node.names)
            if not top_level_only:  # importlib.import_module("pictrieve..."): an import all the same
                for call in ast.walk(node):
                    if (isinstance(call, ast.Call) and ast.unparse(call.func).endswith("import_module")
                            and call.args and isinstance(call.args[0], ast.Constant)
                            and isinstance(call.args[0].value, str)):
                        out.add(call.args[0].value)
            if top_level_only:
                for field in ("body", "orelse", "handlers", "finalbody"):
                    if isinstance(node, (ast.If, ast.Try, ast.With)) or isinstance(node, ast.ExceptHandler):
                        visit(getattr(node, field, []) or [])
            else:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        visit([child])
                    elif isinstance(child, ast.ExceptHandler):
                        visit(child.body)

    visit(tree.body)
    return {m for m in out if m == "pictrieve" or m.startswith("pictrieve.")}


def resolve(target: str, known: dict[str, Path]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def graph(*, top_level_only: bool, type_checking: bool = False) -> dict[str, set[str]]:
    known = modules()
    edges = {}
    for name, path in known.items():
        targets = {resolve(t, known) for t in imports(name, path, top_level_only=top_level_only,
                                                      type_checking=type_checking)}
        edges[name] = {t for t in targets if t and t != name}
    return edges


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def test_no_import_goes_to_a_higher_layer():
    upward = sorted(f"{source} -> {target}" for source, targets in graph(top_level_only=False).items()
                    for target in targets
                    if layer(source) is not None and layer(target) is not None and layer(target) > layer(source))
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_no_import_circle_when_modules_load():
    cycles = cycles_in(graph(top_level_only=True))
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def cycles_in(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules that has one (empty: no circle)."""
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(module: str, stack: list[str]) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                walk(target, stack)
        stack.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            walk(module, [])
    return cycles


def vectorstore_graph() -> dict[str, set[str]]:
    """Imports between modules of vectorstore: lazy ones, ``importlib.import_module`` and type-checking-only ones
    included."""
    inside = "pictrieve.vectorstore"
    return {source: {t for t in targets if t.startswith(inside + ".")}
            for source, targets in graph(top_level_only=False, type_checking=True).items()
            if source.startswith(inside + ".")}


def test_no_import_circle_inside_vectorstore_even_through_lazy_or_type_imports():
    """Issue 39: ``gallery -> store_common -> keywords -> changes -> gallery``, ``tiles <-> gallery`` and
    ``indexing <-> store`` were circles; the store's modules now stand in layers (core, backends, service)."""
    edges = vectorstore_graph()
    assert "pictrieve.vectorstore.core" in edges["pictrieve.vectorstore.indexing"]  # the reader sees what it must
    cycles = cycles_in(edges)
    assert not cycles, "import circles inside vectorstore:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_vectorstore_check_sees_lazy_and_type_checking_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from pictrieve.vectorstore.store import A\n"
                      "def f():\n    from pictrieve.vectorstore.gallery import Gallery\n")
    found = imports("pictrieve.vectorstore.m", source, top_level_only=False, type_checking=True)
    assert {"pictrieve.vectorstore.store", "pictrieve.vectorstore.gallery"} <= found
    assert "pictrieve.vectorstore.store" not in imports("pictrieve.vectorstore.m", source, top_level_only=False)


def tools_part(module: str) -> str | None:
    """``core``, ``models`` or ``web`` for a module of tools (``""`` for a module outside them)."""
    parts = module.split(".")
    if parts[:2] != ["pictrieve", "tools"] or len(parts) == 2:
        return None
    return parts[2] if parts[2] in TOOLS_PARTS else ""


def tools_graph() -> dict[str, set[str]]:
    """Imports between modules of tools, lazy ones and ``importlib.import_module`` included."""
    return {source: {t for t in targets if tools_part(t) is not None}
            for source, targets in graph(top_level_only=False).items() if tools_part(source) is not None}


def test_every_tools_module_is_in_a_part():
    loose = sorted(m for m in modules() if tools_part(m) == "")
    assert not loose, f"modules of tools outside core/, models/ and web/: {loose}"


def test_tools_parts_import_downward_only():
    upward = sorted(f"{source} -> {target}" for source, targets in tools_graph().items() for target in targets
                    if TOOLS_PARTS[tools_part(target)] > TOOLS_PARTS[tools_part(source)])
    assert not upward, "imports inside tools against web -> models -> core:\n" + "\n".join(upward)


def test_no_import_circle_inside_tools_even_through_lazy_imports():
    cycles = cycles_in(tools_graph())
    assert not cycles, "import circles inside tools:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checks_see_imports():
    """The reader finds what it must: a method package's light import, the registry's agents import."""
    edges = graph(top_level_only=True)
    assert "pictrieve.agents.method" in edges["pictrieve.agents.search"]
    assert "pictrieve.agents.method" in edges["pictrieve.graphs.registry"]
    lazy = graph(top_level_only=False)
    assert "pictrieve.tools.web.local_pages" in lazy["pictrieve.tools.web.search"]  # inside a function
    assert "pictrieve.tools.web.local_pages" not in edges["pictrieve.tools.web.search"]
    assert "pictrieve.evaluation.retrieval" in edges["pictrieve.evaluation.head_training"]


def gallery_private_names() -> set[str]:
    """``Gallery``'s private names: its ``_methods`` and the ``self._attributes`` that gallery.py uses."""
    tree = ast.parse((ROOT / "vectorstore" / "gallery.py").read_text(encoding="utf-8"))
    gallery = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Gallery")
    names = {node.name for node in ast.walk(gallery) if isinstance(node, ast.FunctionDef)}
    names |= {node.attr for node in ast.walk(gallery)
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"}
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def private_accesses(source: str, names: set[str]) -> list[str]:
    """``x._name`` (``x`` not ``self``/``cls``) and ``getattr(x, "_name")`` for the names in ``names``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in names and not (
                isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}):
            found.append(ast.unparse(node))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in {"getattr", "setattr", "hasattr", "delattr"} and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in names):
            found.append(ast.unparse(node))
    return found


def test_nothing_outside_gallery_py_touches_a_private_gallery_name():
    """Indexing, tiles, sync and everyone else write through the public API (issue 21): a change inside
    Gallery cannot break another module. Scans every Python file of the repository, tests included."""
    names = gallery_private_names()
    assert {"_get_collection", "_client", "_db"} <= names  # the reader sees what it must
    assert sorted(private_accesses("view._get_collection(create=True)\nself._client\ngetattr(g, '_client')", names)) == [
        "getattr(g, '_client')", "view._get_collection"]
    touched = [
        f"{path.relative_to(ROOT)}: {access}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != ROOT / "vectorstore" / "gallery.py" and not any(p.startswith(".") for p in path.relative_to(ROOT).parts)
        and path.relative_to(ROOT).parts[0] not in {"build", "dist"}
        for access in private_accesses(path.read_text(encoding="utf-8"), names)
    ]
    assert not touched, "private Gallery names used outside vectorstore/gallery.py:\n" + "\n".join(touched)


def test_only_the_store_touches_chroma():
    """Issue 29: Chroma stays behind ``vectorstore/``: no other installed module imports ``chromadb`` or
    reaches for a gallery's Chroma client or collection, so a second store needs no edit elsewhere."""
    touching = []
    for name, path in modules().items():
        if name.split(".")[1:2] == ["vectorstore"]:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            imported = ([a.name for a in node.names] if isinstance(node, ast.Import)
                        else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(m == "chromadb" or m.startswith("chromadb.") for m in imported):
                touching.append(f"{name}:{node.lineno} imports chromadb")
            if isinstance(node, ast.Attribute) and node.attr in ("collection", "_collection"):
                touching.append(f"{name}:{node.lineno} reads .{node.attr}")
            if isinstance(node, ast.Name) and node.id in ("chroma_client", "chroma_collection"):
                touching.append(f"{name}:{node.lineno} uses {node.id}")
    assert not touching, "Chroma used outside vectorstore/:\n" + "\n".join(touching)


def test_indexing_writes_through_the_writer_protocol():
    """Issue 29: indexing, watching and syncing know a gallery only as an ``ImageWriter``
    (``vectorstore/store.py``): they never import ``gallery.py`` (not even for type checking, which made
    gallery.py and indexing.py depend on each other) nor one another's private names."""
    for module in ("indexing", "watching", "syncing"):
        tree = ast.parse((ROOT / "vectorstore" / f"{module}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "pictrieve.vectorstore.gallery", f"{module}.py imports gallery.py"
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                assert not private, f"{module}.py imports private names {private} from {node.module}"
# --- no front end names a method ------------------------------------------------------------------------------
# The front ends reach every method through the registry (graphs/registry.py) and every need through the need
# registry (agents/needs.py): the LangGraph server, `pictrieve search --method`, the MCP server and the page's
# generic parts. A front-end module names a built-in method neither as a string (exactly the method's name;
# docstrings aside) nor by importing its modules (agents/<m>/ or graphs/<m>.py).
# The exceptions are views of their own for one method, listed below with why; a listed exception that is no
# longer used fails too, so the list stays exact.

FRONT_END_PARTS = ("pictrieve.ui", "pictrieve.mcp_server")
FRONT_END_MODULES = {"pictrieve.cli.method_search", "pictrieve.graphs.serving", "pictrieve.graphs.serving_http"}
OWN_VIEWS: dict[str, dict[str, str]] = {
    "pictrieve.ui.app": {"search": "the status of the Ask tab's web search (VSA's need 'search', named like the "
                                   "plain search method)"},
    "pictrieve.ui.methods": {m: "PAGE_TABS: the methods with a tab of their own on the page (every other method "
                                "gets the generic tab)" for m in ("search", "plugir", "qc2", "vsa")},
    "pictrieve.ui.search": {"search": "the Search tab is plain search's view (its filter words too)"},
    "pictrieve.ui.chat": {"plugir": "the Chat tab is PlugIR's view (questions, answers, its paused session)"},
    "pictrieve.ui.steer": {"qc2": "the Steer tab is QC2's view (relevance and quality levels)"},
    "pictrieve.ui.ask": {"vsa": "the Ask tab shows the Vision Search Assistant's step lines"},
    "pictrieve.ui.visualize": {m: "the Visualize tab's controls are VisRet's and NEEDLE's (PAGE_METHODS)"
                               for m in ("visret", "needle")},
    "pictrieve.ui.needle": {"needle": "NEEDLE's review view on the page: its trust weights per topic"},
    "pictrieve.ui.state": {"plugir": "the page's state keeps the Chat tab's PlugIR graph (sessions in SQLite)",
                           "needle": "and the Visualize tab's NEEDLE review sessions (one checkpointer per app)"},
    "pictrieve.mcp_server.service": {
        "plugir": "find_photo/answer_question are PlugIR's own tools (a paused session per photo sought)",
        "vsa": "ask_about_image is the Vision Search Assistant's own tool, with its step lines",
        "visret": "ask_gallery answers with VisRet's reader over the best photos",
        "search": "ask_about_image's openWorldHint: whether VSA's need 'search' (named like the plain search "
                  "method) is the web",
    },
    "pictrieve.cli.method_search": {
        "search": "the command's own default: plain search runs on the gallery directly, by text or --image",
    },
}


def builtin_method_names() -> set[str]:
    """``name=`` of every ``METHOD = Method(...)`` in ``agents/<m>/__init__.py``, read from the source."""
    names = set()
    for init in (ROOT / "agents").glob("*/__init__.py"):
        for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "Method":
                names.update(k.value.value for k in node.keywords
                             if k.arg == "name" and isinstance(k.value, ast.Constant))
    return names


def method_modules(names: set[str], known: dict[str, Path]) -> dict[str, str]:
    """``{module: method}``: each method's folder and graph module."""
    found = {}
    for module, path in known.items():
        parts = module.split(".")
        if len(parts) >= 3 and parts[1] == "agents" and parts[2] in names:
            found[module] = parts[2]
        elif len(parts) == 3 and parts[1] == "graphs" and parts[2] in names:
            found[module] = parts[2]
    return found


def methods_named(module: str, path: Path, names: set[str], by_module: dict[str, str]) -> dict[str, list[str]]:
    """``{method: [where, ...]}`` for each built-in method ``module`` names as a string or imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                and id(node) not in docstrings):
            found.setdefault(node.value, []).append(f"line {node.lineno}: {node.value!r}")
    for target in imports(module, path, top_level_only=False):
        if target in by_module:
            found.setdefault(by_module[target], []).append(f"imports {target}")
    return found


def front_ends(known: dict[str, Path]) -> dict[str, Path]:
    return {m: p for m, p in known.items()
            if m in FRONT_END_MODULES or any(m == part or m.startswith(part + ".") for part in FRONT_END_PARTS)}


def test_no_front_end_names_a_method():
    known = modules()
    names = builtin_method_names()
    by_module = method_modules(names, known)
    assert {"search", "plugir", "qc2", "vsa", "visret", "needle"} <= names and "pictrieve.graphs.qc2" in by_module
    broken, unused = [], []
    for module, path in sorted(front_ends(known).items()):
        named = methods_named(module, path, names, by_module)
        allowed = OWN_VIEWS.get(module, {})
        broken += [f"{module} names the method {m!r} ({'; '.join(where)}): reach it through the registry"
                   for m, where in sorted(named.items()) if m not in allowed]
        unused += [f"{module}: {m!r}" for m in allowed if m not in named]
    assert not broken, "\n".join(broken)
    assert not unused, "exceptions no longer needed (remove them from OWN_VIEWS): " + ", ".join(unused)


def test_the_method_name_check_sees_strings_and_imports(tmp_path):
    source = tmp_path / "front.py"
    source.write_text('"""A docstring may say qc2."""\nfrom pictrieve.graphs.qc2 import x\nTABS = {"visret": 1}\n'
                      'def f():\n    """needle here is prose."""\n    return "searching"\n')
    named = methods_named("pictrieve.ui.front", source, {"qc2", "visret", "needle", "search"},
                          {"pictrieve.graphs.qc2": "qc2"})
    assert set(named) == {"qc2", "visret"} and named["qc2"] == ["imports pictrieve.graphs.qc2"]
