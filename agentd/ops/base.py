"""The conventions every operation follows: who acts, what it asks, what it gets, how it fails.

An **operation** is one thing agentd does (remember a memory, search, export a user, chat,
make a schedule, decide an approval), written once as a plain function::

    @operation("memory_search", roles=(ADMIN, SERVICE))
    def search(ctx: OpContext, request: SearchRequest) -> SearchResponse:
        ...

and reached through every interface by a thin adapter: an HTTP route, an MCP tool, a skill
the model calls, a CLI command. The rules:

1. **Typed in, typed out.** The request is a pydantic model (subclass :class:`Request`),
   the result a pydantic model (subclass :class:`Result`). The request model *is* the input
   schema of every interface: the HTTP route takes it as its body (so the OpenAPI schema is
   its ``model_json_schema()``), the MCP tool publishes :func:`tool_schema` of it as its
   ``inputSchema``, the skill gives the same schema to the model. The result model *is* the
   HTTP response body (``response_model=``), the MCP tool's result and what
   :mod:`agentd.client` parses: one shape per concept, no hand-kept copies. Two interfaces
   that differ in what the caller may say (an MCP session fixes the persona and the user that
   an HTTP body names) have two request models sharing field types, and the narrower one turns
   into the operation's request with one method (``to_request(ctx)``). Models live in a module
   that imports only :mod:`agentd.ops.fields` (:mod:`agentd.ops.models`), so that a client can
   read the daemon's answers with them; a model's class name is its OpenAPI component's name.
2. **Validation once.** What a value may be is said once, in the request model's field types
   (pattern, bounds; shared ``Annotated`` types in :mod:`agentd.ops.fields`). What needs the
   daemon to say (a persona that exists, a text within ``memory.max_text_chars``, a scope
   relative to the caller, a default from the configuration) is checked in the operation, not
   in the adapter. An adapter with raw arguments (MCP, a skill, the CLI) builds the request
   with :func:`parse`, which refuses bad input as :class:`~agentd.InvalidInput` naming the field
   (``limit``, ``memories.0.text``) with the reason the HTTP API gives for the same error.
3. **Who acts, resolved once.** The adapter builds one :class:`OpContext`: the caller's role
   and name, the rights of its key (which channels, which users), and the persona, user and
   channel the call acts for when the request names none (an MCP session's, a conversation's,
   the CLI's default user), checked by whoever builds the context. The operation declares the roles it admits
   (:func:`operation`'s ``roles``); the decorator checks them before the body runs, and the
   operation uses :meth:`OpContext.check_user` and :meth:`OpContext.check_channel` for the rest.
   In-process callers (the CLI, the daemon's own jobs) act as :meth:`OpContext.operator`.
4. **Errors from the catalogue.** An operation raises only :mod:`agentd._exceptions`'
   errors. Each adapter shows them its interface's way (HTTP status and JSON body, an MCP
   ``isError`` result, a skill's :class:`~agentd.SkillInvalidInput`), keeping the code and field.
5. **Blocking.** Operations embed and query the store: adapters on an event loop call them on
   a worker thread (the HTTP API on its embedding threads).
6. **Registered.** :data:`OPERATIONS` maps each operation's name to its :class:`Operation`
   (function, request and result models, roles): tests and the MCP tool list read it.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel

from agentd._exceptions import Forbidden, InvalidInput
from agentd.access.scopes import unseen_character

# The models' building blocks, part of these conventions (re-exported: ``from agentd.ops.base import parse``).
from agentd.ops.fields import Request as Request
from agentd.ops.fields import Result as Result
from agentd.ops.fields import describe as describe
from agentd.ops.fields import field_name as field_name
from agentd.ops.fields import parse as parse

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.memory import MemoryService
    from agentd.personas import Persona, Personas
    from agentd.prompt.tokens import TokenCounter
    from agentd.store import Store

#: The roles a caller can have: a key's (as ``agentd keys`` makes them), and ``persona`` for a
#: persona's own tool calls (the model acting inside its conversation).
ADMIN = "admin"
ADAPTER = "adapter"
SERVICE = "service"
METRICS = "metrics"
PERSONA = "persona"
#: The name of the operator acting in process (the CLI): as :data:`agentd.access.identity.LOCAL`.
OPERATOR = "local"


class Rights(Protocol):
    """What a key may reach (:class:`agentd.api.keys.Principal` is one)."""

    def may_use_channel(self, channel: str) -> bool:
        """True when the caller may post to, read and follow ``channel``."""
        ...

    def may_act_as(self, user: str) -> bool:
        """True when the caller may post or chat as ``user``."""
        ...


class OpParts(Protocol):
    """The parts of agentd an operation works with (:class:`agentd.app.App` is one); each is read
    only by the operations that need it, so a caller pays only for what it uses."""

    @property
    def config(self) -> Config:
        """The configuration."""
        ...

    @property
    def personas(self) -> Personas:
        """The personas by name (an unknown name raises :class:`~agentd.NotFound`)."""
        ...

    @property
    def memory(self) -> MemoryService:
        """The memory service."""
        ...

    @property
    def store(self) -> Store:
        """The store."""
        ...

    def token_counter(self, persona: Persona) -> TokenCounter:
        """The persona's tokenizer."""
        ...


#: The short name (one class per name in agentd: ``runtime.dispatch.Parts`` is another class).
Parts = OpParts


@dataclass(frozen=True)
class OpContext:
    """Who acts, over which parts, and for whom when the request does not say.

    ``role``/``name``: the caller (a key's, :data:`PERSONA` and the persona's name for a tool
    call, :data:`ADMIN` and :data:`OPERATOR` in process). ``rights``: what its key may reach
    (``None``: everything, the operator). ``persona``, ``user``, ``channel``: the defaults of
    the session or conversation (an MCP session's options, the conversation a skill runs in, the
    CLI's default user), checked by whoever builds the context (a persona that exists, ids that
    are identifiers): operations trust them. ``shared_channel`` and ``message_id``: a conversation's, for skills.
    """

    parts: OpParts
    role: str = ADMIN
    name: str = OPERATOR
    rights: Rights | None = None
    persona: str | None = None
    user: str | None = None
    channel: str | None = None
    shared_channel: str | None = None
    message_id: int | None = None
    #: Which interface called (``http``, ``mcp``, ``skill``, ``cli``): for messages and logs only.
    via: str = "cli"
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def operator(cls, parts: OpParts, *, user: str | None = None, via: str = "cli") -> OpContext:
        """The person running agentd on this machine: an admin who may reach everything."""
        return cls(parts, ADMIN, OPERATOR, None, user=user, via=via)

    def persona_for(self, named: str | None = None) -> str:
        """The persona a call acts for: the one it names (checked), else the caller's (checked when the
        context was built), else the only one. :class:`~agentd.NotFound` names the known ones;
        several and none named is ``invalid_input``."""
        if named:
            unseen = unseen_character(named)
            if unseen is not None:
                raise InvalidInput("persona", f"must not hold control, invisible or bidirectional characters: {unseen}")
            return self.parts.personas[named].name
        if self.persona:
            return self.persona
        personas = self.parts.personas
        if len(personas) == 1:
            return next(iter(personas))
        raise InvalidInput("persona", f"this call names no persona, and there are several: {', '.join(personas)}")

    def require(self, operation: str, roles: tuple[str, ...]) -> None:
        """Refuse (403 ``forbidden``) a caller whose role ``operation`` does not admit."""
        if self.role not in roles:
            keys = " or ".join(r for r in roles if r != PERSONA)
            raise Forbidden(
                f"the {self.role} key {self.name!r} may not call {operation}: it needs a key with the role {keys}"
            )

    def check_user(self, user: str) -> None:
        """Refuse a caller that may not act for ``user`` (as :func:`agentd.runtime.acting.check_acting`)."""
        if self.rights is not None and not self.rights.may_act_as(user):
            raise Forbidden(
                f"the {self.role} key {self.name!r} may not post or chat as user {user!r}: an adapter key acts "
                "only for the users it owns (its network's, e.g. 'irc:*', or those given with "
                "agentd keys create --users)"
            )

    def check_channel(self, channel: str) -> None:
        """Refuse a caller that may not use ``channel``."""
        if self.rights is not None and not self.rights.may_use_channel(channel):
            raise Forbidden(f"the {self.role} key {self.name!r} may not use channel {channel!r}")


RequestT = TypeVar("RequestT", bound=Request)
ResultT = TypeVar("ResultT", bound=BaseModel)
OpFunction = Callable[[OpContext, RequestT], ResultT]


@dataclass(frozen=True)
class Operation:
    """One registered operation: its name, the roles it admits, its models and its function."""

    name: str
    roles: tuple[str, ...]
    request: type[Request]
    result: type[BaseModel]
    function: Callable[[OpContext, Any], BaseModel]

    @property
    def key_roles(self) -> tuple[str, ...]:
        """The roles of keys it admits (a persona's own tool call is no key's)."""
        return tuple(r for r in self.roles if r != PERSONA)

    def __call__(self, ctx: OpContext, request: Request) -> BaseModel:
        """Run it (the roles are checked by the function itself, see :func:`operation`)."""
        return self.function(ctx, request)


#: Every operation by name.
OPERATIONS: dict[str, Operation] = {}


def operation(
    name: str, *, roles: tuple[str, ...]
) -> Callable[[Callable[[OpContext, RequestT], ResultT]], Callable[[OpContext, RequestT], ResultT]]:
    """Declare an operation: register it under ``name`` and check the caller's role before it runs.

    The request and result models are read from the function's annotations.
    """

    def register(function: Callable[[OpContext, RequestT], ResultT]) -> Callable[[OpContext, RequestT], ResultT]:
        hints = typing.get_type_hints(function)
        request, result = list(hints.values())[1], hints["return"]

        @functools.wraps(function)
        def checked(ctx: OpContext, body: RequestT) -> ResultT:
            ctx.require(name, roles)
            return function(ctx, body)

        if name in OPERATIONS:
            raise RuntimeError(f"operation {name!r} is defined twice")
        OPERATIONS[name] = Operation(name, roles, request, result, checked)
        return checked

    return register


def tool_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of an MCP tool's (or a skill's) arguments, from ``model``'s: by alias, without
    pydantic's titles, patterns and int64 bounds (:func:`_untitled`) and the model's docstring (the
    tool has its own description), an optional
    argument as its type (left out, not ``null``; its default is in its description), and
    ``required`` always present."""
    schema: dict[str, Any] = _untitled(model.model_json_schema(by_alias=True))
    schema.pop("description", None)
    schema["properties"] = {name: _optional_as_type(p) for name, p in schema.get("properties", {}).items()}
    schema.setdefault("required", [])
    return schema


def _optional_as_type(prop: dict[str, Any]) -> dict[str, Any]:
    prop = {k: v for k, v in prop.items() if k != "default"}
    variants = prop.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:
        (kept,) = [v for v in variants if v != {"type": "null"}]
        prop = {**kept, **{k: v for k, v in prop.items() if k != "anyOf"}}  # the field's description wins
    return prop


#: Numbers past this are not exact in JSON (a double's 53 bits): a bound there only says "an id".
_JSON_SAFE = 2**53


def _untitled(node: Any) -> Any:
    """``node`` without what a model reading the tool does not need and pays for in tokens on every
    turn: pydantic's titles, regular expressions (the checks a value's text passes: the operation
    refuses a bad value with its reason either way) and bounds past JSON's exact numbers."""
    if isinstance(node, dict):
        return {k: _untitled(v) for k, v in node.items() if not _dropped(k, v)}
    if isinstance(node, list):
        return [_untitled(v) for v in node]
    return node


def _dropped(key: str, value: Any) -> bool:
    if key in ("title", "pattern"):
        return isinstance(value, str)
    return key == "maximum" and isinstance(value, int) and value >= _JSON_SAFE
