"""Rooms: a channel bound to several personas, who answer people and each other.

Pure decisions, made once and stored with the message they concern (DESIGN.md, "Rooms, time and
trust"): who answers a person's message (:func:`answerers`, at intake), and which personas a
persona's reply calls on (:func:`called_on`, when the reply is stored). A name is recognised
as ``NAME:`` / ``NAME,`` / ``@NAME`` at the start of a text, or ``@NAME`` anywhere, as a whole
word, in any case.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentd.config import ChannelConfig, Config

#: Characters that may follow a name (a name is never cut in two).
_NAME_END = r"(?![\w-])"


def _alternatives(names: Sequence[str]) -> tuple[dict[str, str], str]:
    known = {n.lower(): n for n in names}
    return known, "|".join(re.escape(n) for n in sorted(known, key=len, reverse=True))


def named(text: str | None, names: Sequence[str]) -> list[str]:
    """The personas among ``names`` that ``text`` names, in the order named, each once: a leading
    ``NAME:``, ``NAME,`` or ``@NAME``, then every ``@NAME``."""
    if not text or not names:
        return []
    known, alternatives = _alternatives(names)
    found: list[str] = []
    lead = re.match(rf"\s*({alternatives})\s*[:,]", text, re.IGNORECASE)
    if lead is not None:
        found.append(known[lead.group(1).lower()])
    for mention in re.finditer(rf"(?<![\w@])@({alternatives}){_NAME_END}", text, re.IGNORECASE):
        name = known[mention.group(1).lower()]
        if name not in found:
            found.append(name)
    return found


def room_of(config: Config, channel: str) -> ChannelConfig | None:
    """``[channels.NAME]`` of ``channel`` when it binds several personas (a room), else ``None``."""
    entry = config.channels.get(channel)
    return entry if entry is not None and len(entry.personas) > 1 else None


def answerers(entry: ChannelConfig, text: str, last: str | None = None) -> list[str]:
    """Who answers a person's ``text`` in a room, in order (``[channels.NAME] answer``):

    * ``addressed``: every persona named, in the order named; none named: the first persona;
    * ``all``: every persona, in the order of ``personas``;
    * ``rotate``: one, the persona after ``last`` (the persona that answered the room's previous
      person's message) in ``personas``; a message naming personas is answered by the first named.

    With ``require_mention`` a persona answers only when named: ``all`` keeps the named ones (in
    the order of ``personas``), and a message naming none is answered by nobody.
    """
    personas = list(entry.personas)
    called = named(text, personas)
    if entry.answer == "all":
        return [p for p in personas if p in called] if entry.require_mention else personas
    if called:
        return called if entry.answer == "addressed" else called[:1]
    if entry.require_mention:
        return []
    if entry.answer == "rotate":
        after = personas.index(last) + 1 if last in personas else 0
        return [personas[after % len(personas)]]
    return personas[:1]


def called_on(entry: ChannelConfig, speaker: str, reply: str) -> list[str]:
    """The personas of the room a persona's reply calls on (named as :func:`named` reads), in the
    order named; never the speaker itself."""
    return [name for name in named(reply, list(entry.personas)) if name != speaker]


__all__ = ["answerers", "called_on", "named", "room_of"]
