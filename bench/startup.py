"""How long agentd's commands take from a cold process, next to ``python -c pass``.

    python bench/startup.py [--runs 7] [--json]

Each command runs ``--runs`` times as a new process, the way a person types it, from
an empty directory with ``AGENTD_HOME`` (and ``HOME``) in a fresh temporary
directory: built-in defaults, the shipped personas, the offline model, the local
embedder. A store with one memory and one exchange is made first (not timed).
``serve`` is timed from the start of the process until ``GET /healthz`` answers
200, and until the "listening" line is printed; the daemon is then stopped with
SIGTERM. Two commands that cannot start (``serve`` on a port in use, a data
directory that is a file) are timed until their one-line error. Prints each
command's median wall time, its ratio to the median of
``python -c pass`` measured in the same run (the ratio is what to compare on a
shared machine), its median CPU time (user + system), whether the run imported
litellm (it must not), and the targets.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

#: command label -> (argv after ``agentd``, target seconds or None)
COMMANDS: dict[str, tuple[list[str], float | None]] = {
    "--help": (["--help"], 0.3),
    "--version": (["--version"], None),
    "personas": (["personas"], None),
    "memory list": (["memory", "list", "--persona", "buddy"], 0.8),
    "memory search": (["memory", "search", "python", "--persona", "buddy"], None),
    "memory add": (["memory", "add", "I drink tea in the morning", "--persona", "buddy"], None),
    "budget": (["budget", "buddy", "--channel", "general"], None),
    "doctor": (["doctor"], None),
    "chat (offline model)": (["chat", "buddy", "--channel", "general", "--message", "what language do I like?"], 1.5),
}
SERVE_TARGET = 2.0
#: A command that cannot start says why in one line "at once": within this many seconds.
FAILURE_TARGET = 1.0


@dataclass
class Row:
    """One command's timings."""

    label: str
    times: list[float]
    target: float | None
    imported_litellm: bool = False
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def _agentd() -> str:
    exe = shutil.which("agentd", path=str(Path(sys.executable).parent))
    if exe is None:
        sys.exit("the agentd command is not installed next to this Python (pip install -e .)")
    return exe


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], env: dict[str, str], cwd: Path, cpu: list[float] | None = None) -> float:
    """Wall seconds of one run; its CPU seconds (user + system) are appended to ``cpu``."""
    before = _cpu()
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    if cpu is not None:
        cpu.append(_cpu() - before)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return elapsed


def _fails_once(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of one run that must fail with one ``error:`` line (status 1)."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    if done.returncode != 1 or not done.stderr.startswith("error: "):
        sys.exit(f"{' '.join(argv)} did not fail with one line ({done.returncode}):\n{done.stderr}")
    return elapsed


def _failures(exe: str, env: dict[str, str], root: Path, runs: int) -> list[Row]:
    """The one-line failures tests/test_cli_startup.py checks the wording of, timed: ``serve`` on a port
    another process listens on, and a command whose data directory is a file."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        argv = [exe, "serve", "--port", str(taken.getsockname()[1])]
        port = Row("serve, port in use (error)", [_fails_once(argv, env, root) for _ in range(runs)], FAILURE_TARGET)
    broken = root / "broken"
    broken.mkdir()
    (broken / "agentd").write_text("a file where the data directory should be")
    bad_env = {**env, "HOME": str(broken), "AGENTD_HOME": str(broken / "agentd")}
    argv = [exe, "memory", "list", "--persona", "buddy"]
    data = Row("data dir is a file (error)", [_fails_once(argv, bad_env, root) for _ in range(runs)], FAILURE_TARGET)
    return [port, data]


def _imports_litellm(argv: list[str], env: dict[str, str], cwd: Path) -> bool:
    """Run once under ``python -X importtime`` and look for litellm among the imports."""
    code = "import sys; from agentd.cli.main import main; sys.argv[0] = 'agentd'; main()"
    cmd = [sys.executable, "-X", "importtime", "-c", code, *argv]
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    return any(line.rstrip().endswith(" litellm") for line in done.stderr.splitlines())


def _serve_once(exe: str, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(seconds until the listening line, seconds until /healthz answers 200)."""
    port_probe = socket.socket()
    port_probe.bind(("127.0.0.1", 0))
    port = port_probe.getsockname()[1]
    port_probe.close()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [exe, "serve", "--port", str(port)],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    listening = healthy = 0.0
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        listening = time.perf_counter() - start
        if "listening" not in line:
            sys.exit(f"agentd serve did not start: {line!r}")
        deadline = start + 60
        while time.perf_counter() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                    if response.status == 200:
                        healthy = time.perf_counter() - start
                        break
            except OSError:
                time.sleep(0.01)
        else:
            sys.exit("agentd serve never answered /healthz")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return listening, healthy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="runs per command (median reported)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()

    exe = _agentd()
    with tempfile.TemporaryDirectory(prefix="agentd-startup-") as tmp:
        root = Path(tmp)
        work, home = root / "work", root / "home"
        work.mkdir()
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        env.update({"HOME": str(home), "AGENTD_HOME": str(home / "agentd")})
        # Byte-code caches are written by the warm-up runs, as on any normal install (pip writes
        # them for installed packages): a run without them compiles every module again.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("XDG_DATA_HOME", None)
        env.pop("XDG_CONFIG_HOME", None)
        # The store, one memory and one exchange (not timed); byte-code caches are warm after it.
        _run([exe, "memory", "add", "I like Python", "--persona", "buddy"], env, work)
        _run([exe, "chat", "buddy", "--channel", "general", "--message", "hello"], env, work)

        rows: list[Row] = []
        baseline = Row("python -c pass", [], None)
        for _ in range(args.runs):
            baseline.times.append(_run([sys.executable, "-c", "pass"], env, work, baseline.cpu))
        rows.append(baseline)
        for label, (argv, target) in COMMANDS.items():
            row = Row(label, [], target)
            row.times = [_run([exe, *argv], env, work, row.cpu) for _ in range(args.runs)]
            row.imported_litellm = _imports_litellm(argv, env, work)
            rows.append(row)
        listen, healthy = [], []
        for _ in range(args.runs):
            a, b = _serve_once(exe, env, work)
            listen.append(a)
            healthy.append(b)
        rows.append(Row("serve (listening line)", listen, None))
        rows.append(Row("serve (/healthz answers)", healthy, SERVE_TARGET))
        rows += _failures(exe, env, root, args.runs)

    base = baseline.median
    if args.json:
        data = [
            {
                "command": r.label,
                "median_s": round(r.median, 4),
                "ratio_to_python": round(r.median / base, 2),
                "cpu_median_s": round(statistics.median(r.cpu), 4) if r.cpu else None,
                "target_s": r.target,
                "imported_litellm": r.imported_litellm,
                "runs": [round(t, 4) for t in r.times],
            }
            for r in rows
        ]
        print(json.dumps(data, indent=2))
        return
    load = os.getloadavg()
    print(f"agentd startup, {args.runs} runs each, medians; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print("wall: median elapsed; cpu: median user+system seconds of the process (less sensitive to load)")
    print(f"{'command':28} {'wall':>8} {'x python':>9} {'cpu':>8} {'target':>8}  litellm")
    for r in rows:
        target = f"{r.target:.1f} s" if r.target else ""
        cpu = f"{statistics.median(r.cpu):7.3f}s" if r.cpu else ""
        flag = (
            ""
            if r is baseline or r.label.startswith("serve") or "error" in r.label
            else ("IMPORTED" if r.imported_litellm else "no")
        )
        print(f"{r.label:28} {r.median:7.3f}s {r.median / base:8.1f}x {cpu:>8} {target:>8}  {flag}")


if __name__ == "__main__":
    main()
