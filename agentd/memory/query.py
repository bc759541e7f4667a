"""What of a query goes to the full-text index: its content words, as plain terms.

Stop words are dropped (they match nearly every memory and only add noise to
bm25), names and numbers are kept, a possessive ``'s`` is cut ("Caroline's" →
``caroline``, as the index tokenizer splits it off), and repeats go. Stemming
is left to the index's porter tokenizer, which applies it to quoted terms too.
"""

from __future__ import annotations

import regex

from agentd.words import content_words, dedupe, is_content

#: At most this many terms are sent (bounds the work of one query; long pasted
#: texts keep their first words).
MAX_TERMS = 24
_POSSESSIVE = regex.compile(r"['’]s$")


def lexical_terms(query: str) -> list[str]:
    """The terms of ``query`` for an OR-query on the full-text index, in order."""
    terms = [_POSSESSIVE.sub("", w) for w in content_words(query)]
    return dedupe([t for t in terms if t and is_content(t)])[:MAX_TERMS]
