"""Faults of the embedding model, through the real daemon over HTTP.

The embedder is the fake OpenAI server behind litellm; each fault is what a
broken or hung embedding service really answers. Nothing it answers that is not
a finite unit vector of the store's dimension is stored; a hung embedder costs
each caller at most its timeout and never blocks ``/healthz``, another channel
or shutdown.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from agentd.access.scopes import GLOBAL, Reach
from agentd.search import SearchQuery
from agentd.store import vectors
from tests.conftest import agentd_cli
from tests.support import wait_for
from tests.support.fakeopenai import EmbeddingFault, Turn, embedding_config

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow


def config(fake, timeout: float = 30.0, retrieval_timeout: float = 30.0, extra: str = "") -> str:
    """A daemon whose embeddings come from the fake server; the timeouts are short only in the tests
    that are about them (a healthy call on a loaded machine can take over a second)."""
    return embedding_config(
        fake, f"timeout_seconds = {timeout}\n[memory]\nretrieval_timeout_seconds = {retrieval_timeout}\n{extra}"
    )


def stored_count(d) -> int:
    with d.app.store.read() as conn:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {vectors.TABLE}").scalar_one())


BAD_ANSWERS = [
    (EmbeddingFault("nan"), 502, "embedder_bad_output"),
    (EmbeddingFault("inf"), 502, "embedder_bad_output"),
    (EmbeddingFault("zero"), 502, "embedder_bad_output"),
    (EmbeddingFault("dimension", dimension=7), 502, "embedder_bad_output"),
    (EmbeddingFault("empty"), 502, "embedder_bad_output"),
    (EmbeddingFault("garbage"), 502, "embedder_bad_output"),
    (EmbeddingFault("status", status=500), 503, "embedder_unavailable"),
    (EmbeddingFault("reset"), 503, "embedder_unavailable"),
]


def test_no_bad_vector_is_ever_stored_and_each_fault_has_its_code(daemons, fake_openai) -> None:
    # Long enough for the provider SDK's own retries of a 500 or a reset (about 1.5 s).
    d = daemons(config(fake_openai, timeout=8.0))
    body = {"persona": "fake", "text": "User likes Python", "category": "preference"}
    for fault, status, code in BAD_ANSWERS:
        fake_openai.embedding_fault = fault  # every try (the SDK retries some) gets the fault
        answer = d.client.post("/v1/memories", json=body)
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), (fault, answer.text)
        searched = d.client.post("/v1/memory/search", json={"query": "python", "persona": "fake"})
        assert (searched.status_code, searched.json()["error"]["code"]) == (status, code), (fault, searched.text)
        imported = d.client.post("/v1/memories/import", json={"persona": "fake", "memories": [{"text": "a b c"}]})
        assert imported.status_code == status, (fault, imported.text)
    assert d.app.memory.count() == 0
    assert stored_count(d) == 0
    fake_openai.embedding_fault = None  # the embedder recovers: everything works again
    assert d.client.post("/v1/memories", json=body).status_code == 201
    found = d.client.post("/v1/memory/search", json={"query": "User likes Python", "persona": "fake"}).json()
    assert [r["text"] for r in found["results"]] == ["User likes Python"]


def test_a_bad_vector_from_the_remember_skill_is_a_tool_error_and_the_turn_goes_on(daemons, fake_openai) -> None:
    d = daemons(config(fake_openai))
    fake_openai.queue(
        Turn(tool_calls=[("remember", {"text": "User likes Python"})]),
        Turn(text="Noted, I think."),
    )
    fake_openai.embedding_fault = EmbeddingFault("nan")
    events = d.chat("remember that I like Python")
    names = [e.event for e in events]
    assert names[0] == "memory_context"
    assert events[0].data["status"] == "error"
    result = next(e for e in events if e.event == "tool_result").data
    assert result["error"]["code"] == "ExecutionFailed"
    assert "NaN" in result["error"]["message"]
    assert names[-1] == "done"
    assert events[-1].data["text"] == "Noted, I think."
    assert d.app.memory.count() == 0
    assert stored_count(d) == 0


def test_a_store_that_already_holds_a_broken_vector_still_answers_every_search(daemons, fake_openai, tmp_path) -> None:
    d = daemons(config(fake_openai))
    memory = d.app.memory
    kept = [memory.add("fake", GLOBAL, f"User likes {lang}")[0] for lang in ("Python", "Rust", "Go")]
    broken, other = memory.add("fake", GLOBAL, "User likes Python a lot")[0], kept[1]
    # Written by hand, as an older release (or an edit) could have: NaN and all-zero vectors.
    with d.app.store.write() as conn:
        for mid, vec in ((broken.id, [np.nan] * 64), (other.id, [0.0] * 64)):
            conn.exec_driver_sql(
                f"UPDATE {vectors.TABLE} SET embedding = ? WHERE rowid = ?",
                (np.asarray(vec, dtype=np.float32).tobytes(), mid),
            )
    for limit in (1, 2, 5):  # the broken rows come first in the k-NN scan: they must not take places
        found = d.client.post(
            "/v1/memory/search", json={"query": "User likes Python", "persona": "fake", "limit": limit}
        )
        assert found.status_code == 200, found.text
        texts = [r["text"] for r in found.json()["results"]]
        assert texts
        assert texts[0] in ("User likes Python", "User likes Python a lot")
    hits = memory.search(SearchQuery("User likes Go", Reach("fake"), limit=5, min_relevance=0.0)).hits
    assert "User likes Go" in [h.memory.text for h in hits]
    context = d.client.post("/v1/memory/context", json={"userId": "alice", "query": "User likes Python"})
    assert context.status_code == 200
    assert context.json()["memoriesUsed"] >= 1
    events = d.chat("What do I like? Python?")
    assert events[0].event == "memory_context"
    assert events[0].data["status"] == "ok"
    assert events[-1].event == "done"
    # The daemon stops; doctor (read-only) reports the rows, reembed rewrites them, doctor is content.
    d.client.close()
    d.server.request_stop()
    d.thread.join(30)
    env = {"FAKE_OPENAI_KEY": "test-key"}
    report = agentd_cli("doctor", "--json", config=d.home, env=env)
    assert report.returncode == 1, report.stderr
    line = next(c for c in json.loads(report.stdout) if c["check"] == "vectors")
    assert not line["ok"]
    assert str(broken.id) in line["detail"]
    assert str(other.id) in line["detail"]
    assert "agentd memory reembed" in line["detail"]
    fixed = agentd_cli("memory", "reembed", "--yes", config=d.home, env=env)
    assert fixed.returncode == 0, fixed.stderr
    again = agentd_cli("doctor", "--json", config=d.home, env=env)
    assert next(c for c in json.loads(again.stdout) if c["check"] == "vectors")["ok"], again.stdout


def test_a_hung_embedder_costs_each_caller_its_timeout_and_blocks_nothing_else(daemons, fake_openai) -> None:
    timeout = 3.0
    d = daemons(config(fake_openai, timeout=timeout, retrieval_timeout=0.5))
    d.app.memory.add("fake", GLOBAL, "User likes Python")
    fake_openai.embedding_fault = EmbeddingFault("hang")
    body = {"persona": "fake", "text": "User likes Rust"}
    added = d.client.post("/v1/memories", json=body)
    assert (added.status_code, added.json()["error"]["code"]) == (504, "embedder_timeout")
    assert fake_openai.hanging == 1  # answered while the embedder still hangs: the timeout, not the embedder
    # More searches than the embedder has call slots (16) hang at once. /healthz answers while
    # every one of them still waits (judged by order, not by a wall-clock bound a loaded machine
    # can miss: blocked behind the hung calls, it could answer only after one gave up), and
    # another channel is answered.
    searches = 24
    pool = ThreadPoolExecutor(searches)
    with httpx.Client(base_url=d.url, timeout=60, limits=httpx.Limits(max_connections=60)) as many:
        futures = [
            pool.submit(many.post, "/v1/memory/search", json={"query": f"python {i}", "persona": "fake"})
            for i in range(searches)
        ]
        wait_for(lambda: fake_openai.hanging >= 10, 30, "searches hanging on the embedder")
        healths = [d.client.get("/healthz").status_code for _ in range(5)]
        still_waiting = sum(not f.done() for f in futures)
        assert healths == [200] * 5
        assert still_waiting == searches, "/healthz waited for the hung calls"
        events = d.chat("hello from another channel", channel="elsewhere")
        assert events[-1].event == "done"
        assert events[0].data["status"] == "timeout"  # its own retrieval gave up, the reply went on
        answers = [f.result(timeout=120) for f in futures]
    pool.shutdown()
    assert {a.status_code for a in answers} == {504}
    assert {a.json()["error"]["code"] for a in answers} == {"embedder_timeout"}
    fake_openai.release()


def test_the_remember_skill_is_bounded_by_the_embedding_timeout(daemons, fake_openai) -> None:
    d = daemons(config(fake_openai, timeout=1.0, retrieval_timeout=0.5))
    fake_openai.queue(Turn(tool_calls=[("remember", {"text": "User likes Python"})]), Turn(text="I tried."))
    fake_openai.embedding_fault = EmbeddingFault("hang")
    events = d.chat("remember that I like Python")
    assert fake_openai.hanging >= 1  # the turn went on while the embedder still hangs
    result = next(e for e in events if e.event == "tool_result").data
    assert result["error"]["code"] == "ExecutionFailed"
    assert "did not answer" in result["error"]["message"]
    assert events[-1].event == "done"
    fake_openai.release()


@pytest.mark.parametrize("fault", [EmbeddingFault("hang"), EmbeddingFault("nan")])
def test_the_cli_is_bounded_and_refuses_bad_vectors(tmp_path, fake_openai, fault) -> None:
    from tests.conftest import write_home

    # 5 s: a CLI's first embedding call (the provider SDK warming up) can take over a second on
    # a loaded machine, and must not be mistaken for the fault.
    home = write_home(tmp_path, config(fake_openai, timeout=5.0))
    env = {"FAKE_OPENAI_KEY": "test-key"}
    assert agentd_cli("memory", "add", "User likes Python", "--persona", "buddy", config=home, env=env).returncode == 0
    fake_openai.embedding_fault = fault
    results = []
    for args in (("memory", "add", "User likes Rust"), ("memory", "search", "python")):
        hanging = fake_openai.hanging
        results.append(agentd_cli(*args, "--persona", "buddy", config=home, env=env))
        # Bounded by the timeout: the command ended while its embedding calls still hang.
        assert (fake_openai.hanging > hanging) if fault.kind == "hang" else fake_openai.hanging == 0, args
    for result in results:
        assert result.returncode == 1, result.stderr
        expected = "did not answer" if fault.kind == "hang" else "NaN"
        assert expected in result.stderr
    fake_openai.release()


def test_sigterm_ends_the_daemon_while_the_embedder_hangs(tmp_path, fake_openai, monkeypatch) -> None:
    """A remember call, searches and a pending message wait on a hung embedder: SIGTERM still
    ends the daemon within its grace period; the pending message is answered after restart."""
    from tests.conftest import write_home
    from tests.support.fakeopenai import fake_persona
    from tests.support.serve import Serve

    home = write_home(
        tmp_path,
        config(fake_openai, timeout=20.0, retrieval_timeout=0.5, extra="[daemon]\nshutdown_grace_seconds = 1\n"),
        {"fake": fake_persona(fake_openai.url)},
    )
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")  # SIGABRT dumps every thread, should it hang
    daemon = Serve(home)
    try:
        client = httpx.Client(base_url=daemon.url, timeout=60)
        fake_openai.embedding_fault = EmbeddingFault("hang")
        fake_openai.queue(Turn(tool_calls=[("remember", {"text": "User likes Python"})]))
        # Texts with a topic: a greeting-like "later" or "x" is never embedded (nothing to search for).
        first = client.post(
            "/v1/channels/general/messages",
            json={"persona": "fake", "user": "a", "text": "remember the python project"},
        )
        second = client.post(
            "/v1/channels/general/messages", json={"persona": "fake", "user": "a", "text": "the rust compiler later"}
        )
        assert first.status_code == second.status_code == 202
        searches = [
            threading.Thread(
                target=lambda: httpx.post(
                    f"{daemon.url}/v1/memory/search", json={"query": "python project", "persona": "fake"}, timeout=60
                ),
                daemon=True,
            )
            for _ in range(5)
        ]
        for t in searches:
            t.start()
        wait_for(lambda: fake_openai.hanging >= 3, 30, "calls hanging on the embedder")
        daemon.proc.terminate()
        try:
            status = daemon.proc.wait(30)
        except subprocess.TimeoutExpired:
            daemon.proc.send_signal(signal.SIGABRT)
            daemon.proc.wait(10)
            pytest.fail("the daemon did not stop:\n" + "".join(daemon.stderr))
        assert status == 0, "".join(daemon.stderr)
        assert fake_openai.hanging >= 3, "the daemon waited for the hung embedder"
        assert "Traceback" not in "".join(daemon.stderr)
        assert "ActorDeadError" not in "".join(daemon.stderr)
        fake_openai.embedding_fault = None
        fake_openai.release()
        again = Serve(home)
        try:
            with httpx.Client(base_url=again.url, timeout=30) as c2:
                replies = wait_for(
                    lambda: [
                        m
                        for m in c2.get("/v1/channels/general/messages").json()["messages"]
                        if m["reply_to"] == second.json()["id"]
                    ],
                    60,
                    "the pending message's reply",
                )
            assert replies[0]["status"] == "complete"
        finally:
            again.stop()
    finally:
        daemon.stop()


def test_with_a_hung_embedder_every_request_waits_its_timeout_once_not_once_per_wave(daemons, fake_openai) -> None:
    """45 searches at once, 16 threads for them: those queued behind the hung calls used to wait for a
    thread (30 s) and then their own timeout again (60 s, 90 s). The timeout counts from the request: a
    queued request is refused without a call, or waits for a call slot only what is left of its timeout
    (tests/test_embedder_guard.py checks each rule on its own). Judged by what the daemon did, not by the
    time it took: bench/embedder_timeout.py measures the slowest answer against the timeout."""
    d = daemons(config(fake_openai, timeout=4.0, retrieval_timeout=0.5))
    d.app.memory.add("fake", GLOBAL, "User likes Python")
    fake_openai.embedding_fault = EmbeddingFault("hang")
    searches = 45
    with httpx.Client(base_url=d.url, timeout=120, limits=httpx.Limits(max_connections=60)) as many:
        with ThreadPoolExecutor(searches) as pool:
            answers = list(
                pool.map(
                    lambda i: many.post("/v1/memory/search", json={"query": f"python {i}", "persona": "fake"}),
                    range(searches),
                )
            )
        hung = fake_openai.hanging
    fake_openai.release()
    assert {a.status_code for a in answers} == {504}
    assert {a.json()["error"]["code"] for a in answers} == {"embedder_timeout"}
    # Each answer names the model and which timeout ended it; none waited for the model to answer.
    reasons = (
        "did not answer within 4 s",  # it called the model, which hung: the guard's timeout
        "timed out after 4 s",  # the same, ended by the HTTP client's own timeout a moment before
        "was not called: its caller waited",  # its timeout had passed while it queued for a thread
        "every one of its call slots is taken",  # what was left of its timeout passed waiting for a slot
    )
    for answer in answers:
        message = answer.json()["error"]["message"]
        assert "openai/fake-embed" in message, message
        assert any(reason in message for reason in reasons), message
    assert hung >= 1, "no search reached the hung embedder"
