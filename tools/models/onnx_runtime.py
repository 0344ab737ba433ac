"""Running a torch model on ONNX Runtime: exported once, cached by fingerprint, torch as the fallback.

Eager PyTorch on a CPU leaves much of the machine's speed unused: ONNX Runtime runs the same
EfficientNet-Lite0 trunk about 2.4 times as fast with outputs equal to 1e-5 (``BENCHMARKS.md``). A model
that wants this path describes itself once as an :class:`OnnxExport` (a name, a fingerprint of its
weights, how to build the torch module and example inputs) and asks :func:`try_onnx_model` for an
:class:`OnnxModel`:

- the first call exports the module with ``torch.onnx.export`` (the TorchScript exporter, which needs
  the ``onnx`` package: ``pip install 'pictrieve[onnx]'``), checks that ONNX Runtime's outputs equal
  torch's on the example inputs (``atol``), and writes the file atomically to
  ``$PICTRIEVE_CACHE/onnx/NAME-KEY.onnx`` (or ``$PICTRIEVE_ONNX_CACHE/NAME-KEY.onnx``); ``KEY`` hashes the fingerprint, the export settings and
  torch's version (and onnxruntime's for int8), so a changed model or exporter never reads a stale file;
- later calls, in any process, only open that file: neither torch nor the model's Python code is
  imported, which is most of a cold start;
- a transformer (``fusion``: :class:`TransformerFusion`) is then rewritten by ONNX Runtime's transformer optimizer
  (``onnxruntime.transformers.optimizer``), which fuses each block's attention, LayerNorm + residual and
  bias + GELU into single operators (ViT-B-32: 184 nodes instead of 1,546; ``benchmarks/onnx_node_counts.py``); the fused file must
  match torch as the plain one does. An optimizer that fails, or fuses into different outputs, leaves the
  plain export in place after one warning line;
- whatever else a later process needs to use the file without torch (``metadata``: an open_clip tower's input
  transform) is kept beside it as ``NAME-KEY.json``, in place before the model file is, and read with
  :func:`cached_metadata`;
- ``quantize="int8"`` adds a dynamically quantised copy (weights int8, activations quantised per
  call; ``onnxruntime.quantization``), cached beside it. It suits models whose time goes to matrix
  products (transformer towers); on a convolutional network it runs ``ConvInteger``, which measured
  slower than fp32 and far less faithful on EfficientNet-Lite0 (``BENCHMARKS.md``): measure first;
- anything failing (no ``onnx`` package, an unwritable cache, an operator the exporter refuses, outputs
  that differ) is logged as one warning line and :func:`try_onnx_model` returns ``None``: the caller
  runs torch, as before.

Which runtime runs is :func:`choose_runtime`: ``--runtime``/``$PICTRIEVE_RUNTIME`` (``torch``,
``onnx`` or ``auto``) when set, else the model's own measured choice on a CPU, and torch on a GPU.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import io
import json
import os
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import numpy as np

from pictrieve.errors import PictrieveError
from pictrieve.tools.core.files import atomic_write_text
from pictrieve.tools.core.model_cache import shared_model
from pictrieve.tools.core.pypi_assets import cache_root
from pictrieve.tools.core.threads import intra_op_threads

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

RUNTIME_ENV = "PICTRIEVE_RUNTIME"
QUANTIZE_ENV = "PICTRIEVE_QUANTIZE"
ONNX_CACHE_ENV = "PICTRIEVE_ONNX_CACHE"
RUNTIMES = ("auto", "torch", "onnx")
QUANTIZATIONS = ("none", "int8")
EXPORT_FORMAT = 1  # bump when the way files are exported changes (invalidates every cached file)
DEFAULT_OPSET = 17


class RuntimeSettingError(PictrieveError, ValueError):
    """``--runtime``/``$PICTRIEVE_RUNTIME`` or ``--quantize``/``$PICTRIEVE_QUANTIZE`` holds an unknown value."""


class OnnxExportError(PictrieveError, RuntimeError):
    """A model could not be exported to, quantised for, or opened by ONNX Runtime."""


def requested_runtime(value: str | None = None) -> str:
    """``auto``, ``torch`` or ``onnx``: ``value`` when given, else ``$PICTRIEVE_RUNTIME``, else ``auto``."""
    chosen = (value if value is not None else os.environ.get(RUNTIME_ENV, "")).strip().lower() or "auto"
    if chosen not in RUNTIMES:
        raise RuntimeSettingError(f"unknown runtime {chosen!r} (from --runtime or ${RUNTIME_ENV}); "
                                  f"choose one of {', '.join(RUNTIMES)}")
    return chosen


def requested_quantization(value: str | None = None, default: str = "none") -> str | None:
    """``"int8"`` or ``None``: ``value`` when given, else ``$PICTRIEVE_QUANTIZE``, else the model's ``default``."""
    chosen = (value if value is not None else os.environ.get(QUANTIZE_ENV, "")).strip().lower() or default
    if chosen not in QUANTIZATIONS:
        raise RuntimeSettingError(f"unknown quantization {chosen!r} (from --quantize or ${QUANTIZE_ENV}); "
                                  f"choose one of {', '.join(QUANTIZATIONS)}")
    return None if chosen == "none" else chosen


def choose_runtime(measured: str, device: str = "cpu", requested: str | None = None) -> str:
    """``"torch"`` or ``"onnx"`` for a model whose measured choice on a CPU is ``measured``.

    An explicit ``requested`` (or ``$PICTRIEVE_RUNTIME``) wins; ``auto`` takes ``measured`` on the CPU and
    torch on any other device (ONNX Runtime runs here on the CPU only).
    """
    runtime = requested_runtime(requested)
    if runtime != "auto":
        return runtime
    return measured if str(device).partition(":")[0] == "cpu" else "torch"


def package_version(name: str) -> str:
    """An installed distribution's version, read without importing it (``"none"`` if absent)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


@dataclass(frozen=True)
class TransformerFusion:
    """How ONNX Runtime's transformer optimizer should rewrite an exported transformer.

    ``model_type`` is the optimizer's name for the graph's pattern (``"clip"`` for open_clip's and Hugging
    Face's CLIP towers once their attention is exported as separate q/k/v projections); ``num_heads`` and
    ``hidden_size`` are the attention's. On a CPU the fused graph runs the same products with a tenth of
    the operators, so a loaded machine wakes ONNX Runtime's threads far fewer times per batch.
    """

    model_type: str
    num_heads: int
    hidden_size: int

    def describe(self) -> str:
        return f"{self.model_type}/heads={self.num_heads}/hidden={self.hidden_size}"


@dataclass(frozen=True)
class OnnxExport:
    """What it takes to export one torch model, and what its cached file is keyed by.

    ``fingerprint`` must change whenever the exported graph would: hash the weights file and name the
    architecture's version (e.g. timm's) there. It is computed by the caller without importing torch, so
    a cached file opens fast. ``build`` and ``example_inputs`` are called only when exporting.
    """

    name: str  # file-name stem, e.g. "efficientnet-lite0-trunk"
    fingerprint: str
    build: Callable[[], "torch.nn.Module"]
    example_inputs: Callable[[], tuple["torch.Tensor", ...]]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    dynamic_axes: Mapping[str, Mapping[int, str]] | None = None  # default: axis 0 of every input and output
    opset: int = DEFAULT_OPSET
    atol: float = 1e-4  # largest difference from torch's outputs on the example inputs accepted
    extra: Mapping[str, Any] = field(default_factory=dict)  # anything else the file depends on
    fusion: TransformerFusion | None = None  # rewrite with ONNX Runtime's transformer optimizer after exporting
    metadata: Callable[[], Mapping[str, str]] | None = None
    """Called once when exporting: strings kept beside the file (``NAME-KEY.json``, written before the model file
    itself) and read back by :func:`cached_metadata` without ONNX Runtime, e.g. how to prepare the inputs, so a later
    process needs nothing but the cache."""

    def axes(self) -> dict[str, dict[int, str]]:
        if self.dynamic_axes is not None:
            return {k: dict(v) for k, v in self.dynamic_axes.items()}
        return {name: {0: "batch"} for name in (*self.input_names, *self.output_names)}

    def key(self, quantize: str | None = None) -> str:
        """Hash of everything the file depends on: format, fingerprint, settings, exporter versions."""
        parts = [
            f"format={EXPORT_FORMAT}", f"name={self.name}", f"fingerprint={self.fingerprint}",
            f"opset={self.opset}", f"inputs={self.input_names}", f"outputs={self.output_names}",
            f"axes={sorted((k, sorted(v.items())) for k, v in self.axes().items())}",
            f"extra={sorted(self.extra.items())}", f"torch={package_version('torch')}",
        ]
        if self.fusion is not None:  # the optimizer's output depends on its version
            parts += [f"fusion={self.fusion.describe()}", f"onnxruntime={package_version('onnxruntime')}"]
        if quantize:
            parts += [f"quantize={quantize}", f"onnxruntime={package_version('onnxruntime')}"]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def path(self, quantize: str | None = None) -> Path:
        """Where the cached file lives: ``onnx_cache_dir()/NAME[-int8]-KEY.onnx``."""
        stem = f"{self.name}-{quantize}" if quantize else self.name
        return onnx_cache_dir() / f"{stem}-{self.key(quantize)[:20]}.onnx"


def onnx_cache_dir() -> Path:
    """Where exported files are kept: ``$PICTRIEVE_ONNX_CACHE`` when set (one folder shared by processes whose
    ``PICTRIEVE_CACHE`` differ, as the test suite's), else ``$PICTRIEVE_CACHE/onnx``."""
    explicit = os.environ.get(ONNX_CACHE_ENV, "").strip()
    return Path(explicit).expanduser() if explicit else cache_root() / "onnx"


class OnnxModel:
    """An ONNX Runtime session on a cached file: ``run(*arrays) -> list of output arrays`` (thread-safe).

    ``threads`` intra-op threads (default :func:`~pictrieve.tools.core.threads.intra_op_threads`). The
    threads sleep between calls instead of spinning, so image decoding beside the model keeps its CPUs.
    """

    def __init__(self, path: str | os.PathLike, threads: int | None = None) -> None:
        import onnxruntime as ort

        self.path = Path(path)
        self.threads = threads or intra_op_threads()
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only: no warnings about unused initialisers on stderr
        try:
            self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            raise OnnxExportError(f"ONNX Runtime cannot open {self.path}: {_first_line(exc)}") from exc
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_names = tuple(o.name for o in self.session.get_outputs())

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """The outputs for ``inputs`` (float32 arrays, in :attr:`input_names` order)."""
        feeds = {name: np.ascontiguousarray(x, dtype=np.float32) for name, x in zip(self.input_names, inputs)}
        return self.session.run(None, feeds)

    def __repr__(self) -> str:
        return f"OnnxModel({self.path.name!r}, threads={self.threads})"


def onnx_model(export: OnnxExport, quantize: str | None = None, threads: int | None = None) -> OnnxModel:
    """The model's ONNX Runtime session, exporting (and quantising) it first when no cached file exists.

    Raises :class:`OnnxExportError` with one line when that is impossible. Sessions are shared per file
    and thread count within the process.
    """
    path = ensure_exported(export, quantize)
    threads = threads or intra_op_threads()
    return shared_model(("onnx-session", str(path), threads), lambda: OnnxModel(path, threads))


_warned: set[str] = set()
_warned_lock = threading.Lock()


def try_onnx_model(export: OnnxExport, quantize: str | None = None, threads: int | None = None) -> OnnxModel | None:
    """:func:`onnx_model`, or ``None`` after one warning line when it fails (the caller runs torch)."""
    try:
        return onnx_model(export, quantize, threads)
    except Exception as exc:  # noqa: BLE001 - any failure means: run torch instead, and say why once
        with _warned_lock:
            first = export.name not in _warned
            _warned.add(export.name)
        log = logger.warning if first else logger.debug
        log("%s: running it with torch instead of ONNX Runtime (%s)", export.name, _first_line(exc))
        return None


_export_locks: dict[str, threading.Lock] = {}


def ensure_exported(export: OnnxExport, quantize: str | None = None) -> Path:
    """The cached file for ``export`` (and ``quantize``), made now when missing; see the module docstring."""
    path = export.path(quantize)
    if path.is_file():
        return path
    with _export_locks.setdefault(str(path), threading.Lock()):  # one export per process; files are atomic
        if path.is_file():
            return path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OnnxExportError(f"cannot create the ONNX cache folder {path.parent} ({exc.strerror or exc})") from exc
        if quantize is None:
            logger.warning("exporting %s to ONNX Runtime once (a few seconds to a minute): %s", export.name, path)

            def write(tmp: Path) -> None:
                _export(export, tmp)
                if export.metadata is not None:  # in place before the model file is
                    atomic_write_text(metadata_path(path), json.dumps(dict(export.metadata()), sort_keys=True))

            _write_atomically(path, write)
        elif quantize == "int8":
            source = ensure_exported(export, None)
            logger.warning("quantising %s to int8 once: %s", export.name, path)

            def write(tmp: Path) -> None:
                _quantize_int8(source, tmp)
                if metadata_path(source).is_file():  # the same inputs as the file it quantises
                    atomic_write_text(metadata_path(path), metadata_path(source).read_text())

            _write_atomically(path, write)
        else:
            raise RuntimeSettingError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZATIONS)}")
        return path


def metadata_path(path: Path) -> Path:
    """Where the metadata of the cached file ``path`` is kept (:attr:`OnnxExport.metadata`)."""
    return path.with_suffix(".json")


def cached_metadata(path: Path) -> dict[str, str] | None:
    """What the export stored beside the cached file ``path`` (:meth:`OnnxExport.path`), when that file exists;
    ``None`` when either is missing or unreadable. Reads a small JSON file: neither ONNX Runtime nor torch is
    involved."""
    try:
        if not path.is_file():
            return None
        stored = json.loads(metadata_path(path).read_text())
    except (OSError, ValueError):
        return None
    return {str(k): str(v) for k, v in stored.items()} if isinstance(stored, dict) else None


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` into a temporary file beside ``path``, then rename it over ``path``."""
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".part.onnx")
    except OSError as exc:
        raise OnnxExportError(f"cannot write into the ONNX cache folder {path.parent} ({exc.strerror or exc})") from exc
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _export(export: OnnxExport, target: Path) -> None:
    """Export with the TorchScript exporter and check ONNX Runtime's outputs against torch's."""
    import importlib.util

    if importlib.util.find_spec("onnx") is None:
        raise OnnxExportError(f"exporting needs the onnx package: pip install 'pictrieve[onnx]', or set {RUNTIME_ENV}=torch")
    import torch

    module = export.build().eval()
    inputs = export.example_inputs()
    with torch.inference_mode():
        expected = module(*inputs)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    try:
        with warnings.catch_warnings(), _exporter_log_off():
            warnings.simplefilter("ignore")  # the exporter's deprecation and tracer warnings
            torch.onnx.export(
                module, inputs, str(target), dynamo=False, opset_version=export.opset,
                input_names=list(export.input_names), output_names=list(export.output_names),
                dynamic_axes=export.axes(), do_constant_folding=True,
            )
    except Exception as exc:  # noqa: BLE001 - exporter errors come in many types
        raise OnnxExportError(f"torch.onnx.export refused {export.name}: {_first_line(exc)}") from exc
    arrays = [x.numpy() for x in inputs]
    worst = _difference(target, arrays, expected)
    if not worst <= export.atol:
        raise OnnxExportError(f"the ONNX export of {export.name} differs from torch by {worst:.2g} "
                              f"(more than {export.atol:g}); not using it")
    if export.fusion is not None:
        _fuse_in_place(export, target, arrays, expected)


def _difference(path: Path, arrays: list[np.ndarray], expected: list["torch.Tensor"]) -> float:
    """The largest absolute difference of ONNX Runtime's outputs for ``arrays`` from torch's (``inf`` when the
    outputs do not correspond)."""
    got = OnnxModel(path, threads=1).run(*arrays)
    if len(got) != len(expected):
        return float("inf")
    return max(float(np.abs(g - e.float().numpy()).max()) for g, e in zip(got, expected))


def _fuse_in_place(export: OnnxExport, target: Path, arrays: list[np.ndarray], expected: list["torch.Tensor"]) -> None:
    """Replace the plain export at ``target`` by ONNX Runtime's fused rewrite of it when that rewrite works and
    still matches torch; otherwise keep the plain file and say why in one warning line."""
    fused = target.with_name(target.stem + ".fused.onnx")
    try:
        _optimize(target, fused, export.fusion)
        worst = _difference(fused, arrays, expected)
        if not worst <= export.atol:
            raise OnnxExportError(f"the fused graph differs from torch by {worst:.2g} (more than {export.atol:g})")
        os.replace(fused, target)
    except Exception as exc:  # noqa: BLE001 - the plain export still works: report and keep it
        logger.warning("%s: kept the plain ONNX export, ONNX Runtime's transformer optimizer failed (%s)",
                       export.name, _first_line(exc))
    finally:
        fused.unlink(missing_ok=True)


def _optimize(source: Path, target: Path, fusion: TransformerFusion) -> None:
    """Run ONNX Runtime's transformer optimizer on ``source`` (graph fusions only, no hardware-specific
    rewrite: ``opt_level=0``) and save the result to ``target``; its advice is kept off the user's screen."""
    quiet = _QuietOptimizer()
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:  # its modules log through loggers of their own names, which reach the root's handlers
        handler.addFilter(quiet)
    try:
        # It prints, too ("Removed N initializers ..."): only this thread's prints are kept off stdout, and only its
        # modules' warnings are dropped, so another thread's output (a server's, a --json answer) goes on as before.
        with _this_thread_prints_to(io.StringIO()), warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"onnx(runtime)?(\.|$)")
            from onnxruntime.transformers.optimizer import MODEL_TYPES, optimize_model

            if fusion.model_type not in MODEL_TYPES:
                raise OnnxExportError(f"it has no model type {fusion.model_type!r}")
            model = optimize_model(str(source), model_type=fusion.model_type, num_heads=fusion.num_heads,
                                   hidden_size=fusion.hidden_size, opt_level=0)
            fused = model.get_fused_operator_statistics()
            if not fused.get("Attention") and not fused.get("MultiHeadAttention"):
                raise OnnxExportError(f"no attention was fused ({fusion.describe()})")
            model.save_model_to_file(str(target))
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)


class _ThreadStdout(io.TextIOBase):
    """``sys.stdout`` while some threads' prints are kept apart: each of those threads writes to its own buffer,
    every other thread to the stream that was ``sys.stdout`` before (:func:`_this_thread_prints_to`)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffers: dict[int, io.StringIO] = {}

    def _target(self) -> Any:
        return self.buffers.get(threading.get_ident(), self.stream)

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, ... of the real stream
        return getattr(self.stream, name)


_stdout_lock = threading.Lock()


@contextlib.contextmanager
def _this_thread_prints_to(buffer: io.StringIO) -> Iterator[None]:
    """Send what the calling thread prints to ``buffer`` for the block; other threads keep printing to stdout
    (``contextlib.redirect_stdout`` would swallow every thread's prints meanwhile)."""
    with _stdout_lock:
        proxy = sys.stdout if isinstance(sys.stdout, _ThreadStdout) else _ThreadStdout(sys.stdout)
        proxy.buffers[threading.get_ident()] = buffer
        sys.stdout = proxy
    try:
        yield
    finally:
        with _stdout_lock:
            proxy.buffers.pop(threading.get_ident(), None)
            if not proxy.buffers and sys.stdout is proxy:  # the last one out puts the real stream back
                sys.stdout = proxy.stream


@contextlib.contextmanager
def _exporter_log_off() -> Iterator[None]:
    """Keep the TorchScript exporter's C++ log off while it runs.

    Its ``setup_onnx_logging`` tests the *function* ``_jit_is_onnx_log_enabled`` for truth (torch 2.9-2.14), so
    the log is always on, and an operator it refuses prints the whole graph to **stdout**, where ``--json``
    output and an MCP server's stdio protocol go. The failure is reported in one log line instead.
    """
    try:
        from torch.onnx._internal.torchscript_exporter import utils
    except ImportError:  # another torch: nothing to correct
        yield
        return
    original = getattr(utils, "setup_onnx_logging", None)
    if original is None:
        yield
        return
    utils.setup_onnx_logging = lambda verbose: contextlib.nullcontext()
    try:
        yield
    finally:
        utils.setup_onnx_logging = original


def _quantize_int8(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of ``source`` (weights int8; activations scaled per call)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise OnnxExportError(f"int8 quantisation needs the onnx package: pip install 'pictrieve[onnx]' ({exc})") from exc
    quiet = _QuietQuantizer()
    logging.getLogger().addFilter(quiet)  # it logs pages of advice through the root logger
    try:
        import onnx

        # DefaultTensorType: shape inference gives no type to the outputs of ONNX Runtime's fused operators
        # (com.microsoft domain), which the quantiser needs for the products that follow them
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QUInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    except Exception as exc:  # noqa: BLE001
        raise OnnxExportError(f"int8 quantisation of {source.name} failed: {_first_line(exc)}") from exc
    finally:
        logging.getLogger().removeFilter(quiet)


class _QuietOptimizer(logging.Filter):
    """Drops what ONNX Runtime's transformer optimizer logs below ERROR (fusion counts, shape-inference notes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or "onnxruntime" not in record.pathname


class _QuietQuantizer(logging.Filter):
    """Drops what ``onnxruntime.quantization`` logs below ERROR through the root logger (advice and shape
    notes, dozens of lines per model); everything else passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or "onnxruntime" not in record.pathname


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."
