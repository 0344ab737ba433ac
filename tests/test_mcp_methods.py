"""Every registered method that takes a text query is a ``search_images`` method over MCP, with no edit of
the MCP server: QC2 (a built-in whose need is the model trained for the gallery) and the toy plugin of
``tests/data/toy_pictrieve_method`` (2 files and one entry point), installed the way pip would. A real MCP
client (the ``mcp`` SDK) starts ``pictrieve mcp`` over stdio, lists the tool and runs both methods."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.mcp import COLOURS, server_env, stdio_session
from helpers.method_plugins import install_toy, plugin_env
from helpers.qc2_fakes import train_tiny_qc2
from PIL import Image

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def gallery_and_plugins(tmp_path_factory, tiny_clip_name):
    """Four coloured, captioned photos with a tiny QC2 model trained for them, and the toy plugin installed."""
    from pictrieve.vectorstore.gallery import Gallery

    root = tmp_path_factory.mktemp("mcp-methods")
    rng = np.random.default_rng(0)
    (root / "photos").mkdir()
    for i, (caption, colour) in enumerate(COLOURS.items()):
        pixels = np.clip(np.array(colour) + rng.integers(-6, 7, size=(96, 128, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(root / "photos" / f"{i}.jpg", quality=90)
        (root / "photos" / f"{i}.txt").write_text(caption + "\n")
    gallery = Gallery.open(root / "gallery", tiny_clip_name)
    gallery.add(root / "photos", progress=False)
    train_tiny_qc2(gallery, root / "tiny-llama")
    return root, gallery, install_toy(root / "plugins")


async def test_qc2_and_a_plugin_method_are_searched_over_mcp_without_any_edit(gallery_and_plugins):
    root, gallery, plugins = gallery_and_plugins
    args = ["-g", str(root / "gallery"), "--state-dir", str(root / "state")]
    async with stdio_session(args, env=plugin_env(plugins, server_env())) as session:
        (tool,) = [t for t in (await session.list_tools()).tools if t.name == "search_images"]
        method = tool.inputSchema["properties"]["method"]
        assert {"search", "qc2", "toy", "visret", "needle"} <= set(method["enum"]) and method["default"] == "search"
        info = (await session.call_tool("gallery_info", {})).structuredContent
        # what this server can run: no visualizer was given, so not the methods that need one
        assert {"search", "qc2", "toy"} <= set(info["search_methods"]) and "visret" not in info["search_methods"]

        toy = await session.call_tool("search_images", {"query": "a red square", "k": 2, "method": "toy"})
        assert not toy.isError, toy.content
        assert toy.structuredContent["method"] == "toy" and len(toy.structuredContent["hits"]) == 2
        # the toy's own ranking: the gallery's text ranking, as in this process
        assert [h["id"] for h in toy.structuredContent["hits"]] == [h.id for h in gallery.search_text("a red square", k=2)]

        qc2 = await session.call_tool("search_images", {"query": "a square", "k": 2, "method": "qc2"})
        assert not qc2.isError, qc2.content
        assert qc2.structuredContent["method"] == "qc2" and len(qc2.structuredContent["hits"]) == 2

        visret = await session.call_tool("search_images", {"query": "a square", "method": "visret"})
        assert visret.isError and "restart it with --visualizer exemplar:DIR" in visret.content[0].text
