"""``pictrieve mcp``: serve a gallery's tools to any MCP client (Claude Desktop, VS Code, agent frameworks)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from pictrieve.cli.need_options import check_needs, need_options
from pictrieve.cli.runtime_options import runtime_options


@click.command("mcp", epilog="Examples:\n\n\b\n  pictrieve mcp --gallery ./my.gallery\n"
               "  pictrieve mcp --gallery ./my.gallery --search local:./pages --allow-dir ~/Pictures\n"
               "  pictrieve mcp --gallery ./my.gallery --transport http --port 8765\n\n"
               "README.md, 'Use it from any agent app (MCP)', has client configurations.")
@click.option("--gallery", "-g", required=True, metavar="PATH|URL", help="Gallery to serve.")
@click.option("--embedder", "-e", default=None, metavar="NAME", help="Embedder (default: the gallery's).")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio: the client starts this command; http: streamable HTTP at http://HOST:PORT/mcp.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="HTTP: address to listen on. Any other than loopback needs --token.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535), help="HTTP: port.")
@click.option("--allow-origin", "allow_origins", multiple=True, metavar="ORIGIN",
              help="HTTP on loopback: a web page origin that may call the server from a browser (repeatable), e.g. "
                   "http://localhost:6274 for the MCP Inspector. Default: none but the server's own.")
@click.option("--token", envvar="PICTRIEVE_MCP_TOKEN", default=None, metavar="TOKEN",
              help="HTTP: bearer token clients must send (default: $PICTRIEVE_MCP_TOKEN; none on loopback).")
@click.option("--allow-dir", "allow_dirs", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False),
              help="A folder whose image files tools may read by path (repeatable). Default: none; images are "
                   "gallery ids or base64 data.")
@click.option("--state-dir", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Where find_photo sessions are kept (default: the pictrieve cache folder).")
@click.option("--max-image-mb", default=20.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Largest image a tool accepts or a resource sends.")
@need_options(environ=True)
@runtime_options
def mcp(gallery: str, embedder: str | None, transport: str, host: str, port: int, allow_origins: tuple[str, ...],
        token: str | None, allow_dirs: tuple[str, ...], state_dir: str | None, max_image_mb: float,
        needs: dict[str, Any]) -> None:
    """Serve the gallery to MCP clients: search_images, search_by_image, ask_about_image, ask_gallery,
    find_photo / answer_question, gallery_info, and the resources pictrieve://gallery and pictrieve://image/{id}.

    Over stdio (the default) the MCP client starts this command itself; nothing but protocol messages is
    written to stdout (logs go to stderr). Models load on first need. What the methods need (a chat model, a
    visualizer, a web search, ...) is given with one option each (or its environment variable), or
    --need NAME=VALUE.
    """
    from pictrieve.tools.core.extras import require_extra

    require_extra("mcp", "the MCP server (the official MCP SDK)")
    from pictrieve.cli.chat import default_checkpoint_path
    from pictrieve.mcp_server.http import check_exposure
    from pictrieve.tools.core.exposure import normalise_host, url_host
    from pictrieve.mcp_server.server import create_server
    from pictrieve.mcp_server.service import PictrieveService, ServerSettings
    from pictrieve.tools.core.image_inputs import AllowedDirs
    from pictrieve.vectorstore.gallery import Gallery

    host = normalise_host(host)  # one spelling from here on (the rebinding protection depends on it)
    if transport == "http":
        check_exposure(host, token)
    elif token:
        click.echo("pictrieve mcp: --token applies to --transport http only; ignored over stdio", err=True)
    check_needs(needs)  # a misspelt model, search or visualizer, a dead endpoint: one line, before the gallery opens
    # Protocol messages alone on stdout: the original stream is kept for them, and anything else written to
    # it (a library's print, a native library's message) goes to stderr.
    protocol = _take_stdout() if transport == "stdio" else None
    opened = Gallery.open(gallery, embedder, create=False)
    settings = ServerSettings(
        state_dir=Path(state_dir) if state_dir else default_checkpoint_path().parent / "mcp",
        needs=needs, allowed_dirs=AllowedDirs.of(allow_dirs), max_image_bytes=int(max_image_mb * 2**20))
    server = create_server(PictrieveService(opened, settings), host=host, port=port, allowed_origins=allow_origins)
    where = (f"streamable HTTP at http://{url_host(host)}:{port}/mcp"
             + (" (bearer token required)" if token else "")) if transport == "http" else "stdio"
    click.echo(f"pictrieve mcp: {opened.count()} images in {opened.location}; {where}", err=True)
    if transport == "http":
        from pictrieve.mcp_server.http import serve_http

        serve_http(server, host=host, port=port, token=token)
    else:
        server.protocol_stdout = protocol
        server.run("stdio")


def _take_stdout():  # noqa: ANN202 - a binary file
    """The process's stdout, kept for the protocol; file descriptor 1 then points at stderr."""
    sys.stdout.flush()
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return protocol
