"""The model's own tokenizer, through litellm."""

from __future__ import annotations

import functools

from agentd.llm import litellm_module
from agentd.llm.offline import litellm_name


@functools.lru_cache(maxsize=64)
def tokenizer_name(model: str) -> str:
    """A name for the tokenizer litellm uses for ``model`` (models sharing one share cached counts)."""
    litellm_module()
    name = litellm_name(model)
    try:
        # With Hugging Face downloads disabled (agentd.llm), litellm counts every
        # model with this tiktoken encoding.
        from litellm.litellm_core_utils.token_counter import openai_tokenizer_encoding_name

        return f"tiktoken:{openai_tokenizer_encoding_name(name)}"
    except (ImportError, AttributeError):  # another litellm release: key the cache on the model
        return f"litellm:{name}"


class LitellmTokenCounter:
    """Counts with ``litellm.token_counter`` for one model."""

    def __init__(self, model: str) -> None:
        self._litellm = litellm_module()
        self._model = litellm_name(model)
        self.name = tokenizer_name(model)

    def count(self, text: str) -> int:
        """Tokens in ``text`` by the model's tokenizer."""
        if not text:
            return 0
        return int(self._litellm.token_counter(model=self._model, text=text))


@functools.lru_cache(maxsize=64)
def counter_for(model: str) -> LitellmTokenCounter:
    """One shared counter per model."""
    return LitellmTokenCounter(model)
