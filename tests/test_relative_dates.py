"""A question that names a day relative to when it is asked ("five days ago", "last Friday",
"the past weekend") finds what was said that day (agentd/search/dates.py, ``relative_dates``):
hybrid search boosts the candidates created on it, counted back from the search's ``now``."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from agentd.access.scopes import GLOBAL, Reach
from agentd.app import App
from agentd.search import SearchQuery
from agentd.search.dates import query_dates, relative_dates

BUDDY = Reach("buddy", "general", "alice")
TUESDAY = date(2023, 3, 28)


@pytest.mark.parametrize(
    ("query", "days"),
    [
        ("What did I say yesterday?", {date(2023, 3, 27)}),
        ("and the day before yesterday?", {date(2023, 3, 26)}),
        ("What did I do 5 days ago?", {date(2023, 3, 23)}),
        ("a couple of days ago", {date(2023, 3, 26)}),
        # Weeks and months are rounded by people: the day, and the days either side.
        ("the milestone I mentioned four weeks ago", {date(2023, 2, 27), date(2023, 2, 28), date(2023, 3, 1)}),
        ("a month ago", {date(2023, 2, 26), date(2023, 2, 27), date(2023, 2, 28), date(2023, 3, 1), date(2023, 3, 2)}),
        ("the artist I started listening to last Friday", {date(2023, 3, 24)}),
        ("which bike did I fix the past weekend?", {date(2023, 3, 25), date(2023, 3, 26)}),
        ("What did I say last week?", set()),  # a span, not a day
        ("on Friday", set()),  # which Friday is not said
        ("What did I plan for tomorrow?", set()),  # only days before the question
    ],
)
def test_relative_phrases_name_days_counted_back_from_the_question(query: str, days: set[date]) -> None:
    assert relative_dates(query, TUESDAY) == days


def test_a_month_back_keeps_the_day_or_the_months_last() -> None:
    assert date(2023, 2, 28) in relative_dates("a month ago", date(2023, 3, 31))


def test_explicit_dates_need_no_today_and_relative_ones_do() -> None:
    assert query_dates("What did I say 3 days ago?") == set()
    assert query_dates("What did I say 3 days ago, or on 1 March, 2023?", TUESDAY) == {
        date(2023, 3, 25),
        date(2023, 3, 1),
    }


def test_what_was_said_on_the_day_a_relative_phrase_names_ranks_first(app: App) -> None:
    now = datetime(2023, 3, 28, 18, 0, tzinfo=UTC)
    five_days_ago = app.memory.add(
        "buddy", GLOBAL, "Alice: I signed up for a pottery class", created_at=now - timedelta(days=5, hours=3)
    )[0]
    app.memory.add(
        "buddy", GLOBAL, "Alice: I started a new activity, indoor climbing", created_at=now - timedelta(days=12)
    )
    query = "What new activity did I start 5 days ago?"
    hits = app.memory.search(SearchQuery(query, BUDDY, limit=2, min_relevance=0.0, now=now)).hits
    assert hits[0].memory.id == five_days_ago.id  # the other one matches more of the words
    # Asked a week later, "5 days ago" is another day: the words decide again.
    later = app.memory.search(SearchQuery(query, BUDDY, limit=2, min_relevance=0.0, now=now + timedelta(days=7))).hits
    assert later[0].memory.id != five_days_ago.id
