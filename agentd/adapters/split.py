"""Cutting a reply into lines a chat network accepts.

Each line is at most ``limit`` bytes of UTF-8. Lines break at the reply's own
newlines, else at the last whitespace that fits; a word longer than a line is
cut between grapheme clusters (never inside a UTF-8 sequence, a combining mark,
an emoji sequence or a flag), so every piece is valid text as the user typed it.
"""

from __future__ import annotations

import regex

_GRAPHEME = regex.compile(r"\X")
_TOKENS = regex.compile(r"\S+|\s+")


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _cut_word(word: str, limit: int) -> list[str]:
    """A word wider than ``limit`` bytes, in pieces of whole grapheme clusters."""
    pieces: list[str] = []
    current = ""
    for cluster in _GRAPHEME.findall(word):
        if current and _size(current + cluster) > limit:
            pieces.append(current)
            current = ""
        current += cluster  # a single cluster wider than the limit stays whole rather than broken
    if current:
        pieces.append(current)
    return pieces


def split_text(text: str, limit: int) -> list[str]:
    """``text`` as lines of at most ``limit`` UTF-8 bytes (blank lines dropped)."""
    if limit < 8:
        raise ValueError("a line limit below 8 bytes cannot hold a grapheme cluster")
    lines: list[str] = []
    for paragraph in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        current = ""
        for token in _TOKENS.findall(paragraph):
            if token.isspace():
                if current:
                    current += " "
                continue
            candidate = f"{current}{token}" if current else token
            if _size(candidate) <= limit:
                current = candidate
                continue
            if current.strip():
                lines.append(current.rstrip())
            current = ""
            if _size(token) <= limit:
                current = token
            else:
                *full, current = _cut_word(token, limit)
                lines.extend(full)
        if current.strip():
            lines.append(current.rstrip())
    return lines
