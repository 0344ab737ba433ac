"""The ``pictrieve`` command line.

Subcommands live in their own modules and are imported only when used, so ``pictrieve --help``
answers instantly instead of loading torch.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from pictrieve import __version__
from pictrieve.tools.core.registry import load_target

COMMANDS = {
    "index": ("pictrieve.cli.gallery_commands:index", "Add photos to a gallery (resumes, skips unchanged files)."),
    "search": ("pictrieve.cli.gallery_commands:search", "Find images by text or by example image."),
    "methods": ("pictrieve.cli.methods:methods", "List the retrieval methods (what --method accepts), their needs and settings."),
    "sync": ("pictrieve.cli.gallery_commands:sync", "Drop images whose files were deleted."),
    "info": ("pictrieve.cli.gallery_commands:info", "Show what a gallery holds."),
    "duplicates": ("pictrieve.cli.duplicates:duplicates", "List groups of near-identical photos in a gallery."),
    "tile": ("pictrieve.cli.tile:tile", "Index tiles of every image so NEEDLE finds small objects."),
    "demo": ("pictrieve.cli.demo:demo", "Index bundled sample photos, search them, write an HTML sheet."),
    "chat": ("pictrieve.cli.chat:chat", "Find a photo by answering questions (PlugIR)."),
    "quality": ("pictrieve.cli.quality:quality", "Quality-controlled search (QC2): annotate, train, search."),
    "serve": ("pictrieve.cli.serve:serve", "Serve every method's graph on a local LangGraph server."),
    "ask": ("pictrieve.cli.ask:ask", "Ask about a photo; answered from the photo and a web or local search, with sources."),
    "ui": ("pictrieve.cli.ui:ui", "Serve a web page to search, chat and steer over a gallery."),
    "mcp": ("pictrieve.cli.mcp:mcp", "Serve the gallery's tools to MCP clients (agent apps), over stdio or HTTP."),
    "fetch-models": ("pictrieve.cli.fetch_models:fetch_models", "Fetch the offline models once, before going offline."),
    "train-embedder": ("pictrieve.cli.train_embedder:train_embedder", "Train the offline image head on your captioned photos."),
    "calibrate": ("pictrieve.cli.calibrate:calibrate",
                  "Choose the embedder's relevance cutoff on captioned photos; store it in the gallery."),
    "eval": ("pictrieve.cli.main:eval_group", "Measure retrieval quality on your own captioned photos."),
}

EVAL_COMMANDS = {
    "retrieval": ("pictrieve.cli.eval_retrieval:retrieval", "Recall@K of text-to-image search on DIR/captions.jsonl."),
    "interactive": ("pictrieve.cli.eval_interactive:interactive", "PlugIR ablation with a simulated user (BRI, Hits@10)."),
    "quality": ("pictrieve.cli.eval_quality:quality_eval", "QC2 quality control against its baselines."),
    "visret": ("pictrieve.cli.eval_generative:visret_eval", "VisRet vs the text query's own ranking (hit@k, nDCG, AP)."),
    "needle": ("pictrieve.cli.eval_generative:needle_eval", "NEEDLE with 1..n embedders, screening, tiles, learned trust."),
    "needle-trust": ("pictrieve.cli.eval_generative:needle_trust_eval",
                     "NEEDLE's learned trust: learn on feedback queries, freeze, test against equal weights."),
    "needle-threshold": ("pictrieve.cli.eval_generative:needle_threshold",
                         "Choose the simulated person's caption-match threshold (on training photos)."),
    "relevance": ("pictrieve.cli.calibrate:relevance_eval",
                  "The relevance cutoff: present photos marked relevant, absent queries finding nothing."),
    "vsa": ("pictrieve.cli.eval_vsa:vsa_eval", "Vision Search Assistant: judged accuracy and citation checks."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are ``module:attribute`` strings imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            target, _ = self.lazy[name]
            return load_target(target)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_text) for name, (_, help_text) in sorted(self.lazy.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Examples:\n\n\b\n  pictrieve index ~/Photos --gallery ./my.gallery\n"
    '  pictrieve search "two dogs playing in the snow" --gallery ./my.gallery -k 12 --html results.html\n'
    "  pictrieve search --image query.jpg --gallery ./my.gallery\n  pictrieve demo",
)
@click.version_option(__version__, prog_name="pictrieve")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """pictrieve: find images with language.

    Galleries are Chroma databases: a folder path, or http://host:port for a `chroma run` server.
    The default embedder, 'offline', works without internet; choose another with --embedder
    (e.g. open_clip:ViT-B-32/laion2b_s34b_b79k) or the PICTRIEVE_EMBEDDER variable.
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)


@click.group(cls=LazyGroup, lazy=EVAL_COMMANDS, name="eval")
def eval_group() -> None:
    """Measure retrieval quality on your own captioned photos (DIR/captions.jsonl)."""


def main() -> None:
    """Console-script entry point: clear one-line errors instead of tracebacks for known failures."""
    from pictrieve.cli.errors import friendly_errors
    from pictrieve.cli.process_exit import end_process

    with friendly_errors():
        try:
            cli(standalone_mode=True)
        except SystemExit as done:
            end_process(done.code)  # a command that asked to skip Python's teardown ends here
            raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
