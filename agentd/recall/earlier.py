"""Earlier exchanges: the user's own earlier exchanges in this channel (``[history]``), and search seeds.

Pipeline, per reply:

1. **Candidates**: this user's earlier ``user`` messages in this channel (a user's
   words in a private channel never surface in a group), at most
   ``history.tuning.max_inspected`` of the newest. Empty messages, other users', system
   and tool messages are never candidates.
2. **Overlap**: words (minimal filtering: lower-case, stop words out) of each
   candidate against the query's. Kept when at least two words overlap, or the
   overlap ratio (shared / query words) reaches ``history.tuning.min_overlap_ratio``;
   a literal substring match either way round is always kept, even with no
   content word shared ("what about it" said again). One guard: a substring
   without a content word counts only when it has two words or more and no
   greeting or thanks in it ("what about it", not "ok" or "thank you so much",
   which recur in every conversation and would turn thanks into a search).
   No recency weight in the overlap itself.
3. **Snippets**: newest first, up to ``history.max_snippets``, each paired with
   the assistant's reply to it, both cut to ``history.max_snippet_chars``
   characters (grapheme clusters are never split: CJK and emoji stay whole).
   Only exchanges the prompt does not carry anyway are summarised: those older
   than the oldest message its transcript can hold (``transcript_from``, from
   :meth:`agentd.prompt.builder.ContextBuilder.transcript_start`) and than the
   channel's last ``history.recent_window`` messages (default 0).
4. **Seeds**: the first five de-duplicated (case-insensitive) words of all the
   accepted candidates, newest first — including those the prompt carries, since
   seeds serve the memory search, not the prompt — that the query does not
   already contain. They join the memory query when the message is sparse, and
   stand in for it when it has no content word at all, so "what about the second
   one?" still finds what the earlier exchange was about.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import regex

from agentd.config import HistoryConfig
from agentd.prompt.assembler import Snippet
from agentd.search.intent import PHATIC
from agentd.store import Store
from agentd.text.quoting import quote
from agentd.text.words import content_words, dedupe, is_content, words

#: How many seeds are harvested ("the first five" de-duplicated words).
SEED_COUNT = 5
_WS = re.compile(r"\s+")
_GRAPHEME = regex.compile(r"\X")


@dataclass(frozen=True)
class RecalledExchange:
    """One recalled exchange: the user's message and the reply to it (if any), condensed."""

    message_id: int
    user_text: str
    reply_id: int | None
    reply_text: str | None

    def snippet(self) -> Snippet:
        """The exchange as one prompt line (quoted: recalled text cannot forge structure)."""
        line = f"- earlier, the user said {quote(self.user_text)}"
        if self.reply_text is not None:
            line += f"; you replied {quote(self.reply_text)}"
        ids = (self.message_id,) if self.reply_id is None else (self.message_id, self.reply_id)
        return Snippet(line, ids)


@dataclass(frozen=True)
class EarlierRecall:
    """What earlier-exchange recall found: exchanges newest first, the seeds, how many messages it inspected."""

    exchanges: tuple[RecalledExchange, ...] = ()
    seeds: tuple[str, ...] = ()
    inspected: int = 0

    def snippets(self) -> tuple[Snippet, ...]:
        """The exchanges as assembler snippets, newest first."""
        return tuple(e.snippet() for e in self.exchanges)


def normalise(text: str) -> str:
    """Whitespace collapsed to single spaces, trimmed."""
    return _WS.sub(" ", text).strip()


def condense(text: str, limit: int) -> str:
    """``text`` (whitespace-normalised) cut to at most ``limit`` characters at a grapheme boundary, with "…"."""
    text = normalise(text)
    if len(text) <= limit:
        return text
    kept: list[str] = []
    used = 0
    for cluster in _GRAPHEME.findall(text):
        if used + len(cluster) > limit - 1:
            break
        kept.append(cluster)
        used += len(cluster)
    return "".join(kept).rstrip() + "…"


def is_sparse(query: str, below: int) -> bool:
    """True when ``query`` has fewer than ``below`` content words."""
    return len(dedupe(content_words(query))) < below


def seeded_query(query: str, recalled: EarlierRecall, sparse_below: int) -> str:
    """The memory query: ``query`` with the recalled seeds appended when it is sparse, or the
    seeds alone when it has no content word (seeds supply the base query when the goal is
    empty); ``query`` unchanged otherwise."""
    if not recalled.seeds:
        return query
    if not content_words(query):
        return " ".join(recalled.seeds)
    if is_sparse(query, sparse_below):
        return f"{query} {' '.join(recalled.seeds)}"
    return query


class EarlierExchanges:
    """Recalls a user's earlier exchanges from the store."""

    def __init__(self, store: Store, config: HistoryConfig) -> None:
        self._store = store
        self._config = config

    def recall(
        self, channel: str, user: str, query: str, before_id: int | None, transcript_from: int | None = None
    ) -> EarlierRecall:
        """Exchanges of ``user`` in ``channel`` that overlap ``query``, and the seeds they give.

        ``before_id``: only messages older than this (the current message). ``transcript_from``:
        the oldest message the prompt's transcript carries; it and newer messages are not
        summarised (``None``: the prompt carries no transcript), but still give seeds.
        """
        cfg = self._config
        if not cfg.enabled or cfg.max_snippets == 0:
            return EarlierRecall()
        # Both sides as space-delimited word sequences, so substring tests respect word boundaries.
        query_norm = f" {' '.join(words(query))} "
        query_words = set(content_words(query))
        if not query_norm.strip():
            return EarlierRecall()
        newest = before_id if before_id is not None else 2**62
        with self._store.read() as conn:
            summarise_before = transcript_from if transcript_from is not None else newest
            if cfg.recent_window:
                recent = self._store.messages.history_page(conn, channel, before_id, cfg.recent_window)
                if recent:
                    summarise_before = min(summarise_before, recent[-1][0])
            candidates = self._store.messages.by_author(conn, channel, user, newest, cfg.tuning.max_inspected)
            accepted = [
                (msg_id, content)
                for msg_id, content in candidates
                if content.strip() and self._matches(query_norm, query_words, content)
            ]
            summarised = [(msg_id, content) for msg_id, content in accepted if msg_id < summarise_before]
            summarised = summarised[: cfg.max_snippets]
            replies = self._store.messages.replies_to(conn, [msg_id for msg_id, _ in summarised])
        exchanges = []
        for msg_id, content in summarised:
            reply = replies.get(msg_id)
            exchanges.append(
                RecalledExchange(
                    message_id=msg_id,
                    user_text=condense(content, cfg.max_snippet_chars),
                    reply_id=reply.id if reply else None,
                    reply_text=condense(reply.content, cfg.max_snippet_chars) if reply else None,
                )
            )
        # Seeds come from the tokens candidate selection extracted (the user's own words),
        # minus those the query already has: appended to it, they would add nothing.
        harvested = [w for _, content in accepted for w in _words(content) if is_content(w) and w not in query_words]
        return EarlierRecall(tuple(exchanges), tuple(dedupe(harvested)[:SEED_COUNT]), len(candidates))

    def _matches(self, query_norm: str, query_words: set[str], text: str) -> bool:
        tokens = _words(text)
        lowered = f" {' '.join(tokens)} "
        if _literal(query_norm, lowered) or _literal(lowered, query_norm):
            return True  # a literal (word-aligned) substring match is always kept
        shared = len(query_words.intersection(w for w in tokens if is_content(w)))
        if not shared:
            return False
        return shared >= 2 or shared / len(query_words) >= self._config.tuning.min_overlap_ratio


#: Earlier messages are inspected turn after turn: the words of this many short ones are kept.
_KEPT_TEXTS = 8192
#: Longer messages are split afresh (what is kept stays bounded: at most ~16 MB of text).
_KEPT_CHARS = 2048


@functools.lru_cache(maxsize=_KEPT_TEXTS)
def _short_words(text: str) -> tuple[str, ...]:
    return tuple(words(text))


def _words(text: str) -> tuple[str, ...]:
    """:func:`agentd.text.words.words` of ``text``, kept for short texts."""
    return _short_words(text) if len(text) <= _KEPT_CHARS else tuple(words(text))


def _literal(part: str, whole: str) -> bool:
    """``part`` occurs in ``whole`` word-aligned (both are ``" w1 w2 … "``), and means something:
    it carries a content word, or it is a phrase of two words or more with no greeting or thanks
    in it ("what about it", not "ok" or "thank you so much", which recur in every conversation)."""
    if not part.strip() or part not in whole:
        return False
    inner = part.split()
    return any(is_content(w) for w in inner) or (len(inner) >= 2 and PHATIC.isdisjoint(inner))
