"""Where a memory lives and where a search may look.

A memory belongs to one persona and one :class:`Scope`: the persona's global
store, one channel, or one user. Its canonical spelling is ``global``,
``channel:NAME`` or ``user:ID``. A search looks at a :class:`Reach`: one persona's
global store plus, when given, one channel and one user — never another
persona's, channel's or user's memories.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal

from agentd._exceptions import InvalidInput

ScopeKind = Literal["global", "channel", "user", "episodes"]
#: Python's whitespace (``str.isspace``), spelled out: regex engines disagree on ``\s``
#: (JavaScript's lacks U+001C-U+001F and U+0085, Rust's lacks U+001C-U+001F), and the API's
#: schema, pydantic and this module must reject exactly the same characters.
WHITESPACE = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
#: Characters that show nothing and are not whitespace (zero-width spaces and joiners, the soft
#: hyphen, direction marks, invisible operators, the byte order mark): text of these alone is blank.
INVISIBLE = "\\xad\\u180e\\u200b-\\u200f\\u2060-\\u2064\\ufeff"
_BLANK = re.compile(f"^[{WHITESPACE}{INVISIBLE}]*$")


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing but whitespace and invisible characters (:data:`INVISIBLE`)."""
    return _BLANK.match(text) is not None


#: Control (Unicode category Cc) and format (Cf) characters (Unicode 14): zero-width spaces and
#: joiners, direction marks, embeddings, overrides and isolates, the soft hyphen, the byte order
#: mark, tags. In an identifier they make ``alice\u200b`` a different user that looks like
#: ``alice``. (:func:`check_identifier` also refuses them by their category, whatever Unicode
#: version adds.)
CONTROL_OR_FORMAT = (
    "\\x00-\\x1f\\x7f-\\x9f\\xad\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890-\\u0891\\u08e2\\u180e"
    "\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u2064\\u2066-\\u206f\\ufeff\\ufff9-\\ufffb"
    # Beyond the BMP, as the characters themselves (JSON Schema's patterns have no escape for them):
    # U+110BD, U+110CD, U+13430-U+1343F, U+1BCA0-U+1BCA3, U+1D173-U+1D17A, U+E0001, U+E0020-U+E007F (tags).
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
)
#: A channel name or user id (also the pattern the API's schema declares): 1-128 characters,
#: no whitespace, no control, invisible or bidirectional characters, not starting with ':'.
IDENTIFIER_PATTERN = f"^[^{WHITESPACE}{CONTROL_OR_FORMAT}:][^{WHITESPACE}{CONTROL_OR_FORMAT}]{{0,127}}$"
#: What an identifier must be, in words (the API's 422 for :data:`IDENTIFIER_PATTERN`).
IDENTIFIER_RULE = (
    "must be 1-128 characters without whitespace, control, invisible or bidirectional characters and not start with ':'"
)
_ID = re.compile(IDENTIFIER_PATTERN)
_UNSEEN = re.compile(f"[{CONTROL_OR_FORMAT}]")


def unseen_character(value: str) -> str | None:
    """The first control, format (invisible) or bidirectional character of ``value``, spelled
    ``U+200B at 5``; ``None`` when it has none."""
    for index, char in enumerate(value):
        if _UNSEEN.match(char) or unicodedata.category(char) in ("Cc", "Cf"):
            return f"U+{ord(char):04X} ({unicodedata.name(char, 'unnamed')}) at {index}"
    return None


def check_identifier(field: str, value: str) -> str:
    """Validate a channel name or user id: 1-128 characters, no whitespace, no control, invisible
    (zero-width, format) or bidirectional characters, no leading ':'."""
    if not isinstance(value, str):
        raise InvalidInput(field, IDENTIFIER_RULE)
    unseen = unseen_character(value)
    if unseen is not None:
        raise InvalidInput(field, f"must not hold control, invisible or bidirectional characters: {unseen}")
    if not _ID.fullmatch(value):
        raise InvalidInput(field, IDENTIFIER_RULE)
    return value


@dataclass(frozen=True, order=True)
class Scope:
    """One memory scope: ``global``, ``channel:NAME`` or ``user:ID``."""

    kind: ScopeKind
    id: str = ""

    def __post_init__(self) -> None:
        if self.kind == "global":
            if self.id:
                raise InvalidInput("scope", "the global scope takes no id")
        elif self.kind in ("channel", "user"):
            check_identifier(f"scope.{self.kind}", self.id)
        elif self.kind == "episodes":
            # The episodes of one channel or of one user: ``episodes:channel:NAME``, ``episodes:user:ID``.
            inner_kind, sep, inner_id = self.id.partition(":")
            if not sep or inner_kind not in ("channel", "user"):
                raise InvalidInput("scope", "episodes scopes are episodes:channel:NAME or episodes:user:ID")
            check_identifier(f"scope.episodes.{inner_kind}", inner_id)
        else:
            raise InvalidInput("scope", f"unknown scope kind {self.kind!r}; use global, channel:NAME or user:ID")

    @classmethod
    def parse(cls, text: str) -> Scope:
        """Parse ``global``, ``channel:NAME`` or ``user:ID``."""
        if not isinstance(text, str):
            raise InvalidInput("scope", "must be a string: global, channel:NAME or user:ID")
        if text == "global":
            return cls("global")
        kind, sep, ident = text.partition(":")
        if not sep or kind not in ("channel", "user", "episodes"):
            raise InvalidInput("scope", f"unknown scope {text!r}; use global, channel:NAME or user:ID")
        return cls(kind, ident)  # type: ignore[arg-type]

    @classmethod
    def channel(cls, name: str) -> Scope:
        """The scope of one channel."""
        return cls("channel", name)

    @classmethod
    def user(cls, user_id: str) -> Scope:
        """The scope of one user."""
        return cls("user", user_id)

    @classmethod
    def episodes(cls, of: Scope) -> Scope:
        """Where the episodes (indexed exchanges) of a channel or user scope live."""
        if of.kind not in ("channel", "user"):
            raise InvalidInput("scope", "only a channel or a user has episodes")
        return cls("episodes", str(of))

    @property
    def episodic(self) -> bool:
        """True for a scope of episodes (never searched as memories)."""
        return self.kind == "episodes"

    def __str__(self) -> str:
        return "global" if self.kind == "global" else f"{self.kind}:{self.id}"


GLOBAL = Scope("global")
#: What joins a channel and a delegated persona in a delegation's child channel (``general~researcher``).
DELEGATION_MARK = "~"


def root_channel(channel: str) -> str:
    """The channel a delegation's child channel belongs to (itself for any other)."""
    return channel.split(DELEGATION_MARK, 1)[0]


@dataclass(frozen=True)
class Reach:
    """Where one search may look: persona ∩ (global ∪ channel ∪ user).

    With ``everywhere=True`` (admin listing and search from the CLI) every scope
    of the persona is searched.

    ``shared_channel`` is set when the conversation is in a channel others read: the
    user's user-scoped memories are then eligible only when they were learned in
    that same channel (what the user told the persona elsewhere, in a direct
    message for instance, stays there).
    """

    persona: str
    channel: str | None = None
    user: str | None = None
    everywhere: bool = False
    shared_channel: str | None = None

    def eligible(self, scope: Scope, learned_in: str | None) -> str | None:
        """Why a memory of ``scope`` learned in ``learned_in`` may not be used here (``None``: it may)."""
        if self.shared_channel is None or scope.kind != "user":
            return None
        if learned_in is not None and root_channel(learned_in) == root_channel(self.shared_channel):
            return None
        where = f"in #{learned_in}" if learned_in else "outside any conversation (added by an operator)"
        return f"user memory learned {where}, not in the shared channel #{self.shared_channel}"

    def scopes(self) -> tuple[Scope, ...]:
        """The scopes searched, global first (empty tuple means every scope of the persona)."""
        if self.everywhere:
            return ()
        found = [GLOBAL]
        if self.channel:
            found.append(Scope.channel(self.channel))
        if self.user:
            found.append(Scope.user(self.user))
        return tuple(found)

    def episode_scopes(self, direct: bool) -> tuple[Scope, ...]:
        """The episode scopes a turn here may recall: this channel's, and the user's own
        (their direct channels') only when this channel is direct — a user's private exchanges
        never surface in a group channel."""
        found = []
        if self.channel:
            found.append(Scope.episodes(Scope.channel(self.channel)))
        if self.user and direct:
            found.append(Scope.episodes(Scope.user(self.user)))
        return tuple(found)
