"""A test's agentd home: an agentd.toml and persona files in a directory (:func:`write_home`)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

BUDDY = """
name = "buddy"
model = "offline"
max_reply_tokens = 512
channels = ["general", "dm-*"]
skills = ["remember", "recall", "delegate"]
system_prompt = "You are buddy. You remember things."
"""

SCHOLAR = """
name = "scholar"
model = "offline"
max_reply_tokens = 512
channels = ["research"]
skills = ["recall", "remember"]
system_prompt = "You are scholar. Answer briefly."
"""


#: Admission control's bounds in a test home that sets none: beyond any test's load. Most tests post
#: bursts, or in closed loops, and expect every post accepted; tests/test_admission.py sets small
#: bounds on purpose, and bench/daemon.py --overload measures the derived ones.
ADMISSION_OFF = "max_pending = 1000000\nmax_pending_per_channel = 1000000\n"


def _admission_off(config: str) -> str:
    """``config`` with :data:`ADMISSION_OFF` in its ``[daemon]`` table, unless it sets a bound itself."""
    if "max_pending" in config:
        return config
    header = re.compile(r"^\[daemon\][ \t]*$", re.MULTILINE)
    if header.search(config):
        return header.sub("[daemon]\n" + ADMISSION_OFF.rstrip("\n"), config, count=1)
    return config + ("" if config.endswith("\n") or not config else "\n") + "[daemon]\n" + ADMISSION_OFF


def write_home(
    root: Path, config: str = "", personas: dict[str, str] | None = None, database_url: str = "sqlite:///agentd.db"
) -> Path:
    """Write an agentd.toml and persona files under ``root``; return the config path. Admission control
    is off (:data:`ADMISSION_OFF`) unless ``config`` sets a bound."""
    (root / "personas").mkdir(parents=True, exist_ok=True)
    for name, text in (personas or {"buddy": BUDDY, "scholar": SCHOLAR}).items():
        (root / "personas" / f"{name}.toml").write_text(textwrap.dedent(text))
    path = root / "agentd.toml"
    base = f'[database]\nurl = "{database_url}"\n[logging]\nlevel = "warning"\n'
    path.write_text(base + _admission_off(textwrap.dedent(config)))
    return path
