"""Calendar dates named in a query ("on 16 June, 2023", "May 3, 2023", "2023-06-16").

A question about what was said *on* a day ("What did Maria share on 16 June,
2023?") is answered by memories written that day: their ``created_at`` is
evidence that words and vectors cannot see. :func:`query_dates` finds the
explicit calendar dates (day, month and year all given) in a query; hybrid
search adds ``[memory.tuning] date_weight`` to the effective cosine of a candidate
(from either pool) created on one of them (UTC day; agentd/search/fusion.py).
No extra query runs: only candidates the words or vectors found are boosted.

Given the day the question is asked (a search's ``now``: the turn's time, or a
benchmark question's date), a relative phrase that names one day names it too
(:func:`relative_dates`): "yesterday", "3 days ago", "four weeks ago" (the day
28 days back, and the days either side: people round weeks), "a month ago"
(likewise), "last Friday", "last weekend" / "the past weekend" (its Saturday
and Sunday). Dates without a year, bare weekdays ("on Friday") and spans
("last week", "in May") are left alone: they do not name a day or two.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta

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


def query_dates(query: str, today: date | None = None) -> set[date]:
    """The calendar days a query names (empty for most queries): explicitly, and, given the day it
    is asked (``today``), by a relative phrase (:func:`relative_dates`)."""
    found: set[date] = relative_dates(query, today) if today is not None else set()
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


_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple of": 2, "a couple of": 2,
}  # fmt: skip
_COUNT = r"(\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + ")"
_AGO = re.compile(rf"\b{_COUNT}\s+(day|week|month)s?\s+ago\b", re.IGNORECASE)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_LAST_WEEKDAY = re.compile(rf"\b(?:last|past|this past)\s+({'|'.join(_WEEKDAYS)})\b", re.IGNORECASE)
_LAST_WEEKEND = re.compile(r"\b(?:last|past|this past|the past)\s+weekend\b", re.IGNORECASE)
_YESTERDAY = re.compile(r"\b(?:the day before )?yesterday\b", re.IGNORECASE)
#: One of these is in every phrase the expressions below read.
_CUES = ("yesterday", "ago", "last", "past")
#: Days either side of "N weeks ago" and "N months ago" (people round them).
_SLACK = {"day": 0, "week": 1, "month": 2}
#: The farthest back a relative phrase is taken to reach.
_MOST_DAYS = 400


def _months_back(today: date, months: int) -> date:
    """The same day of the month ``months`` back (the month's last day when it has fewer)."""
    index = today.year * 12 + today.month - 1 - months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(today.day, calendar.monthrange(year, month + 1)[1]))


def relative_dates(query: str, today: date) -> set[date]:
    """The days a relative phrase in ``query`` names, counted back from ``today`` (see the module docstring)."""
    lowered = query.casefold()
    if not any(cue in lowered for cue in _CUES):  # most queries: no regular expression runs
        return set()
    found: set[date] = set()
    for m in _YESTERDAY.finditer(query):
        found.add(today - timedelta(days=2 if m.group().lower().startswith("the day before") else 1))
    for m in _AGO.finditer(query):
        count, unit = _NUMBERS.get(m.group(1).lower()) or int(m.group(1)), m.group(2).lower()
        back = count * (7 if unit == "week" else 1)
        day = _months_back(today, count) if unit == "month" else today - timedelta(days=back)
        if 0 < (today - day).days <= _MOST_DAYS:
            found.update(day + timedelta(days=k) for k in range(-_SLACK[unit], _SLACK[unit] + 1))
    for m in _LAST_WEEKDAY.finditer(query):
        back = (today.weekday() - _WEEKDAYS.index(m.group(1).lower())) % 7 or 7
        found.add(today - timedelta(days=back))
    if _LAST_WEEKEND.search(query):
        saturday = today - timedelta(days=(today.weekday() - 5) % 7 or 7)
        found.update({saturday, saturday + timedelta(days=1)} - {today})
    return {d for d in found if d < today}
