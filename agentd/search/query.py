"""What of a query goes to the full-text index: its content words, as plain terms.

Stop words are dropped (they match nearly every memory and only add noise to
bm25), names and numbers are kept, a possessive ``'s`` is cut ("Caroline's" →
``caroline``, as the index tokenizer splits it off), and repeats go. Stemming
is left to the index's porter tokenizer, which applies it to quoted terms too.
"""

from __future__ import annotations

import regex

from agentd.text.words import content_words, dedupe, is_content

#: At most this many terms are sent (bounds the work of one query; long pasted
#: texts keep their first words).
MAX_TERMS = 24
_POSSESSIVE = regex.compile(r"['’]s$")


def lexical_terms(query: str) -> list[str]:
    """The terms of ``query`` for an OR-query on the full-text index, in order."""
    terms = [_POSSESSIVE.sub("", w) for w in content_words(query)]
    return dedupe([t for t in terms if t and is_content(t)])[:MAX_TERMS]


#: "I" and its contractions: capitalised wherever they stand, never a name.
_FIRST_PERSON = frozenset({"i", "i'm", "i’m", "i've", "i’ve", "i'd", "i’d", "i'll", "i’ll"})
_WORD = regex.compile(r"[\p{L}\p{N}]+(?:['’][\p{L}]+)?")
#: What may stand between a sentence's end and its first word (spaces, quotes, brackets).
_OPENERS = " \t\r\n\"'‘’“”([{*_-"


def named_words(query: str) -> list[str]:
    """The words ``query`` writes as names: capitalised where no sentence starts ("Caroline",
    "LGBTQ", "Fitbit", "June"), not "I" and not stop words ("The" of a title).

    A sentence's first word is capitalised whatever it is, so it never counts: a name that
    opens the query is missed (a query written all in lower case names nothing either).
    """
    found: list[str] = []
    for match in _WORD.finditer(query):
        word = match.group()
        if not word[0].isupper() or word.casefold() in _FIRST_PERSON:
            continue
        before = query[: match.start()].rstrip(_OPENERS)
        if not before or before[-1] in ".!?:;":
            continue
        if is_content(_POSSESSIVE.sub("", word).casefold()):
            found.append(word)
    return found


#: "How many ...", "how much ...", "in total": a question that asks for a number or a total.
_COUNTS = regex.compile(r"\b(?:how\s+many|how\s+much|in\s+total|total\s+number|altogether)\b", regex.IGNORECASE)


def counts(query: str) -> bool:
    """True when ``query`` asks for a number or a total ("How many rare items do I have in
    total?"): its answer is spread over every mention of the thing counted, and its words
    ("rare items") are what gathers them."""
    return _COUNTS.search(query) is not None
