"""``pictrieve serve``: every registered method's graph on a local LangGraph server (``langgraph dev``), or
``--write-config PATH``: the ``langgraph.json`` that serves them (installed plugins included).

The server trusts only its operator (see the README's threat model): it binds loopback unless told
otherwise, and then only with a token; browsers' pages are refused unless their origin is listed; what a
run may choose among is listed with ``--allow``; image paths are read only inside ``--allow-dir``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from pictrieve.cli.need_options import check_needs, need_options
from pictrieve.cli.runtime_options import runtime_options, runtime_settings

logger = logging.getLogger(__name__)

def need_variables(needs: dict[str, Any]) -> dict[str, str]:
    """What was given for needs (by need and endpoint name, :mod:`pictrieve.cli.need_options`) as the environment
    variables the served graphs read (each need's own, :attr:`~pictrieve.agents.needs.Need.env_var`, and its
    endpoint's; a repeated option's values joined by commas)."""
    from pictrieve.agents.needs import all_needs, names_of
    from pictrieve.graphs.registry import methods

    declared = all_needs(methods())
    endpoints = {need.endpoint.key: need.endpoint for need in declared.values() if need.endpoint is not None}
    found: dict[str, str] = {}
    for key, value in needs.items():
        need = declared.get(key)
        variable = need.env_var if need is not None else endpoints[key].env_var if key in endpoints else None
        if not variable:
            raise click.BadParameter(f"the need {key} declares no environment variable: the server cannot be "
                                     "given it", param_hint="--need")
        found[variable] = ",".join(map(str, names_of(value))) if need is not None and need.many else str(value)
    return found


def parse_allow(values: tuple[str, ...]) -> dict[str, list[str]]:
    """``("llm=offline,openai:gpt-4o-mini", ...)`` -> ``{"llm": ["offline", "openai:gpt-4o-mini"]}``; a setting
    that is not choosable (a URL, a gallery, a folder) is a usage error."""
    from pictrieve.graphs.serving import choosable_settings, operator_only_settings

    OPERATOR_ONLY, CHOOSABLE = operator_only_settings(), choosable_settings()  # plugins' own needs included
    allowed: dict[str, list[str]] = {}
    for text in values:
        key, sep, rest = text.partition("=")
        key = key.strip()
        if not sep or not rest.strip():
            raise click.BadParameter(f"{text!r}: write SETTING=VALUE[,VALUE], e.g. llm=offline,openai:gpt-4o-mini",
                                     param_hint="--allow")
        if key in OPERATOR_ONLY:
            raise click.BadParameter(f"{key} is never chosen by a run (it says where the server reaches or what it "
                                     f"reads): set it with {OPERATOR_ONLY[key][1]}", param_hint="--allow")
        if key not in CHOOSABLE:
            raise click.BadParameter(f"{key!r} is no run setting; choose from {', '.join(CHOOSABLE)}", param_hint="--allow")
        allowed.setdefault(key, []).extend(v.strip() for v in rest.split(",") if v.strip())
    return allowed


@click.command()
@click.option("--gallery", "-g", default=None, help="Gallery folder or http://host:port Chroma server to serve (required unless --write-config).")
@click.option("--allow", "allow", multiple=True, metavar="SETTING=V1[,V2]",
              help="Values a run may choose for a setting besides yours (repeatable), e.g. llm=offline,openai:gpt-4o-mini. "
                   "Never a URL, a gallery or a folder of the caller's.")
@click.option("--allow-dir", "allow_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Folder whose image files a run's image input may name (repeatable; default none: ids and data only).")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Web origin whose pages may call the server (repeatable; default none), e.g. https://smith.langchain.com for LangGraph Studio.")
@click.option("--token", default=None, envvar="PICTRIEVE_SERVE_TOKEN", show_envvar=True,
              help="Bearer token every request must carry; required with a --host other than loopback.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind; keep loopback unless you mean it.")
@click.option("--port", default=2024, show_default=True, type=int, help="Port of the LangGraph API.")
@click.option("--write-config", "write_config", default=None, type=click.Path(dir_okay=False), metavar="PATH",
              help="Write a langgraph.json serving every registered method (installed plugins included) to PATH "
                   "and exit; the settings above go into its env. Then: langgraph dev --config PATH.")
@need_options()
@runtime_options
def serve(gallery: str | None, allow: tuple[str, ...], allow_dirs: tuple[str, ...], cors_origins: tuple[str, ...],
          token: str | None, host: str, port: int, write_config: str | None, needs: dict[str, Any]) -> None:
    """Serve every method (search, PlugIR, QC2, ... and installed plugins) with `langgraph dev`.

    Needs the LangGraph CLI: pip install "pictrieve[serve]". Clients talk to it with langgraph-sdk or
    LangGraph Studio; run settings are each graph's context (e.g. {"k": 5}). Everything that says where
    the server reaches or what it reads is set here, by you; a run may choose only what --allow lists.
    """
    from pictrieve.graphs.serving import ENV_ALLOW, ENV_ALLOW_DIRS, ENV_GALLERY, langgraph_config
    from pictrieve.graphs.serving_http import ENV_CORS_ORIGINS, ENV_TOKEN
    from pictrieve.tools.core.exposure import ExposureError, check_exposure, normalise_host
    from pictrieve.tools.core.image_inputs import AllowedDirs, ImageInputError

    # A gallery folder is passed as an absolute path: the server runs in another folder (below), and a
    # written config may be used from anywhere.
    if gallery and "://" not in gallery:
        gallery = os.path.abspath(os.path.expanduser(gallery))
    try:
        check_exposure(host, token, token_env=ENV_TOKEN)
        dirs = AllowedDirs.of(allow_dirs)
    except (ExposureError, ImageInputError) as exc:
        raise click.UsageError(str(exc)) from None
    env = {**({ENV_GALLERY: gallery} if gallery else {}),
           **need_variables(needs),
           **({ENV_ALLOW: json.dumps(parse_allow(allow))} if allow else {}),
           **({ENV_ALLOW_DIRS: os.pathsep.join(map(str, dirs.dirs))} if dirs else {}),
           **({ENV_CORS_ORIGINS: " ".join(o.rstrip("/") for o in cors_origins)} if cors_origins else {})}
    env.update(runtime_settings())  # --runtime/--quantize (or the variables) reach the served graphs and a written config
    if write_config:  # the token stays out of a file: the server reads it from $PICTRIEVE_SERVE_TOKEN
        Path(write_config).write_text(json.dumps(langgraph_config(env), indent=2) + "\n")
        click.echo(f"wrote {write_config}: {', '.join(langgraph_config()['graphs'])}")
        return
    if not gallery:
        raise click.UsageError("give --gallery PATH (the gallery to serve), or --write-config PATH")
    from pictrieve.vectorstore.chroma_store import is_gallery_folder, is_server, not_a_gallery

    # the operator's names and endpoints (given here, else the variables the served graphs will read) are refused
    # now in one line, not at a failed first run
    check_needs(needs, environ=os.environ, defaults=False)
    if not is_server(gallery) and not is_gallery_folder(gallery):
        raise not_a_gallery(gallery)  # at start, in one line, writing nothing (the served graphs open it read-only)
    executable = shutil.which("langgraph") or str(Path(sys.executable).with_name("langgraph"))
    if not Path(executable).exists():
        raise click.ClickException('the `langgraph` command is missing: pip install "pictrieve[serve]"')
    if token:
        env[ENV_TOKEN] = token
    raise SystemExit(_run(executable, normalise_host(host), port, env, gallery))


def _run(executable: str, host: str, port: int, env: dict[str, str], gallery: str) -> int:
    """``langgraph dev`` in a temporary folder of its own (its in-memory state, the pictures runs send), in
    its own process group; SIGTERM, SIGHUP or Ctrl-C stop the whole group and remove the folder."""
    from pictrieve.graphs.serving import langgraph_config
    from pictrieve.tools.core.exposure import url_host

    for folder in remove_stale_folders(tempfile.gettempdir()):
        logger.info("removed %s, left by a pictrieve serve that was killed", folder)
    state = tempfile.mkdtemp(prefix=STATE_PREFIX)
    (Path(state) / OWNER_FILE).write_text(str(os.getpid()))
    child: subprocess.Popen | None = None

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        config = Path(state) / "langgraph.json"
        config.write_text(json.dumps(langgraph_config(), indent=2))
        (Path(state) / "tmp").mkdir()
        click.echo(f"serving gallery {gallery} at http://{url_host(host)}:{port} (Ctrl-C stops)")
        command = [executable, "dev", "--config", str(config), "--host", host, "--port", str(port),
                   "--no-browser", "--no-reload"]
        child = subprocess.Popen(command, cwd=state, start_new_session=True, preexec_fn=_die_with_parent,
                                 env={**os.environ, **env, "TMPDIR": str(Path(state) / "tmp"),
                                      "LANGGRAPH_CLI_NO_ANALYTICS": "1"})
        return child.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if child is not None:
            _stop_group(child)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        shutil.rmtree(state, ignore_errors=True)


STATE_PREFIX = "pictrieve-serve-"
OWNER_FILE = "owner.pid"
"""The process id of the `pictrieve serve` that made a state folder, written inside it."""


def remove_stale_folders(temp: str | os.PathLike) -> list[str]:
    """Remove the state folders in ``temp`` that a `pictrieve serve` killed without a chance to clean up (kill -9,
    a power cut) left behind: those whose owner process is gone. Folders of running servers, and folders without
    an owner file, stay. Returns the folders removed."""
    removed = []
    for folder in Path(temp).glob(f"{STATE_PREFIX}*"):
        try:
            owner = int((folder / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        if owner == os.getpid() or _alive(owner):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _die_with_parent() -> None:
    """In the child, before ``langgraph dev`` starts: on Linux, be sent SIGTERM when ``pictrieve serve`` dies,
    even by SIGKILL (which no handler sees), so no server is left answering on the port."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def _stop_group(child: subprocess.Popen) -> None:
    """Stop ``child`` and everything it started: SIGTERM to its group, SIGKILL after 20 s."""
    for signum, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            logger.warning("langgraph dev did not stop within %d s; killing it", wait)
        except KeyboardInterrupt:  # a second Ctrl-C: go straight on to SIGKILL
            continue
