"""Accepting messages: group commit, durability before the answer, order, and not waiting on turns."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentd._exceptions import StoreError
from agentd.app import App
from agentd.config import load_config
from agentd.embedders.local import LocalEmbedder
from agentd.runtime import Done, Error, Event, Runtime
from agentd.runtime.group_commit import GroupCommit
from agentd.runtime.pipeline.record import Incoming, TurnWriter
from agentd.store import Store
from agentd.store.messages import Message
from tests.conftest import write_home
from tests.support import wait_for
from tests.support.fakeopenai import KEY_ENV, FakeOpenAI, Turn, fake_persona

pytestmark = pytest.mark.both_backends

OFFLINE = 'name = "quick"\nmodel = "offline"\nmax_reply_tokens = 64\nskills = []\nsystem_prompt = "Be brief."\n'


@pytest.fixture
def extra_config() -> str:
    """More TOML for the test's agentd.toml."""
    return ""


@pytest.fixture
def app(
    tmp_path: Path,
    database_url: str,
    embedder: LocalEmbedder,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    extra_config: str,
) -> Iterator[App]:
    monkeypatch.setenv(KEY_ENV, "test-key")
    home = write_home(
        tmp_path / "home",
        extra_config,
        {"quick": OFFLINE, "fake": fake_persona(fake_openai.url)},
        database_url=database_url,
    )
    made = App(load_config(home, environ={}), embedder=embedder)
    yield made
    made.close()


@pytest.fixture
def runtime(app: App) -> Iterator[Runtime]:
    rt = Runtime(app)
    yield rt
    rt.stop(grace=5)


def incoming(writer: TurnWriter, app: App, channel: str, text: str) -> Incoming:
    return writer.incoming(app.personas["quick"], channel, "alice", text, request_id=text, source="chat")


def test_concurrent_posts_are_each_durable_when_accepted_ordered_per_channel_and_answered_once(
    app: App, runtime: Runtime
) -> None:
    """Many threads submit at once over a few channels. Each submit returns only once its message
    can be read by another connection; every message gets exactly one reply, and each channel's
    replies come in the order its messages were stored."""
    other = Store.open(app.config.database_url)
    finals: list[Event] = []
    lock = threading.Lock()
    accepted: list[int] = []
    not_visible: list[int] = []

    def sink(event: Event) -> None:
        if isinstance(event, Done | Error):
            with lock:
                finals.append(event)

    def client(index: int) -> None:
        for n in range(4):
            got = runtime.submit("quick", f"room{(index + n) % 3}", "alice", f"message {index}-{n}", sink=sink)
            with other.read() as conn:  # a separate connection: committed, not merely written
                if other.messages.get(conn, got.message_id) is None:
                    not_visible.append(got.message_id)
            with lock:
                accepted.append(got.message_id)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not_visible == []
        assert runtime.wait_idle(180)
        assert len(accepted) == 96
        assert len(finals) == 96
        assert [e for e in finals if not isinstance(e, Done)] == []
        with other.read() as conn:
            replies = other.messages.replies_to(conn, accepted)
            messages = {i: other.messages.get(conn, i) for i in accepted}
            per_channel: dict[str, list[tuple[int, int]]] = defaultdict(list)
            for mid in sorted(accepted):
                msg = messages[mid]
                assert msg is not None
                assert msg.status == "answered"
                per_channel[msg.channel].append((mid, replies[mid].id))
            complete = [m for m in other.messages.after(conn, "room0", 0, 1000) if m.role == "assistant" and m.reply_to]
        for pairs in per_channel.values():
            reply_ids = [r for _, r in pairs]
            assert reply_ids == sorted(reply_ids)  # answered in the order stored
        assert len(complete) == len({m.reply_to for m in complete})  # one reply per message
    finally:
        other.close()


class WatchedGroupCommit(GroupCommit[Incoming, Message, None]):
    """A group commit whose queue a test can watch (the daemon never asks): reads its lock and queue."""

    @property
    def queued(self) -> int:
        """How many items wait for the commit under way to end."""
        with self._cond:
            return len(self._queue)


def test_what_queues_during_a_commit_is_stored_in_one_transaction_and_dispatched_in_id_order(app: App) -> None:
    writer = TurnWriter(app.store, app.builder)
    gate = threading.Event()
    batches: list[int] = []
    dispatched: list[int] = []

    def commit(items: Sequence[Incoming]) -> list[Message]:
        batches.append(len(items))
        if len(batches) == 1:
            assert gate.wait(30)
        return writer.accept_many(items)

    def dispatch(message: Message, _then: None) -> None:
        with app.store.read() as conn:  # stored before it is dispatched
            assert app.store.messages.get(conn, message.id) is not None
        dispatched.append(message.id)

    group = WatchedGroupCommit(commit, dispatch)
    results: dict[int, Message] = {}

    def post(i: int) -> None:
        results[i] = group.submit(incoming(writer, app, "room", f"m{i}"), None)

    first = threading.Thread(target=post, args=(0,))
    first.start()
    wait_for(lambda: batches == [1], 10, "the first commit to start")
    rest = [threading.Thread(target=post, args=(i,)) for i in range(1, 12)]
    for t in rest:
        t.start()
    wait_for(lambda: group.queued == 11, 10, "eleven posts queued behind the first commit")
    gate.set()
    for t in [first, *rest]:
        t.join()
    assert batches == [1, 11]
    assert dispatched == sorted(dispatched)
    assert sorted(dispatched) == sorted(m.id for m in results.values())
    assert [results[i].content for i in range(12)] == [f"m{i}" for i in range(12)]


def test_a_batch_that_cannot_be_stored_fails_every_caller_in_it_and_dispatches_nothing(app: App) -> None:
    writer = TurnWriter(app.store, app.builder)
    dispatched: list[Message] = []

    def commit(items: Sequence[Incoming]) -> list[Message]:
        raise StoreError("cannot write the database: disk I/O error")

    group: GroupCommit[Incoming, Message, None] = GroupCommit(commit, lambda m, _t: dispatched.append(m))
    with pytest.raises(StoreError, match="disk I/O error"):
        group.submit(incoming(writer, app, "room", "lost?"), None)
    assert dispatched == []


def test_a_post_is_accepted_while_its_channel_is_busy_with_a_slow_turn(
    app: App, runtime: Runtime, fake_openai: FakeOpenAI
) -> None:
    """The first turn hangs in the model; posts to the same and another channel are accepted
    (stored, ids returned) before that turn ends, and are answered after it, in order."""
    fake_openai.queue(Turn(hang=True, text="first"), Turn(text="second"), Turn(text="third"))
    events: dict[str, list[Any]] = defaultdict(list)
    first = runtime.submit("fake", "general", "alice", "first", sink=events["first"].append)
    wait_for(lambda: fake_openai.hanging == 1, 120, "the first turn to wait on the model")
    second = runtime.submit("fake", "general", "alice", "second", sink=events["second"].append)
    third = runtime.submit("quick", "elsewhere", "bob", "third", sink=events["third"].append)
    assert not any(isinstance(e, Done | Error) for e in events["first"])  # still running
    assert first.message_id < second.message_id < third.message_id
    wait_for(lambda: any(isinstance(e, Done) for e in events["third"]), 60, "the other channel's reply")
    assert not any(isinstance(e, Done | Error) for e in events["first"])  # other channels are not held up
    fake_openai.release()
    assert runtime.wait_idle(60)
    done_first = next(e for e in events["first"] if isinstance(e, Done))
    done_second = next(e for e in events["second"] if isinstance(e, Done))
    assert done_first.message_id < done_second.message_id


@pytest.mark.parametrize("extra_config", ["[runtime]\nturn_slots = 1\n"])
def test_a_turn_waiting_on_its_model_holds_no_turn_slot(
    extra_config: str, app: App, runtime: Runtime, fake_openai: FakeOpenAI
) -> None:
    """With one turn slot, a turn hanging in the model does not keep another channel's turn
    from preparing and finishing."""
    assert app.config.runtime.slots == 1, extra_config
    fake_openai.queue(Turn(hang=True, text="slow"))
    events: dict[str, list[Any]] = defaultdict(list)
    runtime.submit("fake", "general", "alice", "slow one", sink=events["slow"].append)
    wait_for(lambda: fake_openai.hanging == 1, 120, "the first turn to wait on the model")
    runtime.submit("quick", "elsewhere", "bob", "hello there", sink=events["quick"].append)
    wait_for(lambda: any(isinstance(e, Done) for e in events["quick"]), 60, "the other channel's reply")
    assert not any(isinstance(e, Done | Error) for e in events["slow"])
    fake_openai.release()
    assert runtime.wait_idle(60)
    assert any(isinstance(e, Done) for e in events["slow"])


def test_replies_finished_together_share_transactions_each_with_its_record_and_status(app: App) -> None:
    """Replies stored at the same moment (many actors finishing at once) go in shared transactions
    (on PostgreSQL one at a time): each reply still answers its own message, with its own context
    record and recalled-exchanges note, and its message is answered."""
    import sqlalchemy as sa

    from agentd.prompt.budget import ContextBudget
    from agentd.runtime.pipeline.record import ContextRecord, FinishedReply, HistoryInfo, RetrievalInfo
    from agentd.store.schema import messages

    writer = TurnWriter(app.store, app.builder)
    quick = app.personas["quick"]
    asked = writer.accept_many([incoming(writer, app, f"room{i % 3}", f"question {i}") for i in range(24)])
    budget = ContextBudget("offline", "cl100k_base", 32768, "builtin", 64, *([0] * 14), False, False)
    begins: list[str] = []

    @sa.event.listens_for(app.store.engine, "before_cursor_execute")
    def _count(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.split(None, 1)[0].upper() == "BEGIN":
            begins.append(statement)

    start = threading.Barrier(len(asked))
    stored: dict[int, int] = {}

    def answer(message: Message) -> None:
        record = ContextRecord(
            message.request_id or "",
            RetrievalInfo("ok", 1.0, message.content),
            (),
            budget,
            (),
            HistoryInfo(),
            {"prompt_tokens": message.id},
        )
        start.wait(30)
        stored[message.id] = writer.answered(
            quick, message.channel, message.id, FinishedReply(f"re: {message.content}", record, f"note {message.id}")
        ).reply_id

    threads = [threading.Thread(target=answer, args=(m,)) for m in asked]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    sa.event.remove(app.store.engine, "before_cursor_execute", _count)
    assert len(stored) == len(asked)
    if app.store.backend == "sqlite":
        assert len(begins) < len(asked)  # shared transactions
    with app.store.read() as conn:
        for message in asked:
            reply = app.store.messages.get(conn, stored[message.id])
            assert reply is not None
            assert reply.reply_to == message.id
            assert reply.content == f"re: {message.content}"
            assert app.store.messages.get(conn, message.id).status == "answered"  # type: ignore[union-attr]
            record = app.store.contexts.for_message(conn, reply.id)
            assert record is not None
            assert record.user_message_id == message.id
            assert record.data["usage"] == {"prompt_tokens": message.id}
            notes = conn.execute(
                sa.select(messages.c.content).where(
                    messages.c.source == "user_history", messages.c.reply_to == message.id
                )
            ).scalars()
            assert list(notes) == [f"note {message.id}"]


def test_a_message_two_processes_answer_keeps_one_complete_reply_and_stays_answered(app: App) -> None:
    """Two writers (a worker whose daemon was killed, and the restarted daemon) answer one message:
    the first reply is stored, the second is refused (AlreadyAnswered) on SQLite as on PostgreSQL,
    and the first writer's turn ending late ("resume": pending) does not take the answer back."""
    from agentd._exceptions import AlreadyAnswered
    from agentd.prompt.budget import ContextBudget
    from agentd.runtime.messages import TurnState
    from agentd.runtime.pipeline.record import ContextRecord, FinishedReply, HistoryInfo, RetrievalInfo

    orphan, restarted = TurnWriter(app.store, app.builder), TurnWriter(app.store, app.builder)
    quick = app.personas["quick"]
    (asked,) = restarted.accept_many([incoming(restarted, app, "room", "q1")])
    budget = ContextBudget("offline", "cl100k_base", 32768, "builtin", 64, *([0] * 14), False, False)
    record = ContextRecord("q1", RetrievalInfo("ok", 1.0, "q1"), (), budget, (), HistoryInfo(), {})
    first = restarted.answered(quick, "room", asked.id, FinishedReply("the answer", record, None))
    with pytest.raises(AlreadyAnswered):
        orphan.answered(quick, "room", asked.id, FinishedReply("the same answer again", record, None))
    orphan.ended("quick", "room", asked.id, "q1", TurnState.INTERRUPTED, "the same", resume=True)
    with app.store.read() as conn:
        replies = app.store.messages.after(conn, "room", asked.id)
        assert [(m.id, m.status) for m in replies if m.status == "complete"] == [(first.reply_id, "complete")]
        assert app.store.messages.get(conn, asked.id).status == "answered"  # type: ignore[union-attr]
