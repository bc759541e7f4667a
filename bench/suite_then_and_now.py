"""The test suite as it was when issue 14 was opened, timed against the same tests today.

    python bench/suite_then_and_now.py --runs 2

Issue 14 asked for "the suite on this machine at most half of today's time"; that
suite was the 179 tests of commit ``7aeba9d`` (the last commit before the issue's
work), about 225 s then. The suite has grown since with the tests of later issues
(the PostgreSQL variant of every storage test, IRC, the browser, schemathesis), so
the whole suite's time today answers another question. This script answers that one
on this machine, in one sitting:

1. checks out ``--then`` in a temporary git worktree and installs it in its own
   virtual environment (``pip install -e '.[test]'``, from the package registry);
2. collects both suites and pairs every test of then with the same test today: the
   same node id, or, for a test that now runs on both backends (``[sqlite]`` /
   ``[postgres]``), its SQLite variant, the one backend it ran on then;
3. runs, ``--runs`` times and alternating, then's whole suite with then's README
   command (``python -m pytest -q``) and today's code on the paired tests with
   today's (the same command; today's ``pyproject.toml`` adds the xdist workers),
   both with ``-p no:cacheprovider`` so that neither run leaves a cache to the next;
4. prints each run's wall time and its ``passed`` count, the medians and their ratio.

"With no test weakened": for each paired test function it also counts the
``assert`` statements and ``pytest.raises`` calls in its body, then and now, and
lists any that has fewer now (checks moved into a shared helper would show up
here and need reading).

Unpaired tests (renamed or removed since) are listed and counted. ``--full`` also
times today's whole suite in each round. The load average is printed before each
run: compare within one sitting, on a machine with nothing else running.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THEN = "7aeba9d"
PARAMS = re.compile(r"\[(.*)\]$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--then", default=THEN, help="the commit whose suite is the baseline")
    parser.add_argument("--runs", type=int, default=1, help="rounds, each timing then and now once")
    parser.add_argument("--full", action="store_true", help="also time today's whole suite in each round")
    parser.add_argument("--keep", action="store_true", help="keep the worktree and its virtual environment")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs: must be at least 1")

    work = Path(tempfile.mkdtemp(prefix="agentd-suite-then-"))
    then_dir = work / "then"
    try:
        say(f"checking out {args.then} into {then_dir}")
        git("worktree", "add", "--detach", "-q", str(then_dir), args.then)
        say("installing it in its own virtual environment (pip, from the package registry)")
        run([sys.executable, "-m", "venv", str(then_dir / ".venv")], cwd=then_dir)
        then_python = str(then_dir / ".venv" / "bin" / "python")
        run([then_python, "-m", "pip", "install", "-q", "-e", ".[test]"], cwd=then_dir)

        then_ids = collect(then_python, then_dir)
        now_ids = collect(sys.executable, ROOT, "-n0")
        paired, unpaired = pair(then_ids, now_ids)
        selection = work / "paired.txt"
        selection.write_text("".join(f"{node}\n" for node in paired), encoding="utf-8")
        print(f"then ({args.then}): {len(then_ids)} tests; today: {len(now_ids)} tests, {len(paired)} paired")
        for node in unpaired:
            print(f"  unpaired: {node}")
        then_checks, now_checks = checks(then_dir), checks(ROOT)
        functions = sorted({PARAMS.sub("", node) for node in then_ids if node not in unpaired})
        fewer = [f for f in functions if now_checks.get(f, 0) < then_checks.get(f, 0)]
        print(f"checks (assert, pytest.raises): {len(functions)} paired test functions, {len(fewer)} with fewer now")
        for function in fewer:
            print(f"  fewer: {function}: {then_checks[function]} then, {now_checks.get(function, 0)} now")

        # label -> (interpreter, where pytest runs, its extra arguments)
        suites: dict[str, tuple[str, Path, list[str]]] = {
            "then": (then_python, then_dir, []),
            "now, same tests": (sys.executable, ROOT, [f"@{selection}"]),
        }
        if args.full:
            suites["now, whole suite"] = (sys.executable, ROOT, [])
        times: dict[str, list[float]] = {label: [] for label in suites}
        for round_ in range(1, args.runs + 1):
            for label, (python, cwd, extra) in suites.items():
                load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
                say(f"round {round_}/{args.runs}: {label} (load {load})")
                seconds, summary = timed_suite(python, cwd, extra)
                times[label].append(seconds)
                print(f"round {round_}: {label:<17} {seconds:7.1f} s  {summary}  (load before {load})")

        print()
        then_median = statistics.median(times["then"])
        for label, values in times.items():
            median = statistics.median(values)
            print(f"{label:<17} median {median:7.1f} s  ({median / then_median:.0%} of then)")
    finally:
        if args.keep:
            print(f"kept: {then_dir}")
        else:
            git("worktree", "remove", "--force", str(then_dir), check=False)
            shutil.rmtree(work, ignore_errors=True)


def pair(then_ids: list[str], now_ids: list[str]) -> tuple[list[str], list[str]]:
    """Today's counterpart of each test of then, and the tests of then that have none."""
    now = set(now_ids)
    variants: dict[str, list[str]] = {}
    for node in now_ids:
        variants.setdefault(PARAMS.sub("", node), []).append(node)
    paired: list[str] = []
    unpaired: list[str] = []
    for node in then_ids:
        if node in now:
            paired.append(node)
            continue
        match = PARAMS.search(node)
        params = match.group(1) if match else ""
        sqlite = [n for n in variants.get(PARAMS.sub("", node), []) if sqlite_params(n) == params]
        if len(sqlite) == 1:
            paired.append(sqlite[0])
        else:
            unpaired.append(node)
    return paired, unpaired


def checks(root: Path) -> dict[str, int]:
    """``assert`` statements and ``pytest.raises`` calls in each test function's body, by node id."""
    found: dict[str, int] = {}
    for path in sorted((root / "tests").glob("test_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                found[f"tests/{path.name}::{node.name}"] = sum(
                    isinstance(n, ast.Assert) or (isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "raises")
                    for n in ast.walk(node)
                )
    return found


def sqlite_params(node: str) -> str | None:
    """A both-backends test's parameters less its SQLite one; ``None`` for a PostgreSQL variant."""
    match = PARAMS.search(node)
    params = match.group(1) if match else ""
    parts = params.split("-", 1)
    if parts[0] != "sqlite":
        return None
    return parts[1] if len(parts) > 1 else ""


def collect(python: str, cwd: Path, *extra: str) -> list[str]:
    out = run([python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *extra], cwd=cwd)
    return [line.strip() for line in out.splitlines() if "::" in line]


def timed_suite(python: str, cwd: Path, extra: list[str]) -> tuple[float, str]:
    """The suite's wall time and its last line (``N passed in …``); a failing suite ends the script."""
    start = time.perf_counter()
    out = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra], cwd=cwd)
    seconds = time.perf_counter() - start
    lines = [line for line in out.splitlines() if line.strip()]
    return seconds, lines[-1].strip("= ") if lines else ""


def run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=clean_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"{' '.join(cmd[:4])} … failed with exit {proc.returncode} (in {cwd})")
    return proc.stdout


def git(*args: str, check: bool = True) -> None:
    subprocess.run(["git", *args], cwd=ROOT, check=check, capture_output=True)


def clean_env() -> dict[str, str]:
    """This environment without the current virtual environment's marks (each suite runs its own)."""
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    return env


def say(text: str) -> None:
    print(f"… {text}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
