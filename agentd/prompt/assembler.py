"""The context assembler: a deterministic prompt, by priority, under the window.

Priority, highest first:

1. the system prompt — never dropped;
2. the current message — always included, or :class:`ContextOverflow`;
3. project context (``AGENTS.md``) — truncated with a visible marker if it must be;
4. the user's profile (``[memory] profile_tokens``, off by default) — their profile
   memories, whole, newest first, within that many tokens;
5. recalled memories — whole memories, best first, until one does not fit (one
   already in the profile is not repeated); then earlier exchanges recalled by
   meaning (episodes), best first, within what the memories left of their budget;
6. recalled earlier exchanges with this user — whole snippets, newest first;
7. recent channel history — whole messages, newest first, until one does not
   fit; sent in chronological order.

Sections 3 to 7 are data: :data:`SECTIONS`, an ordered list of plain callables, each
fitting itself into what the ones before it left (:class:`Fitting`); the list order is
the priority. The budget is the model's window minus the output reserve, minus the tool
definitions. Counts come from the model's tokenizer (:mod:`agentd.prompt.tokens`)
with message framing included, so the sum is never below what litellm counts
for the assembled request. The assembler is pure: same inputs, same output.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, NamedTuple

from agentd._exceptions import ContextOverflow
from agentd.prompt.budget import ContextBudget
from agentd.prompt.render import (
    EPISODES_HEADING,
    MEMORIES_HEADING,
    PROFILE_HEADING,
    PROJECT_HEADING,
    episode_line,
    memory_line,
    profile_line,
    truncation_marker,
)
from agentd.prompt.tokens import JOIN, PER_MESSAGE, REPLY_PRIMING, TokenCounter, tools_tokens
from agentd.prompt.windows import Window
from agentd.search.ranking import MemoryHit
from agentd.store.memories import Memory

#: The user_history message's first line.
USER_HISTORY_HEADING = "## Earlier exchanges with this user (recalled, oldest context first)"
#: A project section smaller than this is not worth sending truncated.
MIN_PROJECT_TOKENS = 32


class HistoryItem(NamedTuple):
    """One earlier message of the channel, with its (cached) token count. A named tuple, not a
    frozen dataclass: a long channel's prompt makes thousands per turn, and a frozen dataclass
    costs about three times as much to make (each field set through ``object.__setattr__``)."""

    message_id: int
    role: str
    content: str
    tokens: int
    #: Who wrote it (a user's id, or the persona).
    author: str = ""
    #: A note the builder put in, not a stored message (``NO_REPLY`` after an unanswered user message).
    synthetic: bool = False


#: Makes a :class:`HistoryItem` or :class:`PromptMessage` from a tuple of all its fields, in order:
#: what their generated constructor does, without its Python call (half the cost of a message, in
#: the loops that run once per message of a long channel's history).
make = tuple.__new__


@dataclass(frozen=True)
class Snippet:
    """One recalled earlier exchange with this user: its prompt line and the messages it quotes."""

    text: str
    message_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Project:
    """A project's ``AGENTS.md``."""

    path: str
    text: str


@dataclass(frozen=True)
class PromptRequest:
    """Everything one assembly may use; lists are in priority order."""

    model: str
    system_prompt: str
    current: str | None
    output_reserve: int
    project: Project | None = None
    memories: Sequence[MemoryHit] = ()
    #: Recalled earlier exchanges with this user, newest first.
    user_history: Sequence[Snippet] = ()
    #: Recent channel messages, newest first.
    history: Sequence[HistoryItem] = ()
    history_available: int = 0
    tools: Sequence[dict[str, Any]] = ()
    #: Cap on the memories section, in tokens (subagents get a smaller one).
    memory_budget: int | None = None
    #: The user's profile memories, in priority order (newest first).
    profile: Sequence[Memory] = ()
    #: Cap on the profile section, in tokens (``[memory] profile_tokens``; 0: no section).
    profile_budget: int = 0
    #: Earlier exchanges recalled by meaning, best first (share ``memory_budget`` with memories).
    episodes: Sequence[MemoryHit] = ()


class PromptMessage(NamedTuple):
    """One message of the assembled prompt; ``source`` tags where it came from. A named tuple, as
    :class:`HistoryItem` is: made once per message of the prompt."""

    role: str
    content: str
    source: str
    message_id: int | None = None

    def for_llm(self) -> dict[str, str]:
        """The OpenAI-format message."""
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class AssembledContext:
    """The prompt, its accounting, and exactly which memories and messages made it in."""

    messages: tuple[PromptMessage, ...]
    budget: ContextBudget
    memories: tuple[MemoryHit, ...] = ()
    user_history: tuple[Snippet, ...] = ()
    history_ids: tuple[int, ...] = field(default=())
    #: The profile memories the prompt carries.
    profile: tuple[Memory, ...] = ()
    #: The episodes the prompt carries.
    episodes: tuple[MemoryHit, ...] = ()

    def for_llm(self) -> list[dict[str, str]]:
        """The messages in the OpenAI format litellm takes."""
        return [m.for_llm() for m in self.messages]


@dataclass
class Fitting:
    """One assembly under way: what is left of the budget, and what each section has kept so far.

    A section reads what it needs of the request, fits itself into :attr:`left`, takes what it
    used off it, and records what it kept and dropped here.
    """

    count: Callable[[str], int]
    #: Tokens still free for the sections after this one.
    left: int
    #: The system message's blocks, in order (the system prompt first).
    blocks: list[str]
    project_tokens: int = 0
    project_truncated: bool = False
    profile: list[Memory] = field(default_factory=list)
    profile_tokens: int = 0
    profile_dropped: int = 0
    memories: list[MemoryHit] = field(default_factory=list)
    memory_tokens: int = 0
    memories_dropped: int = 0
    episodes: list[MemoryHit] = field(default_factory=list)
    episode_tokens: int = 0
    episodes_dropped: int = 0
    #: Recalled exchanges with this user kept, newest first, and what each costs.
    snippets: list[Snippet] = field(default_factory=list)
    snippet_costs: list[int] = field(default_factory=list)
    #: What the user_history message costs besides its snippets.
    snippet_header: int = 0
    #: Snippets dropped because the transcript carries what they quote.
    snippets_redundant: int = 0
    #: The transcript kept, newest first.
    history: Sequence[HistoryItem] = ()
    history_tokens: int = 0


#: One section of the prompt: fits what ``request`` offers for it into what ``fitting`` has left.
Section = Callable[[PromptRequest, Fitting], None]


def fit_project(request: PromptRequest, fitting: Fitting) -> None:
    """Project context: whole, or truncated with a marker."""
    if request.project is None or not request.project.text.strip():
        return
    block, tokens, truncated = _project(fitting.count, request.project, fitting.left)
    fitting.project_tokens, fitting.project_truncated = tokens, truncated
    if block:
        fitting.blocks.append(block)
        fitting.left -= tokens


def fit_profile(request: PromptRequest, fitting: Fitting) -> None:
    """The user's profile: whole memories, newest first, within its own cap."""
    if request.profile and request.profile_budget > 0:
        block, tokens, n = _whole_lines(
            fitting.count,
            PROFILE_HEADING,
            (profile_line(m.text, m.category) for m in request.profile),
            min(fitting.left, request.profile_budget),
        )
        fitting.profile, fitting.profile_tokens = list(request.profile[:n]), tokens
        if block:
            fitting.blocks.append(block)
            fitting.left -= tokens
    if request.profile_budget > 0:
        fitting.profile_dropped = len(request.profile) - len(fitting.profile)


def fit_memories(request: PromptRequest, fitting: Fitting) -> None:
    """Memories: whole ones, best first, stop at the first that does not fit (one the profile
    carries is not repeated)."""
    in_profile = {m.id for m in fitting.profile}
    recalled = [hit for hit in request.memories if hit.memory.id not in in_profile]
    if recalled:
        left = fitting.left
        block, tokens, n = _whole_lines(
            fitting.count,
            MEMORIES_HEADING,
            (memory_line(h.memory.text, h.memory.category, h.relevance) for h in recalled),
            left if request.memory_budget is None else min(left, request.memory_budget),
        )
        fitting.memories, fitting.memory_tokens = recalled[:n], tokens
        if block:
            fitting.blocks.append(block)
            fitting.left -= tokens
    fitting.memories_dropped = len(recalled) - len(fitting.memories)


def fit_episodes(request: PromptRequest, fitting: Fitting) -> None:
    """Episodes: whole ones, best first, in what the memories left of their budget."""
    if request.episodes:
        left = fitting.left
        block, tokens, n = _whole_lines(
            fitting.count,
            EPISODES_HEADING,
            (episode_line(h.memory.text, h.memory.created_at, h.relevance) for h in request.episodes),
            left if request.memory_budget is None else min(left, request.memory_budget - fitting.memory_tokens),
        )
        fitting.episodes, fitting.episode_tokens = list(request.episodes[:n]), tokens
        if block:
            fitting.blocks.append(block)
            fitting.left -= tokens
    fitting.episodes_dropped = len(request.episodes) - len(fitting.episodes)


def fit_earlier_exchanges(request: PromptRequest, fitting: Fitting) -> None:
    """Earlier exchanges with this user: one system message of whole snippets, newest first."""
    count = fitting.count
    fitting.snippet_header = header = PER_MESSAGE + count(USER_HISTORY_HEADING)
    if not request.user_history:
        return
    cost = header
    for snippet in request.user_history:
        snippet_cost = count(snippet.text) + JOIN
        if cost + snippet_cost > fitting.left:
            break
        cost += snippet_cost
        fitting.snippets.append(snippet)
        fitting.snippet_costs.append(snippet_cost)
    if fitting.snippets:
        fitting.left -= cost


def fit_transcript(request: PromptRequest, fitting: Fitting) -> None:
    """The transcript (the channel's recent messages): newest first, whole messages, contiguous. A
    snippet that quotes a message the transcript carries anyway is dropped and its tokens go to more of it."""
    history = request.history
    snippets, costs = fitting.snippets, fitting.snippet_costs
    left = fitting.left
    # spent[j]: what history[:j] costs. Prefix sums and a bisection, not a loop in Python: a
    # long channel's prompt carries thousands of messages.
    spent = [0, *accumulate(item.tokens + PER_MESSAGE for item in history)]
    taken = 0  # history[:taken] is kept
    while True:
        more = bisect_right(spent, spent[taken] + left, lo=taken) - 1 - taken
        left -= spent[taken + more] - spent[taken]
        taken += more
        quoted = {i for s in snippets for i in s.message_ids}
        in_history = {item.message_id for item in history[:taken] if item.message_id in quoted} if quoted else set()
        redundant = [i for i, s in enumerate(snippets) if in_history.intersection(s.message_ids)]
        if not redundant:
            break
        for i in reversed(redundant):
            left += costs.pop(i)
            snippets.pop(i)
            fitting.snippets_redundant += 1
        if not snippets:
            left += fitting.snippet_header
    fitting.left = left
    fitting.history, fitting.history_tokens = history[:taken], spent[taken]


#: The sections after the system prompt and the current message, highest priority first: each
#: fits into what the ones before it left.
SECTIONS: tuple[Section, ...] = (
    fit_project,
    fit_profile,
    fit_memories,
    fit_episodes,
    fit_earlier_exchanges,
    fit_transcript,
)


class ContextAssembler:
    """Builds prompts under a window with one tokenizer."""

    def __init__(self, counter: TokenCounter, sections: Sequence[Section] = SECTIONS) -> None:
        """``sections``: the prompt's sections in priority order (default :data:`SECTIONS`)."""
        self._counter = counter
        self._sections = tuple(sections)

    @property
    def counter(self) -> TokenCounter:
        """The tokenizer the assembler counts with."""
        return self._counter

    def assemble(self, request: PromptRequest, window: Window) -> AssembledContext:
        """Assemble ``request`` under ``window``; raises :class:`ContextOverflow` if even
        the system prompt and the current message cannot fit."""
        count = self._counter.count
        budget = window.tokens - request.output_reserve
        tools = tools_tokens(self._counter, request.tools)
        system = count(request.system_prompt) + PER_MESSAGE
        current = count(request.current) + PER_MESSAGE if request.current is not None else 0
        fixed = REPLY_PRIMING + tools + system + current
        if fixed > budget:
            raise ContextOverflow(
                f"model {request.model!r} has a {window.tokens:,}-token context window ({window.source}); "
                f"after the {request.output_reserve:,}-token output reserve and {tools:,} tokens of tool "
                f"definitions, the system prompt ({system:,} tokens) and the current message "
                f"({current:,} tokens) do not fit in the {budget - tools - REPLY_PRIMING:,} tokens left"
            )
        fitting = Fitting(count, budget - fixed, [request.system_prompt])
        for section in self._sections:
            section(request, fitting)
        kept_history = fitting.history
        return AssembledContext(
            messages=_messages(request, fitting),
            budget=self._accounting(request, window, fitting, budget, system, current, tools),
            memories=tuple(fitting.memories),
            user_history=tuple(fitting.snippets),
            history_ids=tuple(item.message_id for item in reversed(kept_history) if not item.synthetic),
            profile=tuple(fitting.profile),
            episodes=tuple(fitting.episodes),
        )

    def _accounting(
        self, request: PromptRequest, window: Window, f: Fitting, budget: int, system: int, current: int, tools: int
    ) -> ContextBudget:
        """Where the tokens went, and what was dropped."""
        # Only snippets that did not fit count as dropped; redundant ones are in the history.
        snippets_dropped = len(request.user_history) - len(f.snippets) - f.snippets_redundant
        available = max(request.history_available, len(request.history))
        messages_dropped = available - len(f.history)
        return ContextBudget(
            model=request.model,
            tokenizer=self._counter.name,
            window=window.tokens,
            window_source=window.source,
            output_reserve=request.output_reserve,
            total_tokens=budget - f.left,
            system_tokens=system + REPLY_PRIMING,
            project_tokens=f.project_tokens,
            memory_tokens=f.memory_tokens,
            user_history_tokens=(f.snippet_header + sum(f.snippet_costs)) if f.snippets else 0,
            history_tokens=f.history_tokens,
            current_tokens=current,
            tools_tokens=tools,
            history_messages=len(f.history),
            history_available=available,
            memories_included=len(f.memories),
            memories_dropped=f.memories_dropped,
            messages_dropped=messages_dropped,
            snippets_dropped=snippets_dropped,
            project_truncated=f.project_truncated,
            exhausted=bool(
                f.project_truncated
                or f.profile_dropped
                or f.memories_dropped
                or f.episodes_dropped
                or snippets_dropped
                or messages_dropped
            ),
            profile_tokens=f.profile_tokens,
            profile_included=len(f.profile),
            profile_dropped=f.profile_dropped,
            episode_tokens=f.episode_tokens,
            episodes_included=len(f.episodes),
            episodes_dropped=f.episodes_dropped,
        )


def _messages(request: PromptRequest, fitting: Fitting) -> tuple[PromptMessage, ...]:
    """The prompt: the system message, the earlier exchanges, the transcript in chronological
    order, the current message."""
    messages = [PromptMessage("system", "\n\n".join(fitting.blocks), "system")]
    if fitting.snippets:
        # Oldest snippet first, so the recalled exchanges read in order.
        body = "\n".join([USER_HISTORY_HEADING, *(s.text for s in reversed(fitting.snippets))])
        messages.append(PromptMessage("system", body, "user_history"))
    messages.extend(
        make(PromptMessage, (item.role, item.content, "history", item.message_id)) for item in reversed(fitting.history)
    )
    if request.current is not None:
        messages.append(PromptMessage("user", request.current, "current"))
    return tuple(messages)


def _project(count: Callable[[str], int], project: Project, left: int) -> tuple[str, int, bool]:
    """The project block within ``left`` tokens: (text, tokens, truncated)."""
    full = f"{PROJECT_HEADING}\n{project.text.strip()}"
    cost = count(full) + JOIN
    if cost <= left:
        return full, cost, False
    if left < MIN_PROJECT_TOKENS:
        return "", 0, True
    body = project.text.strip()
    total = count(body)
    # Longest prefix (by characters, found by bisection) whose block still fits.
    lo, hi, best = 0, len(body), ""
    while lo <= hi:
        mid = (lo + hi) // 2
        prefix = body[:mid]
        cut = prefix.rfind("\n")
        if cut > mid // 2:  # prefer ending at a line break when one is near
            prefix = prefix[:cut]
        marker = truncation_marker(count(prefix), total)
        block = f"{PROJECT_HEADING}\n{prefix}\n{marker}"
        if count(block) + JOIN <= left:
            best, lo = block, mid + 1
        else:
            hi = mid - 1
    if not best:
        return "", 0, True
    return best, count(best) + JOIN, True


def _whole_lines(count: Callable[[str], int], heading: str, lines: Iterable[str], room: int) -> tuple[str, int, int]:
    """A section of ``heading`` and whole ``lines`` in their order, stopping at the first that
    does not fit in ``room`` tokens: ``(the section, its tokens, how many lines)``, or
    ``("", 0, 0)`` when not even the first fits."""
    cost = JOIN + count(heading)
    kept: list[str] = []
    for line in lines:
        line_cost = count(line) + JOIN
        if cost + line_cost > room:
            break
        cost += line_cost
        kept.append(line)
    if not kept:
        return "", 0, 0
    return "\n".join([heading, *kept]), cost, len(kept)
