"""``pictrieve ui``: serve the web page over a gallery (search, chat, steer, visualize, ask)."""

from __future__ import annotations

import socket
from typing import Any

import click

from pictrieve.cli.need_options import check_needs, need_options
from pictrieve.cli.runtime_options import runtime_options


def free_port(host: str) -> int:
    """A port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@click.command(epilog="Example:\n\n\b\n  pictrieve demo --out ./demo\n  pictrieve ui --gallery ./demo/gallery")
@click.option("--gallery", "-g", required=True, metavar="PATH|URL", help="Gallery to serve.")
@click.option("--embedder", "-e", default=None, metavar="NAME", help="Embedder (default: the gallery's).")
@click.option("--image-embedder", default=None, metavar="NAME",
              help="Visualize tab: the gallery embedder VisRet searches image-to-image with (e.g. efficientnet-lite0, "
                   "if the gallery was indexed with it). Default: the gallery's own.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Keep the loopback default unless others should reach the page.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another name (or address) visitors may reach the page by, besides localhost, 127.0.0.0/8, [::1] "
                   "and the --host address (repeatable); every other Host header is refused (DNS rebinding).")
@click.option("--port", default=0, type=click.IntRange(0, 65535), help="Port (default: a free one, printed on start).")
@click.option("--state-dir", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Where chat sessions are kept (default: the user cache folder).")
@need_options(environ=True)
@runtime_options
def ui(gallery: str, embedder: str | None, image_embedder: str | None, host: str, port: int,
       allow_hosts: tuple[str, ...], state_dir: str | None, needs: dict[str, Any]) -> None:
    """Serve a web page to search, chat (PlugIR), steer (QC2), visualize (VisRet, NEEDLE) and ask (VSA) over a gallery.

    Opens nothing by itself: visit the printed URL in a browser.
    """
    from pictrieve.tools.core.extras import require_extra

    require_extra("ui", "pictrieve ui")  # before the import that would fail with a traceback
    import uvicorn

    from pictrieve.cli.chat import default_checkpoint_path
    from pictrieve.ui.app import create_app
    from pictrieve.vectorstore.gallery import Gallery

    # what needs an extra, a folder or an endpoint is refused now, not at a tab's first run
    check_needs(needs)
    opened = Gallery.open(gallery, embedder, create=False)  # opening never writes
    if image_embedder and image_embedder not in opened.embedder_names:
        raise click.UsageError(f"--image-embedder {image_embedder}: the gallery holds {', '.join(opened.embedder_names)}; "
                               f"index with it first: pictrieve index PHOTOS --gallery {gallery} -e {image_embedder}")
    state = state_dir or default_checkpoint_path().parent / "ui"
    app = create_app(opened, needs=needs, state_dir=state,
                     settings={"visret": {"image_embedder": image_embedder}} if image_embedder else None,
                     bound=host, allowed_hosts=allow_hosts)
    port = port or free_port(host)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"pictrieve ui: {opened.count()} images in {opened.location}")
    click.echo(f"open http://{shown}:{port}/  (Ctrl+C stops)")
    if host.strip("[]") in ("0.0.0.0", "::") and not allow_hosts:
        click.echo("note: the page answers only to localhost and loopback addresses until you name the others "
                   "it is reached by with --allow-host NAME (it has no login: anyone who reaches it may use it)")
    uvicorn.run(app, host=host, port=port, log_level="warning")
