"""Schemathesis against a real ``agentd serve``: every operation (the endless events stream
excepted), every check, a bounded number of examples, and 0 failures.

The operations are run in three groups, each against its own daemon, so that
pytest-xdist can spread them over the cores; together the groups cover every
path exactly once (the last group is "everything the others do not take").

The schema must declare what the API enforces (patterns, lengths, ranges, the
error body, the error statuses, the API key), the API must accept what the
schema allows and refuse what it does not, and never answer 5xx.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_home
from tests.support.serve import Serve

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow

#: Fixed, so a run can be replayed; bounded, so it takes a minute or two.
SEED = 20261123
MAX_EXAMPLES = 25
KEY = "schemathesis-key"
#: The run's hooks (tests/schemathesis_hooks.py says why).
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")

TURNS = "^/v1/(chat|channels/)"
MEMORY = "^/v1/memor"
EVENTS = "/events$"
#: The filters of each group (schemathesis keeps only the last of a repeated option).
GROUPS = {
    "turns": ["--include-path-regex", TURNS, "--exclude-path-regex", EVENTS],
    "memory": ["--include-path-regex", MEMORY],
    "the-rest": ["--exclude-path-regex", f"{TURNS}|{MEMORY}|{EVENTS}"],
}

#: schemathesis's settings, from ``schemathesis.toml`` in the run's directory:
#:
#: * a body over ``[daemon] max_body_bytes`` is refused with 413 before it is parsed: a
#:   rejection of bad data too (schemathesis's own list leaves 413 out);
#: * the OpenAI-compatible route takes OpenAI's request schema, which admits conversations agentd
#:   refuses with 400 for what a schema cannot say (the last message must be the user's, and have
#:   text): there a schema-valid request may be refused with 400. Every other check applies to it;
#: * a schedule's ``at`` must be in the future, its ``cron`` a valid expression, its ``timezone``
#:   an IANA name, its user under ``[schedules] max_per_user``: what a schema cannot say either,
#:   so a schema-valid ``POST /v1/schedules`` may be refused with 422 (naming the field).
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]

[[operations]]
include-path = "/v1/schedules"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422", "429"]

[[operations]]
include-path = "/v1/chat/completions"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429"]
"""

PERSONA = """
name = "buddy"
model = "offline"
max_reply_tokens = 256
channels = ["*"]
skills = ["remember", "recall"]
system_prompt = "You are buddy."
"""


@pytest.mark.parametrize("group", list(GROUPS))
def test_schemathesis_finds_no_failure(tmp_path: Path, group: str) -> None:
    home = write_home(tmp_path, f'[daemon]\napi_key = "{KEY}"\n', {"buddy": PERSONA})
    (tmp_path / "schemathesis.toml").write_text(CONFIG)  # read from the run's directory
    daemon = Serve(home)
    try:
        exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
        run = subprocess.run(
            [
                exe,
                "run",
                f"{daemon.url}/openapi.json",
                "--checks",
                "all",
                "--header",
                f"Authorization: Bearer {KEY}",
                # Both of the schema's ways of sending a key: a scheme left out is filled in with
                # generated values, and a wrong key beside the right one is refused (401).
                "--header",
                f"X-API-Key: {KEY}",
                *GROUPS[group],
                "--max-examples",
                str(MAX_EXAMPLES),
                "--seed",
                str(SEED),
                # One worker: hypothesis describes strategies with ast.parse, which is not
                # thread-safe on Python 3.11.
                "--workers",
                "1",
                "--request-timeout",
                "60",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
            # Whole numbers spelled as integers: agentd refuses 5.0 where the schema's integer allows it.
            env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)},
        )
    finally:
        daemon.stop()
    out = run.stdout
    start = out.find("=== FAILURES ===")
    summary = (out[start : start + 8000] if start >= 0 else "") + out[-3000:]
    assert run.returncode == 0, summary
    assert "No issues found" in run.stdout or " passed" in summary, summary
