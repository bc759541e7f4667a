"""The ``litellm`` embedder: any embedding model litellm can reach.

What the service answers is checked here before anyone uses it: one vector per
text, all of one dimension (the first answer's, then the store's), every value
finite. litellm's errors map once: a timeout is :class:`~agentd.EmbedderTimeout`,
an answer that cannot be read is :class:`~agentd.EmbedderBadOutput`, anything
else (a refused connection, an HTTP error) is :class:`~agentd.EmbedderError`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentd._exceptions import EmbedderBadOutput, EmbedderError, EmbedderTimeout
from agentd.embedders import check_vectors, normalize
from agentd.embedders.calibration import DEFAULT_WORDS, UNCALIBRATED, Calibration, WordWeights
from agentd.llm import litellm_module
from agentd.llm.errors import caused_by


class LitellmEmbedder:
    """Embeds through ``litellm.embedding``; the dimension is learnt from the first call."""

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 30.0,
        batch_size: int = 64,
    ) -> None:
        if not model:
            raise EmbedderError("embedding.model is required for provider 'litellm'")
        self.model_id = model
        self.calibration: Calibration = UNCALIBRATED
        self.words: WordWeights = DEFAULT_WORDS
        self._api_base = api_base
        self._api_key_env = api_key_env
        self._timeout = timeout
        self._batch_size = batch_size
        self._dimension: int | None = None
        self._lock = threading.Lock()
        # Imported now (it takes seconds): the time a call may take is the model's, not the import's.
        self._litellm = litellm_module()

    @property
    def dimension(self) -> int:
        """The model's vector size (one probe call the first time it is asked)."""
        if self._dimension is None:
            self.embed(["dimension probe"])
        assert self._dimension is not None
        return self._dimension

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Search queries are embedded like any text (the model decides nothing else)."""
        return self.embed(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` in batches; what comes back is checked (see the module's docstring)."""
        litellm = self._litellm
        kwargs: dict[str, object] = {"timeout": self._timeout}
        if self._api_base:
            kwargs["api_base"] = self._api_base
        if self._api_key_env:
            key = os.environ.get(self._api_key_env)
            if not key:
                raise EmbedderError(f"environment variable {self._api_key_env} is not set (embedding.api_key_env)")
            kwargs["api_key"] = key
        rows: list[Any] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            try:
                response = litellm.embedding(model=self.model_id, input=batch, **kwargs)
            except Exception as exc:  # litellm maps provider errors to its own tree
                raise self._map_error(exc) from exc
            rows.extend(self._rows(response, len(batch)))
        if not rows:
            return np.zeros((0, self._dimension or 0), dtype=np.float32)
        try:
            raw = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise EmbedderBadOutput(f"{self.model_id} answered vectors of different sizes or non-numbers") from exc
        if raw.ndim != 2:
            raise EmbedderBadOutput(f"{self.model_id} answered something that is not a list of vectors")
        with self._lock:
            if self._dimension is None:
                self._dimension = int(raw.shape[1])
            dimension = self._dimension
        # Remote models are not all unit length: normalise finite vectors, refuse the rest.
        if not np.isfinite(raw).all():
            raise EmbedderBadOutput(f"{self.model_id} answered a vector with NaN or infinite values")
        return check_vectors(normalize(raw), len(texts), dimension, self.model_id)

    def _rows(self, response: Any, expected: int) -> list[Any]:
        """The embedding of each input, in input order; :class:`EmbedderBadOutput` if any is missing."""
        try:
            data = sorted(response.data, key=lambda d: int(d["index"]))
            rows = [d["embedding"] for d in data]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise EmbedderBadOutput(f"{self.model_id} answered an embeddings response of an unknown shape") from exc
        if len(rows) != expected:
            raise EmbedderBadOutput(f"{self.model_id} answered {len(rows)} vectors for {expected} texts")
        return rows

    def _map_error(self, exc: Exception) -> EmbedderError:
        litellm = self._litellm
        what = f"embedding with {self.model_id!r}"
        if isinstance(exc, litellm.Timeout):
            return EmbedderTimeout(f"{what} timed out after {self._timeout:g} s")
        if caused_by(exc, json.JSONDecodeError):
            return EmbedderBadOutput(f"{what}: the answer is not JSON")
        return EmbedderError(f"{what} failed: {getattr(exc, 'message', None) or exc}")
