"""What litellm knows about models: context windows and required credentials."""

from __future__ import annotations

from agentd.llm import litellm_module


def max_input_tokens(model: str) -> int | None:
    """litellm's ``max_input_tokens`` (or ``max_tokens``) for ``model``, if it knows the model."""
    litellm = litellm_module()
    from agentd.llm.offline import ensure_registered, litellm_name

    ensure_registered()
    try:
        info = litellm.get_model_info(litellm_name(model))
    except Exception:  # litellm raises plain Exception subclasses for unmapped models
        return None
    value = info.get("max_input_tokens") or info.get("max_tokens")
    return int(value) if value else None


def missing_credentials(model: str, api_key_env: str | None = None) -> list[str]:
    """Environment variables ``model`` needs that are not set (empty: ready to call)."""
    import os

    from agentd.llm.offline import is_offline

    if is_offline(model):
        return []
    if api_key_env:
        return [] if os.environ.get(api_key_env) else [api_key_env]
    litellm = litellm_module()
    try:
        checked = litellm.validate_environment(model=model)
    except Exception:  # unknown provider: nothing litellm can tell
        return []
    return list(checked.get("missing_keys") or [])
