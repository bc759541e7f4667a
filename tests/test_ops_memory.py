"""The memory operations, defined once (agentd/ops/memory.py) and reached by every interface: the
MCP tools' input schemas are their argument models', the HTTP routes' bodies and answers are the
operations' models, and the same bad value is refused with the same code and field whichever way
it comes in (HTTP, MCP, the CLI, the model's skill)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from pydantic import BaseModel

from agentd import InvalidInput, SkillInvalidInput
from agentd.api.memory_routes import router
from agentd.mcp.server.tools import ADMITTED, DEFINITIONS, TOOLS, Session, Tools
from agentd.ops import memory as ops
from agentd.ops.base import OPERATIONS, tool_schema
from agentd.skills import RecallSkill, RememberSkill, SkillCaller
from tests.conftest import agentd_cli

#: Each memory tool and the operation it reaches.
TOOL_OPERATIONS = {
    "remember": "memory_remember",
    "recall": "memory_recall",
    "forget": "memory_forget",
    "memory_context": "memory_context",
    "list_memories": "memory_list",
}


@pytest.mark.parametrize("tool", sorted(TOOL_OPERATIONS))
def test_each_mcp_tools_input_schema_is_its_argument_models(tool: str) -> None:
    arguments = TOOLS[tool].arguments
    assert arguments.__module__ == "agentd.ops.models"
    assert DEFINITIONS[tool][1] == tool_schema(arguments)
    assert TOOLS[tool].operation == TOOL_OPERATIONS[tool]
    assert ADMITTED[tool] == OPERATIONS[TOOL_OPERATIONS[tool]].key_roles


def test_the_tool_schema_of_a_model_is_what_an_mcp_client_reads() -> None:
    schema = tool_schema(ops.RecallArgs)
    assert schema == {
        "type": "object",
        "additionalProperties": False,
        "required": ["query"],
        "properties": {
            "query": {"type": "string", "description": "What to look for, in plain words."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "description": "At most this many results (default 5).",
            },
            "minScore": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "description": "Leave out results less relevant than this (default: none).",
            },
        },
    }
    assert tool_schema(ops.ListArgs)["required"] == []  # an MCP client wants the key, even empty


def test_the_skills_parameters_are_their_argument_models() -> None:
    remember = RememberSkill(cast(Any, None)).definition()["function"]["parameters"]
    recall = RecallSkill(cast(Any, None)).definition()["function"]["parameters"]
    for parameters, model in ((remember, ops.RememberArgs), (recall, ops.RecallQuery)):
        schema = tool_schema(model)
        assert parameters["properties"] == schema["properties"]
        assert parameters["required"] == schema["required"]


def _route(path: str, method: str) -> Any:
    return next(r for r in router.routes if getattr(r, "path", None) == path and method in getattr(r, "methods", ()))


@pytest.mark.parametrize(
    ("path", "method", "body", "result"),
    [
        ("/v1/memory/search", "POST", ops.SearchRequest, ops.SearchResponse),
        ("/v1/memory/context", "POST", ops.KnownFactsRequest, ops.KnownFactsResponse),
        ("/v1/memories", "POST", ops.AddMemory, ops.MemoryAdded),
        ("/v1/memories/import", "POST", ops.ImportRequest, ops.ImportResponse),
        ("/v1/memories", "GET", None, ops.MemoryList),
        ("/v1/memories/{memory_id:agentd_id}", "DELETE", None, ops.Forgotten),
        ("/v1/memories/{memory_id:agentd_id}/history", "GET", None, ops.MemoryHistory),
    ],
)
def test_each_routes_body_and_answer_are_the_operations_models(
    path: str, method: str, body: type[BaseModel] | None, result: type[BaseModel]
) -> None:
    route = _route(path, method)
    assert route.response_model is result
    assert [p.field_info.annotation for p in route.dependant.body_params] == ([body] if body else [])


def test_the_list_routes_query_bounds_are_the_requests() -> None:
    """GET /v1/memories publishes its query from ListMemories' fields: the same bounds."""
    query = {p.name: p.field_info.metadata for p in _route("/v1/memories", "GET").dependant.query_params}
    for name, field in ops.ListMemories.model_fields.items():
        assert [repr(m) for m in query[name]] == [repr(m) for m in field.metadata], name


def _mcp_error(tools: Tools, name: str, arguments: dict[str, Any], session: Session) -> tuple[str, str | None]:
    try:
        tools.call(name, arguments, session)
    except InvalidInput as exc:
        return str(exc.code), exc.field
    raise AssertionError(f"{name}({arguments}) was accepted")


def _http_error(answer: Any) -> tuple[str, str | None]:
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    return error["code"], error["field"]


def test_one_bad_value_is_refused_alike_over_http_mcp_the_cli_and_the_skill(daemons: Any) -> None:
    d = daemons()
    tools = Tools(d.app, lambda: d.server.runtime)
    session = Session(persona="fake", user="alice", channel="general")
    long_text = "x" * (d.app.config.memory.max_text_chars + 1)
    # remember: a blank text, and one over memory.max_text_chars
    for text in ("   ", long_text):
        over_http = _http_error(d.client.post("/v1/memories", json={"persona": "fake", "text": text}))
        assert over_http == _mcp_error(tools, "remember", {"text": text}, session) == ("invalid_input", "text")
    cli = agentd_cli("memory", "add", "   ", "-p", "fake", config=d.home)
    assert cli.returncode == 2, cli.stderr
    assert "error: text: " in cli.stderr, cli.stderr
    with pytest.raises(SkillInvalidInput, match="^text: "):
        RememberSkill(d.app.memory).run({"text": "   "}, SkillCaller("fake", "general", "alice"))
    # memory_context: a limit out of bounds, a token budget of 0
    for field, value in (("limit", 0), ("tokenBudget", 0)):
        body = {"userId": "alice", "query": "x", field: value}
        over_http = _http_error(d.client.post("/v1/memory/context", json=body))
        over_mcp = _mcp_error(tools, "memory_context", {"query": "x", field: value}, session)
        assert over_http == over_mcp == ("invalid_input", field)
    # search and recall: a threshold above 1, a limit that is not an integer
    bad: list[tuple[str, object]] = [("minScore", 2), ("limit", "5")]
    for name, given in bad:
        over_http = _http_error(d.client.post("/v1/memory/search", json={"query": "x", name: given}))
        assert over_http == _mcp_error(tools, "recall", {"query": "x", name: given}, session) == ("invalid_input", name)
    cli = agentd_cli("memory", "search", "x", "-p", "fake", "--channel", "has space", config=d.home)
    assert cli.returncode == 2, cli.stderr
    assert "error: --channel: " in cli.stderr, cli.stderr
    # list: a scope that is none
    over_http = _http_error(d.client.get("/v1/memories", params={"persona": "fake", "scope": "somewhere"}))
    assert (
        over_http == _mcp_error(tools, "list_memories", {"scope": "somewhere"}, session) == ("invalid_input", "scope")
    )


def test_a_stored_memory_reads_back_the_same_over_http_mcp_and_the_cli(daemons: Any) -> None:
    d = daemons()
    tools = Tools(d.app, lambda: d.server.runtime)
    stored = tools.call("remember", {"text": "Alice keeps bees", "scope": "user"}, Session("fake", "alice", "general"))
    assert stored["stored"] is True
    memory = stored["memory"]
    assert memory["scope"] == "user:alice"
    listed = d.client.get("/v1/memories", params={"persona": "fake"}).json()
    assert listed == {"memories": [memory], "total": 1}
    assert tools.call("list_memories", {}, Session("fake")) == listed
    cli = agentd_cli("memory", "list", "-p", "fake", "--json", config=d.home)
    assert json.loads(cli.stdout) == [memory]
    again = d.client.post("/v1/memories", json={"persona": "fake", "text": "Alice keeps bees", "userId": "alice"})
    assert again.status_code == 200
    assert again.json() == {"memory": memory, "created": False}
