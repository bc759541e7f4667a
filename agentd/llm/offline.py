"""The built-in offline model, ``model = "offline"`` in a persona file.

It needs no key, no network and no litellm (``LitellmChat`` hands it every call
for an ``offline`` model), so the daemon, the CLI and the demo work on a fresh
machine and a turn starts fast. It is deterministic and shows what it was given: it quotes the
message, lists the recalled memories it received with their relevance, and says
how many earlier exchanges were recalled. Asked to remember something it calls
the ``remember`` tool; asked what it remembers, ``recall``; asked to have another
persona do something, ``delegate``; asked "remind me in N minutes/hours to …" or "remind me
at HH:MM to …", ``schedule`` (a reminder worded ``Reminder: …``, which it repeats when it
fires) — each only when that tool was offered.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from agentd.llm.types import ModelSettings, ModelTurn, ToolCallRequest, Usage

PROVIDER = "offline"
#: Its context window, in tokens (counted as litellm counts unknown models: cl100k_base).
CONTEXT_WINDOW = 32_768

_REMEMBER = re.compile(
    r"^\s*(?:please\s+)?(?:remember|note|don'?t forget|do not forget)\s*(?:that|:)?\s+(.+?)\s*[.!]?\s*$", re.I | re.S
)
_RECALL = re.compile(
    r"(?:what do you (?:remember|know) about|recall|search (?:your )?memory for)\s+(.+?)\s*\??\s*$", re.I | re.S
)
_DELEGATE = re.compile(
    r"^\s*(?:please\s+)?(?:ask|delegate to)\s+([a-z0-9][a-z0-9_-]*)\s*(?:to|:)\s*(.+?)\s*$", re.I | re.S
)
# (A shared room's lines reach the model attributed, "bob: remind me …": the name is skipped.)
_REMIND_IN = re.compile(
    r"^\s*(?:[^\s:]+:\s+)?(?:please\s+)?remind me in\s+(\d+(?:\.\d+)?|an?|one)\s*(minutes?|mins?|m|hours?|hrs?|h)\s+"
    r"(?:to\s+)?(.+?)\s*[.!]?\s*$",
    re.I | re.S,
)
_REMIND_AT = re.compile(
    r"^\s*(?:[^\s:]+:\s+)?(?:please\s+)?remind me at\s+(\d{1,2})(?:[:h](\d{2}))?\s*(am|pm)?\s+"
    r"(?:to\s+)?(.+?)\s*[.!]?\s*$",
    re.I | re.S,
)
#: A reminder's trigger message, as the offline model words the schedules it makes.
_REMINDER = re.compile(r"^\s*(?:\S+:\s+)?Reminder:\s*(.+?)\s*$", re.I | re.S)
_MEMORY_LINE = re.compile(r'^- (".*") \((.*), relevance: ([0-9.]+)\)$')
_PREFERENCE = re.compile(r"\b(like|love|prefer|favou?rite|hate|enjoy|dislike)", re.I)
_DECISION = re.compile(r"\b(decided|agreed|will|going to|chose)\b", re.I)


def is_offline(model: str) -> bool:
    """True for ``offline`` and ``offline/<anything>``."""
    return model == PROVIDER or model.startswith(PROVIDER + "/")


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
        elif name == "schedule" or "scheduled" in result:
            made = result.get("scheduled") or {}
            parts.append(
                f'OK, at {made.get("next_at")} I will remind you: "{made.get("text")}" (schedule {made.get("id")}).'
            )
        elif name == "delegate" or "answer" in result:
            parts.append(f"{result.get('persona', 'The other persona')} answered: {result.get('answer', '')}")
        else:
            parts.append(f"The tool answered: {json.dumps(result)[:200]}")
    return " ".join(reversed(parts))


def _reminder(said: str, now: datetime | None = None) -> dict[str, Any] | None:
    """The ``schedule`` call for "remind me in N minutes/hours to …" or "remind me at HH:MM to …"
    (HH:MM in this machine's timezone, the next time it comes), else ``None``."""
    now = now or datetime.now().astimezone()
    if (match := _REMIND_IN.match(said)) is not None:
        count = match.group(1).lower()
        amount = 1.0 if count in ("a", "an", "one") else float(count)
        minutes = amount * (60 if match.group(2).lower().startswith("h") else 1)
        return {"text": f"Reminder: {match.group(3)}", "in_minutes": minutes}
    if (match := _REMIND_AT.match(said)) is not None:
        hour, minute = int(match.group(1)), int(match.group(2) or 0)
        half = (match.group(3) or "").lower()
        hour = hour % 12 + (12 if half == "pm" else 0) if half else hour
        if hour > 23 or minute > 59:
            return None
        at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if at <= now:
            at += timedelta(days=1)
        return {"text": f"Reminder: {match.group(4)}", "at": at.isoformat()}
    return None


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
    if "schedule" in offered and (reminder := _reminder(said)) is not None:
        return "", [("schedule", reminder)]
    if (match := _REMINDER.match(said)) is not None:
        return f"Reminder: {match.group(1)}", []
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


def _usage(messages: Sequence[dict[str, Any]], text: str, calls: list[tuple[str, dict[str, Any]]]) -> Usage:
    """Token usage as litellm's ``token_counter`` frames a chat request (4 per message, 3 to prime)."""
    from agentd.llm.tokens import counter_for

    counter = counter_for(PROVIDER)
    prompt = 3 + sum(4 + counter.count(_content(m)) for m in messages)
    completion = counter.count(text + "".join(json.dumps(a) for _, a in calls)) or 1
    return Usage(prompt, completion)


class OfflineChat:
    """The offline model as a :class:`~agentd.llm.chat.ChatModel`: no key, no network, no litellm.

    It streams its reply word by word, as a real model would, and stops early when
    ``should_stop`` says so.
    """

    def stream(
        self,
        settings: ModelSettings,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        on_text: Callable[[str], None],
        should_stop: Callable[[], bool] = lambda: False,
    ) -> ModelTurn:
        """Answer deterministically from ``messages`` (see :func:`plan`)."""
        text, calls = plan(list(messages), list(tools))
        said: list[str] = []
        for word in re.findall(r"\S+\s*|\s+", text):
            said.append(word)
            on_text(word)
            if should_stop():
                return ModelTurn("".join(said), (), _usage(messages, "".join(said), []), None, True)
        requests = tuple(
            ToolCallRequest(f"call_{uuid.uuid4().hex[:12]}", name, json.dumps(args)) for name, args in calls
        )
        return ModelTurn(text, requests, _usage(messages, text, calls), "tool_calls" if calls else "stop")
