"""Say what a command waits for, at once, and how long it has waited while it waits.

A command that waits (for the daemon, for a model) prints one line on stderr saying
what it waits for as soon as it starts, then a progress line every
:data:`EVERY` seconds until the wait ends, so nothing is ever silent for long.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

from rich.markup import escape

from agentd.cli.output import err
from agentd.config import Config
from agentd.llm.errors import where
from agentd.llm.offline import is_offline
from agentd.personas import Persona

#: Seconds between progress lines.
EVERY = 10.0


class Waiting:
    """``with Waiting("waiting for X"):`` prints ``waiting for X…`` now and the time waited every
    ``every`` seconds until :meth:`done` (or the end of the block)."""

    def __init__(self, what: str, every: float = EVERY) -> None:
        self._what = what
        self._every = every
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._tick, name="agentd-waiting", daemon=True)

    def __enter__(self) -> Waiting:
        err.print(f"[dim]{escape(self._what)}…[/]", soft_wrap=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.done()

    def done(self) -> None:
        """The wait is over (the first sign of what was waited for): no more progress lines."""
        self._stop.set()

    def _tick(self) -> None:
        while not self._stop.wait(self._every):
            err.print(
                f"[dim]  still {escape(self._what)} ({time.monotonic() - self._started:.0f} s)[/]", soft_wrap=True
            )


def model_wait(persona: Persona, config: Config) -> str:
    """What a turn of ``persona`` waits for: its model, at its address, for how long."""
    if is_offline(persona.model):
        return f"{persona.name} is answering with the offline model"
    silence = persona.model_timeout_seconds or config.models.llm_timeout_seconds
    return (
        f"{persona.name} is waiting for {where(persona.model, persona.api_base)} "
        f"(gives up after {silence:g} s without a word: model_timeout_seconds)"
    )
