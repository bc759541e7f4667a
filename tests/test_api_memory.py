"""The memory service over HTTP: /context and /search share one search
function; defaults, budget, greedy fill by score, per-user isolation; add, import,
list, forget; budgets."""

from __future__ import annotations

import math

import pytest

from agentd.access.scopes import Scope
from agentd.recall.known_facts import KNOWN_FACTS_HEADING

pytestmark = pytest.mark.both_backends

ALICE = [
    "Alice's favourite programming language is Python",
    "Alice likes programming in Python more than any other language",
]
BOB = ["Bob's favourite programming language is Rust", "Bob likes programming in Rust more than any other language"]
QUERY = "What programming language do I like?"


def context(d, **body):  # type: ignore[no-untyped-def]
    response = d.client.post("/v1/memory/context", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_context_has_the_seed_fields_defaults_and_block(daemons) -> None:
    d = daemons()
    for text in ALICE:
        d.app.memory.add("fake", Scope.user("alice"), text, "preference")
    result = context(d, userId="alice", query=QUERY)
    assert set(result) == {"context", "memoriesUsed", "tokensUsed", "tokenBudget"}
    assert result["tokenBudget"] == 2000
    lines = result["context"].splitlines()
    assert lines[0] == KNOWN_FACTS_HEADING == "## Known Facts (from memory)"
    assert sorted(lines[1:]) == sorted(f"- {t}" for t in ALICE)
    assert result["context"].endswith("\n")
    assert result["memoriesUsed"] == 2
    assert result["tokensUsed"] == sum(math.ceil(len(t) / 4) for t in ALICE)  # English: len/4 rules
    # Nothing to recall (a greeting), or nothing relevant enough for a threshold: an empty string and zeros.
    empty = {"context": "", "memoriesUsed": 0, "tokensUsed": 0, "tokenBudget": 2000}
    assert context(d, userId="alice", query="hello") == empty
    assert context(d, userId="alice", query="Explain quantum entanglement", minScore=0.5) == empty


def test_a_users_memories_never_reach_another_users_context(daemons) -> None:
    d = daemons()
    for text in ALICE:
        d.app.memory.add("fake", Scope.user("alice"), text)
    for text in BOB:
        d.app.memory.add("fake", Scope.user("bob"), text)
    alice = context(d, userId="alice", query=QUERY)["context"]
    bob = context(d, userId="bob", query=QUERY)["context"]
    assert "Python" in alice
    assert "Rust" not in alice
    assert "Bob" not in alice
    assert "Rust" in bob
    assert "Python" not in bob
    assert "Alice" not in bob
    assert context(d, userId="carol", query=QUERY)["memoriesUsed"] == 0
    searched = d.client.post("/v1/memory/search", json={"userId": "bob", "query": QUERY}).json()
    assert {r["text"] for r in searched["results"]} == set(BOB)


def test_context_fills_the_budget_greedily_by_score_as_search_ranks(daemons) -> None:
    d = daemons()
    texts = [f"User practises Python programming every day, exercise number {i} of the course" for i in range(25)]
    for text in texts:
        d.app.memory.add("fake", Scope.user("erin"), text)
    ranked = d.client.post("/v1/memory/search", json={"userId": "erin", "query": "Python programming practice"}).json()
    assert ranked["total_found"] == 20  # limit defaults to 20
    scores = [r["score"] for r in ranked["results"]]
    assert scores == sorted(scores, reverse=True)
    full = context(d, userId="erin", query="Python programming practice")
    assert full["memoriesUsed"] == 20
    assert full["tokensUsed"] <= 2000
    cost = [math.ceil(len(r["text"]) / 4) for r in ranked["results"]]
    for budget in (cost[0] - 1, cost[0], 100, 333):
        result = context(d, userId="erin", query="Python programming practice", tokenBudget=budget)
        n = 0
        while n < len(cost) and sum(cost[: n + 1]) <= budget:
            n += 1
        assert result["memoriesUsed"] == n
        assert result["tokenBudget"] == budget
        assert result["tokensUsed"] == sum(cost[:n]) <= budget
        shown = [line[2:] for line in result["context"].splitlines()[1:]]
        assert shown == [r["text"] for r in ranked["results"][:n]]  # best score first, a prefix of /search
    assert context(d, userId="erin", query="Python programming practice", limit=3)["memoriesUsed"] == 3


def test_context_counts_cjk_text_with_the_real_tokenizer(daemons) -> None:
    d = daemons()
    text = "用户喜欢用Python编程，也喜欢学习新的编程语言和算法"
    d.app.memory.add("fake", Scope.user("li"), text)
    hit = d.client.post("/v1/memory/search", json={"userId": "li", "query": text, "minScore": 0.0}).json()
    assert hit["total_found"] == 1
    result = context(d, userId="li", query=text, minScore=0.0)
    assert result["memoriesUsed"] == 1
    assert result["tokensUsed"] > math.ceil(len(text) / 4)  # len/4 would undercount CJK


def test_memories_add_list_search_forget_and_import(daemons) -> None:
    d = daemons()
    body = {
        "persona": "fake",
        "text": "User's favorite color is blue",
        "category": "preference",
        "userId": "alice",
        "metadata": {"source": "test"},
    }
    added = d.client.post("/v1/memories", json=body)
    assert added.status_code == 201
    assert added.json()["created"] is True
    memory = added.json()["memory"]
    assert memory["scope"] == "user:alice"
    assert memory["metadata"] == {"source": "test"}
    again = d.client.post("/v1/memories", json=body)
    assert again.status_code == 200
    assert again.json() == {"memory": memory, "created": False}
    listed = d.client.get("/v1/memories", params={"persona": "fake"}).json()
    assert [m["id"] for m in listed["memories"]] == [memory["id"]]
    assert listed["total"] == 1
    found = d.client.post(
        "/v1/memory/search", json={"persona": "fake", "userId": "alice", "query": "what color does the user like"}
    ).json()
    assert found["results"][0]["text"] == "User's favorite color is blue"
    assert set(found["results"][0]) >= {"id", "text", "category", "score", "relevance", "created_at", "persona"}
    assert d.client.delete(f"/v1/memories/{memory['id']}").json()["forgotten"]["id"] == memory["id"]
    assert d.client.delete(f"/v1/memories/{memory['id']}").status_code == 404
    # Import: one bad item refuses the batch (nothing stored) unless skip_invalid.
    items = [
        {"text": "User lives in Lisbon", "scope": "user:alice"},
        {"text": "User works as a nurse", "category": "fact", "created_at": "2025-01-15T10:30:00Z"},
        {"text": 42},
    ]
    refused = d.client.post("/v1/memories/import", json={"persona": "fake", "memories": items})
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "memories[2].text"
    assert d.client.get("/v1/memories", params={"persona": "fake"}).json()["total"] == 0
    partial = d.client.post(
        "/v1/memories/import", json={"persona": "fake", "memories": items, "skip_invalid": True}
    ).json()
    assert partial["added"] == 2
    assert partial["duplicates"] == 0
    assert [s["index"] for s in partial["skipped"]] == [2]
    scoped = d.client.get("/v1/memories", params={"persona": "fake", "scope": "user:alice"}).json()
    assert [m["text"] for m in scoped["memories"]] == ["User lives in Lisbon"]
    unknown = d.client.post("/v1/memories", json={**body, "persona": "nobody"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["field"] == "persona"


def test_budget_shows_where_the_tokens_go(daemons) -> None:
    d = daemons('[channels.general]\nvisibility = "direct"\n')  # alice's own: her memories count
    d.app.memory.add("fake", Scope.user("alice"), ALICE[0], "preference")
    budget = d.client.get(
        "/v1/budget", params={"persona": "fake", "channel": "general", "user": "alice", "message": QUERY}
    ).json()
    assert budget["budget"]["memories_included"] == 1
    assert budget["budget"]["memory_tokens"] > 0
    assert budget["budget"]["system_tokens"] > 0
    assert budget["budget"]["window"] > 0
    assert [m["text"] for m in budget["memories"]] == [ALICE[0]]
    missing = d.client.get("/v1/budget", params={"persona": "nobody", "channel": "general"})
    assert missing.status_code == 404
    assert missing.json()["error"]["field"] == "persona"
