"""What agentd knows about a model before calling it, without importing litellm.

- Context windows: from the model information litellm ships
  (``model_prices_and_context_window_backup.json``, the very file litellm reads
  with ``LITELLM_LOCAL_MODEL_COST_MAP=True``), read as a file: looked up by the
  exact name, then without its ``provider/`` prefix, as ``litellm.get_model_info``
  finds them.
- Keys: which environment variable a provider reads its key from, for the
  providers people use most; ``agentd doctor`` reports from it, and
  :func:`request_key` decides what key a call sends. The table is checked against
  ``litellm.validate_environment`` in tests/test_models.py.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from agentd._compat.litellm import model_map_file
from agentd._exceptions import LLMAuthError
from agentd.llm.offline import CONTEXT_WINDOW, is_offline

#: Sent as the key to a server at a persona's ``api_base`` when the persona names no
#: ``api_key_env``: local OpenAI-compatible servers (llama.cpp, vLLM, Ollama) need none,
#: but the OpenAI client refuses to send a request without one.
PLACEHOLDER_KEY = "agentd-no-key"

#: Provider -> the environment variables it reads its key from (any one suffices).
KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "mistral": ("MISTRAL_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY",),
}


@functools.cache
def _model_map() -> dict[str, Any]:
    path = model_map_file()
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def model_info(model: str) -> dict[str, Any] | None:
    """litellm's shipped information on ``model`` (``None``: it does not know the model)."""
    known = _model_map()
    candidates = [model]
    if "/" in model:
        candidates.append(model.split("/", 1)[1])
    for name in candidates:
        entry = known.get(name)
        if isinstance(entry, dict) and name != "sample_spec":
            return entry
    return None


def max_input_tokens(model: str) -> int | None:
    """The model's context window as litellm knows it (``max_input_tokens``, else ``max_tokens``)."""
    if is_offline(model):
        return CONTEXT_WINDOW
    info = model_info(model)
    if info is None:
        return None
    value = info.get("max_input_tokens") or info.get("max_tokens")
    return int(value) if isinstance(value, int | float) and value else None


def provider_of(model: str) -> str | None:
    """The provider litellm would route ``model`` to: its prefix, else what litellm's map says."""
    if is_offline(model):
        return "offline"
    if "/" in model:
        return model.split("/", 1)[0]
    info = model_info(model)
    provider = info.get("litellm_provider") if info else None
    return str(provider) if provider else None


def key_variables(model: str) -> tuple[str, ...] | None:
    """The variables ``model``'s provider reads its key from (``None``: not one agentd knows)."""
    provider = provider_of(model)
    return KEY_VARIABLES.get(provider) if provider else None


def request_key(model: str, api_key_env: str | None, api_base: str | None) -> str | None:
    """The key a call to ``model`` sends; ``None`` leaves it to the provider's own variable.

    ``api_key_env`` names the variable (it must be set); a persona with ``api_base`` and
    no ``api_key_env`` sends :data:`PLACEHOLDER_KEY`, so neither a dummy variable nor a
    real key meant for another server is needed.
    """
    if is_offline(model):
        return None
    if api_key_env:
        value = os.environ.get(api_key_env)
        if not value:
            raise LLMAuthError(
                f"model {model!r} needs {api_key_env} (api_key_env), which is not set in the environment"
            )
        return value
    if api_base:
        return PLACEHOLDER_KEY
    return None


def missing_credentials(model: str, api_key_env: str | None = None, api_base: str | None = None) -> list[str]:
    """Environment variables ``model`` needs that are not set (empty: ready to call).

    Reads :data:`KEY_VARIABLES` for the providers it lists (the first variable is named when
    none is set); asks litellm (imported here) for the others.
    """
    if is_offline(model):
        return []
    if api_key_env:
        return [] if os.environ.get(api_key_env) else [api_key_env]
    if api_base:
        return []
    known = key_variables(model)
    if known is not None:  # a provider agentd knows: no need to import litellm (seconds) to say so
        return [] if any(os.environ.get(name) for name in known) else [known[0]]
    from agentd.llm import litellm_module

    litellm = litellm_module()
    try:
        checked = litellm.validate_environment(model=model)
    except Exception:  # unknown provider: nothing litellm can tell
        return []
    return list(checked.get("missing_keys") or [])
