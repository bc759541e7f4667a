"""``remember`` and ``recall``: the model's explicit access to long-term memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentd._exceptions import EmbedderNotConfigured, InvalidInput, NotFound, SkillExecutionFailed, SkillInvalidInput
from agentd.access.scopes import GLOBAL, Reach, Scope
from agentd.skills.registry import SkillCaller, SkillDeps, function_tool

if TYPE_CHECKING:
    from agentd.memory import MemoryService

#: Where ``remember`` may store, relative to the conversation.
REMEMBER_SCOPES = ("user", "channel", "global")


def _int_arg(arguments: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = arguments.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise SkillInvalidInput(f"{name} must be an integer")
    if not low <= value <= high:
        raise SkillInvalidInput(f"{name} must be between {low} and {high}")
    return value


class RememberSkill:
    """``remember(text, category, scope)``: store a memory."""

    name = "remember"

    def __init__(self, memory: MemoryService) -> None:
        self._memory = memory

    def definition(self) -> dict[str, Any]:
        """The tool definition."""
        return function_tool(
            self.name,
            "Store a fact, preference or decision in long-term memory so it can be recalled later.",
            {
                "text": {"type": "string", "description": "The memory, as a short self-contained sentence."},
                "category": {"type": "string", "description": "preference, fact, decision, ... (default fact)"},
                "scope": {
                    "type": "string",
                    "enum": list(REMEMBER_SCOPES),
                    "description": "user: only for this user (default); channel: for this channel; global: everywhere",
                },
            },
            ["text"],
        )

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Store the memory; a duplicate is reported, not stored twice."""
        text = arguments.get("text")
        if not isinstance(text, str) or not text.strip():
            raise SkillInvalidInput("text must be a non-empty string")
        category = arguments.get("category") or "fact"
        where = arguments.get("scope") or ("user" if ctx.user else "channel")
        if where not in REMEMBER_SCOPES:
            raise SkillInvalidInput(f"scope must be one of {', '.join(REMEMBER_SCOPES)}")
        if where == "user" and not ctx.user:
            where = "channel"
        scope = (
            GLOBAL
            if where == "global"
            else Scope.user(ctx.user or "")
            if where == "user"
            else Scope.channel(ctx.channel)
        )
        try:
            mem, created = self._memory.add(ctx.persona, scope, text, category, source_message_id=ctx.message_id)
        except InvalidInput as exc:
            raise SkillInvalidInput(str(exc)) from exc
        return {"stored": created, "id": mem.id, "scope": str(mem.scope), "text": mem.text, "category": mem.category}


class RecallSkill:
    """``recall(query, limit=5)``: search long-term memory.

    Results carry text, category, score and created_at; bad arguments are InvalidInput,
    a failed search ExecutionFailed.
    """

    name = "recall"

    def __init__(self, memory: MemoryService) -> None:
        self._memory = memory

    def definition(self) -> dict[str, Any]:
        """The tool definition: ``query`` (required) and ``limit``."""
        return function_tool(
            self.name,
            "Search long-term memory for stored facts, preferences or context relevant to a query.",
            {
                "query": {"type": "string", "description": "What to look for."},
                "limit": {"type": "integer", "description": "Maximum number of results (default 5).", "minimum": 1},
            },
            ["query"],
        )

    def run(self, arguments: dict[str, Any], ctx: SkillCaller) -> dict[str, Any]:
        """Embed the query, search this conversation's reach, return results best first."""
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise SkillInvalidInput("query must be a non-empty string")
        if self._memory.embedder is None:
            raise SkillExecutionFailed(
                'recall needs an embedding model; configure [embedding] provider = "local" or "litellm"'
            )
        limit = _int_arg(arguments, "limit", self._memory.config.recall_limit, 1, 100)
        # The recall skill's contract: the top ``limit`` by score, with no threshold unless configured.
        threshold = self._memory.config.recall_min_score or 0.0
        try:
            hits = self._memory.search(
                query,
                Reach(ctx.persona, ctx.channel, ctx.user, shared_channel=ctx.shared_channel),
                limit=limit,
                min_relevance=threshold,
            )
        except EmbedderNotConfigured as exc:
            raise SkillExecutionFailed(str(exc)) from exc
        except (InvalidInput, NotFound) as exc:
            raise SkillInvalidInput(str(exc)) from exc
        result: dict[str, Any] = {"results": [h.as_recall_result() for h in hits], "total_found": len(hits)}
        if not hits and self._memory.count(ctx.persona) == 0:
            result["message"] = "no memories are stored yet"
        return result


def remember_skill(deps: SkillDeps) -> RememberSkill | None:
    """``remember``, when memories can be stored (a memory service with an embedder)."""
    memory = deps.searchable_memory()
    return RememberSkill(memory) if memory is not None else None


def recall_skill(deps: SkillDeps) -> RecallSkill | None:
    """``recall``, when memories can be searched (a memory service with an embedder)."""
    memory = deps.searchable_memory()
    return RecallSkill(memory) if memory is not None else None
