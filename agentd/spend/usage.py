"""What the models were used for, and what that cost: ``agentd usage`` and ``GET /v1/usage``.

Computed from what is stored, never from a counter kept beside it: each reply's context record
holds its model's usage (every round of the turn, tools included), a delegation's subagent
reply has a record of its own (in the ``PARENT~PERSONA`` channel), and each extraction call
(``[memory] extract = "model"``) is noted on the record of the reply it extracted from. Cost is
priced when asked, with the installed litellm's cost map (:func:`agentd.llm.cost.cost_usd`): 0 for
the offline model and for models the map does not price. Tokens are summed per model before
pricing, so a model priced in tiers by prompt length is priced at its base tier.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Literal

from agentd._exceptions import InvalidInput
from agentd.access.scopes import DELEGATION_MARK
from agentd.llm.cost import cost_usd
from agentd.store import Store
from agentd.store.contexts import UsageRow

By = Literal["day", "persona", "model", "persona-model"]
#: What ``--by`` may group by (``persona-model``, the default: one row per persona and model).
GROUPINGS: tuple[str, ...] = ("persona-model", "day", "persona", "model")
#: The kinds of model call a record holds.
KINDS = ("reply", "delegation", "extraction")


@dataclass
class Tally:
    """Calls, tokens and cost of one group (or of one kind of call within it)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, prompt: int, completion: int, cost: float, calls: int = 1) -> None:
        """Count ``calls`` more calls."""
        self.calls += calls
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cost_usd += cost

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (cost rounded to a millionth of a dollar)."""
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "cost_usd": round(self.cost_usd, 6),
        }


@dataclass
class UsageGroup:
    """One row of the report: its key, its totals, and the totals of each kind of call."""

    key: dict[str, str]
    total: Tally = field(default_factory=Tally)
    kinds: dict[str, Tally] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {**self.key, **self.total.as_json(), "by_kind": {k: t.as_json() for k, t in sorted(self.kinds.items())}}


@dataclass(frozen=True)
class UsageReport:
    """The rows, their grand total, and what was asked."""

    by: str
    persona: str | None
    since: datetime | None
    groups: tuple[UsageGroup, ...]
    total: Tally

    def as_json(self) -> dict[str, Any]:
        """What ``agentd usage --json`` prints and ``GET /v1/usage`` answers."""
        return {
            "by": self.by,
            "persona": self.persona,
            "since": self.since.isoformat() if self.since is not None else None,
            "rows": [g.as_json() for g in self.groups],
            "total": self.total.as_json(),
        }


def parse_since(value: str | datetime | None) -> datetime | None:
    """``--since``: a date (``2026-11-01``, from its start, UTC) or an ISO time (UTC unless it says);
    a clear error else."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if value is None:
        return None
    text = value.strip()
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
        found = datetime.fromisoformat(re.sub("[zZ]$", "+00:00", text))
        return found.replace(tzinfo=UTC) if found.tzinfo is None else found.astimezone(UTC)
    except ValueError:
        raise InvalidInput("since", f"{value!r} is not a date (YYYY-MM-DD) or an ISO time") from None
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise InvalidInput("since", f"{value!r} is out of range (years 1-9999 in UTC)") from None


def usage_report(
    store: Store, *, persona: str | None = None, since: str | datetime | None = None, by: str = "persona-model"
) -> UsageReport:
    """Tokens and cost per ``by`` group, from the stored context records (oldest first within the store)."""
    if by not in GROUPINGS:
        raise InvalidInput("by", f"must be one of {', '.join(GROUPINGS)}")
    start = parse_since(since)
    with store.read() as conn:
        rows = store.contexts.usage(conn, persona, start)
    # Tokens per (group, kind, model) first; each model is priced once per group and kind.
    sums: dict[tuple[tuple[tuple[str, str], ...], str, str], Tally] = defaultdict(Tally)
    for row in rows:
        for kind, model, used in _calls(row):
            key = _key(by, row, model)
            sums[(key, kind, model)].add(_tokens(used, "prompt_tokens"), _tokens(used, "completion_tokens"), 0.0)
    groups: dict[tuple[tuple[str, str], ...], UsageGroup] = {}
    total = Tally()
    for (key, kind, model), tally in sums.items():
        cost = cost_usd(model, tally.prompt_tokens, tally.completion_tokens)
        group = groups.setdefault(key, UsageGroup(dict(key)))
        for target in (group.total, group.kinds.setdefault(kind, Tally()), total):
            target.add(tally.prompt_tokens, tally.completion_tokens, cost, tally.calls)
    ordered = tuple(groups[k] for k in sorted(groups))
    return UsageReport(by, persona, start, ordered, total)


def _calls(row: UsageRow) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, model, usage) of each model call a record holds."""
    kind = "delegation" if DELEGATION_MARK in row.channel else "reply"
    found = [(kind, row.model, row.usage)]
    for call in row.extraction:
        if isinstance(call, dict):
            found.append(("extraction", str(call.get("model") or row.model), dict(call.get("usage") or {})))
    return found


def _key(by: str, row: UsageRow, model: str) -> tuple[tuple[str, str], ...]:
    if by == "day":
        at = row.created_at if row.created_at.tzinfo is not None else row.created_at.replace(tzinfo=UTC)
        return (("day", at.astimezone(UTC).date().isoformat()),)
    if by == "persona":
        return (("persona", row.persona),)
    if by == "model":
        return (("model", model),)
    return (("persona", row.persona), ("model", model))


def _tokens(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    return int(value) if isinstance(value, int | float) and value > 0 else 0


__all__ = ["GROUPINGS", "KINDS", "Tally", "UsageGroup", "UsageReport", "parse_since", "usage_report"]
