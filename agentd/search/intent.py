"""What a query asks of memory: a topic, the user themself, or nothing at all.

Embedding similarity answers "which memory is about the same thing as this
text". Three kinds of message break that question, whatever the model:

- **No topic** ("hello", "ok thanks!", "lol", "and the second one?"): there is
  nothing to be about, yet every memory is *some* distance away, and a short
  memory ("Has a cat") sits close to every short message (e5-small-v2 scores
  "hello" against "Has a cat" at 0.80, above most related pairs). Such a query
  recalls nothing.
- **About the user** ("what do you know about me?", "remind me what I told
  you", "who am I?"): the answer is every memory *of the user*, and none of
  them shares a topic with the question. Such a query recalls the user's own
  memories (user scope), newest first.
- **The user's tastes** ("what are my preferences?", "what do I like?", "what
  should I learn?", "any recommendations for me?"): the user's preference
  memories, which a request for advice rests on.

Everything else is a **topic** query and goes to hybrid search as before.

The decision is made on words, in :func:`analyse`: a query's *topic words* are
its content words (:func:`agentd.text.words.is_content`) minus conversational words
that carry no subject (greetings, thanks, acknowledgements, laughter, fillers,
pronoun-like "one"/"thing", ordinals, time words), minus the words that ask
about memory itself (know, remember, told, …), about tastes (like, favourite,
…) or for advice (recommend, suggest, should, and the bare verbs such advice
is about: learn, do, try, …), minus the persona's own name ("thanks buddy").
A query with topic words is a topic query. A query without any is about the
user when one of its clauses is first-person ("I", "me", "my", …) and either
asks (ends in "?" or starts like a question) or names memory, tastes or
advice; otherwise it is content-free. The lexicon is English: in other
languages every content word counts as topic, as before.

The same rule guards the other side: a memory without a content word ("a",
"ok", "?") is never a search result (:func:`has_content`).

A topic query also asks something **of the asker** or not (:func:`asks_of_asker`):
a decision or advice for them ("can I eat the dumplings?", "is a cruise a good
idea for me?", "recommend a book"), something about them ("what's my dog
called?", their name), or neither. A decision for the asker rests on whatever
constrains them (a diet, an allergy, a fear), which rarely shares a word or a
topic with the question. A memory *about* the user answers only a question that
asks something of them: "Why is the Dead Sea so salty?" shares a topic with
"Is afraid of heights" or "Sister lives in Porto" only by accident, however
close the two sit in embedding space. A how-to question's "I" is anyone's
("How do I save a file in Vim?"): it counts only with another reference to the
asker ("How do I get to my sister's?").
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal

import regex

from agentd.text.words import is_content, words

IntentKind = Literal["topic", "about_user", "none"]
#: What a topic query asks of the asker: a decision or advice for them, something about them, or neither.
Asker = Literal["for", "about", "none"]
#: Which of the user's memories an ``about_user`` query asks for.
Facet = Literal["all", "preferences"]


def lexicon(text: str) -> frozenset[str]:
    """A word list written as whitespace-separated words."""
    return frozenset(text.split())


FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "im", "ive", "id", "ill"})

#: Greetings, thanks, acknowledgements, laughter, fillers: no topic of their own.
PHATIC = lexicon(
    """
    hi hello hey heya hiya howdy yo sup greetings morning afternoon evening night gm gn
    bye goodbye byebye cya ciao farewell later welcome good day
    thanks thank thx thnx ty tysm cheers appreciate appreciated grateful much lot lots
    ok okay okey kk alright right sure yes yeah yep yup ya yea nope nah fine
    got gotcha understood noted roger agree agreed makes sense sounds seems
    cool nice great awesome perfect excellent wonderful amazing fantastic brilliant lovely
    neat sweet wow indeed exactly true totally definitely absolutely certainly course
    worries problem np welcome
    lol lmao lmfao rofl haha hahaha hehe heh xd omg oh ah ahh uh um umm hmm hm mm mhm huh
    oops whoa yay ugh meh welp aw aww oof
    please pls plz sorry excuse
    anyway anyways actually basically literally maybe perhaps guess think
    everyone guys folks mate dude buddy pal
    back going doing new there today
    """
)
#: Words that point at something said before ("the second one", "that thing") rather than name it.
GENERIC = lexicon(
    """
    one ones first second third fourth fifth last next other others another
    thing things stuff something anything everything nothing
    else same part bit kind sort way option options choice choices point points
    tonight tomorrow yesterday weekend week soon now more far already
    """
)
#: Words that ask what memory holds.
META = lexicon(
    """
    know knew known remember remembered recall recalled remind told said say saying
    mention mentioned shared share learned learnt noted note stored saved memory memories
    info information details detail facts fact data file record records profile
    summarise summarize summary rundown
    """
)
#: Words that ask about tastes; a memory using one states a preference.
PREFERENCE = lexicon(
    """
    like likes liked love loves loved enjoy enjoys enjoyed prefer prefers preferred
    preference preferences favourite favourites favorite favorites interest interests
    hobby hobbies dislike dislikes disliked hate hates hated taste tastes fan into
    """
)
#: Words that ask for advice.
ADVICE = lexicon(
    """
    should recommend recommends recommendation recommendations suggest suggests suggestion
    suggestions advice advise idea ideas tip tips
    """
)
#: Bare activities that advice is asked about ("what should I learn?"), and verbs of asking:
#: no topic of their own, and no cue either.
ACTIONS = lexicon(
    """
    learn do try read watch eat cook make buy play visit see get go start study listen
    wear use pick choose focus practice practise tell give show let help
    """
)
#: Memory categories that mark a preference (besides a preference word in the text).
PREFERENCE_CATEGORIES = frozenset({"preference", "preferences", "like", "likes", "taste", "tastes"})

_ASKS_ONLY = frozenset({"into"})
#: "my", "mine", and the first person plural: the asker's own.
_POSSESSIVE = lexicon("my mine myself we our ours ourselves")
#: A request for advice is for the asker, whoever it names ("recommend a book for a long flight").
_ASKS_ADVICE = lexicon(
    "recommend recommends recommendation recommendations suggest suggestion suggestions advice advise tips idea ideas"
)
#: "I wonder ...", "I'm curious ...", "I want to know ...": an "I" that only frames the question.
_WONDER = lexicon("wonder wondered wondering curious know")
#: "I", "I'm", "I've" ("I'd" and "I'll" lose their apostrophe and read as "id" and "ill").
_SUBJECT_I = frozenset({"i", "im", "ive"})
#: A modal before "I"/"we" asks for a decision on the asker's behalf ("can I eat ...", "should we ...").
_MODAL = lexicon("can could should would may might must shall will")
_WE_I = frozenset({"i", "we"})
#: "for me", "help me": for the asker's sake.
_FOR_ASKER = lexicon("me my myself us our")
_BENEFIT = lexicon("for help")
#: "how do I ...": a how-to question, whose "I" is anyone's ("how can I", "how should I" ask
#: about the asker's own case more often than not).
_HOW_TO = lexicon("do does")
_ABOUT = lexicon("about on of for to regarding concerning")
_QUESTION_START = lexicon(
    "who what which where when why how do does did can could would will am is are have has tell remind any"
)
_WORD = regex.compile(r"[\p{L}\p{N}]+(?:['’][\p{L}]+)?")
_CLAUSE = re.compile(r"[^.!?;,\n]+[.!?;,\n]*")
_NOT = re.compile(r"n['’]t$")
_NOT_STEMS = {"ca": "can", "wo": "will", "sha": "shall"}


def base_word(token: str) -> str:
    """``token`` without a contraction or possessive ("what's" → what, "don't" → do, "i'm" → im)."""
    if "'" not in token and "’" not in token:
        return token
    if _NOT.search(token):
        stem = token[:-3]
        return _NOT_STEMS.get(stem, stem)
    if token in ("i'm", "i’m", "i've", "i’ve", "i'd", "i’d", "i'll", "i’ll"):
        return "i" + token[2:]
    return re.split(r"['’]", token, maxsplit=1)[0]


def plain_words(text: str) -> list[str]:
    """The words of ``text`` (:func:`agentd.text.words.words`) with contractions and possessives cut."""
    return [w for w in (base_word(t) for t in words(text)) if w]


def _not_topic(names: Collection[str]) -> frozenset[str]:
    return PHATIC | GENERIC | META | PREFERENCE | ADVICE | ACTIONS | FIRST_PERSON | {n.casefold() for n in names}


def topic_words(text: str, names: Collection[str] = ()) -> list[str]:
    """The words of ``text`` that name a subject (see the module docstring); ``names`` are ignored too."""
    skip = _not_topic(names)
    return [w for w in plain_words(text) if is_content(w) and w not in skip]


def has_content(text: str) -> bool:
    """True when ``text`` has a content word that is not a greeting or filler ("a", "ok", "?" have none).

    On every search result, so it stops at the first content word (a run of CJK, which
    :func:`agentd.text.words.words` would cut into bigrams, is content either way).
    """
    for match in _WORD.finditer(text.casefold()):
        word = base_word(match.group())
        if is_content(word) and word not in PHATIC:
            return True
    return False


def states_preference(text: str, category: str) -> bool:
    """True for a memory that records a taste: a preference category or a preference word in its text
    ("into" only asks: "what am I into?", but "moved into a flat" states no taste)."""
    if category.casefold() in PREFERENCE_CATEGORIES:
        return True
    return not (PREFERENCE - _ASKS_ONLY).isdisjoint(plain_words(text))


@dataclass(frozen=True)
class QueryIntent:
    """What one query asks of memory."""

    kind: IntentKind
    #: For ``about_user``: every memory of the user, or their preferences only.
    facet: Facet = "all"
    #: The query's topic words (empty unless ``kind == "topic"``).
    topic: tuple[str, ...] = ()
    #: What a topic query asks of the asker (:func:`asks_of_asker`); always "about" otherwise.
    asker: Asker = "about"


def _asks(clause: str, tokens: list[str]) -> bool:
    return clause.rstrip().endswith("?") or (bool(tokens) and tokens[0] in _QUESTION_START)


def _personal(tokens: list[str]) -> bool:
    """True when the clause is about the speaker: "I", "my", "myself", or "me" after a
    preposition or a memory verb ("about me", "know me"), not "tell me more"."""
    for i, token in enumerate(tokens):
        if token in FIRST_PERSON and token != "me":
            return True
        if token == "me" and i > 0 and (tokens[i - 1] in _ABOUT or tokens[i - 1] in META):
            return True
    return False


def asks_of_asker(query: str, names: Collection[str] = ()) -> Asker:
    """What ``query`` asks of the person asking (see the module docstring).

    ``"for"``: a decision or advice for them: a modal with "I" or "we" ("can I", "should we"),
    "for me" / "for my", "help me", or a request for advice ("recommend", "suggest", "tips").
    ``"about"``: it refers to them otherwise: "my", "our", "I" outside a how-to question ("how
    do I ...") and not only framing it ("I wonder why ...", "I'm curious ..."), "me" after a
    preposition or a memory verb ("remind me"), one of ``names`` (the asker's names).
    ``"none"``: neither.
    """
    own = {n for name in names for n in name.casefold().split()}
    found: Asker = "none"
    for clause in _CLAUSE.findall(query):
        tokens = plain_words(clause)
        for i, token in enumerate(tokens):
            before = tokens[i - 1] if i > 0 else ""
            if token in _ASKS_ADVICE or (token in _FOR_ASKER and before in _BENEFIT):
                return "for"
            if token in _WE_I and before in _MODAL:
                return "for"
            refers = token in _POSSESSIVE or token in own or (token == "me" and (before in _ABOUT or before in META))
            how_to = i >= 2 and tokens[i - 2] == "how" and before in _HOW_TO
            framing = not _WONDER.isdisjoint(tokens[i + 1 : i + 4])
            if refers or (token in _SUBJECT_I and not how_to and not framing):
                found = "about"
    return found


def _about_user(clauses: Iterable[str]) -> Facet | None:
    """What a query without topic words asks about the user, if anything (see the module docstring).

    Per first-person clause: words about tastes or advice ask for the user's
    preferences; words about memory, or a question, ask for everything. Across
    clauses, everything wins.
    """
    found: Facet | None = None
    for clause in clauses:
        tokens = plain_words(clause)
        if not _personal(tokens):
            continue
        if not PREFERENCE.isdisjoint(tokens) or not ADVICE.isdisjoint(tokens):
            found = found or "preferences"
        elif not META.isdisjoint(tokens) or _asks(clause, tokens):
            found = "all"
    return found


def analyse(query: str, names: Collection[str] = (), asker_names: Collection[str] = ()) -> QueryIntent:
    """Classify ``query``; ``names`` (the persona's name) never count as topic words;
    ``asker_names`` (the asker's) make a question about the asker."""
    topic = topic_words(query, names)
    if topic:
        return QueryIntent("topic", topic=tuple(topic), asker=asks_of_asker(query, asker_names))
    facet = _about_user(_CLAUSE.findall(query))
    if facet is not None:
        return QueryIntent("about_user", facet)
    return QueryIntent("none")


__all__ = [
    "Facet",
    "IntentKind",
    "QueryIntent",
    "Asker",
    "analyse",
    "asks_of_asker",
    "base_word",
    "has_content",
    "plain_words",
    "states_preference",
    "topic_words",
]
