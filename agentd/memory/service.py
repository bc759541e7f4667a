"""The memory service: add, list, forget, import and re-embed memories, and search them.

Everything that reads or writes memories goes through here (the CLI, the
skills, the actors, the HTTP API), so validation and scoping are the same
everywhere. Searching is the search package's (:mod:`agentd.search`): the
service hands a :class:`~agentd.search.SearchQuery` to its searcher.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd._exceptions import EmbedderNotConfigured, InvalidInput, NotFound
from agentd.access.scopes import Reach, Scope, is_blank
from agentd.config import MemoryConfig
from agentd.embedders import Embedder
from agentd.embedders.calibration import DEFAULT_WORDS
from agentd.embedders.guard import GuardedEmbedder, guarded
from agentd.memory.importer import ImportReport, parse_line, read_lines
from agentd.search import Searcher, SearchQuery, SearchResult
from agentd.search.eligibility import eligible
from agentd.search.fusion import Fusion
from agentd.search.intent import has_content
from agentd.search.subjects import indexed_text
from agentd.store import Store
from agentd.store.jobs import Revision
from agentd.store.lexical import CONTEXT_KEY
from agentd.store.memories import Memory, NewMemory
from agentd.store.schema import utcnow

if TYPE_CHECKING:
    import numpy as np

_CATEGORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$")
#: How far in the future a memory's ``created_at`` may be (clocks disagree a little, not by years).
MAX_FUTURE = timedelta(days=1)
#: ``progress(done, total)`` callbacks for long operations.
Progress = Callable[[int, int], None]
#: How many of a user's newest memories the profile is gathered from (bounds the work).
PROFILE_SCAN = 500


def _no_progress(_done: int, _total: int) -> None:
    pass


class MemoryService:
    """Validated, scoped access to memories, with the injected embedder."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder | None,
        config: MemoryConfig,
        personas: Collection[str] | None = None,
        check_embedding: bool = True,
    ) -> None:
        self._store = store
        # Every vector that reaches the store passes the boundary: bounded in time, finite, unit length.
        self._embedder = guarded(embedder)
        self._config = config
        self._personas = personas
        fusion = Fusion.of(embedder.words if embedder is not None else DEFAULT_WORDS, config)
        self._searcher = Searcher(store, self._embedder, config, fusion, self.check_persona)
        if embedder is not None and check_embedding:
            store.bind_embedding(embedder.model_id, embedder.dimension)

    @property
    def embedder(self) -> Embedder | None:
        """The embedder in use (``None``: semantic search is unavailable)."""
        return self._embedder

    @property
    def store(self) -> Store:
        """The store the memories are in."""
        return self._store

    @property
    def fusion(self) -> Fusion:
        """The hybrid-search weights in use (the embedder's own unless ``[memory.tuning]`` sets them)."""
        return self._searcher.fusion

    @property
    def config(self) -> MemoryConfig:
        """The ``[memory]`` settings."""
        return self._config

    # -- validation ------------------------------------------------------------

    def check_persona(self, persona: str) -> str:
        """Raise :class:`NotFound` for a persona agentd does not know."""
        if not isinstance(persona, str) or not persona:
            raise InvalidInput("persona", "must be a non-empty string")
        if self._personas is not None and persona not in self._personas:
            known = ", ".join(sorted(self._personas)) or "none"
            raise NotFound("persona", persona, f"known personas: {known}")
        return persona

    def validate(self, item: NewMemory) -> NewMemory:
        """Check one new memory; return it with its text stripped."""
        self.check_persona(item.persona)
        if not isinstance(item.text, str):
            raise InvalidInput("text", "must be a string")
        text = item.text.strip()
        if is_blank(text):
            raise InvalidInput("text", "must not be empty, whitespace or invisible characters only")
        if len(text) > self._config.max_text_chars:
            raise InvalidInput(
                "text", f"is {len(text)} characters; the limit is {self._config.max_text_chars} (memory.max_text_chars)"
            )
        if not isinstance(item.category, str) or not _CATEGORY.match(item.category):
            raise InvalidInput("category", "must be 1-64 letters, digits, spaces, '_', '.' or '-'")
        if not isinstance(item.metadata, dict):
            raise InvalidInput("metadata", "must be a JSON object")
        context = item.metadata.get(CONTEXT_KEY)
        if context is not None and (not isinstance(context, str) or len(context) > self._config.max_text_chars):
            raise InvalidInput(
                f"metadata.{CONTEXT_KEY}",
                f"must be a string of at most {self._config.max_text_chars} characters",
            )
        if not isinstance(item.scope, Scope):
            raise InvalidInput("scope", "must be global, channel:NAME or user:ID")
        if item.created_at is not None and item.created_at > utcnow() + MAX_FUTURE:
            # A memory from the far future would never decay, and would outrank everything for ever.
            raise InvalidInput(
                "created_at", f"is {item.created_at.isoformat()}, in the future; at most a day ahead of now is accepted"
            )
        return replace(item, text=text)

    # -- writing -----------------------------------------------------------------

    def add(
        self,
        persona: str,
        scope: Scope,
        text: str,
        category: str = "fact",
        metadata: dict[str, Any] | None = None,
        created_at: datetime | None = None,
        source_message_id: int | None = None,
    ) -> tuple[Memory, bool]:
        """Store one memory; return it and whether it was new (False: an identical one exists)."""
        item = self.validate(NewMemory(persona, scope, category, text, metadata or {}, created_at, source_message_id))
        ((mid, created),) = self.add_many([item])
        with self._store.read() as conn:
            memory = self._store.memories.get(conn, mid)
        assert memory is not None
        return memory, created

    def add_many(self, items: Sequence[NewMemory], also: Callable[[Any], None] | None = None) -> list[tuple[int, bool]]:
        """Store already-validated memories in one transaction; embeds them in one batch.

        A memory's ``metadata["context"]`` is indexed for full-text search with
        it, never shown (see :func:`agentd.store.lexical.context_of`). A user's memory is
        embedded without a leading subject that names the user (:mod:`agentd.search.subjects`). ``also(conn)``
        runs in the same transaction (a background job moves its cursor there).
        """
        vecs = (
            self._embed([indexed_text(i.text, i.scope) for i in items])
            if self._embedder is not None and items
            else None
        )
        with self._store.write() as conn:
            added = self._store.memories.add(conn, items, vecs) if items else []
            if also is not None:
                also(conn)
            return added

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray | None:
        """Embed memory texts (``None`` without an embedder): for writes made in one transaction later."""
        return self._embed(texts) if self._embedder is not None and texts else None

    def forget(self, memory_id: int) -> Memory:
        """Delete one memory: its row, vector and index entry."""
        with self._store.write() as conn:
            memory = self._store.memories.get(conn, memory_id)
            if memory is None:
                raise NotFound("memory", memory_id)
            self._store.memories.delete(conn, memory_id)
        return memory

    def import_jsonl(
        self,
        path: Path,
        default_persona: str | None = None,
        progress: Progress = _no_progress,
        batch: int = 256,
        strict: bool = False,
    ) -> ImportReport:
        """Import a JSONL file (UTF-8, a byte order mark allowed); each bad line, bad UTF-8
        included, is reported with its number and skipped, or with ``strict`` refuses the
        whole file (nothing is imported)."""
        report = ImportReport()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidInput("file", f"cannot read {path}: {exc.strerror}") from exc
        valid: list[NewMemory] = []
        for number, raw in read_lines(data):
            if isinstance(raw, InvalidInput):
                report.skipped.append((number, str(raw)))
                continue
            try:
                valid.append(parse_line(raw, default_persona, self.validate))
            except (InvalidInput, NotFound) as exc:
                report.skipped.append((number, str(exc)))
        if strict and report.skipped:
            report.refused = True
            return report
        total = len(valid)
        progress(0, total)
        for start in range(0, total, batch):
            chunk = valid[start : start + batch]
            for _mid, created in self.add_many(chunk):
                if created:
                    report.added += 1
                else:
                    report.duplicates += 1
            progress(min(start + batch, total), total)
        return report

    def reembed(self, progress: Progress = _no_progress, batch: int = 256) -> int:
        """Rebuild every vector with the configured embedder; return how many were embedded.

        The store is re-bound to the configured model. Vectors are staged batch by
        batch beside the live ones and swapped in one transaction at the end.
        """
        embedder = self._require_embedder()
        vectors = self._store.vectors
        with self._store.write() as conn:
            vectors.begin_rebuild(conn, embedder.dimension)
            total = self._store.memories.count(conn)
        progress(0, total)
        done = 0
        with self._store.read() as reader:
            batches = list(self._store.memories.iter_all(reader, batch))
        for mems in batches:
            vecs = self._embed([indexed_text(m.text, m.scope) for m in mems])
            with self._store.write() as conn:
                vectors.insert_staged(
                    conn, [(m.id, m.persona, str(m.scope), v) for m, v in zip(mems, vecs, strict=True)]
                )
            done += len(mems)
            progress(done, total)
        with self._store.write() as conn:
            self._store.rebind_embedding(conn, embedder.model_id, embedder.dimension)
            # Memories added while re-embedding ran are embedded now.
            late = vectors.missing(conn)
            if late:
                mems = list(self._store.memories.fetch(conn, late).values())
                vecs = self._embed([indexed_text(m.text, m.scope) for m in mems])
                vectors.insert(conn, [(m.id, m.persona, str(m.scope), v) for m, v in zip(mems, vecs, strict=True)])
                done += len(mems)
        return done

    # -- reading -----------------------------------------------------------------

    def get(self, memory_id: int) -> Memory:
        """One memory by id."""
        with self._store.read() as conn:
            memory = self._store.memories.get(conn, memory_id)
        if memory is None:
            raise NotFound("memory", memory_id)
        return memory

    def list_memories(
        self, persona: str, scope: Scope | None = None, limit: int = 100, offset: int = 0
    ) -> list[Memory]:
        """A persona's memories, newest first (episodes only when ``scope`` is an episodes scope)."""
        self.check_persona(persona)
        with self._store.read() as conn:
            return self._store.memories.page(conn, persona, scope, limit, offset)

    def revisions(self, memory_id: int) -> list[Revision]:
        """A memory's revisions (fact extraction's decisions), oldest first; :class:`NotFound` when
        there is neither such a memory nor any revision of it."""
        with self._store.read() as conn:
            entries = self._store.memory_history.of(conn, memory_id)
            if not entries and self._store.memories.get(conn, memory_id) is None:
                raise NotFound("memory", memory_id)
        return entries

    def count(self, persona: str | None = None) -> int:
        """How many memories are stored (episodes are not counted)."""
        with self._store.read() as conn:
            return self._store.memories.count(conn, persona, episodes=False)

    def profile(self, persona: str, user: str | None) -> tuple[Memory, ...]:
        """The user's profile: their own memories (user scope) in ``memory.profile_categories``,
        newest first, at most :data:`PROFILE_SCAN` of their newest memories looked at; empty when
        ``memory.profile_tokens`` is 0 or there is no user. Memories without content are left out.
        The prompt assembler fits as many as ``profile_tokens`` allows."""
        if not self._config.profile_tokens or user is None:
            return ()
        self.check_persona(persona)
        wanted = {c.casefold() for c in self._config.profile_categories}
        with self._store.read() as conn:
            memories = self._store.memories.page(conn, persona, Scope.user(user), PROFILE_SCAN)
        return tuple(m for m in memories if m.category.casefold() in wanted and has_content(m.text))

    # -- searching (agentd/search/) ------------------------------------------------------

    @property
    def searcher(self) -> Searcher:
        """The search over these memories (:mod:`agentd.search`)."""
        return self._searcher

    def search(self, request: SearchQuery) -> SearchResult:
        """The best memories for ``request``, best first, with its near misses, what was not
        eligible in its channel and the search's timings (:meth:`agentd.search.Searcher.search`)."""
        return self._searcher.search(request)

    def eligible(self, reach: Reach, memories: Sequence[Memory]) -> list[Memory]:
        """The ``memories`` that may be used in ``reach`` (see :meth:`agentd.access.scopes.Reach.eligible`)."""
        return eligible(self._store, reach, memories)

    # -- internals -----------------------------------------------------------------

    def _require_embedder(self) -> GuardedEmbedder:
        if self._embedder is None:
            raise EmbedderNotConfigured(
                'no embedding model is configured ([embedding] provider = "none"); '
                'semantic memory search needs one: set provider = "local" or "litellm"'
            )
        return self._embedder

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """The passages' vectors, a text repeated in the batch embedded once (an import may repeat one
        thousands of times: the same vector each time, for a fraction of the time)."""
        embedder = self._require_embedder()
        unique = list(dict.fromkeys(texts))
        if len(unique) == len(texts):
            return embedder.embed(list(texts))
        position = {text: i for i, text in enumerate(unique)}
        vectors: np.ndarray = embedder.embed(unique)[[position[t] for t in texts]]
        return vectors
