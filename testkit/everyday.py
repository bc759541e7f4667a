"""Everyday recall: facts about a user, written the ways memories are written, asked the ways people ask.

Used by ``bench/recall_quality.py --everyday`` and tests/test_recall_quality.py. The set
(tests/data/everyday_set.json) has facts, each written in every style (``name``: with the
user's display name, ``subjectless`` as extractors write them, ``user``: "User ...",
``first``: first person, ``messy``: casing and small typos) and asked by two questions
(first or second person; ``one_step`` facts need one step: a dish and a diet, a trip and a
fear); then unrelated questions and shared-word traps.

Per style, one fresh SQLite store holds every fact in that style, each in its user's
scope (facts are dealt to the users in turn); each user asks their facts' questions in
their direct channel (``dm-<id>``) as automatic retrieval asks (``MemoryService.search``,
``limit = [memory] max_per_reply``, the default threshold). A question counts as recalled when its
fact is among the hits. Every user also asks every unrelated question and trap, which must
recall nothing. Facts and questions are split: every third group of three is held out
(``held``), never used to choose anything.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd.access.scopes import Reach, Scope
from agentd.config import MemoryConfig
from agentd.embedders import Embedder
from agentd.memory import MemoryService
from agentd.search import SearchQuery
from agentd.store import Store
from agentd.store.schema import utcnow

DEFAULT_EVERYDAY = Path(__file__).resolve().parent.parent / "tests" / "data" / "everyday_set.json"


def held(index: int) -> bool:
    """Whether item ``index`` of a list is in the held-out part (every third group of three)."""
    return (index // 3) % 3 == 2


@dataclass(frozen=True)
class Fact:
    key: str
    kind: str
    forms: dict[str, str]
    questions: tuple[str, ...]
    user: dict[str, str]
    held: bool

    def text(self, style: str) -> str:
        name = self.user["name"]
        return self.forms[style].format(Name=name, name=name.lower(), NAME=name.upper())


@dataclass(frozen=True)
class EverydaySet:
    persona: str
    users: tuple[dict[str, str], ...]
    styles: tuple[str, ...]
    facts: tuple[Fact, ...]
    #: (question, held, kind): kind is "unrelated" or "trap".
    silent: tuple[tuple[str, bool, str], ...]

    @property
    def cases(self) -> int:
        return len(self.styles) * sum(len(f.questions) for f in self.facts)


def load_everyday(path: Path = DEFAULT_EVERYDAY) -> EverydaySet:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    users = tuple(data["users"])
    styles = tuple(data["styles"])
    facts = tuple(
        Fact(f["key"], f["kind"], {s: f[s] for s in styles}, tuple(f["questions"]), users[i % len(users)], held(i))
        for i, f in enumerate(data["facts"])
    )
    silent = tuple((q, held(i), "unrelated") for i, q in enumerate(data["unrelated"])) + tuple(
        (q, held(i), "trap") for i, q in enumerate(data["traps"])
    )
    return EverydaySet(data["persona"], users, styles, facts, silent)


@dataclass
class Tally:
    """Recalled questions of one style (dev / held), and silent questions that recalled something."""

    recalled: dict[tuple[bool, str], int] = field(default_factory=lambda: defaultdict(int))
    asked: dict[tuple[bool, str], int] = field(default_factory=lambda: defaultdict(int))
    noisy: dict[bool, int] = field(default_factory=lambda: defaultdict(int))
    silent: dict[bool, int] = field(default_factory=lambda: defaultdict(int))
    misses: list[str] = field(default_factory=list)
    noise: list[str] = field(default_factory=list)

    def rate(self, part: bool | None = None, kind: str | None = None) -> float:
        keys = [k for k in self.asked if (part is None or k[0] == part) and (kind is None or k[1] == kind)]
        asked = sum(self.asked[k] for k in keys)
        return sum(self.recalled[k] for k in keys) / asked if asked else float("nan")

    def noisy_count(self, part: bool | None = None) -> tuple[int, int]:
        parts = [part] if part is not None else [False, True]
        return sum(self.noisy[p] for p in parts), sum(self.silent[p] for p in parts)


def evaluate_everyday(
    labelled: EverydaySet, embedder: Embedder, workdir: Path, config: MemoryConfig | None = None
) -> dict[str, Tally]:
    """Every style's tally (see the module docstring)."""
    config = config or MemoryConfig()
    tallies: dict[str, Tally] = {}
    for style in labelled.styles:
        tally = tallies[style] = Tally()
        store = Store.open(f"sqlite:///{workdir / f'everyday-{style}.db'}", dimension=embedder.dimension)
        try:
            service = MemoryService(store, embedder, config, personas=[labelled.persona])
            now = utcnow()
            ids: dict[str, int] = {}
            for fact in labelled.facts:
                memory, _ = service.add(labelled.persona, Scope.user(fact.user["id"]), fact.text(style), created_at=now)
                ids[fact.key] = memory.id
            for fact in labelled.facts:
                reach = Reach(labelled.persona, f"dm-{fact.user['id']}", fact.user["id"])
                for question in fact.questions:
                    hits = service.search(SearchQuery(question, reach, config.max_per_reply, now=now)).hits
                    found = ids[fact.key] in {h.memory.id for h in hits}
                    tally.asked[(fact.held, fact.kind)] += 1
                    tally.recalled[(fact.held, fact.kind)] += found
                    if not found:
                        tally.misses.append(f"{fact.text(style)!r} <- {question!r}")
            for user in labelled.users:
                reach = Reach(labelled.persona, f"dm-{user['id']}", user["id"])
                for question, part, _kind in labelled.silent:
                    hits = service.search(SearchQuery(question, reach, config.max_per_reply, now=now)).hits
                    tally.silent[part] += 1
                    if hits:
                        tally.noisy[part] += 1
                        tally.noise.append(f"{question!r} -> {[h.memory.text for h in hits]}")
        finally:
            store.close()
    return tallies


def everyday_report(name: str, tallies: dict[str, Tally], verbose: bool = False) -> str:
    """A table: recalled share per style (dev, held-out, one-step), silent questions that recalled something."""
    lines = [
        f"## everyday recall, {name} (default threshold, max_per_reply)",
        f"{'style':<12} {'dev':>6} {'held':>6} {'direct':>7} {'1-step':>7} {'noisy dev':>10} {'noisy held':>11}",
    ]
    for style, t in tallies.items():
        nd, sd = t.noisy_count(False)
        nh, sh = t.noisy_count(True)
        lines.append(
            f"{style:<12} {t.rate(False):>6.3f} {t.rate(True):>6.3f} {t.rate(None, 'direct'):>7.3f} "
            f"{t.rate(None, 'one_step'):>7.3f} {f'{nd}/{sd}':>10} {f'{nh}/{sh}':>11}"
        )
        if verbose:
            lines.extend(f"    miss  {m}" for m in t.misses)
            lines.extend(f"    noise {n}" for n in t.noise)
    return "\n".join(lines)


def worst(tallies: dict[str, Tally], part: bool | None = None) -> float:
    """The lowest recalled share over the styles."""
    return min(t.rate(part) for t in tallies.values())


__all__: Sequence[str] = ["DEFAULT_EVERYDAY", "EverydaySet", "Tally", "evaluate_everyday", "load_everyday"]
