"""The full-text term budget (agentd.store.lexical.TERM_BUDGET): common terms are dropped only past it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from agentd.store import Store, lexical, pgtext
from agentd.store.engine import create_engine
from tests.support.pgserver import PostgresDatabases

P = "p"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    """A file database with 40 memories: "coffee" in 30, "tea" in 8, "zanzibar" in one, "harbour" in two."""
    eng = create_engine(f"sqlite:///{tmp_path / 'lex.db'}")
    rows = []
    for i in range(1, 41):
        words = ["coffee"] * (i <= 30) + ["tea"] * (30 < i <= 38) + ["note", f"n{i}"]
        if i == 39:
            words.append("zanzibar")
        if i in (5, 40):
            words.append("harbour")
        rows.append((i, P, "global" if i % 2 else "channel:a", " ".join(words)))
    with eng.begin() as conn:
        conn.exec_driver_sql(lexical.CREATE_SQL)
        lexical.insert(conn, rows)
    yield eng
    lexical._common.pop(eng, None)
    eng.dispose()


def ids(hits: list[tuple[int, float]]) -> list[int]:
    return [m for m, _ in hits]


def test_below_the_budget_results_are_those_of_the_full_query(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        for terms in (["coffee", "zanzibar"], ["tea", "harbour", "zanzibar"], ["coffee", "tea"], ["harbour"]):
            for scopes in ([], ["global"], ["channel:a"]):
                full = lexical.search(conn, terms, P, scopes, 50, budget=0)
                assert full
                assert lexical.search(conn, terms, P, scopes, 50, budget=40) == full
                assert lexical.bounded_terms(conn, terms, 40) == terms


def test_past_the_budget_the_common_term_is_dropped_and_the_rare_match_comes_first(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        full = lexical.search(conn, ["coffee", "zanzibar"], P, [], 10, budget=0)
        assert len(full) == 10
        assert 39 in ids(full)
        assert lexical.postings(conn, "coffee", 100) == 30
        # 30 + 1 postings: within a budget of 31, over one of 30.
        assert lexical.bounded_terms(conn, ["coffee", "zanzibar"], 31) == ["coffee", "zanzibar"]
        assert lexical.bounded_terms(conn, ["coffee", "zanzibar"], 30) == ["zanzibar"]
        assert ids(lexical.search(conn, ["coffee", "zanzibar"], P, [], 10, budget=30)) == [39]


def test_rarest_terms_are_kept_within_the_budget_in_query_order(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        terms = ["coffee", "harbour", "tea", "zanzibar"]  # 30, 2, 8, 1 postings
        assert lexical.bounded_terms(conn, terms, 11) == ["harbour", "tea", "zanzibar"]
        assert lexical.bounded_terms(conn, terms, 10) == ["harbour", "zanzibar"]
        assert lexical.bounded_terms(conn, terms, 1) == ["zanzibar"]
        # The rarest term is kept even alone over the budget.
        assert lexical.bounded_terms(conn, ["coffee", "tea"], 5) == ["tea"]
        assert ids(lexical.search(conn, ["coffee"], P, [], 50, budget=5)) == ids(
            lexical.search(conn, ["coffee"], P, [], 50, budget=0)
        )
        # A term missing from the index (df 0) is the rarest: benign, it matches nothing.
        assert lexical.bounded_terms(conn, ["coffee", "tea", "quokka"], 5) == ["quokka"]


def test_the_terms_are_counted_as_the_index_tokenizes_them(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert lexical.postings(conn, "Coffees", 100) == 30  # case folded, porter-stemmed
        assert lexical.postings(conn, "coffee", 10) == 10  # counting stops at the cap


def test_a_common_term_is_remembered_and_a_bigger_budget_counts_again(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert lexical.bounded_terms(conn, ["coffee", "zanzibar"], 20) == ["zanzibar"]
        assert lexical._common[engine]["coffee"][0] == 21
    with engine.begin() as conn:
        lexical.delete(conn, 1)
        for mid in range(2, 31):
            lexical.delete(conn, mid)
    with engine.connect() as conn:
        # Still remembered as common within COMMON_TTL...
        assert lexical.bounded_terms(conn, ["coffee", "zanzibar"], 20) == ["zanzibar"]
        # ...but a budget above what was seen counts afresh (no postings left now).
        assert lexical.bounded_terms(conn, ["coffee", "zanzibar"], 25) == ["coffee", "zanzibar"]
        assert lexical._common[engine]["coffee"][:2] == (0, True)  # exact now: serves any budget
        assert lexical.bounded_terms(conn, ["coffee", "zanzibar"], 20) == ["coffee", "zanzibar"]


def test_the_default_budget_is_the_module_constant(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    with engine.connect() as conn:
        monkeypatch.setattr(lexical, "TERM_BUDGET", 30)
        assert ids(lexical.search(conn, ["coffee", "zanzibar"], P, [], 10)) == [39]
        monkeypatch.setattr(lexical, "TERM_BUDGET", 0)
        assert len(lexical.search(conn, ["coffee", "zanzibar"], P, [], 10)) == 10


# -- PostgreSQL: the same bound in agentd.store.pgtext ------------------------------------------


@pytest.fixture
def pg_store(postgres: PostgresDatabases) -> Iterator[Store]:
    """The same 40 memories, in the PostgreSQL text index."""
    store = Store.open(postgres.fresh())
    rows = []
    for i in range(1, 41):
        words = ["coffee"] * (i <= 30) + ["tea"] * (30 < i <= 38) + ["note", f"n{i}"]
        if i == 39:
            words.append("zanzibar")
        if i in (5, 40):
            words.append("harbour")
        rows.append((i, P, "global" if i % 2 else "channel:a", " ".join(words), ""))
    with store.write() as conn:
        store.words.insert(conn, rows)
    yield store
    pgtext._common.pop(store.engine, None)
    store.close()


def test_postgresql_past_the_budget_drops_the_common_term(pg_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    with pg_store.read() as conn:
        monkeypatch.setattr(pgtext, "TERM_BUDGET", 0)
        full = pg_store.words.search(conn, ["coffee", "zanzibar"], P, [], 10)
        assert len(full) == 10
        assert 39 in ids(full)
        monkeypatch.setattr(pgtext, "TERM_BUDGET", 31)  # 30 + 1 postings: within it
        assert pg_store.words.search(conn, ["coffee", "zanzibar"], P, [], 10) == full
        monkeypatch.setattr(pgtext, "TERM_BUDGET", 30)
        assert ids(pg_store.words.search(conn, ["coffee", "zanzibar"], P, [], 10)) == [39]
        monkeypatch.setattr(pgtext, "TERM_BUDGET", 10)  # tea (8) fits, coffee (30) does not
        assert pg_store.words.search(conn, ["coffee", "tea"], P, ["channel:a"], 50) == (
            pg_store.words.search(conn, ["tea"], P, ["channel:a"], 50)
        )
        assert sorted(ids(pg_store.words.search(conn, ["tea"], P, [], 50))) == list(range(31, 39))
        # The rarest term is kept even alone over the budget, scored with its exact document frequency.
        monkeypatch.setattr(pgtext, "TERM_BUDGET", 5)
        bounded = pg_store.words.search(conn, ["coffee"], P, [], 50)
        monkeypatch.setattr(pgtext, "TERM_BUDGET", 0)
        assert bounded == pg_store.words.search(conn, ["coffee"], P, [], 50)
        assert len(bounded) == 30
