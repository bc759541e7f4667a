"""schemathesis hooks for tests/test_schemathesis.py (loaded through ``SCHEMATHESIS_HOOKS``).

The published schema is OpenAPI 3.1, whose JSON Schema (2020-12) counts ``5.0`` as an
integer, and schemathesis sends integers in JSON bodies spelled both ways. agentd does not
coerce: where an integer is wanted it takes ``5`` and refuses ``5.0`` (as it refuses ``5.5``,
``"5"`` and ``true``; tests/test_faults_input.py). A schema cannot say so (2020-12 has no way to
tell the two spellings apart), so the bodies schemathesis generates spell every whole number as
an integer. Nothing else changes: a value of the wrong type stays of the wrong type (a float
field takes an integer; a string, boolean or fraction is left as it is).
"""

from __future__ import annotations

from typing import Any

import schemathesis


def _whole_as_int(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_as_int(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_as_int(v) for v in value]
    return value


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    """Every whole number of a generated JSON body spelled as an integer."""
    return _whole_as_int(body)
