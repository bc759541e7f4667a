"""How long a crowd of memory searches waits when the embedding model hangs, against its timeout.

    python bench/embedder_timeout.py [--searches 45] [--timeout 4] [--json]

Starts ``agentd serve --port 0`` on a fresh home whose embeddings come from a small HTTP
server of this script's (through litellm, as a remote embedding model would), stores one
memory while that server answers, then makes the server hang and sends ``--searches``
``POST /v1/memory/search`` at once: more than the daemon's 16 embedding threads. Each
should be answered 504 within about one timeout, counted from its request; a request queued
behind the hung calls used to wait for a thread and then its own timeout again (two or three
timeouts). Prints the slowest and the median answer, their ratio to the timeout, and the
target (slowest below 1.75 timeouts). tests/test_faults_embedder.py checks what the daemon
answers and tests/test_embedder_guard.py the guard's rules; the time is measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

#: The slowest answer may take this many timeouts (one, and the time to answer under load).
TARGET_RATIO = 1.75
DIMENSION = 8
KEY_ENV = "BENCH_EMBED_KEY"


class Embeddings(ThreadingHTTPServer):
    """``POST /v1/embeddings``: a unit vector per input, or, once :attr:`hang` is set, nothing until closed."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hang = threading.Event()
        self.released = threading.Event()

    @property
    def url(self) -> str:
        """Its base URL (``/v1``)."""
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: Embeddings

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.server.hang.is_set():
            self.server.released.wait(600)
            return
        texts = body.get("input") or []
        rows = [
            {"object": "embedding", "index": i, "embedding": [1.0] + [0.0] * (DIMENSION - 1)} for i in range(len(texts))
        ]
        answer = json.dumps(
            {"object": "list", "data": rows, "model": "bench-embed", "usage": {"prompt_tokens": 1, "total_tokens": 1}}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *_args: Any) -> None:
        pass


def _home(root: Path, embed_url: str, timeout: float) -> Path:
    (root / "personas").mkdir(parents=True)
    (root / "personas" / "fake.toml").write_text(
        f'name = "fake"\nmodel = "openai/fake-model"\napi_base = "{embed_url}"\napi_key_env = "{KEY_ENV}"\n'
        'system_prompt = "You are fake."\n'
    )
    config = root / "agentd.toml"
    config.write_text(
        f'[database]\nurl = "sqlite:///agentd.db"\n[logging]\nlevel = "error"\n'
        f'[embedding]\nprovider = "litellm"\nmodel = "openai/bench-embed"\napi_base = "{embed_url}"\n'
        f'api_key_env = "{KEY_ENV}"\ntimeout_seconds = {timeout}\n[memory]\nretrieval_timeout_seconds = 0.5\n'
    )
    return config


def _serve(config: Path) -> tuple[subprocess.Popen[str], str]:
    exe = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")} | {KEY_ENV: "bench-key"}
    proc = subprocess.Popen(
        [exe, "--config", str(config), "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "agentd listening on " not in line:
        proc.kill()
        raise SystemExit(f"agentd serve did not start: {line!r}")
    return proc, line.split("listening on ")[1].split()[0]


def measure(searches: int, timeout: float) -> dict[str, Any]:
    """Start a daemon, hang its embedder, and time ``searches`` searches sent at once."""
    server = Embeddings()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = Path(tempfile.mkdtemp(prefix="agentd-bench-embed-"))
    proc, url = _serve(_home(root, server.url, timeout))
    try:
        with httpx.Client(base_url=url, timeout=120, limits=httpx.Limits(max_connections=searches + 10)) as client:
            added = client.post("/v1/memories", json={"persona": "fake", "text": "User likes Python"})
            assert added.status_code == 201, added.text
            server.hang.set()

            def search(i: int) -> tuple[int, float]:
                start = time.monotonic()
                answer = client.post("/v1/memory/search", json={"query": f"python {i}", "persona": "fake"})
                return answer.status_code, time.monotonic() - start

            with ThreadPoolExecutor(searches) as pool:
                answers = list(pool.map(search, range(searches)))
    finally:
        server.released.set()
        proc.terminate()
        proc.wait(60)
        server.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    took = sorted(t for _status, t in answers)
    return {
        "searches": searches,
        "timeout_s": timeout,
        "statuses": sorted({status for status, _t in answers}),
        "slowest_s": round(took[-1], 2),
        "median_s": round(statistics.median(took), 2),
        "slowest_per_timeout": round(took[-1] / timeout, 2),
        "target_per_timeout": TARGET_RATIO,
        "met": took[-1] < TARGET_RATIO * timeout,
    }


def main() -> None:
    """Parse the arguments, measure once, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=45)
    parser.add_argument("--timeout", type=float, default=4.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = measure(args.searches, args.timeout)
    if args.json:
        print(json.dumps(found))
        return
    print(
        f"{found['searches']} searches with a hung embedder (timeout {found['timeout_s']:g} s): "
        f"answers {found['statuses']}, slowest {found['slowest_s']} s ({found['slowest_per_timeout']}x the timeout), "
        f"median {found['median_s']} s; target: slowest < {TARGET_RATIO}x the timeout: "
        + ("met" if found["met"] else "NOT met")
    )


if __name__ == "__main__":
    main()
