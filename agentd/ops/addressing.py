"""Which persona a message is addressed to, by its text.

A message addresses persona ``NAME`` when it starts with ``NAME:``, ``NAME,`` or
``@NAME`` (any case, after leading spaces), or mentions ``@NAME`` anywhere as a
whole word. A leading address wins over a mention; among mentions the first wins.
Only the names given are recognised (the personas allowed in the channel).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Characters that may follow a mention (a name is never cut in two).
_NAME_END = r"(?![\w-])"


def addressed_to(text: str | None, names: Iterable[str]) -> str | None:
    """The persona among ``names`` that ``text`` addresses, or ``None``."""
    if not text:
        return None
    known = {n.lower(): n for n in names}
    if not known:
        return None
    alternatives = "|".join(re.escape(n) for n in sorted(known, key=len, reverse=True))
    lead = re.match(rf"\s*(?:@({alternatives}){_NAME_END}|({alternatives})\s*[:,])", text, re.IGNORECASE)
    if lead is not None:
        return known[(lead.group(1) or lead.group(2)).lower()]
    mention = re.search(rf"(?<![\w@])@({alternatives}){_NAME_END}", text, re.IGNORECASE)
    return known[mention.group(1).lower()] if mention is not None else None
