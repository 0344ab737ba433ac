"""A need a plugin declares is one :class:`~pictrieve.agents.needs.Need` and reaches every front end with no
other edit: the plugin here is a distribution installed the way pip would (its ``pictrieve.methods`` entry point
names a method whose ``needs`` holds its own ``label`` need, the toy's graph of ``tests/data/toy_pictrieve_method``
underneath), and nothing in pictrieve names it. Its resolver writes each value it makes into ``$LABEL_NEED_LOG``
with the gallery's photo count, so a test sees what reached the need in another process too:

- the command line: ``--need label=...`` on ``pictrieve search --method``, ``serve``, ``ui`` and ``mcp``, and the
  need's own ``check`` refusing a value in one line before a server starts;
- ``ServerSettings`` (what ``pictrieve mcp`` was started with) and the MCP server: ``gallery_info`` shows the
  value, ``search_images`` runs the method with it made by the plugin's resolver;
- ``create_app(needs=...)`` (the page) and ``pictrieve serve`` (the variable the need declares).
"""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner
from helpers.galleries import tiny_gallery  # noqa: F401  (fixture)
from helpers.method_plugins import install_toy, installed_in_process, plugin_env, write_distribution

# imported now: the stdio client binds its default error stream when first imported, and a CliRunner below swaps
# sys.stderr for its own while it runs (the MCP command imports the SDK)
try:
    import mcp.client.stdio  # noqa: F401
except ImportError:  # the MCP test skips itself
    pass

PLUGIN = textwrap.dedent('''
    """A plugin whose method declares a need of its own: one Need, nothing else."""
    import os

    from pictrieve.agents.method import Method
    from pictrieve.agents.needs import Need, NeedUnavailable


    def label_of(value, context):
        made = f"{value or 'unlabelled'} over {context.gallery.count()} photos"
        if os.environ.get("LABEL_NEED_LOG"):
            with open(os.environ["LABEL_NEED_LOG"], "a", encoding="utf-8") as log:
                log.write(made + "\\n")
        return made


    def check_label(value, context):
        if value == "forbidden":
            raise NeedUnavailable(f"{context.need.cli_option or '--need label'}: 'forbidden' is no label")


    LABEL = Need("label", "the words the labelled method's note starts with", label_of, env_var="LABEL_NEED",
                 cli_option="--label", config_key="label", check=check_label)
    graph = "toy_pictrieve_method.graph"
    METHOD = Method(name="labelled", description="the toy, its label a need of its own",
                    builder=f"{graph}:build_toy_graph", settings=f"{graph}:ToySettings",
                    input_schema=f"{graph}:ToyInput", output_schema=f"{graph}:ToyOutput", needs=(LABEL,))
''')


@pytest.fixture(scope="module")
def plugins(tmp_path_factory):
    """The toy and the labelled plugin, installed into a folder the way pip would."""
    folder = install_toy(tmp_path_factory.mktemp("need-plugins"))
    (folder / "labelled_need_plugin.py").write_text(PLUGIN)
    write_distribution(folder, "labelled-need-plugin", {"labelled": "labelled_need_plugin:METHOD"})
    return folder


@pytest.fixture
def log(tmp_path, monkeypatch):
    path = tmp_path / "made.log"
    monkeypatch.setenv("LABEL_NEED_LOG", str(path))
    return path


def made(log) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_search_gives_it_with_need_and_its_check_refuses_in_one_line(plugins, tiny_gallery, log):  # noqa: F811
    from pictrieve.cli.main import cli

    with installed_in_process(plugins):
        done = CliRunner().invoke(cli, ["search", "a dog", "-g", str(tiny_gallery.location), "--method", "labelled",
                                        "-k", "2", "--need", "label=mine"])
        assert done.exit_code == 0, done.output
        assert made(log) == ["mine over 4 photos"]
        refused = CliRunner().invoke(cli, ["mcp", "-g", str(tiny_gallery.location), "--need", "label=forbidden"])
    assert refused.exit_code != 0 and "'forbidden' is no label" in str(refused.exception or refused.output)
    assert made(log) == ["mine over 4 photos"]  # refused before anything was made


def test_the_mcp_server_is_started_with_it_and_runs_the_method_with_it(plugins, tiny_gallery, log, tmp_path):  # noqa: F811
    """``pictrieve mcp --need label=...`` (a real MCP client over stdio): ServerSettings holds it, gallery_info shows
    it, and search_images runs the plugin's method with the value made by the plugin's resolver."""
    pytest.importorskip("mcp.client.stdio", reason="the MCP server needs the 'mcp' extra")
    import anyio
    from helpers.mcp import server_env, stdio_session

    async def run() -> tuple[dict, dict]:
        args = ["-g", str(tiny_gallery.location), "--state-dir", str(tmp_path / "state"), "--need", "label=mcp's"]
        async with stdio_session(args, env=plugin_env(plugins, {**server_env(), "LABEL_NEED_LOG": str(log)})) as session:
            info = (await session.call_tool("gallery_info", {})).structuredContent
            found = await session.call_tool("search_images", {"query": "a dog", "k": 2, "method": "labelled"})
            assert not found.isError, found.content
            return info, found.structuredContent

    info, found = anyio.run(run)
    assert info["needs"]["label"] == "mcp's" and "labelled" in info["search_methods"]
    assert [h["id"] for h in found["hits"]] == [h.id for h in tiny_gallery.search_text("a dog", k=2)]
    assert made(log) == ["mcp's over 4 photos"]


def test_server_settings_and_the_page_give_it_by_name(plugins, tiny_gallery, log, tmp_path):  # noqa: F811
    from pictrieve.mcp_server.service import PictrieveService, ServerSettings

    with installed_in_process(plugins):
        service = PictrieveService(tiny_gallery, ServerSettings(state_dir=tmp_path / "mcp", needs={"label": "set"}))
        assert service.info()["needs"]["label"] == "set"
        note = service.graph("labelled").invoke({"query": "a dog"}, context={"k": 1})["note"]
        assert note == "set over 4 photos ranked 1 images for 'a dog'"
        pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra")
        from helpers.web_page import finished, page_client
        from pictrieve.ui.app import create_app

        client = page_client(create_app(tiny_gallery, state_dir=tmp_path / "page", needs={"label": "the page's"}),
                             raise_server_exceptions=False)
        started = client.post("/api/methods/labelled/run", json={"input": {"query": "a dog"}, "settings": {"k": "2"}})
        view = finished(client, started.json())
    assert not view["error"], view
    assert view["result"]["output"]["note"] == "the page's over 4 photos ranked 2 images for 'a dog'"
    assert made(log) == ["set over 4 photos", "the page's over 4 photos"]


def test_serve_passes_it_as_the_variable_the_need_declares(plugins, tmp_path):
    from pictrieve.cli.serve import serve

    path = tmp_path / "langgraph.json"
    with installed_in_process(plugins):
        done = CliRunner().invoke(serve, ["--write-config", str(path), "--need", "label=served", "--allow", "label=a"])
        assert done.exit_code == 0, done.output
        refused = CliRunner().invoke(serve, ["--write-config", str(path), "--need", "lable=served"])
    env = json.loads(path.read_text())["env"]
    assert env["LABEL_NEED"] == "served" and json.loads(env["PICTRIEVE_SERVE_ALLOW"]) == {"label": ["a"]}
    assert refused.exit_code == 2 and "--need lable: no registered method needs it" in refused.output


def test_the_server_commands_offer_need_and_every_house_need_the_same_way():
    """Every command that serves methods has the same need options, made from the Need objects (one edit of
    NEEDS reaches them all)."""
    from pictrieve.agents.needs import NEEDS
    from pictrieve.cli.gallery_commands import search
    from pictrieve.cli.mcp import mcp
    from pictrieve.cli.serve import serve
    from pictrieve.cli.ui import ui

    options = {need.cli_option for need in NEEDS.values() if need.cli_option} | \
        {need.endpoint.cli_option for need in NEEDS.values() if need.endpoint} | {"--need"}
    for command in (search, serve, ui, mcp):
        offered = {flag for param in command.params for flag in param.opts}
        assert options <= offered, (command.name, options - offered)


# --- no front end declares, stores or makes a need -------------------------------------------------------------

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
FRONT_ENDS = ("cli/method_search.py", "cli/need_options.py", "cli/serve.py", "cli/ui.py", "cli/mcp.py",
              "cli/chat.py", "cli/ask.py", "ui/*.py", "mcp_server/*.py", "graphs/serving.py", "graphs/serving_http.py")
"""The front ends: the commands that run methods (the evaluation commands hand their method's need options to
the evaluation harness, which is no front end), the page, the MCP server and the LangGraph server."""
MODEL_FACTORIES = {"create_chat_model", "create_region_captioner", "create_visualizer", "create_detector",
                   "create_captioner", "load_for_gallery", "as_search_backend"}
"""What turns a need's name into its object: only a need's resolver calls them."""


def _front_end_files():
    return sorted({path for pattern in FRONT_ENDS for path in ROOT.glob(pattern)})


def _need_words():
    from pictrieve.agents.needs import NEEDS

    options, names = set(), set()
    for need in NEEDS.values():
        if need.brought_by_caller:
            continue
        options |= {need.cli_option, need.env_var}
        names |= {need.name}
        if need.endpoint is not None:
            options |= {need.endpoint.cli_option, need.endpoint.env_var}
            names |= {need.endpoint.key}
    return options - {None}, names


def test_no_front_end_declares_stores_or_makes_a_need():
    """docs/architecture.md: the options, settings and objects of needs come from the Need objects alone. A
    front end writes no need's option or variable (they are generated), has no parameter, field or keyword
    argument named after a need (what it was given travels as one mapping by need name), and calls no model
    factory (a need's resolver does). A method's own view may still read its method's value by name
    (PlugIR's default arm from its chat model)."""
    import ast

    options, names = _need_words()
    assert {"--llm", "--base-url", "--visualizer", "PICTRIEVE_LLM"} <= options and {"llm", "visualizers"} <= names
    broken = []
    for path in _front_end_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in options:
                broken.append(f"{where}:{node.lineno} writes the need option {node.value!r}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                broken += [f"{where}:{node.lineno} takes a parameter named after the need {a.arg!r}"
                           for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg in names]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
                broken.append(f"{where}:{node.lineno} has a field named after the need {node.target.id!r}")
            elif isinstance(node, ast.Call):
                broken += [f"{where}:{node.lineno} passes {k.arg}= (a need by its name)"
                           for k in node.keywords if k.arg in names]
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in MODEL_FACTORIES:
                    broken.append(f"{where}:{node.lineno} makes a need's object itself ({called})")
    assert not broken, "\n".join(broken)
