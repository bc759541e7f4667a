"""Keys with roles: made, listed and revoked with the CLI, stored hashed, checked on every operation.

The role matrix walks every operation the OpenAPI schema publishes with an admin,
an adapter (limited to ``irc-*``), a service and a metrics key, and checks each is let in or
refused with 403 and the reason, as the table below (written by hand, not read
from the schema) says.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentd.api.keys import KeyBook
from tests.conftest import agentd_cli, write_home
from tests.support import Running
from tests.support.fakeopenai import Turn

#: Who each operation admits: "admin", "adapter", "service", "metrics" (plus every admin).
EXPECTED: dict[tuple[str, str], set[str]] = {
    ("get", "/healthz"): {"admin", "adapter", "service", "metrics"},
    ("post", "/v1/chat"): {"admin", "adapter"},
    ("post", "/v1/channels/{channel}/messages"): {"admin", "adapter"},
    ("get", "/v1/channels/{channel}/events"): {"admin", "adapter"},
    ("get", "/v1/channels/{channel}/messages"): {"admin", "adapter"},
    ("get", "/v1/channels"): {"admin", "adapter", "service"},
    ("post", "/v1/memory/search"): {"admin", "service"},
    ("post", "/v1/memory/context"): {"admin", "service"},
    ("post", "/v1/memories"): {"admin"},
    ("post", "/v1/memories/import"): {"admin"},
    ("get", "/v1/memories"): {"admin"},
    ("delete", "/v1/memories/{memory_id}"): {"admin"},
    ("get", "/v1/memories/{memory_id}/history"): {"admin"},
    ("get", "/v1/personas"): {"admin", "adapter", "service"},
    ("get", "/v1/budget"): {"admin"},
    ("get", "/v1/models"): {"admin", "adapter", "service"},
    ("get", "/v1/models/{model}"): {"admin", "adapter", "service"},
    ("post", "/v1/chat/completions"): {"admin", "adapter"},
    ("get", "/v1/users/{user}/export"): {"admin"},
    ("delete", "/v1/users/{user}"): {"admin"},
    ("get", "/v1/approvals"): {"admin", "adapter", "service"},
    ("post", "/v1/approvals/{approval_id}"): {"admin", "adapter", "service"},
    ("get", "/metrics"): {"admin", "metrics"},
    ("get", "/v1/usage"): {"admin", "metrics"},
    ("get", "/v1/schedules"): {"admin", "service"},
    ("post", "/v1/schedules"): {"admin", "service"},
    ("get", "/v1/schedules/{schedule_id}"): {"admin", "service"},
    ("delete", "/v1/schedules/{schedule_id}"): {"admin", "service"},
}
#: Path parameters: a channel the adapter key may use, a memory id, a model.
PARAMS = {
    "channel": "irc-lobby",
    "memory_id": "1",
    "model": "fake",
    "user": "alice",
    "approval_id": "1",
    "schedule_id": "1",
}


def _keys(d: Running) -> dict[str, str]:
    book = KeyBook(d.app.store)
    return {
        "admin": book.create("admin", "ops").token,
        "adapter": book.create("adapter", "irc", ["irc-*"]).token,
        "service": book.create("service", "crm").token,
        "metrics": book.create("metrics", "prometheus").token,
    }


def _call(client: httpx.Client, method: str, path: str, token: str | None) -> tuple[int, dict[str, Any]]:
    """One request with an empty JSON body (where it takes one); the status and the JSON error, if any."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"json": {}} if method in ("post", "put", "patch") else {}
    with client.stream(method.upper(), path, headers=headers, **body) as response:  # events never end: read no body
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response.status_code, {}
        response.read()
        try:
            return response.status_code, response.json()
        except json.JSONDecodeError:
            return response.status_code, {}


def test_every_operation_admits_its_roles_and_refuses_the_others_with_403_and_why(daemons) -> None:
    d = daemons()
    tokens = _keys(d)
    schema = d.client.get("/openapi.json", headers={"Authorization": f"Bearer {tokens['admin']}"}).json()
    operations = {(m, p): op for p, ops in schema["paths"].items() for m, op in ops.items()}
    assert set(operations) == set(EXPECTED), "a new operation needs its roles in EXPECTED"
    assert {"bearer", "apiKey"} <= set(schema["components"]["securitySchemes"])
    wrong = []
    for (method, template), op in sorted(operations.items()):
        published = set(op["x-agentd-roles"]) - {"anyone"}
        if template != "/healthz" and published != EXPECTED[(method, template)]:
            wrong.append(f"{method} {template}: publishes {sorted(published)}")
        path = re.sub(r"\{(\w+)\}", lambda m: PARAMS[m.group(1)], template)
        for role, token in tokens.items():
            status, body = _call(d.client, method, path, token)
            if role in EXPECTED[(method, template)]:
                if status in (401, 403):
                    wrong.append(f"{method} {path} as {role}: refused ({status}) but should be let in")
            elif status != 403 or body["error"]["code"] != "forbidden" or role not in body["error"]["message"]:
                wrong.append(f"{method} {path} as {role}: {status} {body} (expected 403 naming the role)")
        status, _ = _call(d.client, method, path, None)
        if template != "/healthz" and status != 401:
            wrong.append(f"{method} {path} without a key: {status} (expected 401)")
    assert not wrong, "\n".join(wrong)


def test_an_adapter_key_uses_only_its_channels_and_nobody_posts_to_or_follows_a_delegation_channel(daemons) -> None:
    d = daemons()
    tokens = _keys(d)
    adapter = {"Authorization": f"Bearer {tokens['adapter']}"}
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    post = {"user": "irc:alice", "text": "hello", "persona": "fake"}
    assert d.client.post("/v1/channels/irc-lobby/messages", json=post, headers=adapter).status_code == 202
    refused = d.client.post("/v1/channels/general/messages", json=post, headers=adapter)
    assert refused.status_code == 403
    assert "'general'" in refused.json()["error"]["message"]
    assert d.client.post("/v1/channels/general/messages", json=post, headers=admin).status_code == 202
    # The channel list (the web page's) holds only the channels the key may use.
    listed = {
        role: [c["name"] for c in d.client.get("/v1/channels", headers=who).json()["channels"]]
        for role, who in (("adapter", adapter), ("admin", admin))
    }
    assert listed["adapter"] == ["irc-lobby"]
    assert {"irc-lobby", "general"} <= set(listed["admin"])
    chat = {"persona": "fake", "channel": "general", "user": "alice", "message": "hi"}
    assert d.client.post("/v1/chat", json=chat, headers=adapter).status_code == 403
    completion = {"model": "fake", "user": "alice", "messages": [{"role": "user", "content": "hi"}]}
    # Its default channel is dm-alice, which irc-* does not match.
    assert d.client.post("/v1/chat/completions", json=completion, headers=adapter).status_code == 403
    for headers in (admin, adapter):
        for method, path in (
            ("POST", "/v1/channels/irc-lobby~fake/messages"),
            ("GET", "/v1/channels/irc-lobby~fake/events"),
        ):
            answer = d.client.request(method, path, json=post if method == "POST" else None, headers=headers)
            assert answer.status_code == 403, (method, path)
            assert "delegation" in answer.json()["error"]["message"], (method, path)
    inside = {**chat, "channel": "irc-lobby~fake"}
    assert d.client.post("/v1/chat", json=inside, headers=admin).status_code == 403


def test_health_without_a_key_says_only_that_the_daemon_is_up(daemons) -> None:
    d = daemons('[daemon]\napi_key = "s3cret"\n')
    bare = d.client.get("/healthz")
    assert bare.status_code == 200
    assert bare.json() == {"status": "ok"}
    wrong = d.client.get("/healthz", headers={"Authorization": "Bearer nope"})
    assert wrong.json() == {"status": "ok"}
    full = d.client.get("/healthz", headers={"Authorization": "Bearer s3cret"}).json()
    assert full["status"] == "ok"
    assert "version" in full
    assert "store" in full


def test_the_config_key_still_works_as_an_admin_key(daemons) -> None:
    d = daemons('[daemon]\napi_key = "s3cret"\n')
    admin = {"X-API-Key": "s3cret"}
    assert d.client.get("/v1/memories", params={"persona": "fake"}, headers=admin).status_code == 200
    assert d.client.get("/v1/budget", params={"persona": "fake", "channel": "c"}, headers=admin).status_code == 200


@pytest.mark.both_backends
def test_keys_cli_creates_lists_and_revokes_and_a_revoked_key_is_refused_at_once(daemons, backend: str) -> None:
    d = daemons()
    made = agentd_cli("keys", "create", "--role", "adapter", "--channels", "irc-*", "--name", "irc", config=d.home)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("agentd_")
    assert len(token) > 40
    assert "shown only once" in made.stderr
    service = agentd_cli("keys", "create", "--role", "service", "--json", config=d.home)
    assert service.returncode == 0
    assert json.loads(service.stdout)["role"] == "service"
    listed = agentd_cli("keys", "list", "--json", config=d.home)
    keys = json.loads(listed.stdout)
    assert [(k["name"], k["role"], k["channels"]) for k in keys][0] == ("irc", "adapter", ["irc-*"])
    assert token not in listed.stdout
    assert all("token" not in k for k in keys)
    headers = {"Authorization": f"Bearer {token}"}
    assert d.client.get("/v1/channels/irc-a/messages", headers=headers).status_code == 200
    revoked = agentd_cli("keys", "revoke", "irc", config=d.home)
    assert revoked.returncode == 0
    assert "revoked" in revoked.stdout
    answer = d.client.get("/v1/channels/irc-a/messages", headers=headers)
    assert answer.status_code == 401
    assert "revoked" in answer.json()["error"]["message"]
    assert agentd_cli("keys", "revoke", "irc", config=d.home).returncode == 2  # no active key of that name
    listed = json.loads(agentd_cli("keys", "list", "--json", config=d.home).stdout)
    assert listed[0]["revoked_at"] is not None
    assert listed[1]["revoked_at"] is None


def test_keys_are_stored_hashed_and_bad_requests_are_refused(tmp_path: Path) -> None:
    home = write_home(tmp_path)
    made = agentd_cli("keys", "create", "--role", "admin", config=home)
    token = made.stdout.strip()
    raw = (tmp_path / "agentd.db").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("agentd.db-*"))
    assert token.encode() not in raw
    assert token[7:].encode() not in raw
    with sqlite3.connect(tmp_path / "agentd.db") as db:
        (stored,) = db.execute("SELECT token_hash FROM api_keys").fetchone()
    assert len(stored) == 64
    assert stored != token
    bad = agentd_cli("keys", "create", "--role", "adapter", config=home)
    assert bad.returncode == 2
    assert "channel glob" in bad.stderr
    bad = agentd_cli("keys", "create", "--role", "service", "--channels", "x", config=home)
    assert bad.returncode == 2
    assert "only adapter keys" in bad.stderr
    assert agentd_cli("keys", "create", "--role", "root", config=home).returncode == 2


def test_a_request_that_names_no_user_acts_as_the_keys_user(daemons, fake_openai) -> None:
    """One identity with keys: an OpenAI client that sends no ``user`` acts as the user its key was
    made for (in that user's direct channel); an admin key's request acts as the key's name."""
    d = daemons()
    book = KeyBook(d.app.store)
    made_for = book.create("adapter", "phone", ["dm-*"], ["bob"]).token
    admin = book.create("admin", "ops").token
    body = {"model": "fake", "messages": [{"role": "user", "content": "hello"}]}
    for token, who in ((made_for, "bob"), (admin, "ops")):
        fake_openai.queue(Turn(text="hi"))
        answer = d.client.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["agentd"]["user"] == who
        assert answer.json()["agentd"]["channel"] == f"dm-{who}"
