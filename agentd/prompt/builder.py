"""Gathers what a persona's prompt is made of, from the store, and assembles it.

Used by the actors before every reply and by ``agentd budget``. The transcript is
read newest first, page by page, and only as far back as the window could hold,
so a channel of 100,000 messages costs the same as one of 1,000. Token counts of
stored messages are computed once (by the tokenizer they are keyed on) and kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentd.config import Config
from agentd.observe import tracing
from agentd.personas import Persona
from agentd.prompt.assembler import AssembledContext, ContextAssembler, HistoryItem, PromptRequest, Snippet, make
from agentd.prompt.history_cache import MAX_ROWS, HistoryCache, Row, newest_read
from agentd.prompt.project import ProjectFiles
from agentd.prompt.tokens import PER_MESSAGE, TokenCounter
from agentd.prompt.windows import Window, WindowMap
from agentd.search.ranking import MemoryHit
from agentd.store import Store
from agentd.store.memories import Memory
from agentd.store.schedules import AUTHOR_PREFIX

PAGE = 200
#: A channel's transcript (its recent messages), newest first, and how many messages the channel has.
Transcript = tuple[list[HistoryItem], int]
#: Never inspect more history than this, whatever the window.
MAX_HISTORY_MESSAGES = 20_000


#: What stands for the reply a user message never got (its turn failed, or was cut short).
NO_REPLY = "[no reply was given to this message]"


def attributed(author: str, text: str) -> str:
    """``text`` as said by ``author`` in a shared channel (``alice: text``)."""
    return f"{author}: {text}"


def _attributed_history(history: Sequence[HistoryItem], counter: TokenCounter) -> list[HistoryItem]:
    """``history`` with each user message's author in front; each author's prefix is counted once
    (a long history has thousands of messages and a few authors), with a token of slack for where
    the tokenizer joins it to the text. One loop, no call per message: it runs over every message
    a long channel's prompt carries."""
    prefixes: dict[str, tuple[str, int]] = {}
    out: list[HistoryItem] = []
    append = out.append
    for h in history:
        if h.role != "user" or h.synthetic:
            append(h)
            continue
        found = prefixes.get(h.author)
        if found is None:
            prefix = attributed(h.author, "")
            found = prefixes[h.author] = (prefix, counter.count(prefix) + 1)
        append(make(HistoryItem, (h.message_id, "user", found[0] + h.content, h.tokens + found[1], h.author, False)))
    return out


def in_a_room(history: Sequence[HistoryItem], persona: str) -> bool:
    """Whether another persona's replies are in ``history`` (the channel is a room to ``persona``)."""
    return any(h.role == "assistant" and h.author != persona and not h.synthetic for h in history)


def room_history(
    history: Sequence[HistoryItem], persona: str, counter: TokenCounter, people: bool = True
) -> list[HistoryItem]:
    """A room's transcript from ``persona``'s side: its own replies are its assistant turns; every
    other line is a user turn, another persona's attributed to it (``researcher: …``), a person's
    too when several people speak (``people``; ``alice: …``). Each author's prefix is counted
    once, added to the stored count (nothing is counted again). The notes of unanswered messages
    are left out: in a room a message another persona answered, or nobody was asked to, is no gap."""
    prefixes: dict[str, tuple[str, int]] = {}
    out: list[HistoryItem] = []
    append = out.append
    for h in history:
        if h.synthetic:
            continue
        if h.role == "assistant" and h.author == persona:
            append(h)
            continue
        if h.role == "user" and not people:
            append(h)
            continue
        found = prefixes.get(h.author)
        if found is None:
            prefix = attributed(h.author, "")
            found = prefixes[h.author] = (prefix, counter.count(prefix) + 1)
        append(make(HistoryItem, (h.message_id, "user", found[0] + h.content, h.tokens + found[1], h.author, False)))
    return out


class ContextBuilder:
    """Loads history, project files and windows; runs the assembler."""

    def __init__(
        self,
        store: Store,
        config: Config,
        windows: WindowMap,
        counter_for: Callable[[str], TokenCounter],
        projects: ProjectFiles | None = None,
        history_rows: int = MAX_ROWS,
    ) -> None:
        """``history_rows``: the most conversation rows kept between turns, across channels."""
        self._store = store
        self._config = config
        self._windows = windows
        self._counter_for = counter_for
        self._projects = projects or ProjectFiles()
        #: The tokens of :data:`NO_REPLY` per tokenizer (counted once).
        self._no_reply: dict[str, int] = {}
        #: The transcript kept between turns (SQLite).
        self._kept = HistoryCache(store, history_rows)

    @property
    def kept_history_rows(self) -> int:
        """How many conversation rows are kept between turns (at most ``history_rows``)."""
        return self._kept.kept_rows

    def window(self, persona: Persona) -> Window:
        """The persona's context window."""
        return self._windows.window_for(persona.model, persona.context_window)

    def counter(self, persona: Persona) -> TokenCounter:
        """The persona's tokenizer."""
        return self._counter_for(persona.model)

    def count_message(self, persona: Persona, text: str) -> tuple[int, str]:
        """(tokens, tokenizer name) of ``text`` for ``persona``, to store with a new message."""
        counter = self.counter(persona)
        return counter.count(text), counter.name

    def recent(
        self,
        persona: Persona,
        channel: str,
        before_id: int | None = None,
        *,
        before_user: bool = True,
        skip: int | None = None,
    ) -> Transcript:
        """The channel's transcript (its recent messages) as ``persona``'s prompt could carry it (read
        once per turn: pass it to :meth:`transcript_start` and :meth:`build`). ``before_user``: a user message
        (the turn's own) follows it (see :meth:`history`). ``skip``: a message left out (in a room, the
        one the turn answers when it is not its own: it is the prompt's current message)."""
        window = self.window(persona)
        items, available = self.history(
            channel, before_id, self.counter(persona), window.tokens - persona.max_reply_tokens, before_user=before_user
        )
        if skip is not None:
            items = [i for i in items if i.message_id != skip]
        return items, available

    def transcript_start(
        self, persona: Persona, channel: str, before_id: int | None = None, recent: Transcript | None = None
    ) -> int | None:
        """The id of the oldest message the prompt's transcript can carry (``None``: none fits).

        An upper bound: everything older is certainly out of the prompt, so recall of
        earlier exchanges summarises only older ones (the assembler may keep fewer, and drops
        a recalled exchange that its kept transcript quotes anyway). ``recent``: what
        :meth:`recent` read for this turn (read now when not given).
        """
        window = self.window(persona)
        room = window.tokens - persona.max_reply_tokens
        items, _available = recent if recent is not None else self.recent(persona, channel, before_id)
        spent, oldest = 0, None
        for item in items:
            spent += item.tokens + PER_MESSAGE
            if spent > room:
                break
            oldest = item.message_id
        return oldest

    @tracing.spanned("assemble")
    def build(
        self,
        persona: Persona,
        channel: str,
        current: str | None,
        *,
        before_id: int | None = None,
        memories: Sequence[MemoryHit] = (),
        user_history: Sequence[Snippet] = (),
        tools: Sequence[dict[str, Any]] = (),
        system_prompt: str | None = None,
        memory_budget: int | None = None,
        profile: Sequence[Memory] = (),
        episodes: Sequence[MemoryHit] = (),
        speaker: str | None = None,
        recent: Transcript | None = None,
        room: bool = False,
        caller: str | None = None,
    ) -> AssembledContext:
        """Assemble ``persona``'s prompt in ``channel`` for ``current``.

        ``before_id``: history is read from messages older than this id (the
        current message's own id, so it is not sent twice). ``profile``: the user's
        profile memories (:meth:`agentd.memory.MemoryService.profile`), given up to
        ``[memory] profile_tokens``. ``episodes``: earlier exchanges recalled by meaning,
        best first (they share the memories' budget). ``speaker`` (a shared channel's current user):
        every user message, the current one too, starts with its author
        (``alice: ...``), counted, so the model can tell the speakers apart. ``recent``: what
        :meth:`recent` read for this turn (read now when not given). ``room``: the channel is a room
        (several personas answer there); so is any whose transcript carries another persona's replies:
        the transcript is rendered from ``persona``'s side (:func:`room_history`). ``caller``: the
        persona whose reply ``current`` is (it called on this one): it says it.
        """
        window = self.window(persona)
        counter = self.counter(persona)
        history, available = (
            recent if recent is not None else self.recent(persona, channel, before_id, before_user=current is not None)
        )
        authors = {i.author for i in history if i.role == "user" and not i.synthetic}
        if any(a.startswith(AUTHOR_PREFIX) for a in authors):
            history = self._in_askers_words(history)
            authors = {i.author for i in history if i.role == "user" and not i.synthetic}
        several = speaker is not None and bool(authors - {speaker})
        if room or caller is not None or in_a_room(history, persona.name):
            history = room_history(history, persona.name, counter, people=several)
            if current is not None and (caller is not None or (several and speaker is not None)):
                current = attributed(caller or speaker or "", current)
        elif several and speaker is not None:
            # Several people speak here: each user message says who wrote it.
            history = _attributed_history(history, counter)
            if current is not None:
                current = attributed(speaker, current)
        project_dir = self._config.channel_project_dir(channel) or persona.project_dir
        request = PromptRequest(
            model=persona.model,
            system_prompt=(system_prompt or persona.system_prompt).strip(),
            current=current,
            output_reserve=persona.max_reply_tokens,
            project=self._projects.load(project_dir),
            memories=tuple(memories),
            user_history=tuple(user_history),
            history=history,
            history_available=available,
            tools=tuple(tools),
            memory_budget=memory_budget,
            profile=tuple(profile),
            profile_budget=self._config.memory.profile_tokens,
            episodes=tuple(episodes),
        )
        return ContextAssembler(counter).assemble(request, window)

    def _in_askers_words(self, history: list[HistoryItem]) -> list[HistoryItem]:
        """``history`` with each schedule's firing said by the user it is for (it is in their words;
        ``schedule:<id>`` is no speaker the model should tell apart from them)."""
        ids = [i.message_id for i in history if i.role == "user" and i.author.startswith(AUTHOR_PREFIX)]
        with self._store.read() as conn:
            askers = self._store.messages.askers(conn, ids)
        return [i._replace(author=askers[i.message_id]) if i.message_id in askers else i for i in history]

    def history(
        self, channel: str, before_id: int | None, counter: TokenCounter, max_tokens: int, *, before_user: bool = False
    ) -> tuple[list[HistoryItem], int]:
        """Recent messages newest first, up to ``max_tokens`` worth; and how many the channel has.

        A user message with no reply after it is followed by its reply if one was stored
        after ``before_id`` (a burst's earlier message answered while this one waited),
        else (its turn failed, or was cut short) by a counted :data:`NO_REPLY` note, so two
        user turns never follow each other; ``before_user``: the prompt's next message is a
        user's (the current one).
        """
        items: list[HistoryItem] = []
        spent = 0
        with self._store.read() as conn:
            available, erasures = self._store.messages.tally(conn, channel, before_id=before_id)
        # What was kept from the last turn, and what was said since; then older pages from the store.
        rows, newest, complete = self._kept.rows(channel, before_id, erasures)
        if not rows and not complete:
            newest = -1  # nothing kept: set once the first page is read
        fresh: dict[int, int] = {}
        late: dict[int, list[Row]] | None = None  # read when a user message seems unanswered
        shown_late = 0
        # The loop runs once per message a long channel's prompt carries (thousands): names are local.
        name, count = counter.name, counter.count
        newer = "user" if before_user else None  # the role of the message after this one
        i = 0
        while spent <= max_tokens and len(items) < MAX_HISTORY_MESSAGES:
            if i == len(rows):
                if complete:
                    break
                with self._store.read() as conn:
                    page = self._store.messages.history_page(conn, channel, rows[-1][0] if rows else before_id, PAGE)
                if newest < 0:
                    newest = newest_read(before_id, page)
                rows.extend(page)
                complete = len(page) < PAGE
                if not page:
                    break
            mid, role, content, tokens, counted_by, author = rows[i]
            if tokens is None or counted_by != name:
                tokens = fresh[mid] = count(content)
                rows[i] = (mid, role, content, tokens, name, author)
            i += 1
            if role == "user" and newer == "user":
                late = self._late_replies(channel, before_id) if late is None else late
                for item in self._in_place_of_no_reply(mid, counter, late, fresh):
                    items.append(item)
                    spent += item.tokens + PER_MESSAGE
                    shown_late += not item.synthetic
            items.append(make(HistoryItem, (mid, role, content, tokens, author, False)))
            spent += tokens + PER_MESSAGE
            newer = role
        if fresh:
            with self._store.write() as conn:
                self._store.messages.set_token_counts(conn, fresh, counter.name)
        if newest >= 0:
            self._kept.keep(channel, rows, newest, complete, erasures)
        return items, available + shown_late

    def _late_replies(self, channel: str, before_id: int | None) -> dict[int, list[Row]]:
        """The replies stored after message ``before_id`` to messages before it, by the message they answer."""
        if before_id is None:
            return {}
        with self._store.read() as conn:
            return self._store.messages.late_replies(conn, channel, before_id)

    def _in_place_of_no_reply(
        self, mid: int, counter: TokenCounter, late: dict[int, list[Row]], fresh: dict[int, int]
    ) -> list[HistoryItem]:
        """What follows user message ``mid`` when the next message is a user's too, newest first: the
        replies to it stored after the turn's own message (a burst's earlier message, answered while
        this one waited), else a counted :data:`NO_REPLY` note. New token counts go to ``fresh``."""
        answers = late.get(mid)
        if not answers:
            if counter.name not in self._no_reply:
                self._no_reply[counter.name] = counter.count(NO_REPLY)
            return [HistoryItem(mid, "assistant", NO_REPLY, self._no_reply[counter.name], synthetic=True)]
        items: list[HistoryItem] = []
        for rid, role, content, tokens, counted_by, author in reversed(answers):
            if tokens is None or counted_by != counter.name:
                tokens = fresh[rid] = counter.count(content)
            items.append(make(HistoryItem, (rid, role, content, tokens, author, False)))
        return items
