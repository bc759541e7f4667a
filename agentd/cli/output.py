"""How the CLI prints: JSON for machines, rich tables and progress bars for people."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

# Piped output gets a width that fits the tables instead of rich's 80 columns.
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 120)


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def print_json_line(value: Any) -> None:
    """One JSON object on one line (event streams)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")
    sys.stdout.flush()


@contextmanager
def progress_bar(description: str) -> Iterator[Any]:
    """A progress bar on stderr; yields ``update(done, total)`` (rich's progress module is imported
    here: only imports and re-embedding show one)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
