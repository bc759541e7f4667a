"""Recalled text written into a prompt or an event stream, on one line, so it cannot forge structure.

Recalled text is data, never instructions. :func:`quote` makes it a one-line
JSON string literal (newlines, quotes, "## System" or "assistant:" inside it
cannot open a section, fake a role or close the quote); :func:`one_line`
collapses every kind of line break to a space where no quotes are used.
"""

from __future__ import annotations

import json
import re

#: Everything Python's str.splitlines() treats as a line boundary.
LINE_BREAKS = re.compile("[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]+")


def one_line(text: str) -> str:
    """``text`` with every kind of line break collapsed to one space."""
    return LINE_BREAKS.sub(" ", text).strip()


def data_json(value: object) -> str:
    """``value`` as one line of JSON (a tool's result, given to the model as data): every line
    break escaped, U+0085, U+2028 and U+2029 too, so nothing inside can open a prompt section
    or fake a role (:func:`quote` does the same for a single text)."""
    return LINE_BREAKS.sub(
        lambda m: "".join(f"\\u{ord(c):04x}" for c in m.group()), json.dumps(value, ensure_ascii=False)
    )


def quote(text: str) -> str:
    """``text`` as a one-line, double-quoted literal (JSON string escaping).

    JSON leaves U+0085, U+2028 and U+2029 unescaped, yet they break lines for
    many readers (and for ``str.splitlines``), so they are escaped too.
    """
    return LINE_BREAKS.sub(
        lambda m: "".join(f"\\u{ord(c):04x}" for c in m.group()), json.dumps(text, ensure_ascii=False)
    )
