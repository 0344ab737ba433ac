"""The served graphs' HTTP guard (graphs/serving_http.py) and the address rule it uses (tools/core/exposure.py),
each rule pinned by an attack on a real uvicorn (issue 38, What to build 6: the mutation audit's survivors).

- a connection that reached a non-loopback address without a token is refused (a plain ``langgraph dev --host
  0.0.0.0``), and with a token only the token opens it;
- ``Sec-Fetch-Site: same-site`` (a page on a sibling name) without ``Origin`` is refused, as ``cross-site`` is;
- Chrome's private-network grant is sent only to a preflight that asks for it;
- ``POST /threads/ID/state/`` (a trailing slash the router redirects) is refused as ``/threads/ID/state`` is;
- ``evillocalhost`` is no name of this machine;
- oversized base64 image data is refused from its length, before anything is decoded.
"""

from __future__ import annotations

import socket

import httpx
import pytest

from helpers.serve import TOKEN, guarded


def _non_loopback_address() -> str:
    """This machine's address on its first non-loopback interface (a UDP socket's route: nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
            address = sock.getsockname()[0]
        except OSError:
            address = "127.0.0.1"
    if address.startswith("127."):
        pytest.skip("this machine has no non-loopback address")
    return address


def test_a_connection_from_beyond_loopback_without_a_token_is_refused():
    address = _non_loopback_address()
    with guarded("0.0.0.0", token="", origins=()) as (_, port):
        outside = httpx.get(f"http://{address}:{port}/", headers={"Host": f"{address}:{port}"}, trust_env=False)
        assert outside.status_code == 403 and "no token" in outside.json()["detail"]
        # The same server over loopback answers: the refusal is about where the connection came in.
        assert httpx.get(f"http://127.0.0.1:{port}/", trust_env=False).status_code == 200


def test_beyond_loopback_with_a_token_only_the_token_opens_it():
    address = _non_loopback_address()
    with guarded("0.0.0.0", token=TOKEN, origins=()) as (_, port):
        url = f"http://{address}:{port}/"
        assert httpx.get(url, trust_env=False).status_code == 401
        assert httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False).status_code == 200


@pytest.mark.parametrize("site,status", [("same-site", 403), ("cross-site", 403), ("same-origin", 200),
                                         ("none", 200), (None, 200)])
def test_a_request_a_page_on_another_site_made_is_refused_without_an_origin(site, status):
    with guarded("127.0.0.1", token="", origins=()) as (url, _):
        headers = {"Sec-Fetch-Site": site} if site else {}
        assert httpx.post(url, headers=headers, content=b"{}", trust_env=False).status_code == status


@pytest.mark.parametrize("asked", [True, False])
def test_the_private_network_grant_goes_only_to_a_preflight_that_asks(asked):
    listed = "http://127.0.0.1:1"
    with guarded("127.0.0.1", token="", origins=(listed,)) as (url, _):
        headers = {"Origin": listed, "Access-Control-Request-Method": "POST"}
        if asked:
            headers["Access-Control-Request-Private-Network"] = "true"
        answer = httpx.options(url + "/runs/wait", headers=headers, trust_env=False)
    assert answer.status_code == 204 and answer.headers["access-control-allow-origin"] == listed
    assert answer.headers.get("access-control-allow-private-network") == ("true" if asked else None)


@pytest.mark.parametrize("path", ["/threads/0b6c/state", "/threads/0b6c/state/", "//threads/0b6c/state",
                                  "/threads/0b6c//state/", "/threads/0b6c/state//"])
def test_the_state_edit_route_is_refused_however_its_path_is_spelt(path):
    """The app behind the guard answers anything with 200; only the guard stands between."""
    with guarded("127.0.0.1", token="", origins=()) as (url, _):
        answer = httpx.post(url + path, json={"values": {"image": "/etc/hosts"}}, trust_env=False)
        assert answer.status_code == 403 and "written by its own steps" in answer.json()["detail"]
        # Reading the state, and the checkpoint route beside it, are not state writes.
        assert httpx.get(url + path, trust_env=False).status_code == 200
        assert httpx.post(url + "/threads/0b6c/state/checkpoint", json={"checkpoint": {}},
                          trust_env=False).status_code == 200


@pytest.mark.parametrize("name", ["evillocalhost", "evil-localhost", "localhost.evil", "xlocalhost:80",
                                  "notlocalhost.", "127.0.0.1.evil"])
def test_a_name_that_ends_or_starts_like_localhost_is_not_this_machine(name):
    from pictrieve.tools.core.exposure import header_host, is_loopback

    assert not is_loopback(header_host(name))
    with guarded("127.0.0.1", token="", origins=()) as (url, _):
        assert httpx.get(url, headers={"Host": name}, trust_env=False).status_code == 403


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST", "localhost.", "localhost:8123", "127.3.4.5", "[::1]:80"])
def test_this_machines_names_are_loopback(name):
    from pictrieve.tools.core.exposure import header_host, is_loopback

    assert is_loopback(header_host(name))


def test_oversized_base64_is_refused_from_its_length_before_it_is_decoded(monkeypatch):
    """The length says the size: data that would decode past the cap is refused without decoding any of it (a
    caller's 27 MB of text must not become 20 MB of bytes first)."""
    import pictrieve.tools.core.image_inputs as image_inputs

    decoded: list[int] = []
    real = image_inputs.base64.b64decode

    def counting(data, *args, **kwargs):
        decoded.append(len(data))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(image_inputs.base64, "b64decode", counting)
    cap = 3000
    with pytest.raises(image_inputs.ImageInputError, match="larger than"):
        image_inputs.decode_image_data("A" * (cap * 4 // 3 + 16), max_bytes=cap)
    assert decoded == []
    # Just inside the cap: decoded (the check is on the size, not on every long value).
    assert len(image_inputs.decode_image_data("A" * (cap * 4 // 3), max_bytes=cap)) == cap
    assert decoded


def test_the_guard_reads_documents_as_deep_as_the_servers_parser_does():
    """orjson reads up to 1,024 levels: a command 1,000 levels down is found, and a deep harmless body passes,
    without the guard's own recursion limit deciding either."""
    from pictrieve.graphs.serving_http import judged_body

    deep = b'{"a": ' * 1000 + b'{"command": {"goto": "search"}}' + b"}" * 1000
    assert judged_body(deep)[0] == 403
    harmless = b"[" * 1000 + b"1" + b"]" * 1000
    assert judged_body(harmless) is None


@pytest.mark.parametrize("body,refused", [
    (b'{"command": {"resume": "yes"}}', None),
    (b'{"command": {"resume": "yes", "update": null, "goto": null}}', None),
    (b'{"command": {"resume": "yes", "update": {}}}', 403),
    (b'{"command": "goto"}', 403),
    (b'{"command": {"update": 1}, "command": null}', None),  # the last of a repeated key counts, as for the server
    (b'{"supersteps": []}', None),
    (b'{"\\u0073upersteps": [{}]}', 403),
    (b'not json', 400),
    (b'{"assistant_id": "s", "input": {"image": "' + b"A" * 5000 + b'"}}', None),  # a picture is not text
    (b'{"assistant_id": "s", "input": {"query": {"deep": ["' + b"a" * 2001 + b'"]}}}', 413),
])
def test_what_the_guard_decides_on_a_decoded_body(body, refused):
    from pictrieve.graphs.serving_http import judged_body

    answer = judged_body(body)
    assert (answer[0] if answer else None) == refused, answer


@pytest.mark.parametrize("path,opened", [("/threads/0b6c/stream/events", False),
                                         ("//threads/0b6c/stream/events/", False), ("/threads/0b6c/elsewhere", True)])
def test_the_event_streaming_websocket_is_refused_before_it_opens(path, opened):
    """LangGraph's event-streaming protocol also runs over a websocket (``input.respond`` may carry update/goto):
    the guard closes it before the handshake completes."""
    import asyncio

    import uvicorn  # noqa: F401  (the guarded app is served by uvicorn with the websockets library)
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    from helpers import free_port
    from pictrieve.graphs.serving_http import ServeGuard

    async def echo(scope, receive, send):
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1000})

    async def attempt() -> bool:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(ServeGuard(echo, token="", origins=()), host="127.0.0.1", port=port,
                                               log_level="warning"))
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)
        try:
            async with connect(f"ws://127.0.0.1:{port}{path}"):
                return True
        except InvalidStatus as refused:
            assert refused.response.status_code == 403
            return False
        finally:
            server.should_exit = True
            await serving

    assert asyncio.run(attempt()) is opened
