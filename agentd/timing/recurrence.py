"""When a schedule is due: one time (``at``) or a five-field cron expression in an IANA timezone.

The one module that speaks to the cron library (cronsim: zero dependencies, zoneinfo-aware, so
daylight-saving changes are handled as cron users expect — a 02:30 that does not exist on the day
clocks go forward is skipped, one that happens twice fires once). Every check raises
:class:`~agentd.InvalidInput` naming the field (``at``, ``cron``, ``timezone``) and why, so the
API, the CLI and the ``schedule`` skill refuse bad input with the same words.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from agentd._exceptions import InvalidInput

#: How many fields a cron expression has: minute hour day-of-month month day-of-week (so a
#: recurrence fires at most once a minute; six-field expressions with seconds are refused).
CRON_FIELDS = 5
#: The longest cron expression accepted.
MAX_CRON = 128


def zone(name: str) -> ZoneInfo:
    """The IANA timezone ``name`` (``Europe/Paris``, ``UTC``); :class:`InvalidInput` (``timezone``) if unknown."""
    if not isinstance(name, str) or not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        raise InvalidInput("timezone", f"{name!r} is not an IANA timezone name such as Europe/Paris or UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            "timezone", f"unknown timezone {name!r}; use an IANA name such as Europe/Paris or UTC"
        ) from None


def check_cron(expr: str) -> str:
    """``expr`` normalised (single spaces), or :class:`InvalidInput` (``cron``) saying what is wrong."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidInput("cron", "must be a five-field cron expression such as '0 9 * * 1-5'")
    fields = expr.split()
    if len(expr) > MAX_CRON or len(fields) != CRON_FIELDS:
        raise InvalidInput(
            "cron",
            f"{expr!r} has {len(fields)} fields; a cron expression has five (minute hour day month weekday), "
            "so a recurrence fires at most once a minute",
        )
    normal = " ".join(fields)
    try:
        CronSim(normal, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise InvalidInput("cron", f"{expr!r} is not a valid cron expression: {exc}") from None
    return normal


def next_occurrence(cron: str, timezone: str, after: datetime) -> datetime:
    """The first occurrence of ``cron`` in ``timezone`` strictly after ``after``, in UTC."""
    tz = zone(timezone)
    # Whole minutes: cronsim starts from the next minute after the given time.
    start = after.astimezone(tz).replace(second=0, microsecond=0)
    try:
        found = next(CronSim(cron, start))
    except (CronSimError, StopIteration):
        raise InvalidInput("cron", f"{cron!r} never occurs") from None
    return found.astimezone(UTC)


def parse_at(value: str | datetime, now: datetime | None = None) -> datetime:
    """An ISO 8601 time with an offset (``2026-11-28T09:00:00+01:00``, ``…Z``) as UTC; refused
    (:class:`InvalidInput`, ``at``) without an offset or when it is not in the future."""
    if isinstance(value, datetime):
        when = value
    else:
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput("at", "must be an ISO 8601 time with an offset, e.g. 2026-11-28T09:00:00+01:00")
        try:
            when = datetime.fromisoformat(value.strip().replace("z", "Z"))
        except ValueError:
            raise InvalidInput(
                "at", f"{value!r} is not an ISO 8601 time; e.g. 2026-11-28T09:00:00+01:00 or 2026-11-28T08:00:00Z"
            ) from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise InvalidInput("at", f"{value!s} has no offset; add one, e.g. +01:00 or Z")
    try:
        when = when.astimezone(UTC)
    except OverflowError:
        raise InvalidInput("at", f"{value!s} is out of range") from None
    now = now or datetime.now(UTC)
    if when <= now:
        raise InvalidInput("at", f"{when.isoformat()} is in the past (now is {now.isoformat(timespec='seconds')})")
    return when


def in_minutes(minutes: float, now: datetime | None = None) -> datetime:
    """``minutes`` from now, in UTC (the reminders the offline model makes)."""
    return (now or datetime.now(UTC)) + timedelta(minutes=minutes)


__all__ = ["CRON_FIELDS", "check_cron", "in_minutes", "next_occurrence", "parse_at", "zone"]
