"""Words of a text, for lexical matching: lower-cased, Unicode-aware, CJK as bigrams.

Scripts written without spaces (Chinese, Japanese, Korean) have no word
boundaries to split on, so their runs become overlapping character bigrams
("公园散步" → 公园, 园散, 散步), the usual choice for lexical CJK matching.
"""

from __future__ import annotations

import regex

_TOKEN = regex.compile(r"[\p{L}\p{N}]+(?:['’][\p{L}]+)?")
_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]+")

#: Function words that carry no topic. Deliberately small: minimal filtering.
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "i'm",
        "if",
        "in",
        "into",
        "is",
        "it",
        "it's",
        "its",
        "itself",
        "just",
        "let's",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "ok",
        "okay",
        "yes",
        "yeah",
        "hi",
        "hello",
        "hey",
        "please",
        "thanks",
        "thank",
        "also",
        "like",
        "well",
        "really",
    ]
)


def words(text: str) -> list[str]:
    """Every word of ``text`` in order, lower-cased; CJK runs as bigrams."""
    found: list[str] = []
    for token in _TOKEN.findall(text.casefold()):
        pos = 0
        for run in _CJK.finditer(token):
            if run.start() > pos:
                found.append(token[pos : run.start()])
            chars = run.group()
            found.extend(chars[i : i + 2] for i in range(max(1, len(chars) - 1)))
            pos = run.end()
        if pos < len(token):
            found.append(token[pos:])
    return found


def is_content(word: str) -> bool:
    """True for a word that carries content: not a stop word, not a single Latin letter or digit."""
    return word not in STOP_WORDS and (len(word) > 1 or not word.isascii())


def content_words(text: str) -> list[str]:
    """The words of ``text`` that carry content (see :func:`is_content`), in order."""
    return [w for w in words(text) if is_content(w)]


def dedupe(tokens: list[str]) -> list[str]:
    """``tokens`` without repeats (case-insensitive), first occurrence kept."""
    seen: set[str] = set()
    out: list[str] = []
    for token in tokens:
        key = token.casefold()
        if key not in seen:
            seen.add(key)
            out.append(token)
    return out
