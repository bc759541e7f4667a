"""One operation, reached through two interfaces, refuses bad input the same way: the same error
code, the same field, the same words (:mod:`agentd.ops`: the checks live in the operation, not in
its HTTP route, CLI command or tool)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentd._exceptions import SkillInvalidInput
from agentd.skills import build_registry
from agentd.skills.registry import SkillCaller
from tests.conftest import agentd_cli
from tests.support import Running

BUDDY = """
name = "buddy"
model = "offline"
max_reply_tokens = 256
channels = ["general", "dm-*"]
skills = ["schedule"]
owners = ["carol"]
system_prompt = "You are buddy."
"""
SCHOLAR = BUDDY.replace('"buddy"', '"scholar"').replace("You are buddy", "You are scholar")
CONFIG = '[embedding]\nprovider = "none"\n[channels.library]\npersonas = ["scholar"]\n'


@pytest.fixture
def daemon(daemons: Callable[..., Running]) -> Running:
    """A daemon without keys (the operator over HTTP), its home shared with the CLI."""
    return daemons(CONFIG, {"buddy": BUDDY, "scholar": SCHOLAR})


def _refused(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def _cli_error(*args: str, home: Any) -> str:
    done = agentd_cli(*args, config=home)
    assert done.returncode == 2, (done.stdout, done.stderr)
    return done.stderr.strip().removeprefix("error: ")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"cron": "* * * * * *"}, "cron"),  # six fields
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"at": "tomorrow"}, "at"),
    ],
)
def test_making_a_schedule_over_http_and_the_cli_refuses_alike(
    daemon: Running, extra: dict[str, str], field: str
) -> None:
    body = {"persona": "buddy", "channel": "general", "user": "alice", "text": "stretch", **extra}
    error = _refused(daemon.client.post("/v1/schedules", json=body), 422)
    assert (error["code"], error["field"]) == ("invalid_input", field)
    options = [arg for name, value in extra.items() for arg in (f"--{name}", value)]
    said = _cli_error("schedule", "add", "buddy", "stretch", "--channel", "general", "--user", "alice", *options,
                      home=daemon.home)  # fmt: skip
    assert said == error["message"]
    assert said.startswith(f"{field}: ")
    assert daemon.client.get("/v1/schedules").json()["schedules"] == []  # neither way stored anything


def test_the_schedule_tool_refuses_what_http_refuses_with_its_words(daemon: Running) -> None:
    """The model's ``schedule`` tool and ``POST /v1/schedules``: one operation, one message."""
    app = daemon.app
    tools = build_registry(app.personas["buddy"], None, app.personas, config=app.config, store=app.store)
    body = {"persona": "buddy", "channel": "general", "user": "alice", "text": "stretch", "cron": "61 * * * *"}
    error = _refused(daemon.client.post("/v1/schedules", json=body), 422)
    with pytest.raises(SkillInvalidInput) as refused:
        tools.execute("schedule", {"text": "stretch", "cron": "61 * * * *"}, SkillCaller("buddy", "general", "alice"))
    assert error["field"] == "cron"
    assert str(refused.value) == error["message"]
    # A bound the tool's model declares is said as the API says its own: the field, then why.
    with pytest.raises(SkillInvalidInput, match=r"^in_minutes: "):
        tools.execute("schedule", {"text": "stretch", "in_minutes": -5}, SkillCaller("buddy", "general", "alice"))


def test_deciding_an_approval_over_http_and_the_cli_refuses_alike(daemon: Running) -> None:
    too_long = "x" * 2001
    error = _refused(daemon.client.post("/v1/approvals/7", json={"decision": "deny", "reason": too_long}), 422)
    assert (error["code"], error["field"]) == ("invalid_input", "reason")
    # The command line names the flag the value came from; the reason is the operation's.
    said = _cli_error("approvals", "deny", "7", "--reason", too_long, home=daemon.home)
    assert said == "--" + error["message"]
    missing = _refused(daemon.client.post("/v1/approvals/7", json={"decision": "approve"}), 404)
    assert missing["code"] == "not_found"
    assert _cli_error("approvals", "approve", "7", home=daemon.home) == missing["message"]


def test_a_chat_and_a_channel_post_choose_the_persona_by_one_rule(daemon: Running) -> None:
    """``POST /v1/chat``, ``POST /v1/channels/{channel}/messages`` and ``agentd chat``: the same operation decides
    that buddy does not answer in scholar's bound channel, with the same code, field and words."""
    chat = {"persona": "buddy", "channel": "library", "user": "alice", "message": "hello"}
    error = _refused(daemon.client.post("/v1/chat", json=chat), 422)
    post = {"persona": "buddy", "user": "alice", "text": "hello"}
    again = _refused(daemon.client.post("/v1/channels/library/messages", json=post), 422)
    assert (error["code"], error["field"]) == ("invalid_input", "persona")
    assert again == error
    assert "not bound to channel 'library'" in error["message"]
    # agentd chat sends its message through the same operation: the same words, nothing stored.
    said = _cli_error("chat", "buddy", "--channel", "library", "--user", "alice", "-m", "hello", home=daemon.home)
    assert said == error["message"]
    assert daemon.client.get("/v1/channels/library/messages").json()["messages"] == []


def test_the_schemas_come_from_the_operations_models(daemon: Running) -> None:
    """The OpenAPI bodies, MCP's ``chat`` input schema and the schedule tools' parameters are the
    models' of :mod:`agentd.ops.models` (one shape per concept, no hand-kept copy)."""
    from agentd.mcp.server.tools import ADMITTED, DEFINITIONS
    from agentd.ops import models
    from agentd.ops.base import OPERATIONS, tool_schema

    published = daemon.client.get("/openapi.json").json()
    paths = published["paths"]

    def body(path: str, method: str) -> str:
        ref: str = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        return ref.rsplit("/", 1)[-1]

    def answer(path: str, method: str, status: str = "200") -> str:
        ref: str = paths[path][method]["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        return ref.rsplit("/", 1)[-1]

    assert body("/v1/schedules", "post") == models.NewScheduleBody.__name__
    assert answer("/v1/schedules", "post", "201") == models.ScheduleOut.__name__
    assert answer("/v1/schedules", "get") == models.ScheduleList.__name__
    assert body("/v1/approvals/{approval_id}", "post") == models.DecisionIn.__name__
    assert answer("/v1/approvals", "get") == models.ApprovalList.__name__
    assert body("/v1/chat", "post") == models.ChatRequest.__name__
    assert body("/v1/channels/{channel}/messages", "post") == models.ChannelPost.__name__
    assert DEFINITIONS["chat"][1] == tool_schema(models.ChatArgs)
    assert ADMITTED["chat"] == OPERATIONS["chat"].key_roles == ("admin", "adapter")
    app = daemon.app
    tools = build_registry(app.personas["buddy"], None, app.personas, config=app.config, store=app.store)
    parameters = {d["function"]["name"]: d["function"]["parameters"] for d in tools.tool_definitions()}
    assert parameters == {
        "schedule": tool_schema(models.ScheduleArgs),
        "list_schedules": tool_schema(models.ListSchedulesArgs),
        "cancel_schedule": tool_schema(models.CancelScheduleArgs),
    }
