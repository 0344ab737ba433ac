"""``pictrieve serve``: every registered method's graph on a local LangGraph server (``langgraph dev``), or
``--write-config PATH``: the ``langgraph.json`` that serves them (installed plugins included)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click


@click.command()
@click.option("--gallery", "-g", default=None, help="Gallery folder or http://host:port Chroma server to serve (required unless --write-config).")
@click.option("--llm", default=None, help="Chat model for the methods that use one (default: offline), e.g. openai:gpt-4o-mini.")
@click.option("--base-url", default=None, help="OpenAI-compatible endpoint for --llm (vLLM, llama.cpp, Ollama).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind; keep loopback unless you mean it.")
@click.option("--port", default=2024, show_default=True, type=int, help="Port of the LangGraph API.")
@click.option("--write-config", "write_config", default=None, type=click.Path(dir_okay=False), metavar="PATH",
              help="Write a langgraph.json serving every registered method (installed plugins included) to PATH "
                   "and exit; --gallery/--llm/--base-url go into its env. Then: langgraph dev --config PATH.")
def serve(gallery: str | None, llm: str | None, base_url: str | None, host: str, port: int,
          write_config: str | None) -> None:
    """Serve every method (search, PlugIR, QC2, ... and installed plugins) with `langgraph dev`.

    Needs the LangGraph CLI: pip install "pictrieve[serve]". Clients talk to it with langgraph-sdk or
    LangGraph Studio; run settings are each graph's context (e.g. {"k": 5}).
    """
    from pictrieve.graphs.serving import ENV_BASE_URL, ENV_GALLERY, ENV_LLM, langgraph_config

    # A gallery folder is passed as an absolute path: the server runs in another folder (below), and a
    # written config may be used from anywhere.
    if gallery and "://" not in gallery:
        gallery = os.path.abspath(os.path.expanduser(gallery))
    env = {**({ENV_GALLERY: gallery} if gallery else {}), **({ENV_LLM: llm} if llm else {}),
           **({ENV_BASE_URL: base_url} if base_url else {})}
    if write_config:
        Path(write_config).write_text(json.dumps(langgraph_config(env), indent=2) + "\n")
        click.echo(f"wrote {write_config}: {', '.join(langgraph_config()['graphs'])}")
        return
    if not gallery:
        raise click.UsageError("give --gallery PATH (the gallery to serve), or --write-config PATH")
    executable = shutil.which("langgraph") or str(Path(sys.executable).with_name("langgraph"))
    if not Path(executable).exists():
        raise click.ClickException('the `langgraph` command is missing: pip install "pictrieve[serve]"')
    # langgraph dev keeps its in-memory state under the working directory: keep it out of the user's.
    with tempfile.TemporaryDirectory(prefix="pictrieve-serve-") as state:
        config = Path(state) / "langgraph.json"
        config.write_text(json.dumps(langgraph_config(), indent=2))
        click.echo(f"serving gallery {gallery} at http://{host}:{port} (Ctrl-C stops)")
        command = [executable, "dev", "--config", str(config), "--host", host, "--port", str(port),
                   "--no-browser", "--no-reload"]
        try:
            completed = subprocess.run(command, cwd=state, env={**os.environ, **env, "LANGGRAPH_CLI_NO_ANALYTICS": "1"})
        except KeyboardInterrupt:
            return
    raise SystemExit(completed.returncode)
