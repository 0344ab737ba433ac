"""A client in another language: the official TypeScript MCP SDK (``@modelcontextprotocol/sdk``, on node) starts
``pictrieve mcp`` over stdio, lists its tools and calls ``search_images`` (tests/mcp_ts/client.mjs).

The SDK is installed by ``.ci/run`` (``npm ci --prefix tests/mcp_ts``) before the tests, never during them.
The test skips only where node or npm is missing.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess

import pytest
from PIL import Image

from helpers import REPO_ROOT
from helpers.mcp import MCP_COMMAND, TOOLS, served, server_env  # noqa: F401  (fixture: served)

CLIENT = REPO_ROOT / "tests" / "mcp_ts"

pytestmark = pytest.mark.server


def test_the_typescript_sdk_lists_the_tools_and_searches(served):  # noqa: F811
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node and npm are needed for the TypeScript MCP client (apt-get install nodejs npm)")
    if not (CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json").is_file():
        pytest.fail(f"the TypeScript MCP SDK is not installed: run `npm ci --prefix {CLIENT.relative_to(REPO_ROOT)}` "
                    "(.ci/run does) before the tests")
    done = subprocess.run(["node", str(CLIENT / "client.mjs"), json.dumps([*MCP_COMMAND, *served.args]), "a green field"],
                          capture_output=True, text=True, timeout=600, env=server_env(), cwd=CLIENT)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(out["tools"]) == TOOLS
    result = out["result"]
    assert not result.get("isError"), result
    hits = result["structuredContent"]["hits"]
    assert [h["id"] for h in hits] == [h.id for h in served.gallery.search_text("a green field", k=2, hybrid=True)]
    images = [block for block in result["content"] if block["type"] == "image"]
    assert len(images) == 2 and all(block["mimeType"] == "image/jpeg" for block in images)
    for block in images:
        picture = Image.open(io.BytesIO(base64.b64decode(block["data"])))
        assert picture.format == "JPEG" and max(picture.size) == 512
