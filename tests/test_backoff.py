"""The one backoff (:mod:`agentd.timing.backoff`) and the one ``Retry-After`` parser: what the model client,
the Python client and the adapters wait (the client's exception classes: tests/test_client.py)."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx

import agentd
from agentd.client.errors import error_from
from agentd.llm.errors import retry_after as model_retry_after
from agentd.timing import backoff
from agentd.timing.backoff import Backoff, delay, retry_after_seconds


def test_delays_double_up_to_the_cap_within_their_jitter() -> None:
    rng = random.Random(7)
    for attempt, ceiling in enumerate([1.0, 2.0, 4.0, 8.0, 10.0, 10.0]):
        wait = delay(attempt, 1.0, 10.0, jitter=0.5, rng=rng)
        assert ceiling / 2 <= wait <= ceiling
    assert delay(3, 0.25, 60.0, jitter=0.0) == 2.0  # no jitter: exactly first * 2**attempt


def test_a_backoff_grows_resets_and_never_goes_below_its_floor() -> None:
    backoff = Backoff(first=1.0, cap=4.0, jitter=0.0)
    assert [backoff.next() for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.next() == 1.0
    backoff.floor = 3.0
    assert backoff.next() == 3.0  # 2.0 asked, the server's retry: says 3
    jittered = Backoff(first=10.0, cap=10.0, jitter=0.3)
    assert all(7.0 <= jittered.next() <= 10.0 for _ in range(50))


def test_retry_after_is_read_as_seconds_or_as_an_http_date() -> None:
    now = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    assert retry_after_seconds("5") == 5.0
    assert retry_after_seconds("0.5") == 0.5
    assert retry_after_seconds("-3") == 0.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=90), usegmt=True), now) == 90.0
    assert retry_after_seconds(format_datetime(now - timedelta(seconds=90), usegmt=True), now) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_the_model_client_and_the_python_client_read_retry_after_alike() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)

    class Refused(Exception):
        response = httpx.Response(429, headers={"Retry-After": later})

    from_model = model_retry_after(Refused())
    body = b'{"error": {"code": "overloaded", "field": null, "message": "busy"}}'
    from_client = error_from(httpx.Response(429, headers={"Retry-After": later}), body).retry_after
    assert from_model is not None
    assert from_client is not None
    assert 100 < from_model <= 120
    assert 100 < from_client <= 120
    ms = type("Ms", (Exception,), {"response": httpx.Response(429, headers={"retry-after-ms": "1500"})})
    assert model_retry_after(ms()) == 1.5


def test_no_module_but_the_one_computes_a_backoff_or_reads_retry_after() -> None:
    """Exponential growth (``** attempt``, ``* 2 **``, ``min(pause * 2, ...)``) and the parsing of an
    HTTP date (``parsedate_to_datetime``) live in :mod:`agentd.timing.backoff` only; the rest call it."""
    root = Path(agentd.__file__).parent
    the_one = Path(backoff.__file__)
    doubling = re.compile(r"\*\*\s*\(?(attempt|failures|tries)|\*\s*2\s*\*\*|min\(\s*\w+\s*\*\s*2\b")
    found = [
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if path != the_one
        for line in path.read_text(encoding="utf-8").splitlines()
        if (doubling.search(line) or "parsedate_to_datetime" in line) and not line.lstrip().startswith("#")
    ]
    # The store's file lock polls in microseconds on the group commit's path: a wait, not a retry.
    assert [p for p in found if not p.endswith("store/writers.py")] == []
