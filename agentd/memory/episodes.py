"""Episodic memory: every answered exchange of a channel, searchable by meaning.

An *episode* is one exchange (a user's message and the persona's reply) stored
as a memory of category ``episode`` in an episodes scope
(:meth:`agentd.access.scopes.Scope.episodes`): ``episodes:channel:NAME`` for a group
channel, ``episodes:user:ID`` for a direct channel (``[episodes]
direct_prefixes``), so a user's direct exchanges are recalled in any of their
direct channels and never in a group one. Memory search never looks in episodes
scopes, and episode search (:func:`agentd.recall.episodes.search`) looks nowhere else: each is
its own prompt section.
Living in the memories table, episodes get the vector and full-text indexes,
hybrid ranking, recency and the isolation of reaches for free.

A message sent with ``disable_memory`` is not kept, nor (with ``keep = "user"``, the
default) one without a content word ("hi!", "thanks, ok"): nothing would recall it. An
episode's text is the user's line (``keep = "user"``; the reply is indexed with it as
context) or the user's line and the reply (``keep = "exchange"``). Its time is its user
message's; the channel's earlier messages (``context_messages``) are indexed with it
as context (never shown). Indexing runs
in the background (:class:`agentd.memory.background.JobWorker`), a batch at a
time: the episodes and the job's cursor are written in one transaction, so after
a crash indexing resumes where it stopped, skipping nothing and adding nothing
twice (the content hash dedupes even a replayed batch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agentd._exceptions import InvalidInput, NotFound
from agentd.access.scopes import Scope, root_channel
from agentd.config import EpisodesConfig
from agentd.memory.service import MemoryService
from agentd.observe.log import get_logger
from agentd.search.intent import has_content
from agentd.store import Store
from agentd.store.lexical import CONTEXT_KEY
from agentd.store.memories import NewMemory
from agentd.store.messages import Message
from agentd.store.schema import utcnow

if TYPE_CHECKING:
    from sqlalchemy import Connection

log = get_logger("agentd.episodes")

#: The background job's name (its cursors in ``job_cursors``).
JOB = "episodes"
#: The category of every episode.
CATEGORY = "episode"
#: Messages read per scan of a channel, per exchange of the batch (at most).
_SCAN_FACTOR = 4
#: Messages read first: behind a backlog the scan stops at the first pending message,
#: which is near the cursor, so the channel is read in growing pages from this size.
_FIRST_PAGE = 8


@dataclass(frozen=True)
class Exchange:
    """A user's message and the reply that answered it."""

    message: Message
    reply: Message


def exchanges(
    store: Store, channel: str, after_id: int, limit: int, conn: Connection | None = None
) -> tuple[list[Exchange], int]:
    """Up to ``limit`` answered exchanges of ``channel`` after user message ``after_id``, oldest first,
    and the id the cursor may move to (the last user message finished with: answered, failed or
    interrupted). A message still ``pending`` stops the scan: its reply is yet to come. Fewer than
    ``limit`` exchanges: there are no more now. ``conn``: a read transaction to use (else one of its own)."""
    if conn is None:
        with store.read() as own:
            return exchanges(store, channel, after_id, limit, own)
    found: list[Exchange] = []
    cursor = after_id
    last_read = after_id
    page = min(_FIRST_PAGE, limit * _SCAN_FACTOR)
    while True:
        messages = store.messages.after(conn, channel, last_read, page)
        users = [m for m in messages if m.role == "user"]
        # The complete reply (an answer resumed after a crash may follow an interrupted one).
        answered = [m.id for m in users if m.status == "answered"]
        replies = store.messages.replies_to(conn, answered, "complete")
        for msg in users:
            if msg.status == "pending":
                return found, cursor
            reply = replies.get(msg.id)
            if msg.status == "answered":
                if reply is None:
                    return found, cursor  # written with the status: not expected; look again later
                found.append(Exchange(msg, reply))
            cursor = msg.id
            if len(found) == limit:
                return found, cursor
        if len(messages) < page:
            return found, cursor
        last_read = messages[-1].id
        page = min(page * 4, limit * _SCAN_FACTOR)


class Episodes:
    """Indexes a channel's exchanges as episodes and prunes them (:mod:`agentd.recall.episodes` searches them)."""

    def __init__(
        self,
        store: Store,
        memory: MemoryService,
        config: EpisodesConfig,
        configured: Callable[[str], str | None] = lambda _channel: None,
    ) -> None:
        """``configured``: the visibility config sets for a channel (``Config.channel_visibility``)."""
        self._store = store
        self._memory = memory
        self._config = config
        self._configured = configured

    @property
    def config(self) -> EpisodesConfig:
        """The ``[episodes]`` settings."""
        return self._config

    @property
    def memory(self) -> MemoryService:
        """The memory service episodes are stored (and searched) through."""
        return self._memory

    def scope_of(self, channel: str, user: str) -> Scope:
        """Where an exchange of ``user`` in ``channel`` is kept."""
        with self._store.read() as conn:
            return self._scope(conn, channel, user)

    def is_direct(self, channel: str, user: str | None, conn: Connection | None = None) -> bool:
        """Whether ``channel`` is ``user``'s direct channel, decided as visibility decides it
        (agentd/access/visibility.py): by config (``[channels.NAME] visibility``), else as
        declared for that user by whoever posted first (an adapter's private message, the web
        page, the OpenAI endpoint's default channel), else by its name (``[episodes]
        direct_prefixes``: ``dm-alice`` is alice's). ``conn``: a read transaction to use (else
        one of its own)."""
        if user is None:
            return False
        if conn is None:
            with self._store.read() as own:
                return self.is_direct(channel, user, own)
        root = root_channel(channel)
        declared, owner = self._store.messages.visibility(conn, root)
        decided = self._configured(root) or declared
        if decided is not None:
            return decided == "direct" and owner in (None, user)
        return self._config.named_owner(root) == user

    def _scope(self, conn: Connection, channel: str, user: str) -> Scope:
        if self.is_direct(channel, user, conn):
            return Scope.episodes(Scope.user(user))
        return Scope.episodes(Scope.channel(channel))

    def index(self, channel: str, should_stop: Callable[[], bool] = lambda: False) -> int:
        """Index every finished exchange of ``channel`` not indexed yet; return how many episodes were added.

        ``should_stop`` is asked between batches and before each write: a stopping
        daemon writes nothing more, and the next start indexes that batch.
        """
        added = 0
        while not should_stop():
            done, more = self.index_batch(channel, should_stop)
            added += done
            if not more:
                break
        return added

    def index_batch(self, channel: str, should_stop: Callable[[], bool] = lambda: False) -> tuple[int, bool]:
        """Index one batch: ``(episodes added, whether more may follow)``."""
        items: list[NewMemory] = []
        with self._store.read() as conn:  # one read: the cursor, the exchanges and what goes with them
            start = self._store.cursors.get(conn, JOB, channel)
            batch, cursor = exchanges(self._store, channel, start, self._config.batch_size, conn)
            if cursor == start:
                return 0, False
            for exchange in batch:
                if exchange.message.options.get("disable_memory"):
                    continue  # opting out of memory for a message opts out of keeping it as an episode
                if self._config.keep == "user" and not has_content(exchange.message.content):
                    # "hi!", "thanks, ok": nothing to recall it by (a greeting is never searched for),
                    # so nothing is embedded or kept; the reply alone is not an episode's text here.
                    continue
                try:
                    items.append(self._memory.validate(self._episode(conn, channel, exchange)))
                except (InvalidInput, NotFound) as exc:  # a persona since removed: nothing to keep it for
                    log.info("episode_skipped", message_id=exchange.message.id, reason=str(exc))
        vectors = self._memory.embed_passages([i.text for i in items]) if items else None
        if should_stop():
            return 0, False
        with self._store.write() as conn:
            # Compare-and-set: another worker (another daemon on the same database, or one that
            # was stopping) may have done this batch.
            if not self._store.cursors.advance(conn, JOB, channel, start, cursor):
                return 0, True
            added = self._store.memories.add(conn, items, vectors) if items else []
        self._prune({(i.persona, i.scope) for i in items})
        created = sum(1 for _mid, new in added if new)
        log.debug("episodes_indexed", channel=channel, added=created, cursor=cursor)
        # A short batch ended where the channel's finished exchanges end: nothing more for now.
        return created, len(batch) == self._config.batch_size

    # -- internals ---------------------------------------------------------------------

    def _episode(self, conn: Connection, channel: str, exchange: Exchange) -> NewMemory:
        msg, reply = exchange.message, exchange.reply
        limit = self._memory.config.max_text_chars
        user_line = f"{msg.author}: {msg.content}"
        reply_line = f"{reply.author}: {reply.content}"
        text = f"{user_line}\n{reply_line}" if self._config.keep == "exchange" else user_line
        context_lines = self._context(conn, channel, msg.id)
        if self._config.keep == "user":
            context_lines.append(reply_line)
        metadata: dict[str, Any] = {
            "episode": {"message_id": msg.id, "reply_id": reply.id, "channel": channel, "user": msg.author},
        }
        if context_lines:
            metadata[CONTEXT_KEY] = "\n".join(context_lines)[:limit]
        persona = reply.persona or reply.author
        return NewMemory(
            persona, self._scope(conn, channel, msg.author), CATEGORY, text[:limit], metadata, msg.created_at, msg.id
        )

    def _context(self, conn: Connection, channel: str, before_id: int) -> list[str]:
        """The channel's earlier messages (as ``keep`` says), oldest first."""
        n = self._config.context_messages
        if not n:
            return []
        roles = ("user", "assistant") if self._config.keep == "exchange" else ("user",)
        earlier = self._store.messages.recent(conn, channel, n * 2, before_id=before_id)
        lines = [f"{m.author}: {m.content}" for m in earlier if m.role in roles][:n]
        return list(reversed(lines))

    def _prune(self, touched: set[tuple[str, Scope]]) -> None:
        """Apply the retention (age, count) to the scopes a batch wrote to."""
        cfg = self._config
        if not cfg.retention_days and not cfg.max_per_scope:
            return
        before = utcnow() - timedelta(days=cfg.retention_days) if cfg.retention_days else None
        with self._store.write() as conn:
            for persona, scope in sorted(touched, key=lambda t: (t[0], str(t[1]))):
                for mid in self._store.memories.expired(conn, persona, scope, before, cfg.max_per_scope):
                    self._store.memories.delete(conn, mid)
