"""``pictrieve mcp`` with the official Python MCP client, over stdio and over streamable HTTP.

The server is the real command in a subprocess, over a real gallery (tiny random CLIP: its ranking means
nothing, so ids are checked against the gallery's own ranking and each picture against its photo), the
offline Vision Search Assistant (a tiny random OWL-ViT finds no region, the offline describer, the example
pages searched offline with MiniLM, the extractive answerer), and PlugIR's offline questioner with its
sessions in SQLite. No network; the chat model is never loaded.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from helpers.mcp import (  # noqa: F401  (fixture: served)
    COLOURS, SECRET, TOOLS, HttpServer, error_text, image_data, mean_colour, pictures, served, server_env, stdio_session)
from pictrieve.vectorstore.search_request import MODEL_K

pytestmark = pytest.mark.server


# --- what every transport must do -------------------------------------------------------------------------


async def check_tools_are_listed_with_schemas(session):
    listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(listed) == TOOLS
    for tool in listed.values():
        assert tool.description and tool.outputSchema, tool.name
        for name, field in tool.inputSchema.get("properties", {}).items():
            assert field.get("description"), f"{tool.name}.{name} has no description for the model"
    search = listed["search_images"].inputSchema["properties"]
    assert (search["k"]["minimum"], search["k"]["maximum"], search["k"]["default"]) == (1, 20, MODEL_K)  # a model's k
    assert listed["search_by_image"].inputSchema["properties"]["k"]["default"] == MODEL_K
    assert search["method"]["enum"] == ["search", "needle", "qc2", "visret"]  # the registry's, plain search first
    assert "required" not in listed["search_images"].inputSchema  # without a query, filters browse


async def check_search_images_returns_the_galleries_hits_and_their_photos(session, served):
    # Hybrid by default: the photo whose caption says "a red square" is matched by its words too.
    hybrid = (await session.call_tool("search_images", {"query": "a red square", "k": 3})).structuredContent["hits"]
    assert [h["id"] for h in hybrid] == [h.id for h in served.gallery.search_text("a red square", k=3, hybrid=True)]
    assert hybrid[0]["keyword_match"] and hybrid[0]["relevant"] and hybrid[0]["id"] == served.ids["a red square"]
    # By vectors alone (hybrid off), which the rest checks: photos, relevance, summary.
    result = await session.call_tool("search_images", {"query": "a red square", "k": 3, "hybrid": False})
    assert not result.isError, result.content
    hits = result.structuredContent["hits"]
    assert [h["id"] for h in hits] == [h.id for h in served.gallery.search_text("a red square", k=3)]
    assert not any(h["keyword_match"] for h in hits)
    assert json.loads(result.content[0].text) == result.structuredContent
    shown = pictures(result)
    assert len(shown) == 3
    for hit, picture in zip(hits, shown):
        assert picture.size == (512, 384)  # 800x600 scaled to a longest side of 512
        # the picture is the hit's own photo: its colour, not another's
        nearest = min(served.colour_of, key=lambda i: np.abs(mean_colour(picture) - served.colour_of[i]).sum())
        assert nearest == hit["id"]
    # beside its score, each hit says whether it matches well; a line in words says how many do
    assert [h["relevant"] for h in hits] == [True, False, False]
    summary = "1 of the 3 photos shown matches 'a red square' well; the other 2 are only the closest."
    assert result.structuredContent["summary"] == summary and result.content[1].text == summary
    labels = [b.text for b in result.content[2:] if b.type == "text"]
    assert [line.split(")")[0] for line in labels] == [f"Photo {n} (id {h['id']}" for n, h in enumerate(hits, 1)]
    old = await session.call_tool("search_images", {"query": "a red square", "k": 3, "before": "2000-01-01"})
    assert not old.isError and old.structuredContent["hits"] == []  # each photo's time is its file's: now
    folder = Path(served.paths[hits[0]["id"]]).parent
    inside = await session.call_tool("search_images", {"query": "a red square", "k": 20, "folder": str(folder)})
    assert {h["id"] for h in inside.structuredContent["hits"]} == \
        {id_ for id_, path in served.paths.items() if Path(path).parent == folder}
    bad = await session.call_tool("search_images", {"query": "a red square", "after": "last june"})
    assert bad.isError and error_text(bad).startswith("after: 'last june' is not accepted; it takes a date as YYYY-MM-DD")
    only = await session.call_tool("search_images", {"query": "a red square", "k": 3, "only_relevant": True,
                                                     "hybrid": False})
    assert [h["id"] for h in only.structuredContent["hits"]] == [hits[0]["id"]] and len(pictures(only)) == 1
    # Hybrid: the photo whose words hold the query is relevant too.
    both = await session.call_tool("search_images", {"query": "a red square", "k": 3, "only_relevant": True})
    assert {h["id"] for h in both.structuredContent["hits"]} == {hits[0]["id"], served.ids["a red square"]}
    like = await session.call_tool("search_by_image", {"image": served.ids["a green field"], "k": 2})
    assert like.structuredContent["hits"][0]["id"] == served.ids["a green field"]  # a photo finds itself first
    by_path = await session.call_tool("search_by_image", {"image": str(served.allowed / "inside.png"), "k": 1})
    assert not by_path.isError and len(pictures(by_path)) == 1
    sent = image_data(Image.open(served.paths[served.ids["a blue sky"]]), "JPEG")
    by_data = await session.call_tool("search_by_image", {"image": sent, "k": 1})
    assert by_data.structuredContent["hits"][0]["id"] == served.ids["a blue sky"]


async def check_ask_about_image_cites_the_right_page(session, served):
    progress = []

    async def on_progress(step, total, message):
        progress.append(message)

    result = await session.call_tool("ask_about_image", {"image": served.ids["a brown horse in a field"],
                                                         "question": "How many teeth does an adult horse have?"},
                                     progress_callback=on_progress)
    assert not result.isError, result.content
    # each step as `pictrieve ask -v` and the web page word it (agents/vsa/progress.py)
    assert any(m.startswith("regions: ") for m in progress) and progress[-1].startswith("answered"), progress
    answer = result.structuredContent
    cited = [s for s in answer["sources"] if s["cited"]]
    assert cited and all(s["url"].endswith("horses.md") for s in cited), answer
    assert "36 to 44" in answer["answer"] and f"[{cited[0]['number']}]" in answer["answer"]
    assert "Sources:" in result.content[1].text and "horses.md" in result.content[1].text


async def check_a_find_photo_session(session, served):
    progress = []

    async def on_progress(step, total, message):
        progress.append(message)

    started = await session.call_tool("find_photo", {"description": "a red square"}, progress_callback=on_progress)
    assert not started.isError, started.content
    view = started.structuredContent
    assert not view["done"] and view["question"] and view["round"] == 1
    assert len(pictures(started)) == len(view["results"]) >= 3
    assert "searched the gallery" in progress  # each step reported as it finished
    answered = await session.call_tool("answer_question", {"session": view["session"], "answer": "no"})
    assert not answered.isError, answered.content
    after = answered.structuredContent
    assert after["session"] == view["session"] and not after["done"] and after["round"] == 2, after
    picked = after["results"][1]
    final = await session.call_tool("answer_question", {"session": view["session"], "answer": "found 2"})
    assert final.structuredContent["done"] and final.structuredContent["found"]["id"] == picked["id"]
    ended = await session.call_tool("answer_question", {"session": view["session"], "answer": "yes"})
    assert "has ended" in error_text(ended)


async def check_bad_inputs_each_get_one_line_and_the_server_goes_on(session, served):
    def no_secret(text):
        assert SECRET not in text and "not a picture" not in text
        return text

    noise = Image.fromarray(np.random.default_rng(1).integers(0, 255, (600, 600, 3), dtype=np.uint8))
    truncated = base64.b64decode(image_data(Image.new("RGB", (200, 200), (9, 9, 9))))[:120]
    cases = [
        ("search_by_image", {"image": "ffffffffffffffffffffffff"}, "no image with id ffffffffffffffffffffffff"),
        ("search_images", {"query": "   "}, "the query is blank"),
        ("search_images", {"query": "a dog", "k": 0}, "k: Input should be greater than or equal to 1"),
        ("search_images", {"query": "a dog", "k": 21}, "k: Input should be less than or equal to 20"),
        ("search_images", {"query": "a dog", "k": "many"}, "k: Input should be a valid integer"),
        ("search_images", {"query": "a dog", "method": "clip"}, "method: Input should be 'search', 'needle', 'qc2' or 'visret'"),
        ("search_images", {"query": "a dog", "method": "visret"}, "--visualizer exemplar:DIR"),
        ("search_images", {}, "the query is blank: say in words what the photos should show, or give filters"),
        ("ask_about_image", {"image": base64.b64encode(truncated).decode(), "question": "what?"}, "not a readable image"),
        ("search_by_image", {"image": image_data(noise)}, "larger than 512 KiB"),
        ("search_by_image", {"image": str(served.outside / "secret.txt")}, "outside the folders this server may read"),
        ("search_by_image", {"image": str(served.outside / "gone.png")}, "outside the folders this server may read"),
        ("search_by_image", {"image": str(served.allowed / "link.png")}, "outside the folders this server may read"),
        ("search_by_image", {"image": f"{served.allowed}/../outside/secret.txt"}, "outside the folders"),
        ("search_by_image", {"image": str(served.root / "allowed-evil" / "photo.png")}, "outside the folders"),
        ("search_by_image", {"image": str(served.allowed / "big.png")}, "the image file is larger than 512 KiB"),
        # neither an id, nor data, nor a path: each reading is named, not only the path's refusal
        ("search_by_image", {"image": "photo-7"}, "'photo-7' is no gallery id of this gallery (ids come from search "
                                                  "results), too short to be base64 image data (at least 64 "
                                                  "characters), and not a file path inside the folders"),
        ("search_by_image", {"image": "/9j/4AAQSkZJRg=="}, "too short to be base64 image data"),
        ("search_by_image", {"image": "no such photo!"}, "is no gallery id of this gallery (ids come from search "
                                                         "results), not base64 image data"),
        ("search_by_image", {"image": str(served.allowed / "notes.txt")}, "not a readable image"),
        ("search_by_image", {"image": base64.b64encode(f"{SECRET} is not an image at all " .encode() * 4).decode()},
         "not a readable image"),
        ("search_by_image", {"image": "data:image/png;base64,@@@not base64@@@"}, "not valid base64"),
        ("answer_question", {"session": "0" * 32, "answer": "yes"}, "unknown session"),
        ("answer_question", {"session": "../../etc/passwd", "answer": "yes"}, "unknown session"),
        ("answer_question", {"session": "0" * 32, "answer": " "}, "the answer is blank"),
        ("ask_gallery", {"question": "which?", "k": 11}, "k: Input should be less than or equal to 10"),
        ("find_photo", {"description": ""}, "the description is blank"),
        ("no_such_tool", {}, "Unknown tool: no_such_tool"),
    ]
    for tool, arguments, expected in cases:
        line = no_secret(error_text(await session.call_tool(tool, arguments)))
        assert expected in line, (tool, arguments, line)
    info = await session.call_tool("gallery_info", {})  # still answering, and still searching
    assert not info.isError and info.structuredContent["images"] == len(COLOURS)
    again = await session.call_tool("search_images", {"query": "a blue sky", "k": 1})
    assert not again.isError and len(pictures(again)) == 1


async def exercise(session, served):
    await check_tools_are_listed_with_schemas(session)
    await check_search_images_returns_the_galleries_hits_and_their_photos(session, served)
    await check_ask_about_image_cites_the_right_page(session, served)
    await check_a_find_photo_session(session, served)
    await check_bad_inputs_each_get_one_line_and_the_server_goes_on(session, served)


# --- stdio --------------------------------------------------------------------------------------------------


async def test_over_stdio(served):
    async with stdio_session(served.args) as session:
        await exercise(session, served)


async def test_a_session_survives_a_server_restart(served):
    args = [*served.args[:2], "--state-dir", str(served.root / "restart-state"), *served.args[4:]]
    async with stdio_session(args) as session:
        view = (await session.call_tool("find_photo", {"description": "a blue sky"})).structuredContent
        assert not view["done"]
    async with stdio_session(args) as session:  # a new server process over the same state folder
        answered = await session.call_tool("answer_question", {"session": view["session"], "answer": "no"})
        assert not answered.isError, answered.content
        after = answered.structuredContent
        assert after["session"] == view["session"] and (after["done"] or after["round"] == 2)
        if not after["done"]:
            final = await session.call_tool("answer_question", {"session": view["session"], "answer": "found 1"})
            assert final.structuredContent["found"]["id"] == after["results"][0]["id"]


async def test_find_photo_asks_the_person_through_elicitation(served):
    from mcp.types import ElicitResult

    asked = []
    replies = [ElicitResult(action="accept", content={"answer": "no"}),
               ElicitResult(action="accept", content={"answer": "found 1"}),
               ElicitResult(action="decline")]

    async def person(context, params):
        asked.append(params.message)
        return replies[len(asked) - 1]

    async with stdio_session(served.args, elicitation_callback=person) as session:
        result = await session.call_tool("find_photo", {"description": "a green field", "ask_person": True})
        view = result.structuredContent
        assert not result.isError and view["done"] and view["found"] is not None
        assert len(asked) == 2 and "a green field" in asked[0] and "?" in asked[0]
        # the person declines the next session's question: the two-tool flow goes on from there
        declined = (await session.call_tool("find_photo", {"description": "a red square", "ask_person": True}))
        assert not declined.structuredContent["done"] and "declined" in declined.structuredContent["note"]
        assert not (await session.call_tool("answer_question", {"session": declined.structuredContent["session"],
                                                                "answer": "no"})).isError


async def test_without_elicitation_find_photo_falls_back_to_the_two_tool_flow(served):
    async with stdio_session(served.args) as session:
        view = (await session.call_tool("find_photo", {"description": "a red square", "ask_person": True})).structuredContent
        assert not view["done"] and view["question"] and "answer_question" in view["note"]


async def test_resources_serve_the_gallery_and_its_photos_by_id_only(served):
    from mcp.shared.exceptions import McpError

    async with stdio_session(served.args) as session:
        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        templates = {t.uriTemplate for t in (await session.list_resource_templates()).resourceTemplates}
        assert uris == {"pictrieve://gallery"} and templates == {"pictrieve://image/{image_id}"}
        info = json.loads((await session.read_resource("pictrieve://gallery")).contents[0].text)
        assert info["images"] == len(COLOURS) and info["allowed_dirs"] == [str(served.allowed.resolve())]
        image_id = served.ids["a red square"]
        photo = (await session.read_resource(f"pictrieve://image/{image_id}")).contents[0]
        assert photo.mimeType == "image/jpeg" and base64.b64decode(photo.blob) == Path(served.paths[image_id]).read_bytes()
        for uri in ("pictrieve://image/ffffffffffffffffffffffff", "pictrieve://image/..%2F..%2Fetc%2Fpasswd"):
            with pytest.raises(McpError, match="no image with id"):
                await session.read_resource(uri)
        assert not (await session.call_tool("gallery_info", {})).isError


async def test_ask_gallery_answers_from_the_best_photos(served):
    from helpers.openai_fake import OpenAIFake

    with OpenAIFake(lambda messages: "### Reasoning: picture 1 is red\n### Answer: the red one, picture 1") as fake:
        args = [*served.args, "--llm", "openai:fake-reader", "--base-url", fake.base_url]
        async with stdio_session(args) as session:
            result = await session.call_tool("ask_gallery", {"question": "which photo is red?", "k": 2})
    assert not result.isError, result.content
    assert result.structuredContent["answer"] == "the red one, picture 1"
    assert [h["id"] for h in result.structuredContent["hits"]] == [
        h.id for h in served.gallery.search_text("which photo is red?", k=2)]
    assert len(pictures(result)) == 2 and fake.requests  # the reader was asked


async def test_visret_and_needle_search_with_a_visualizer(served):
    """With --visualizer (offline exemplar: the reference photo whose caption matches makes the guide), the two
    methods that search with pictures of the query run, and gallery_info offers them."""
    reference = served.root / "reference"
    (reference / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (caption, colour) in enumerate(COLOURS.items()):
        Image.new("RGB", (64, 48), colour).save(reference / "images" / f"{i}.png")
        lines.append(json.dumps({"image": f"images/{i}.png", "captions": [caption]}))
    (reference / "captions.jsonl").write_text("\n".join(lines) + "\n")
    async with stdio_session([*served.args, "--visualizer", f"exemplar:{reference}"]) as session:
        info = (await session.call_tool("gallery_info", {})).structuredContent
        # every registered method that takes a text query and whose needs this server meets, plain search first
        assert info["search_methods"][0] == "search" and {"visret", "needle"} <= set(info["search_methods"])
        for method in ("visret", "needle"):
            steps, values = [], []

            async def on_progress(step, total, message):
                steps.append(message)
                values.append(step)

            result = await session.call_tool("search_images", {"query": "a red square", "k": 3, "method": method},
                                             progress_callback=on_progress)
            assert not result.isError, result.content
            assert result.structuredContent["method"] == method and len(result.structuredContent["hits"]) == 3
            assert {h["id"] for h in result.structuredContent["hits"]} <= set(served.paths)
            assert len(pictures(result)) == 3
            assert f"{method}: visualize done" in steps  # the method's own graph ran, making guide pictures
            assert all(b > a for a, b in zip(values, values[1:])), list(zip(values, steps))  # MCP: only increasing
            # the first use loads the visualizer (once per server), and says so while it does
            assert any(m.startswith("loading the visualizer") for m in steps) == (method == "visret"), steps


STRAY_WRITER = """
import os, sys
import pictrieve.mcp_server.service as service
answer = service.PictrieveService.info
def noisy(self):  # a library that prints while a tool runs: Python's stdout and the file descriptor itself
    print("stray print from a library")
    os.write(1, b"stray bytes from native code\\n")
    return answer(self)
service.PictrieveService.info = noisy
sys.argv = ["pictrieve", "mcp", *sys.argv[1:]]
from pictrieve.cli.main import main
main()
"""


def test_the_stdio_server_writes_nothing_but_protocol_to_stdout(served, tmp_path):
    """Whatever else writes to stdout while the server runs (a print, a native library) goes to stderr: a
    client reading stdout sees only JSON-RPC lines."""
    errors = tmp_path / "stderr.txt"  # a file, not a pipe nobody reads while the test waits on stdout
    with errors.open("w") as err:
        server = subprocess.Popen([sys.executable, "-c", STRAY_WRITER, *served.args], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=err, text=True, env=server_env())
    try:
        def send(message):
            server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
            server.stdin.flush()

        def reply(request_id):
            while True:
                line = server.stdout.readline()
                assert line, "the server closed stdout"
                message = json.loads(line)  # every line on stdout is a JSON-RPC message
                if message.get("id") == request_id:
                    return message

        send({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                          "clientInfo": {"name": "raw", "version": "1"}}})
        from pictrieve import __version__

        assert reply(1)["result"]["serverInfo"] == {"name": "pictrieve", "version": __version__}
        send({"method": "notifications/initialized"})
        send({"id": 2, "method": "tools/call", "params": {"name": "gallery_info", "arguments": {}}})
        assert reply(2)["result"]["structuredContent"]["images"] == len(COLOURS)
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
            raise
    rest = server.stdout.read()
    assert all(json.loads(line) for line in rest.splitlines() if line.strip())
    stderr = errors.read_text()
    assert "stray print from a library" in stderr and "stray bytes from native code" in stderr
    assert "pictrieve mcp: 4 images" in stderr


# --- streamable HTTP ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_server(served):
    server = HttpServer(served.args, token="s3cret-token")
    yield server
    server.stop()


async def test_over_streamable_http(served, http_server):
    async with http_server.session() as session:
        await exercise(session, served)


def test_http_needs_the_token(http_server):
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    # none, a wrong one, another scheme, an empty one, a prefix of the token and the token with more after it
    for sent in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-token"},
                 {"Authorization": "Bearer"}, {"Authorization": "Bearer s3cret"},  # an empty token, a prefix
                 {"Authorization": "Bearer s3cret-token-and-more"}):
        answer = httpx.post(http_server.url, json=hello, headers={**headers, **sent}, timeout=30)
        assert answer.status_code == 401 and answer.headers["www-authenticate"].startswith("Bearer"), sent
    for scheme in ("Bearer", "bearer"):  # the scheme is case-insensitive (RFC 9110)
        ok = httpx.post(http_server.url, json=hello, headers={**headers, "Authorization": f"{scheme} s3cret-token"},
                        timeout=30)
        assert ok.status_code == 200, scheme


def test_the_example_client_without_the_token_says_so_in_one_line(http_server):
    """examples/mcp_client.py against a server that wants a token: one line saying to pass it (it printed a
    41-line traceback); with the token it searches."""
    example = Path(__file__).resolve().parents[1] / "examples" / "mcp_client.py"
    env = {key: value for key, value in server_env().items() if key != "PICTRIEVE_MCP_TOKEN"}
    for token, said in (([], "pass the server's token with --token TOKEN"),
                        (["--token", "wrong"], "the one given was not accepted")):
        done = subprocess.run([sys.executable, str(example), "a red square", "--url", http_server.url, *token],
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 1 and not done.stdout, done.stdout
        assert done.stderr.strip().count("\n") == 0 and "(401)" in done.stderr and said in done.stderr, done.stderr
    found = subprocess.run([sys.executable, str(example), "a red square", "--url", http_server.url, "--token",
                            "s3cret-token", "-k", "1"], capture_output=True, text=True, timeout=120, env=env)
    assert found.returncode == 0 and "search_images" in found.stdout, found.stderr


def test_an_http_body_above_the_limit_is_refused_before_it_reaches_a_tool(http_server):
    limit = int(0.5 * 2**20) * 4 // 3 + 2**20  # --max-image-mb 0.5 as base64, and a megabyte for the rest
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "Authorization": "Bearer s3cret-token"}

    def hello(size):
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "", "version": "1"}}}
        body["params"]["clientInfo"]["name"] = "x" * (size - len(json.dumps(body)))
        data = json.dumps(body).encode()
        assert len(data) == size
        return httpx.post(http_server.url, content=data, headers=headers, timeout=60)

    assert hello(limit).status_code == 200
    assert hello(limit + 1).status_code == 413


def test_a_server_reachable_from_other_machines_needs_a_token(served):
    env = {k: v for k, v in server_env().items() if k != "PICTRIEVE_MCP_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "pictrieve.cli.main", "mcp", "--transport", "http", "--host", "0.0.0.0",
                           *served.args], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode != 0 and "--token" in done.stderr and "Traceback" not in done.stderr
    # an empty token is no token (192.0.2.1, a documentation address, could not even be bound here)
    for token in (["--token", ""], ["--token", "   "]):
        done = subprocess.run([sys.executable, "-m", "pictrieve.cli.main", "mcp", "--transport", "http", "--host",
                               "192.0.2.1", *token, *served.args], capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode != 0 and "--token" in done.stderr and "reachable from other machines" in done.stderr, (
            token, done.stderr)
