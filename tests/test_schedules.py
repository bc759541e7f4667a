"""Schedules: reminders, schedules and routines, over real HTTP against real daemons.

A schedule a couple of seconds ahead fires once into its channel (its trigger message from
``schedule:<id>``, source ``schedule``, and the persona's reply, seen by a follower); a daemon
killed with SIGKILL before the due time fires it exactly once after restart; one due while no
daemon ran, beyond ``[schedules] max_lateness_seconds``, becomes ``missed``; bad input is
refused naming the field; two daemons on one PostgreSQL fire a shared set with no duplicate;
worker-pool mode fires too; the offline model makes a reminder from "remind me in 1 minute to …".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.conftest import agentd_cli, write_home
from tests.support import Running, follow, wait_for
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona
from tests.support.serve import Serve

OFFLINE = """
name = "buddy"
model = "offline"
max_reply_tokens = 256
channels = ["general", "dm-*", "room*"]
skills = ["remember", "recall", "schedule"]
system_prompt = "You are buddy."
"""
PERSONAS = {"buddy": OFFLINE}
QUIET = '[embedding]\nprovider = "none"\n'


def _at(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def _add(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/schedules", json={"persona": "buddy", "channel": "general", **body})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def _schedule(client: httpx.Client, sid: int) -> dict[str, Any]:
    response = client.get(f"/v1/schedules/{sid}")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def _triggers(messages: list[dict[str, Any]], sid: int) -> list[dict[str, Any]]:
    return [m for m in messages if m["author"] == f"schedule:{sid}"]


def _replies(messages: list[dict[str, Any]], to: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "assistant" and m["reply_to"] == to["id"] and m["status"] == "complete"]


@pytest.mark.both_backends
def test_schedules_a_few_seconds_ahead_fire_once_each_into_their_channels(daemons) -> None:
    d: Running = daemons(QUIET, PERSONAS)
    follower, _ = follow(d.client, "room1")
    wait_for(follower.ready.is_set, 30, "the follower")
    made = [
        _add(d.client, channel=channel, user="alice", text=f"say hello {i}", at=_at(2 + i * 0.2))
        for i, channel in enumerate(["room1", "room2", "room1"])
    ]
    assert all(s["state"] == "scheduled" and s["user"] == "alice" for s in made)
    for s in made:
        wait_for(lambda s=s: _schedule(d.client, s["id"])["state"] == "fired", 60, f"schedule {s['id']} to fire")
    for s in made:
        messages = d.messages(s["channel"])
        wait_for(lambda s=s: _replies(d.messages(s["channel"]), _triggers(d.messages(s["channel"]), s["id"])[0]), 60)
        messages = d.messages(s["channel"])
        triggers = _triggers(messages, s["id"])
        assert len(triggers) == 1, triggers
        assert triggers[0]["source"] == "schedule"
        assert triggers[0]["content"] == s["text"]
        assert len(_replies(messages, triggers[0])) == 1
        assert _schedule(d.client, s["id"])["last_message_id"] == triggers[0]["id"]
    # The follower of room1 saw both of its firings answered.
    room1 = [s for s in made if s["channel"] == "room1"]
    wait_for(
        lambda: sum(e.event == "done" for e in follower.snapshot()) >= len(room1), 30, "the follower's done events"
    )
    listed = d.client.get("/v1/schedules", params={"state": "fired"}).json()["schedules"]
    assert [s["id"] for s in listed] == sorted((s["id"] for s in made), reverse=True)
    scraped = d.client.get("/metrics").text
    fired = [line for line in scraped.splitlines() if line.startswith("agentd_schedules_fired_total{")]
    assert any('persona="buddy"' in line and 'outcome="fired"' in line for line in fired), fired
    assert "agentd_schedule_lateness_seconds_count" in scraped


@pytest.mark.both_backends
def test_a_firing_is_said_by_its_user_in_the_prompt(daemons, fake_openai: FakeOpenAI) -> None:
    """A schedule's firing is in its user's words: alone in a channel, nobody is named (two firings
    are not two speakers); where others speak too, it is named for its user, never ``schedule:<id>``."""
    d: Running = daemons(QUIET, {"fake": fake_persona(fake_openai.url, channels='["lobby"]')})
    for text in ("ping one", "ping two"):  # the second made once the first is answered: it follows it
        made = _add(d.client, persona="fake", channel="lobby", user="ann", text=text, at=_at(1))
        wait_for(lambda made=made: _answered_once(d.client, made), 60, f"schedule {made['id']} to be answered")

    def talk() -> list[tuple[str, str]]:
        messages = fake_openai.chat_requests()[-1]["messages"]
        return [(m["role"], m["content"]) for m in messages if m["role"] != "system"]

    assert talk() == [("user", "ping one"), ("assistant", "echo: ping one"), ("user", "ping two")]
    chat = {"persona": "fake", "channel": "lobby", "user": "bob", "message": "hi all"}
    with d.client.stream("POST", "/v1/chat", json=chat) as response:
        assert response.status_code == 200, response.read()
        response.read()
    assert talk() == [
        ("user", "ann: ping one"),
        ("assistant", "echo: ping one"),
        ("user", "ann: ping two"),
        ("assistant", "echo: ping two"),
        ("user", "bob: hi all"),
    ]


def _refused(response: httpx.Response, field: str, words: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    assert words in error["message"], error


def test_bad_input_is_refused_naming_the_field(daemons, tmp_path) -> None:
    d: Running = daemons(QUIET + "[schedules]\nmax_per_user = 2\n", PERSONAS)
    post = lambda **body: d.client.post("/v1/schedules", json={"persona": "buddy", "channel": "general", **body})  # noqa: E731
    _refused(post(text="x", cron="*/5 * * * * *"), "cron", "five")
    _refused(post(text="x", cron="61 * * * *"), "cron", "not a valid cron")
    _refused(post(text="x", cron="0 9 * * *", timezone="Mars/Olympus"), "timezone", "unknown timezone")
    _refused(post(text="x", at="2020-01-01T00:00:00Z"), "at", "in the past")
    _refused(post(text="x", at="2030-01-01T09:00:00"), "at", "no offset")
    _refused(post(text="x", at="next tuesday"), "at", "ISO 8601")
    _refused(post(text="x", at=_at(60), cron="0 9 * * *"), "cron", "exactly one")
    _refused(post(text="x"), "at", "exactly one")
    assert post(persona="nobody", text="x", at=_at(60)).status_code == 404
    # At most [schedules] max_per_user active schedules per user; a cancelled one leaves room.
    first, _second = (_add(d.client, user="alice", text=f"n{i}", at=_at(600)) for i in range(2))
    _refused(post(user="alice", text="third", at=_at(600)), "user", "max_per_user")
    assert d.client.delete(f"/v1/schedules/{first['id']}").json()["state"] == "cancelled"
    assert post(user="alice", text="third", at=_at(600)).status_code == 201
    # The same words from the CLI, through its entry point (exit 2).
    cli = agentd_cli(
        "schedule",
        "add",
        "buddy",
        "--channel",
        "general",
        "--cron",
        "0 9 * * *",
        "--timezone",
        "X/Y",
        "hi",
        config=d.home,
    )
    assert cli.returncode == 2
    assert "timezone: unknown timezone 'X/Y'" in cli.stderr


def test_a_service_key_sees_and_cancels_only_its_users_schedules(daemons) -> None:
    d: Running = daemons(QUIET, PERSONAS)
    mine = _add(d.client, user="alice", text="alice's", at=_at(600))
    theirs = _add(d.client, user="bob", text="bob's", at=_at(600))
    made = agentd_cli("keys", "create", "--role", "service", "--json", config=d.home)
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    service = httpx.Client(base_url=d.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    _refused(service.get("/v1/schedules"), "user", "one user")
    listed = service.get("/v1/schedules", params={"user": "alice"}).json()["schedules"]
    assert [s["id"] for s in listed] == [mine["id"]]
    assert service.get(f"/v1/schedules/{theirs['id']}", params={"user": "alice"}).status_code == 404
    assert service.delete(f"/v1/schedules/{theirs['id']}", params={"user": "alice"}).status_code == 404
    assert service.delete(f"/v1/schedules/{mine['id']}", params={"user": "alice"}).json()["state"] == "cancelled"
    service.close()
    admin = json.loads(agentd_cli("keys", "create", "--role", "admin", "--json", config=d.home).stdout)["token"]
    d.client.headers["Authorization"] = f"Bearer {admin}"
    assert _schedule(d.client, theirs["id"])["state"] == "scheduled"


def test_remind_me_in_1_minute_through_the_offline_model_makes_a_schedule(daemons) -> None:
    d: Running = daemons(QUIET, PERSONAS)
    before = datetime.now(UTC)
    events = d.chat("remind me in 1 minute to stretch", persona="buddy", channel="general", user="alice")
    reply = "".join(e.data.get("text", "") for e in events if e.event == "token_delta")
    assert "I will remind you" in reply, events
    (made,) = d.client.get("/v1/schedules", params={"user": "alice"}).json()["schedules"]
    assert made["text"] == "Reminder: stretch"
    assert made["channel"] == "general"
    assert made["state"] == "scheduled"
    due = datetime.fromisoformat(made["next_at"])
    assert before + timedelta(seconds=59) <= due <= datetime.now(UTC) + timedelta(seconds=61)
    # "remind me at HH:MM" schedules the next HH:MM of this machine's clock.
    d.chat("remind me at 23:59 to sleep", persona="buddy", channel="general", user="bob")
    (at_night,) = d.client.get("/v1/schedules", params={"user": "bob"}).json()["schedules"]
    local = datetime.fromisoformat(at_night["next_at"]).astimezone()
    assert (local.hour, local.minute) == (23, 59)


def test_routines_in_a_persona_file_are_kept_in_step_with_it(daemons) -> None:
    routine = OFFLINE + (
        '\n[[routines]]\nname = "plan"\ncron = "0 9 * * 1-5"\ntimezone = "Europe/Paris"\n'
        'channel = "general"\nprompt = "Post the plan."\n'
    )
    d: Running = daemons(QUIET, {"buddy": routine})
    (made,) = d.client.get("/v1/schedules").json()["schedules"]
    assert made["routine"] == "plan"
    assert made["cron"] == "0 9 * * 1-5"
    assert made["timezone"] == "Europe/Paris"
    assert made["user"] is None
    due = datetime.fromisoformat(made["next_at"]).astimezone(ZoneInfo("Europe/Paris"))
    assert (due.hour, due.minute, due.weekday() < 5) == (9, 0, True)


def test_routines_follow_their_persona_file_at_each_start(tmp_path) -> None:
    from agentd.app import App
    from agentd.config import load_config
    from agentd.timing.schedules import listing, sync_routines

    entry = '\n[[routines]]\nname = "plan"\ncron = "0 9 * * 1-5"\nchannel = "general"\nprompt = "{}"\n'
    home = write_home(tmp_path, QUIET, {"buddy": OFFLINE + entry.format("Post the plan.")})

    def started() -> list[Any]:
        app = App(load_config(home, environ={}))
        try:
            sync_routines(app.store, app.personas)
            return listing(app.store, state="scheduled")
        finally:
            app.close()

    (first,) = started()
    assert (first.routine, first.text, first.timezone) == ("plan", "Post the plan.", "UTC")
    assert [s.id for s in started()] == [first.id]  # unchanged: kept as it is
    (tmp_path / "personas" / "buddy.toml").write_text(OFFLINE + entry.format("Post the plan, briefly."))
    (changed,) = started()
    assert changed.text == "Post the plan, briefly."
    (tmp_path / "personas" / "buddy.toml").write_text(OFFLINE)
    assert started() == []


class _Serve(Serve):
    """``agentd serve --port 0`` in a process of its own, with a client (killed with SIGKILL by :meth:`kill`)."""

    def __init__(self, home: Path) -> None:
        super().__init__(home)
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def kill(self) -> None:
        self.client.close()
        self.stop()


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[_Serve] = []

    def start(home: Path) -> _Serve:
        started.append(_Serve(home))
        return started[-1]

    yield start
    for s in started:
        s.kill()


def _answered_once(client: httpx.Client, schedule: dict[str, Any]) -> bool:
    """The schedule fired, its one trigger message is stored and has one complete reply."""
    if _schedule(client, schedule["id"])["state"] not in ("fired", "scheduled"):
        return False
    messages = client.get(f"/v1/channels/{schedule['channel']}/messages", params={"limit": 1000}).json()["messages"]
    triggers = _triggers(messages, schedule["id"])
    assert len(triggers) <= 1, triggers
    return len(triggers) == 1 and len(_replies(messages, triggers[0])) == 1


def test_a_daemon_killed_before_the_due_time_fires_once_after_restart(tmp_path, serve) -> None:
    home = write_home(tmp_path, QUIET, PERSONAS)
    first = serve(home)
    made = _add(first.client, user="alice", text="Reminder: stretch", at=_at(2))
    first.kill()  # SIGKILL, before it was due
    wait_for(lambda: datetime.now(UTC) > datetime.fromisoformat(made["next_at"]) + timedelta(seconds=0.5), 10)
    second = serve(home)
    wait_for(lambda: _answered_once(second.client, made), 60, "the firing after restart")
    assert _schedule(second.client, made["id"])["state"] == "fired"
    second.kill()
    # A third start fires nothing again.
    third = serve(home)
    assert _answered_once(third.client, made)
    assert _schedule(third.client, made["id"])["fired_count"] == 1


def test_a_daemon_killed_during_a_firing_answers_it_once_after_restart(tmp_path, serve, fake_openai) -> None:
    """The trigger message was stored with the claim; the reply was not: it is a pending message."""
    fake: FakeOpenAI = fake_openai
    home = write_home(tmp_path, QUIET, {"fake": fake_persona(fake.url, skills="[]", channels='["general"]')})
    first = serve(home)
    fake.queue(Turn(hang=True))
    made = first.client.post(
        "/v1/schedules", json={"persona": "fake", "channel": "general", "user": "alice", "text": "ping", "at": _at(1)}
    ).json()
    wait_for(lambda: fake.hanging == 1, 30, "the firing's turn to reach the model")
    assert _schedule(first.client, made["id"])["state"] == "fired"
    first.kill()  # SIGKILL mid-turn
    fake.release()
    second = serve(home)
    wait_for(lambda: _answered_once(second.client, made), 60, "the pending firing to be answered")
    assert _schedule(second.client, made["id"])["fired_count"] == 1


def test_a_schedule_due_while_no_daemon_ran_beyond_the_bound_is_missed(daemons, tmp_path) -> None:
    config = QUIET + "[schedules]\nmax_lateness_seconds = 0.5\n"
    home = write_home(tmp_path / "home0", config, PERSONAS)
    soon = agentd_cli("schedule", "add", "buddy", "--channel", "general", "--at", _at(1), "--json", "late", config=home)
    later = agentd_cli(
        "schedule", "add", "buddy", "--channel", "general", "--at", _at(600), "--json", "fine", config=home
    )
    assert soon.returncode == 0, soon.stderr
    late, fine = json.loads(soon.stdout), json.loads(later.stdout)
    wait_for(lambda: datetime.now(UTC) > datetime.fromisoformat(late["next_at"]) + timedelta(seconds=1), 10)
    d: Running = daemons(config, PERSONAS)  # the same home, the same database
    wait_for(lambda: _schedule(d.client, late["id"])["state"] == "missed", 30, "the late one to be missed")
    assert _schedule(d.client, fine["id"])["state"] == "scheduled"
    assert _triggers(d.messages("general"), late["id"]) == []
    listed = agentd_cli("schedule", "list", "--json", config=home)
    assert [s["state"] for s in json.loads(listed.stdout)] == ["scheduled", "missed"]
    cancelled = agentd_cli("schedule", "cancel", str(fine["id"]), config=home)
    assert "cancelled" in cancelled.stdout


def test_worker_pool_mode_fires_schedules(tmp_path, serve) -> None:
    home = write_home(tmp_path, QUIET + "[runtime]\nworkers = 2\n", PERSONAS)
    daemon = serve(home)
    made = [_add(daemon.client, channel=f"room{i}", text=f"hello {i}", at=_at(1.5)) for i in range(3)]
    for s in made:
        wait_for(lambda s=s: _answered_once(daemon.client, s), 60, f"schedule {s['id']}")


def test_two_daemons_on_postgresql_fire_a_shared_set_once_each(tmp_path, postgres, serve) -> None:
    url = postgres.fresh()
    try:
        daemons_ = [serve(write_home(tmp_path / f"d{i}", QUIET, PERSONAS, url)) for i in range(2)]
        made = [
            _add(daemons_[i % 2].client, channel=f"room{i % 5}", user=f"u{i}", text=f"hello {i}", at=_at(2 + i * 0.05))
            for i in range(20)
        ]
        for s in made:
            wait_for(lambda s=s: _answered_once(daemons_[0].client, s), 60, f"schedule {s['id']}")
        fired = daemons_[1].client.get("/v1/schedules", params={"state": "fired"}).json()["schedules"]
        assert sorted(s["id"] for s in fired) == sorted(s["id"] for s in made)
        assert all(s["fired_count"] == 1 for s in fired)
    finally:
        for s in list(locals().get("daemons_", [])):
            s.kill()
        postgres.drop(url)


def test_the_schedule_tools_act_for_the_asking_user_only(app) -> None:
    """A user lists and cancels only their own schedules; bad input is the tool's InvalidInput."""
    from agentd._exceptions import SkillInvalidInput
    from agentd.skills import build_registry
    from agentd.skills.registry import SkillCaller

    buddy = app.personas["buddy"]
    tools = build_registry(buddy.__class__(**{**buddy.__dict__, "skills": ("schedule",)}), None, app.personas,
                           config=app.config, store=app.store)  # fmt: skip
    assert tools.names() == ["cancel_schedule", "list_schedules", "schedule"]
    alice, bob = SkillCaller("buddy", "general", "alice"), SkillCaller("buddy", "general", "bob")
    made = tools.execute("schedule", {"text": "Reminder: stretch", "in_minutes": 5}, alice)["scheduled"]
    assert (made["user"], made["channel"], made["created_by"]) == ("alice", "general", "user:alice")
    assert [s["id"] for s in tools.execute("list_schedules", {}, alice)["schedules"]] == [made["id"]]
    assert tools.execute("list_schedules", {}, bob)["schedules"] == []
    with pytest.raises(SkillInvalidInput, match="unknown schedule"):
        tools.execute("cancel_schedule", {"id": made["id"]}, bob)
    with pytest.raises(SkillInvalidInput, match="cron"):
        tools.execute("schedule", {"text": "x", "cron": "* * * * * *"}, alice)
    assert tools.execute("cancel_schedule", {"id": made["id"]}, alice)["schedule"]["state"] == "cancelled"
    # Erasing a person erases their schedules too.
    tools.execute("schedule", {"text": "again", "in_minutes": 5}, alice)
    assert len(app.store.export_user("alice")["schedules"]) == 2
    assert app.store.forget_user("alice").schedules == 2


def test_a_recurring_schedule_fires_at_each_occurrence_and_never_a_burst(tmp_path) -> None:
    """The scheduler on a clock of the test's: due → fired once and moved to the next occurrence;
    two occurrences late (within the bound) → fired once, not twice; beyond the bound →
    not fired, moved on, still scheduled."""
    from agentd.app import App
    from agentd.config import load_config
    from agentd.ops.base import OpContext
    from agentd.ops.schedules import NewScheduleBody, create
    from agentd.runtime import Runtime
    from agentd.runtime.scheduler import Scheduler
    from agentd.timing.schedules import get

    home = write_home(tmp_path, QUIET + "[schedules]\nmax_lateness_seconds = 600\n", PERSONAS)
    app = App(load_config(home, environ={}))
    runtime = Runtime(app)
    now = [datetime.now(UTC)]
    scheduler = Scheduler(runtime, clock=lambda: now[0])  # not started: rounds run when the test says
    try:
        request = NewScheduleBody(
            persona="buddy", channel="general", text="tick", user="alice", cron="*/5 * * * *", timezone="UTC"
        )
        made = get(app.store, create(OpContext.operator(app), request).id)
        first = made.next_at
        assert first is not None
        now[0] = first
        assert scheduler.fire_due().fired == 1
        after = get(app.store, made.id)
        assert (after.state, after.fired_count, after.next_at) == ("scheduled", 1, first + timedelta(minutes=5))
        assert scheduler.fire_due().fired == 0  # not due again until then
        now[0] = first + timedelta(minutes=11)  # two occurrences passed (+5, +10), 6 minutes late
        assert scheduler.fire_due().fired == 1
        after = get(app.store, made.id)
        assert (after.fired_count, after.next_at) == (2, first + timedelta(minutes=15))
        now[0] = first + timedelta(minutes=15 + 11)  # 11 minutes late: beyond the bound
        done = scheduler.fire_due()
        assert (done.fired, done.missed) == (0, 1)
        after = get(app.store, made.id)
        assert (after.state, after.fired_count, after.next_at) == ("scheduled", 2, first + timedelta(minutes=30))
        assert runtime.wait_idle(30)
        with app.store.read() as conn:
            triggers = [m for m in app.store.messages.recent(conn, "general", 100) if m.author == made.author]
        assert len(triggers) == 2
        assert all(m.source == "schedule" and m.options == {"for_user": "alice"} for m in triggers)
    finally:
        runtime.stop(grace=5)
        app.close()
