"""No function in agentd is longer than :data:`LIMIT` lines: a longer one is doing several things,
and its parts want names of their own."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

#: The most lines a function (its signature, docstring and body) may span.
LIMIT = 80


def function_lengths(root: Path) -> list[tuple[int, str]]:
    """``(lines, "path:line name")`` of every function and method under ``root``, longest first."""
    found: list[tuple[int, str]] = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                found.append((lines, f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def test_no_function_is_longer_than_the_limit() -> None:
    """Every function of agentd fits in LIMIT lines."""
    long = [f"{where} ({lines} lines)" for lines, where in function_lengths(REPO / "agentd") if lines > LIMIT]
    assert not long, f"functions over {LIMIT} lines:\n" + "\n".join(long)


def test_the_measure_counts_a_function_from_its_def_to_its_last_line(tmp_path: Path) -> None:
    """A three-line function measures three lines (decorators aside)."""
    (tmp_path / "m.py").write_text("def f():\n    x = 1\n    return x\n", encoding="utf-8")
    assert function_lengths(tmp_path)[0][0] == 3
