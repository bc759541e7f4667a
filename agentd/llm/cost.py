"""What a model call costs, in US dollars, by litellm's cost map (the copy bundled with litellm:
``LITELLM_LOCAL_MODEL_COST_MAP``, never fetched).

The offline model costs nothing, and so does a model the map does not price (a local server's,
a fine-tune under its own name): 0, never an error. Prices are looked up when asked, so
``agentd usage`` prices stored usage with the installed litellm's map.
"""

from __future__ import annotations

import functools
import threading

from agentd.llm.offline import is_offline
from agentd.llm.types import ModelSettings, Usage
from agentd.observe import metrics

_unpriced: set[str] = set()
_lock = threading.Lock()


def cost_usd(model: str, prompt_tokens: int, completion_tokens: int) -> float:
    """The cost of ``prompt_tokens`` in and ``completion_tokens`` out of ``model`` (0: not priced)."""
    if is_offline(model) or model in _unpriced or (prompt_tokens <= 0 and completion_tokens <= 0):
        return 0.0
    from agentd.llm import litellm_module

    try:
        prompt, completion = litellm_module().cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
        return float(prompt) + float(completion)
    except Exception:  # litellm raises a bare Exception for a model its map does not have
        with _lock:
            _unpriced.add(model)
        return 0.0


@functools.lru_cache(maxsize=256)
def unit_prices(model: str) -> tuple[float, float]:
    """US dollars per prompt token and per completion token of ``model`` (its base tier; 0, 0: not
    priced), asked of litellm once per model: pricing a day's spend before each turn stays cheap."""
    return cost_usd(model, 1, 0), cost_usd(model, 0, 1)


def count_call(settings: ModelSettings, usage: Usage) -> None:
    """Count one model call's tokens and cost in the metrics (when they are on)."""
    if metrics.enabled():
        cost = cost_usd(settings.model, usage.prompt_tokens, usage.completion_tokens)
        metrics.model_call(settings.persona, settings.model, usage.prompt_tokens, usage.completion_tokens, cost)


__all__ = ["cost_usd", "count_call", "unit_prices"]
