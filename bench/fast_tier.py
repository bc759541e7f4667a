"""The fast test tier's wall time and flakiness: ``pytest -m fast`` run several times in a row.

    python bench/fast_tier.py [--runs 20] [--log DIR]

Each run is ``python -m pytest -m fast -p no:cacheprovider -q`` from the repository, with the
xdist settings of pyproject.toml (``-n auto``), as a developer runs it. Prints each run's wall
time and outcome as it ends, then the median, the slowest, and every run that failed (its
output is kept in ``--log``, a temporary directory by default). The tier's target: under 60 s
on two cores, no failure in twenty runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 60.0


def run_once(log: Path) -> tuple[float, int, str]:
    """One run of the tier: (wall seconds, exit status, pytest's last line)."""
    cmd = [sys.executable, "-m", "pytest", "-m", "fast", "-p", "no:cacheprovider", "-q"]
    start = time.monotonic()
    with log.open("w") as out:
        status = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    took = time.monotonic() - start
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return took, status, lines[-1] if lines else ""


def main() -> None:
    """Run the tier ``--runs`` times; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--log", type=Path, default=None, help="where each run's output is kept")
    args = parser.parse_args()
    logs = args.log or Path(tempfile.mkdtemp(prefix="agentd-fast-tier-"))
    logs.mkdir(parents=True, exist_ok=True)
    times: list[float] = []
    failed: list[tuple[int, str]] = []
    for i in range(1, args.runs + 1):
        took, status, last = run_once(logs / f"run{i:02d}.log")
        times.append(took)
        if status != 0:
            failed.append((i, last))
        load = os.getloadavg()[0]
        print(f"run {i:2d}: {took:6.1f} s  exit {status}  load {load:.1f}  {last}", flush=True)
    print(
        f"{args.runs} runs: median {statistics.median(times):.1f} s, fastest {min(times):.1f} s, "
        f"slowest {max(times):.1f} s (target under {TARGET_SECONDS:g} s); failed runs: {len(failed)}"
        + "".join(f"\n  run {i}: {last} ({logs / f'run{i:02d}.log'})" for i, last in failed)
    )


if __name__ == "__main__":
    main()
