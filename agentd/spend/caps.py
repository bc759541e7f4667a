"""Spend caps: how much a persona, and a user across personas, may spend per UTC day.

* a persona's ``max_tokens_per_day`` and ``max_cost_usd_per_day`` (its persona file);
* ``[users] max_tokens_per_day``: each user's tokens, whichever personas answered them.

Caps are checked before the model is called (a reply's, an extraction's), from what is stored
for today (:mod:`agentd.store.spend`, kept with each reply), never from a count in memory: a
restarted daemon, or another daemon on the same PostgreSQL, sees the same spend. A call past
a cap is not made: :class:`~agentd.BudgetExceeded` names the cap and when it resets (the next
00:00 UTC). Tokens of every model count, priced or not; cost is priced with litellm's price
map (:func:`agentd.llm.cost.cost_usd`: 0 for the offline model and unpriced models). The check
is made before each turn, so turns already running when a cap is reached finish: the spend
may pass a cap by what those turns use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agentd._exceptions import BudgetExceeded
from agentd.config import Config
from agentd.llm.cost import unit_prices
from agentd.observe import metrics
from agentd.personas import Persona, Personas
from agentd.store import Store
from agentd.store.spend import Spent

#: The caps' names, as ``cap`` names them (with the persona's or user's id before).
TOKENS = "max_tokens_per_day"
COST = "max_cost_usd_per_day"


def day_of(now: datetime) -> str:
    """The UTC day ``now`` falls in (``YYYY-MM-DD``)."""
    return now.astimezone(UTC).date().isoformat()


def resets_at(now: datetime) -> datetime:
    """When the caps of ``now``'s UTC day reset: the next 00:00 UTC."""
    start = datetime.combine(now.astimezone(UTC).date(), datetime.min.time(), UTC)
    return start + timedelta(days=1)


@dataclass(frozen=True)
class CapStatus:
    """One cap, what was spent toward it today, and what is left."""

    #: ``persona`` | ``user``.
    kind: str
    #: The persona's name or the user's id.
    name: str
    #: :data:`TOKENS` or :data:`COST`.
    cap: str
    limit: float
    used: float
    resets_at: datetime

    @property
    def left(self) -> float:
        """What may still be spent today (0 when the cap is reached)."""
        return max(0.0, self.limit - self.used)

    @property
    def reached(self) -> bool:
        """True when nothing more may be spent today."""
        return self.used >= self.limit

    @property
    def label(self) -> str:
        """``persona:NAME:CAP`` or ``user:ID:CAP``: the ``cap`` of a ``budget_exceeded`` error."""
        return f"{self.kind}:{self.name}:{self.cap}"

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``agentd usage --json`` and ``GET /v1/usage`` list under ``caps``)."""
        exact = self.cap == TOKENS
        return {
            "kind": self.kind,
            "name": self.name,
            "cap": self.cap,
            "limit": int(self.limit) if exact else self.limit,
            "used": int(self.used) if exact else round(self.used, 6),
            "left": int(self.left) if exact else round(self.left, 6),
            "resets_at": self.resets_at.isoformat(),
        }

    def refusal(self) -> BudgetExceeded:
        """The error a call past this cap ends with."""
        who = f"persona {self.name!r}" if self.kind == "persona" else f"user {self.name!r}"
        spent = f"{int(self.used):,} tokens" if self.cap == TOKENS else f"${self.used:.4f}"
        limit = f"{int(self.limit):,}" if self.cap == TOKENS else f"${self.limit:g}"
        at = self.resets_at.isoformat().replace("+00:00", "Z")
        message = f"{who} reached its {self.cap} cap ({spent} of {limit} today); it resets at {at}"
        return BudgetExceeded(message, self.label, at)


def tokens(rows: Iterable[Spent]) -> int:
    """The prompt and completion tokens of ``rows``."""
    return sum(r.prompt_tokens + r.completion_tokens for r in rows)


def cost(rows: Iterable[Spent]) -> float:
    """What ``rows`` cost, priced per model at its base tier (as ``agentd usage`` prices)."""
    total = 0.0
    for r in rows:
        prompt, completion = unit_prices(r.model)
        total += prompt * r.prompt_tokens + completion * r.completion_tokens
    return total


class SpendCaps:
    """Checks the caps of a persona and a user against today's stored spend."""

    def __init__(self, config: Config, store: Store, personas: Personas) -> None:
        self._config = config
        self._store = store
        self._personas = personas

    def capped(self, persona: Persona, user: str | None) -> bool:
        """True when any cap applies to ``persona`` answering ``user`` (else checking reads nothing)."""
        user_cap = user is not None and self._config.users.max_tokens_per_day > 0
        return user_cap or persona.max_tokens_per_day > 0 or persona.max_cost_usd_per_day > 0

    def status(self, persona: Persona, user: str | None, now: datetime | None = None) -> list[CapStatus]:
        """The caps that apply to ``persona`` answering ``user``, with today's spend (one read)."""
        if not self.capped(persona, user):
            return []
        now = now or datetime.now(UTC)
        with self._store.read() as conn:
            totals = self._store.spend.of_day(conn, day_of(now), persona=persona.name)
            theirs = self._store.spend.of_day(conn, day_of(now), user=user) if user is not None else []
        return self._statuses(persona, totals, user, theirs, now)

    def check(self, persona: Persona, user: str | None, now: datetime | None = None) -> None:
        """Raise :class:`~agentd.BudgetExceeded` when a cap of ``persona`` or ``user`` is reached today
        (and count the refusal: ``agentd_budget_refusals_total``)."""
        for found in self.status(persona, user, now):
            if found.reached:
                metrics.budget_refused(persona.name, found.cap, found.kind == "user")
                raise found.refusal()

    def check_named(self, persona: str, user: str | None, now: datetime | None = None) -> None:
        """:meth:`check` for the persona named ``persona`` (one no longer configured has no caps)."""
        if persona in self._personas:
            self.check(self._personas[persona], user, now)

    def today(self, now: datetime | None = None, persona: str | None = None) -> list[CapStatus]:
        """Every configured cap of every persona (of ``persona`` only, when given), and the user cap of
        each user who spent today (with that persona, when given): ``agentd usage``'s list."""
        now = now or datetime.now(UTC)
        with self._store.read() as conn:
            rows = self._store.spend.of_day(conn, day_of(now))
        found: list[CapStatus] = []
        for p in self._personas.values():
            mine = [r for r in rows if r.persona == p.name]
            found += self._statuses(p, mine, None, [], now) if persona in (None, p.name) else []
        users = sorted({r.user for r in rows if r.user and persona in (None, r.persona)})
        for user in users if self._config.users.max_tokens_per_day > 0 else []:
            found += self._statuses(None, [], user, [r for r in rows if r.user == user], now)
        return found

    def _statuses(
        self, persona: Persona | None, mine: list[Spent], user: str | None, theirs: list[Spent], now: datetime
    ) -> list[CapStatus]:
        """The caps of ``persona`` (``mine``: what it spent today) and of ``user`` (``theirs``)."""
        reset = resets_at(now)
        found: list[CapStatus] = []
        if persona is not None:
            name = persona.name
            if persona.max_tokens_per_day > 0:
                found.append(CapStatus("persona", name, TOKENS, persona.max_tokens_per_day, tokens(mine), reset))
            if persona.max_cost_usd_per_day > 0:
                found.append(CapStatus("persona", name, COST, persona.max_cost_usd_per_day, cost(mine), reset))
        limit = self._config.users.max_tokens_per_day
        if user is not None and limit > 0:
            found.append(CapStatus("user", user, TOKENS, limit, tokens(theirs), reset))
        return found


__all__ = ["COST", "TOKENS", "CapStatus", "SpendCaps", "day_of", "resets_at"]
