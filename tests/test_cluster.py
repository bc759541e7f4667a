"""Several ``agentd serve`` processes on one PostgreSQL (the embedded server of the test run).

Three real daemons share one database; messages are posted round-robin to all of
them; one is killed with SIGKILL mid-run. Every accepted message is answered
exactly once (read back from the store), a follower on one daemon sees the
events of a channel another daemon answers, and a chat on a daemon that does not
own the channel streams the owner's reply.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa

from agentd.store.cluster import lock_key
from tests.conftest import write_home
from tests.support import SSE, read_sse, wait_for
from tests.support.cluster import CLUSTER_CONFIG, ECHO
from tests.support.pgserver import PostgresDatabases

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow


CHANNELS = [f"c{i:02d}" for i in range(20)]
MESSAGES = 200


def _dsn(url: str) -> str:
    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _locked_keys(dsn: str, daemon: str) -> set[int]:
    """The advisory lock ids held by ``daemon``'s lock connection."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT l.classid::bigint, l.objid::bigint FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s",
            (f"agentd {daemon} lock",),
        ).fetchall()
    return {int.from_bytes(((hi << 32) | lo).to_bytes(8, "big"), "big", signed=True) for hi, lo in rows}


def _all_locks(dsn: str) -> set[int]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted"
        ).fetchall()
    return {int.from_bytes(((hi << 32) | lo).to_bytes(8, "big"), "big", signed=True) for hi, lo in rows}


class Follower:
    """Reads ``GET /v1/channels/{channel}/events`` of one daemon on a thread."""

    def __init__(self, url: str, channel: str) -> None:
        self.events: list[SSE] = []
        self.open = threading.Event()
        self._client = httpx.Client(base_url=url, timeout=httpx.Timeout(10, read=120))
        self._thread = threading.Thread(target=self._read, args=(channel,), daemon=True)
        self._thread.start()

    def _read(self, channel: str) -> None:
        try:
            with self._client.stream("GET", f"/v1/channels/{channel}/events", params={"after": 0}) as response:
                self.open.set()
                for event in read_sse(response.iter_lines()):
                    self.events.append(event)
        except httpx.HTTPError:
            pass

    def close(self) -> None:
        self._client.close()


def test_three_daemons_answer_every_accepted_message_once_across_a_sigkill(cluster, capsys) -> None:
    url, daemons = cluster
    dsn = _dsn(url)
    clients = [httpx.Client(base_url=d.url, timeout=30) for d in daemons]
    names = [c.get("/healthz").json()["cluster"]["daemon"] for c in clients]
    assert len(set(names)) == 3
    victim, follower_at = 1, 2
    # c00's first message goes to daemon 0, which takes the channel; daemon 2 follows it.
    follower = Follower(daemons[follower_at].url, "c00")
    wait_for(follower.open.is_set, 30, "the follower's stream to open")

    taken: list[float] = []

    def watch() -> None:  # takeover: every channel the victim held is held again by a live daemon
        wait_for(lambda: victim_keys <= _all_locks(dsn), 60, "the victim's channels to be taken over")
        taken.append(time.monotonic() - killed_at)

    watcher = threading.Thread(target=watch, daemon=True)
    left_pending: Any = None
    accepted: dict[int, str] = {}
    victim_keys: set[int] = set()
    killed_at = 0.0

    def post(i: int) -> tuple[int, str]:
        target = i % 3
        if target == victim and killed_at:
            target = (target + 1) % 3  # the dead daemon accepts nothing; its share goes to the next
        channel = CHANNELS[i % len(CHANNELS)]
        response = clients[target].post(f"/v1/channels/{channel}/messages", json={"user": "u", "text": f"m{i}"})
        assert response.status_code == 202, response.text
        return int(response.json()["id"]), channel

    # Six clients post at once, so work is queued on every daemon when the victim is killed.
    with ThreadPoolExecutor(6) as pool:
        accepted.update(pool.map(post, range(MESSAGES // 2)))
        victim_keys = _locked_keys(dsn, names[victim])
        daemons[victim].proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        daemons[victim].proc.wait(10)
        watcher.start()
        victim_channels = [c for c in CHANNELS if lock_key(("echo", c)) in victim_keys]
        with psycopg.connect(dsn, autocommit=True) as conn:
            left_pending = conn.execute(
                "SELECT count(*) FROM messages WHERE status = 'pending' AND channel = ANY(%s)", (victim_channels,)
            ).fetchone()
        accepted.update(pool.map(post, range(MESSAGES // 2, MESSAGES)))
    assert victim_keys, "the victim owned no channel before it was killed"

    watcher.join(60)
    assert taken, "the victim's channels were not taken over within 60 s"
    takeover = taken[0]

    engine = sa.create_engine(url)
    try:

        def answered() -> bool:
            with engine.connect() as conn:
                left = conn.execute(
                    sa.text("SELECT count(*) FROM messages WHERE role = 'user' AND status <> 'answered'")
                ).scalar_one()
            return left == 0

        wait_for(answered, 120, "every accepted message to be answered")
        drained = time.monotonic() - killed_at
        with engine.connect() as conn:
            users = dict(conn.execute(sa.text("SELECT id, status FROM messages WHERE role = 'user'")).all())
            replies = conn.execute(
                sa.text("SELECT reply_to, count(*) FROM messages WHERE role = 'assistant' GROUP BY reply_to")
            ).all()
    finally:
        engine.dispose()
    assert set(users) == set(accepted), "a message was stored that was not accepted, or the reverse"
    assert set(users.values()) == {"answered"}
    counts = dict(replies)
    assert set(counts) == set(accepted), "some accepted message has no reply"
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
    for i, serve in enumerate(daemons):
        if i != victim:
            assert not any("turn_already_answered" in line for line in serve.stderr), serve.stderr

    # The follower on daemon 2 saw c00, answered by daemon 0: every message and every turn's done.
    c00 = {mid for mid, channel in accepted.items() if channel == "c00"}

    def followed() -> bool:
        dones = {e.data["user_message_id"] for e in follower.events if e.event == "done"}
        return c00 <= dones

    wait_for(followed, 30, f"the follower to see every c00 turn end (saw {[e.event for e in follower.events]})")
    seen = [e for e in follower.events if e.event == "message"]
    assert {int(e.data["id"]) for e in seen if e.data["role"] == "user"} == c00
    assert len({int(e.data["id"]) for e in seen if e.data["role"] == "assistant"}) == len(c00)
    ids = [int(e.id or 0) for e in seen]
    assert ids == sorted(ids), "messages out of order"
    assert any(e.event == "token_delta" for e in follower.events), "live events were not relayed"
    follower.close()

    # A chat on daemon 2 in c00 (daemon 0 answers it) streams daemon 0's reply.
    with clients[follower_at].stream(
        "POST", "/v1/chat", json={"channel": "c00", "user": "u", "message": "hello from afar", "persona": "echo"}
    ) as response:
        assert response.status_code == 200
        events = list(read_sse(response.iter_lines()))
    assert events[0].event == "memory_context", [e.event for e in events]
    assert events[-1].event == "done", [e.event for e in events]
    assert "hello from afar" in events[-1].data["text"]

    with capsys.disabled():
        print(
            f"\ncluster: {len(accepted)} messages accepted by 3 daemons, one SIGKILLed after {MESSAGES // 2}: "
            f"its {len(victim_keys)} channels ({left_pending[0]} messages pending) taken over in {takeover:.2f} s, "
            "all answered once "
            f"{drained:.2f} s after the kill"
        )
    for client in clients:
        client.close()


def test_a_reply_is_stored_once_even_if_two_daemons_answer(postgres: PostgresDatabases) -> None:
    """The store's own guard (migration 0006): a second complete reply to a message is refused, also
    when the insert runs as a prepared statement with a generic plan (psycopg prepares a query
    after its fifth run; the index's predicate must still be recognised)."""
    from agentd._exceptions import AlreadyAnswered
    from agentd.store import Store

    url = postgres.fresh()
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {sa.engine.make_url(url).database} SET plan_cache_mode = force_generic_plan")
    store = Store.open(url)
    try:
        asked = []
        for i in range(12):
            with store.write() as conn:
                asked.append(
                    store.messages.add(conn, channel="c", role="user", author="u", content=f"q{i}", status="pending")
                )
            with store.write() as conn:
                store.messages.add(
                    conn,
                    channel="c",
                    role="assistant",
                    author="p",
                    content="one",
                    status="complete",
                    reply_to=asked[-1].id,
                )
        for message in asked:
            with pytest.raises(AlreadyAnswered), store.write() as conn:
                store.messages.add(
                    conn,
                    channel="c",
                    role="assistant",
                    author="p",
                    content="two",
                    status="complete",
                    reply_to=message.id,
                )
        with store.read() as conn:
            replies = store.messages.replies_to(conn, [m.id for m in asked])
            counted = conn.execute(sa.text("SELECT count(*) FROM messages WHERE role = 'assistant'")).scalar_one()
        assert {r.content for r in replies.values()} == {"one"}
        assert counted == len(asked)
    finally:
        store.close()


def test_a_daemon_that_loses_its_lock_connection_gives_up_its_channels(tmp_path, postgres) -> None:
    """The server ends one daemon's lock session (as it does for a silent host after lease_seconds):
    that daemon forgets its channels within a heartbeat, and the other takes them over and answers
    there. Two runtimes in this process, each with its own App, on one database."""
    from agentd.app import App
    from agentd.config import load_config
    from agentd.runtime import Runtime

    url = postgres.fresh()
    homes = [write_home(tmp_path / f"h{i}", CLUSTER_CONFIG, {"echo": ECHO}, url) for i in range(2)]
    apps = [App(load_config(home, environ={})) for home in homes]
    first, second = (Runtime(a) for a in apps)
    try:
        events = list(first.chat("echo", "c01", "u", "hello"))
        assert events[-1].type == "done"
        name = first.health()["cluster"]["daemon"]
        assert first.health()["cluster"]["channels"] == 1
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            ended = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (f"agentd {name} lock",),
            ).fetchall()
        assert ended == [(True,)]
        wait_for(lambda: first.health()["cluster"]["channels"] == 0, 10, "the first daemon to give up c01")
        events = list(second.chat("echo", "c01", "u", "again"))
        assert events[-1].type == "done"
        assert "again" in events[-1].text
        assert second.health()["cluster"]["channels"] == 1
        # The first daemon now forwards c01 to the second, and relays its reply.
        events = list(first.chat("echo", "c01", "u", "via the first"))
        assert events[-1].type == "done"
        assert "via the first" in events[-1].text
        assert first.health()["cluster"]["channels"] == 0
        # An event larger than a NOTIFY payload travels as a row of cluster_events.
        long = " ".join(f"w{i}" for i in range(3000))
        events = list(first.chat("echo", "c01", "u", long))
        assert events[-1].type == "done"
        assert long in events[-1].text
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            rows = conn.execute("SELECT count(*) FROM cluster_events").fetchone()
        assert rows is not None
        assert rows[0] >= 1
    finally:
        for rt in (first, second):
            rt.stop(2)
        for a in apps:
            a.close()


def test_a_message_another_daemon_stored_first_is_answered_first(tmp_path, postgres) -> None:
    """Per-channel order across daemons: the owner is posted a message while an earlier one, stored
    by another daemon whose NOTIFY has not arrived yet (here: stored with no NOTIFY at all), is
    pending. The earlier one is answered first, at once, not at the next heartbeat's sweep."""
    from agentd.app import App
    from agentd.config import load_config
    from agentd.runtime import Runtime

    url = postgres.fresh()
    slow_sweep = CLUSTER_CONFIG.replace("heartbeat_seconds = 0.5", "heartbeat_seconds = 60")
    app = App(load_config(write_home(tmp_path / "h", slow_sweep, {"echo": ECHO}, url), environ={}))
    runtime = Runtime(app)
    try:
        assert list(runtime.chat("echo", "c01", "u", "hello"))[-1].type == "done"  # c01 is owned here
        with app.store.write() as conn:
            app.store.messages.add(
                conn,
                channel="c01",
                role="user",
                author="v",
                content="stored elsewhere",
                status="pending",
                persona="echo",
            )
        events = list(runtime.chat("echo", "c01", "u", "posted here"))
        assert events[-1].type == "done"
        assert "posted here" in events[-1].text

        def replies() -> dict[str, int]:
            with app.store.read() as conn:
                rows = conn.execute(
                    sa.text(
                        "SELECT q.content, r.id FROM messages r JOIN messages q ON r.reply_to = q.id "
                        "WHERE r.role = 'assistant' AND r.status = 'complete' AND q.channel = 'c01'"
                    )
                ).all()
            return {str(content): int(rid) for content, rid in rows}

        wait_for(lambda: "stored elsewhere" in replies(), 10, "the earlier message's reply")
        answered = replies()
        assert answered["stored elsewhere"] < answered["posted here"], answered
    finally:
        runtime.stop(2)
        app.close()


def test_lock_keys_differ_per_persona_and_channel() -> None:
    keys: set[Any] = {lock_key((p, c)) for p in ("a", "b") for c in CHANNELS}
    assert len(keys) == 2 * len(CHANNELS)
