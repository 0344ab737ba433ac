"""Talk to ``pictrieve mcp`` as an agent app does, with the official MCP Python SDK: list the tools, search,
and save the photos the server sends back.

Over stdio (the client starts the server)::

    python examples/mcp_client.py "a dog in the snow" --gallery ./my.gallery --out found/

Over streamable HTTP (start ``pictrieve mcp --gallery ./my.gallery --transport http`` first)::

    python examples/mcp_client.py "a dog in the snow" --url http://127.0.0.1:8765/mcp [--token TOKEN]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path


async def search(args: argparse.Namespace) -> None:
    from mcp import ClientSession

    async with connect(args) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            print("tools:", ", ".join(tool.name for tool in tools.tools))
            result = await session.call_tool("search_images", {"query": args.query, "k": args.k})
            if result.isError:
                sys.exit(f"search_images failed: {result.content[0].text}")
            for hit in result.structuredContent["hits"]:
                print(f"{hit['rank']:>3}. {hit['score']:.3f}  {hit['id']}  {hit['caption'] or hit['path']}")
            images = [block for block in result.content if block.type == "image"]
            if args.out:
                Path(args.out).mkdir(parents=True, exist_ok=True)
                for n, block in enumerate(images, start=1):
                    (Path(args.out) / f"{n:02d}.jpg").write_bytes(base64.b64decode(block.data))
                print(f"saved {len(images)} photos in {args.out}")


@asynccontextmanager
async def connect(args: argparse.Namespace) -> AsyncIterator[tuple]:
    """The ``(read, write)`` streams of a session: a server started over stdio, or one at ``--url``."""
    if args.url:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = {"Authorization": f"Bearer {args.token}"} if args.token else None
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(args.url, http_client=http) as (read, write, _session_id):
                yield read, write
        return
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    server = StdioServerParameters(command=sys.executable, args=["-m", "pictrieve.cli.main", "mcp", "--gallery", args.gallery],
                                   env=dict(os.environ))  # the SDK passes only a minimal environment by default
    async with stdio_client(server) as (read, write):
        yield read, write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("query")
    parser.add_argument("--gallery", help="start `pictrieve mcp --gallery GALLERY` over stdio")
    parser.add_argument("--url", help="or connect to a running server over streamable HTTP")
    parser.add_argument("--token", default=os.environ.get("PICTRIEVE_MCP_TOKEN"), help="the HTTP server's bearer token")
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--out", help="save the photos the server sends into this folder")
    args = parser.parse_args()
    if bool(args.gallery) == bool(args.url):
        parser.error("give --gallery (stdio) or --url (HTTP)")
    try:
        asyncio.run(search(args))
    except Exception as exc:  # the SDK raises from a task group: find the HTTP status inside
        status = http_status(exc)
        if status in (401, 403):
            sys.exit(f"{args.url} refused the request ({status}): pass the server's token with --token TOKEN "
                     "or set PICTRIEVE_MCP_TOKEN" + (" (the one given was not accepted)" if args.token else ""))
        if status is not None:
            sys.exit(f"{args.url} answered HTTP {status}: is it `pictrieve mcp --transport http`?")
        raise


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of the first ``httpx.HTTPStatusError`` in ``exc`` (exception groups and causes searched)."""
    import httpx

    seen: set[int] = set()
    todo = [exc]
    while todo:
        error = todo.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, httpx.HTTPStatusError):
            return error.response.status_code
        todo.extend(getattr(error, "exceptions", ()))
        todo.extend((error.__cause__, error.__context__))
    return None


if __name__ == "__main__":
    main()
