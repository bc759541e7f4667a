"""The built-in offline model, registered with litellm as the custom provider ``offline``.

It needs no key and no network, so the daemon, the CLI and the demo work on a
fresh machine. It is deterministic and shows what it was given: it quotes the
message, lists the recalled memories it received with their relevance, and says
how many earlier exchanges were recalled. Asked to remember something it calls
the ``remember`` tool; asked what it remembers, ``recall``; asked to have another
persona do something, ``delegate`` — each only when that tool was offered.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from agentd.llm import litellm_module

PROVIDER = "offline"
MODEL = "offline/agentd"
CONTEXT_WINDOW = 32_768
_registered = threading.Event()
_lock = threading.Lock()

_REMEMBER = re.compile(
    r"^\s*(?:please\s+)?(?:remember|note|don'?t forget|do not forget)\s*(?:that|:)?\s+(.+?)\s*[.!]?\s*$", re.I | re.S
)
_RECALL = re.compile(
    r"(?:what do you (?:remember|know) about|recall|search (?:your )?memory for)\s+(.+?)\s*\??\s*$", re.I | re.S
)
_DELEGATE = re.compile(
    r"^\s*(?:please\s+)?(?:ask|delegate to)\s+([a-z0-9][a-z0-9_-]*)\s*(?:to|:)\s*(.+?)\s*$", re.I | re.S
)
_MEMORY_LINE = re.compile(r'^- (".*") \((.*), relevance: ([0-9.]+)\)$')
_PREFERENCE = re.compile(r"\b(like|love|prefer|favou?rite|hate|enjoy|dislike)", re.I)
_DECISION = re.compile(r"\b(decided|agreed|will|going to|chose)\b", re.I)


def is_offline(model: str) -> bool:
    """True for ``offline`` and ``offline/<anything>``."""
    return model == PROVIDER or model.startswith(PROVIDER + "/")


def litellm_name(model: str) -> str:
    """The model string litellm is called with (``offline`` becomes ``offline/agentd``)."""
    return MODEL if model == PROVIDER else model


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _recalled(messages: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(text, category, relevance) of each memory line in the system messages."""
    found = []
    for message in messages:
        if message.get("role") != "system":
            continue
        for line in _content(message).splitlines():
            match = _MEMORY_LINE.match(line)
            if match:
                found.append((json.loads(match.group(1)), match.group(2), match.group(3)))
    return found


def _tool_names(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"] for t in tools or [] if t.get("type") == "function"}


def _category(text: str) -> str:
    if _PREFERENCE.search(text):
        return "preference"
    if _DECISION.search(text):
        return "decision"
    return "fact"


def _after_tools(messages: list[dict[str, Any]]) -> str:
    """The answer once the tools this turn called have answered."""
    parts = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        name = message.get("name") or ""
        try:
            result = json.loads(_content(message))
        except json.JSONDecodeError:
            result = {"error": _content(message)}
        if "error" in result:
            error = result["error"]
            reason = error.get("message") if isinstance(error, dict) else error
            parts.append(f"The {name or 'tool'} call failed: {reason}")
        elif name == "remember" or "stored" in result:
            verb = "I will remember" if result.get("stored") else "I already knew"
            parts.append(f'Noted. {verb}: "{result.get("text")}".')
        elif name == "recall" or "results" in result:
            items = result.get("results") or []
            listed = "; ".join(f'"{r["text"]}" ({r["score"]:.2f})' for r in items)
            parts.append(
                f"I found {len(items)} memories: {listed}." if items else "I found nothing in memory about that."
            )
        elif name == "delegate" or "answer" in result:
            parts.append(f"{result.get('persona', 'The other persona')} answered: {result.get('answer', '')}")
        else:
            parts.append(f"The tool answered: {json.dumps(result)[:200]}")
    return " ".join(reversed(parts))


def plan(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """The offline model's whole behaviour: (text, tool calls) for a conversation."""
    if messages and messages[-1].get("role") == "tool":
        return _after_tools(messages), []
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    said = _content(last).strip() if last else ""
    offered = _tool_names(tools)
    if "remember" in offered and (match := _REMEMBER.match(said)):
        fact = match.group(1).strip()
        return "", [("remember", {"text": f"User said: {fact}", "category": _category(fact)})]
    if "delegate" in offered and (match := _DELEGATE.match(said)):
        enum = offered["delegate"]["parameters"]["properties"]["persona"].get("enum", [])
        if match.group(1).lower() in enum:
            return "", [("delegate", {"persona": match.group(1).lower(), "task": match.group(2)})]
    if "recall" in offered and (match := _RECALL.search(said)):
        return "", [("recall", {"query": match.group(1)})]
    memories = _recalled(messages)
    lines = [f'You said: "{said}".']
    if memories:
        lines.append("I recall: " + "; ".join(f'"{t}" ({c}, relevance {r})' for t, c, r in memories) + ".")
    else:
        lines.append("I have no stored memories that bear on this.")
    earlier = sum(1 for m in messages if m.get("role") == "system" and _content(m).startswith("## Earlier exchanges"))
    if earlier:
        history = next(
            _content(m)
            for m in messages
            if m.get("role") == "system" and _content(m).startswith("## Earlier exchanges")
        )
        lines.append(f"We have talked about this before ({history.count(chr(10) + '- ')} earlier exchanges recalled).")
    return " ".join(lines), []


def _chunks(text: str, calls: list[tuple[str, dict[str, Any]]], usage: dict[str, int]) -> Iterator[dict[str, Any]]:
    for word in re.findall(r"\S+\s*|\s+", text):
        yield {"text": word, "is_finished": False, "finish_reason": "", "usage": None, "index": 0, "tool_use": None}
    for i, (name, args) in enumerate(calls):
        yield {
            "text": "",
            "is_finished": False,
            "finish_reason": "",
            "usage": None,
            "index": 0,
            "tool_use": {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
                "index": i,
            },
        }
    yield {
        "text": "",
        "is_finished": True,
        "finish_reason": "tool_calls" if calls else "stop",
        "usage": usage,
        "index": 0,
        "tool_use": None,
    }


def _usage(messages: list[dict[str, Any]], text: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    litellm = litellm_module()
    prompt = int(litellm.token_counter(model=MODEL, messages=messages))
    completion = int(litellm.token_counter(model=MODEL, text=text + "".join(json.dumps(a) for _, a in calls))) or 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _handler_class() -> type:
    from litellm.llms.custom_llm import CustomLLM
    from litellm.types.utils import ModelResponse

    class OfflineModel(CustomLLM):
        """litellm custom handler for ``offline/*``."""

        def streaming(  # type: ignore[override]  # litellm passes everything by keyword
            self, model: str, messages: list[Any], *args: Any, **kwargs: Any
        ) -> Iterator[dict[str, Any]]:
            tools = (kwargs.get("optional_params") or {}).get("tools")
            text, calls = plan(messages, tools)
            yield from _chunks(text, calls, _usage(messages, text, calls))

        def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
            tools = (kwargs.get("optional_params") or {}).get("tools")
            text, calls = plan(messages, tools)
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [
                    {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                    for i, (n, a) in enumerate(calls)
                ]
            return ModelResponse(
                id=f"offline-{uuid.uuid4().hex[:12]}",
                created=int(time.time()),
                model=MODEL,
                choices=[{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
                usage=_usage(messages, text, calls),
            )

    return OfflineModel


def ensure_registered() -> None:
    """Register the provider and its model information with litellm (once)."""
    if _registered.is_set():
        return
    with _lock:
        if _registered.is_set():
            return
        litellm = litellm_module()
        providers = [p for p in getattr(litellm, "custom_provider_map", []) if p.get("provider") != PROVIDER]
        setattr(  # noqa: B010  (litellm_module() is typed as a plain module)
            litellm, "custom_provider_map", [*providers, {"provider": PROVIDER, "custom_handler": _handler_class()()}]
        )
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
