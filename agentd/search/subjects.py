"""Who a user memory is about, said one way: the text its vector is made from.

A memory about a user gets written many ways: with their name ("Carol plays the
cello", an operator's import, "remember that Carol ..."), subjectless as
extractors write it ("Plays the cello"), as "User plays the cello", or in the first
person ("I play the cello"). Whoever asks, the question is theirs: "what
instrument do I play?". An embedding model sees the name as a topic of its own
and scores "Carol plays the cello" far below "Plays the cello" for that question
(e5-small-v2, asked "What programming language should I learn?": relevance 0.19 for
"Carol likes Python" against 0.90 for "Likes Python").

In a user's scope, who the memory is about is known: the user. So the vector of
a user memory is made from its text with the leading subject that names the
user dropped (:func:`indexed_text`): their name (from the user id, see
:func:`names_of`) or "I"/"My", with a following "is"/"am"/"'s" possessive, so
those ways of writing it read like the subjectless form the model scores best.
"User ..." is left as written: the model already reads it as the asker (0.89 for
"User likes Python" in that case), and stripping it made "The user's favorite food is pasta" a
match for "what is my favorite color?". The memory's text is kept as written; only its vector (and
nothing shown) comes from the normalised text. Memories in other scopes are
embedded as written: whom they are about is not known there.
"""

from __future__ import annotations

import re

from agentd.access.scopes import Scope

#: What separates the parts of a user id: a network prefix (``libera:bob``), dots, dashes, underscores.
_ID_PARTS = re.compile(r"[:._\-@+/]+")
_FIRST_PERSON = r"i(?:['’]m|['’]ve|['’]d|['’]ll)?|my|me"
#: A copula or auxiliary right after the subject, dropped with it ("Carol is allergic" -> "allergic").
_AFTER = r"(?:\s+(?:is|am|was|has\s+been|is\s+now))?"


def names_of(user_id: str) -> tuple[str, ...]:
    """The names a user id stands for, longest first: ``priya.nair`` -> ("priya nair", "priya");
    ``irc:tomasz`` -> ("tomasz",); a network prefix is not a name."""
    local = user_id.rsplit(":", 1)[-1]
    parts = [p for p in _ID_PARTS.split(local) if p and not p.isdigit()]
    if not parts:
        return ()
    names = [" ".join(parts)]
    if len(parts) > 1:
        names.append(parts[0])
    return tuple(n.casefold() for n in names)


def _subject(names: tuple[str, ...], user_word: bool = False) -> re.Pattern[str]:
    who = [_FIRST_PERSON, *(re.escape(n).replace(r"\ ", r"\s+") for n in names)]
    if user_word:
        who.append(r"(?:the\s+)?user")
    return re.compile(rf"^\s*(?:{'|'.join(who)})(?:['’]s\b|s['’]|s\b)?{_AFTER}\b[\s,:]*", re.IGNORECASE)


def indexed_text(text: str, scope: Scope) -> str:
    """The text a memory's vector is made from: for a user's memory, without a leading subject
    that names the user (see the module docstring); any other memory's text as it is."""
    return _without_subject(text, scope, user_word=False)


def reread_text(text: str, scope: Scope) -> str:
    """The text the cross-encoder reads (:mod:`agentd.search.rerank`): for a user's memory, without a
    leading subject that names the user, "User" and "The user" included (it only orders candidates,
    so the threshold case that keeps "User" in :func:`indexed_text` does not arise); any other
    memory's text as it is."""
    return _without_subject(text, scope, user_word=True)


def _without_subject(text: str, scope: Scope, user_word: bool) -> str:
    if scope.kind != "user":
        return text
    stripped = _subject(names_of(scope.id), user_word).sub("", text, count=1)
    # Nothing left: the subject was the whole memory ("Carol").
    return stripped if stripped.strip() else text
