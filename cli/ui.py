"""``pictrieve ui``: serve the web page over a gallery (search, chat, steer, visualize, ask)."""

from __future__ import annotations

import socket

import click

from pictrieve.cli.method_search import need_option, parse_needs
from pictrieve.cli.runtime_options import runtime_options


def free_port(host: str) -> int:
    """A port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@click.command(epilog="Example:\n\n\b\n  pictrieve demo --out ./demo\n  pictrieve ui --gallery ./demo/gallery")
@click.option("--gallery", "-g", required=True, metavar="PATH|URL", help="Gallery to serve.")
@click.option("--embedder", "-e", default=None, metavar="NAME", help="Embedder (default: the gallery's).")
@click.option("--llm", default="offline", show_default=True, metavar="NAME", help="Chat model for the Chat (PlugIR) and Ask (VSA) tabs.")
@click.option("--base-url", default=None, metavar="URL", help="OpenAI-compatible endpoint for --llm openai:...")
@click.option("--captioner", default="auto", show_default=True, metavar="NAME",
              help="Captions for uncaptioned candidates in the Chat tab (see `pictrieve chat --help`).")
@click.option("--visualizer", default=None, envvar="PICTRIEVE_VISUALIZER", metavar="NAME",
              help="Guide images for the Visualize tab (VisRet, NEEDLE), e.g. exemplar:DIR (a captioned folder; "
                   "finds matching photos, does not generate). Default: $PICTRIEVE_VISUALIZER.")
@click.option("--image-embedder", default=None, metavar="NAME",
              help="Visualize tab: the gallery embedder VisRet searches image-to-image with (e.g. efficientnet-lite0, "
                   "if the gallery was indexed with it). Default: the gallery's own.")
@click.option("--search", default=None, metavar="NAME",
              help="Where the Ask tab searches: ddgs (DuckDuckGo, needs internet) or local:DIR (a folder of "
                   "pages). Default: no search; answers come from the photo alone.")
@click.option("--detector", default="ssd", show_default=True, help="Ask tab region detector: ssd or zeroshot:MODEL.")
@click.option("--vlm", default="offline", show_default=True, help="Ask tab region describer: offline or openai:MODEL.")
@click.option("--vlm-base-url", default=None, metavar="URL", help="OpenAI-compatible endpoint of the --vlm.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Keep the loopback default unless others should reach the page.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Another name (or address) visitors may reach the page by, besides localhost, 127.0.0.0/8, [::1] "
                   "and the --host address (repeatable); every other Host header is refused (DNS rebinding).")
@click.option("--port", default=0, type=click.IntRange(0, 65535), help="Port (default: a free one, printed on start).")
@click.option("--state-dir", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Where chat sessions are kept (default: the user cache folder).")
@need_option
@runtime_options
def ui(gallery: str, embedder: str | None, llm: str, base_url: str | None, captioner: str, visualizer: str | None,
       image_embedder: str | None, search: str | None, detector: str, vlm: str, vlm_base_url: str | None, host: str, port: int,
       allow_hosts: tuple[str, ...], state_dir: str | None, own_needs: tuple[str, ...] = ()) -> None:
    """Serve a web page to search, chat (PlugIR), steer (QC2), visualize (VisRet, NEEDLE) and ask (VSA) over a gallery.

    Opens nothing by itself: visit the printed URL in a browser.
    """
    from pictrieve.tools.core.extras import require_extra

    require_extra("ui", "pictrieve ui")  # before the import that would fail with a traceback
    import uvicorn

    from pictrieve.cli.chat import default_checkpoint_path
    from pictrieve.tools.models.chat_models import create_chat_model
    from pictrieve.tools.models.llm_calls import check_endpoint
    from pictrieve.ui.app import create_app
    from pictrieve.vectorstore.gallery import Gallery

    if search:  # what needs an extra or a folder is refused now, not at a tab's first run
        from pictrieve.tools.web.search import check_search_name

        check_search_name(search)
    if visualizer:
        from pictrieve.tools.models.visualizers import check_visualizer_name

        check_visualizer_name(visualizer)
    # the operator's endpoints answer before anything else (a dead one is one line, not a failed first run)
    check_endpoint(llm, base_url)
    check_endpoint(vlm, vlm_base_url, option="--vlm", base_option="--vlm-base-url")
    needs = parse_needs(own_needs)  # a misspelt need: one line, before the gallery opens
    opened = Gallery.open(gallery, embedder, create=False)  # opening never writes
    if image_embedder and image_embedder not in opened.embedder_names:
        raise click.UsageError(f"--image-embedder {image_embedder}: the gallery holds {', '.join(opened.embedder_names)}; "
                               f"index with it first: pictrieve index PHOTOS --gallery {gallery} -e {image_embedder}")
    chat_model = create_chat_model(llm, base_url=base_url)
    state = state_dir or default_checkpoint_path().parent / "ui"
    from pictrieve.tools.models.vlm import create_region_captioner

    app = create_app(opened, llm=chat_model, state_dir=state, plugir_extras={"captioner": captioner},
                     ask_extras={"search": search, "detector": detector,
                                 "vlm": create_region_captioner(vlm, base_url=vlm_base_url)},
                     visualizer=visualizer,
                     visualize_context={"image_embedder": image_embedder} if image_embedder else None,
                     bound=host, allowed_hosts=allow_hosts, needs=needs)
    port = port or free_port(host)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"pictrieve ui: {opened.count()} images in {opened.location}")
    click.echo(f"open http://{shown}:{port}/  (Ctrl+C stops)")
    if host.strip("[]") in ("0.0.0.0", "::") and not allow_hosts:
        click.echo("note: the page answers only to localhost and loopback addresses until you name the others "
                   "it is reached by with --allow-host NAME (it has no login: anyone who reaches it may use it)")
    uvicorn.run(app, host=host, port=port, log_level="warning")
