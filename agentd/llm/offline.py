"""The built-in offline model, registered with litellm as the custom provider ``offline``.

(Completed with the actor runtime: see :class:`OfflineModel`.)
"""

from __future__ import annotations

import threading

from agentd.llm import litellm_module

PROVIDER = "offline"
MODEL = "offline/agentd"
CONTEXT_WINDOW = 32_768
_registered = threading.Event()
_lock = threading.Lock()


def is_offline(model: str) -> bool:
    """True for ``offline`` and ``offline/<anything>``."""
    return model == PROVIDER or model.startswith(PROVIDER + "/")


def litellm_name(model: str) -> str:
    """The model string litellm is called with (``offline`` becomes ``offline/agentd``)."""
    return MODEL if model == PROVIDER else model


def ensure_registered() -> None:
    """Register the provider and its model information with litellm (once)."""
    if _registered.is_set():
        return
    with _lock:
        if _registered.is_set():
            return
        litellm = litellm_module()
        litellm.register_model(
            {
                MODEL: {
                    "max_input_tokens": CONTEXT_WINDOW,
                    "max_output_tokens": 4096,
                    "max_tokens": CONTEXT_WINDOW,
                    "input_cost_per_token": 0.0,
                    "output_cost_per_token": 0.0,
                    "litellm_provider": PROVIDER,
                    "mode": "chat",
                    "supports_function_calling": True,
                }
            }
        )
        _registered.set()
