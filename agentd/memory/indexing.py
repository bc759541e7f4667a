"""What is indexed for a memory besides its text: an optional, never-shown context.

A memory may carry ``metadata["context"]``, a string that helps *find* it but
is not part of what it says - e.g. the neighbouring turns of the conversation
a turn came from, whose words often hold what a question asks about ("Where
was it?" / "In Paris!"). The context is indexed in the full-text table's
``context`` column, weighted below the text (:data:`agentd.store.lexical.CONTEXT_WEIGHT`);
it is not embedded (measured on LoCoMo: embedding it too cost three times the
ingest time for no gain once the words are indexed). Results, prompts and
dedupe only ever use the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CONTEXT_KEY = "context"


def context_of(metadata: Mapping[str, Any] | None) -> str:
    """The memory's context text ("" when it has none)."""
    value = (metadata or {}).get(CONTEXT_KEY)
    return value.strip() if isinstance(value, str) else ""
