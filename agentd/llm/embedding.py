"""The ``litellm`` embedder: any embedding model litellm can reach."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np

from agentd._exceptions import EmbedderError
from agentd.embedders import normalize
from agentd.llm import litellm_module
from agentd.relevance import DEFAULT_WORDS, UNCALIBRATED, Calibration, WordWeights


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
        """Embed ``texts`` in batches; errors become :class:`EmbedderError`."""
        litellm = litellm_module()
        kwargs: dict[str, object] = {"timeout": self._timeout}
        if self._api_base:
            kwargs["api_base"] = self._api_base
        if self._api_key_env:
            key = os.environ.get(self._api_key_env)
            if not key:
                raise EmbedderError(f"environment variable {self._api_key_env} is not set (embedding.api_key_env)")
            kwargs["api_key"] = key
        rows: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            try:
                response = litellm.embedding(model=self.model_id, input=batch, **kwargs)
            except Exception as exc:  # litellm maps provider errors to its own tree
                raise EmbedderError(f"embedding with {self.model_id!r} failed: {exc}") from exc
            data = sorted(response.data, key=lambda d: d["index"])
            rows.extend(d["embedding"] for d in data)
        vectors = normalize(np.asarray(rows, dtype=np.float32).reshape(len(rows), -1))
        with self._lock:
            if self._dimension is None and len(rows):
                self._dimension = vectors.shape[1]
            elif len(rows) and vectors.shape[1] != self._dimension:
                raise EmbedderError(
                    f"{self.model_id!r} returned {vectors.shape[1]}-d vectors, expected {self._dimension}"
                )
        return vectors
