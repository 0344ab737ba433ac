"""Every route of the page's server, whichever tab's router holds it, is behind PageGuard (ui/guard.py).

The routes are read from the app itself (``app.routes``), so a route added to a tab's router later is checked
too: on a real uvicorn each refuses a rebinding page's Host (421); each API route refuses another site's
page (403); each post refuses a body type a plain HTML form on another site can send (415) and a JSON body
above the limit before reading it (413); every answer carries the security headers; nothing starts.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("fastapi", reason="the web page needs the 'ui' extra: pip install -e '.[ui]'")
import httpx  # noqa: E402
from fastapi.routing import APIRoute  # noqa: E402

from helpers.plugir_fakes import ScriptedChatModel  # noqa: E402
from helpers.web_page import gallery, serve  # noqa: E402,F401

from pictrieve.ui.app import TAB_ROUTERS, create_app, page_router  # noqa: E402
from pictrieve.ui.guard import MAX_JSON_BYTES, SECURITY_HEADERS  # noqa: E402

pytestmark = pytest.mark.server
TABS = {("POST", "/api/search"), ("POST", "/api/chat/start"), ("POST", "/api/chat/reply"), ("GET", "/api/chat/{thread}"),
        ("POST", "/api/steer"), ("POST", "/api/ask"), ("POST", "/api/visualize"),
        ("POST", "/api/needle/{session}/{stage}"), ("GET", "/api/needle/{session}/guide/{guide_id}"),
        ("GET", "/api/methods"), ("POST", "/api/methods/{name}/run")}
"""The tabs' routes (each router's), which the reader must find among the app's."""


def app_routes(app) -> list[tuple[str, str]]:
    """What the app serves: its OpenAPI schema's operations (made even though the page publishes none) and, in
    case a route hides from the schema, every route of each router it includes."""
    described = {(method.upper(), path) for path, ops in app.openapi()["paths"].items() for method in ops}
    included = {(method, route.path) for router in (*TAB_ROUTERS, page_router) for route in router.routes
                if isinstance(route, APIRoute) for method in route.methods if method != "HEAD"}
    return sorted(described | included)


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "abc123", path)


def test_every_route_of_every_tab_is_guarded(gallery, tmp_path):  # noqa: F811
    app = create_app(gallery, needs={"llm": ScriptedChatModel(questions=["Is it red?"])}, state_dir=tmp_path / "state")
    routes = app_routes(app)
    assert TABS <= set(routes)  # the reader sees each tab's router
    assert {("GET", "/"), ("GET", "/api/status"), ("GET", "/api/image/{image_id}"), ("GET", "/{name}")} <= set(routes)
    with serve(app) as url:
        own = url.split("//", 1)[1]
        for method, path in routes:
            target = url + concrete(path)
            answers = [httpx.request(method, target, headers={"Host": "evil.example"})]
            assert answers[-1].status_code == 421, (method, path)
            if path.startswith("/api/") or method != "GET":
                answers.append(httpx.request(method, target, json={}, headers={"Origin": "http://evil.example"}))
                assert answers[-1].status_code == 403, (method, path)
            if method == "POST":
                answers.append(httpx.request(method, target, content=b"q=x", headers={
                    "Content-Type": "text/plain", "Origin": f"http://{own}"}))
                assert answers[-1].status_code == 415, (method, path)
                answers.append(httpx.request(method, target, content=b" " * (MAX_JSON_BYTES + 1),
                                             headers={"Content-Type": "application/json"}))
                assert answers[-1].status_code == 413, (method, path)
            for answer in answers:
                assert all(answer.headers.get(name.decode()) == value.decode() for name, value in SECURITY_HEADERS), \
                    (method, path)
    assert len(app.state.jobs) == 0 and not (tmp_path / "state" / "chat.sqlite").exists()  # nothing started
