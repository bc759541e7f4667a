"""Calendar dates named in a query ("on 16 June, 2023", "May 3, 2023", "2023-06-16").

A question about what was said *on* a day ("What did Maria share on 16 June,
2023?") is answered by memories written that day: their ``created_at`` is
evidence that words and vectors cannot see. :func:`query_dates` finds the
explicit calendar dates (day, month and year all given) in a query; hybrid
search adds ``[memory] date_weight`` to the effective cosine of a candidate
(from either pool) created on one of them (UTC day; agentd/memory/fusion.py).
No extra query runs: only candidates the words or vectors found are boosted. Dates without a year, weekdays and relative
phrases ("last week") are left alone: they do not name one day.
"""

from __future__ import annotations

import re
from datetime import date

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"
# "16 June, 2023" / "16th of June 2023"
_DMY = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s*{_YEAR}\b", re.IGNORECASE)
# "June 16, 2023" / "June 16th 2023"
_MDY = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s*{_YEAR}\b", re.IGNORECASE)
# "2023-06-16"
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


def _make(year: str, month: int | None, day: str) -> date | None:
    if month is None:
        return None
    try:
        return date(int(year), month, int(day))
    except ValueError:
        return None


def query_dates(query: str) -> set[date]:
    """The calendar days a query names explicitly (empty for most queries)."""
    found: set[date] = set()
    for m in _DMY.finditer(query):
        d = _make(m.group(3), _MONTHS.get(m.group(2).lower()), m.group(1))
        if d:
            found.add(d)
    for m in _MDY.finditer(query):
        d = _make(m.group(3), _MONTHS.get(m.group(1).lower()), m.group(2))
        if d:
            found.add(d)
    for m in _ISO.finditer(query):
        d = _make(m.group(1), int(m.group(2)), m.group(3))
        if d:
            found.add(d)
    return found
