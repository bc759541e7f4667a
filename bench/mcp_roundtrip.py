"""One memory search, three ways in, in one run: MCP ``recall`` over stdio, MCP ``recall`` over
Streamable HTTP (``/mcp`` on the daemon), and ``POST /v1/memory/search``.

    python bench/mcp_roundtrip.py                  # 300 calls each, 1,000 memories
    python bench/mcp_roundtrip.py --calls 1000 --memories 10000

One store (SQLite in a temp dir) holds ``--memories`` memories of one persona
(a tenth of them one user's, the rest global). One ``agentd serve`` (in-process
turns: ``[runtime] workers = 0``) answers HTTP and ``/mcp``; one ``agentd mcp``
(stdio) runs beside it on the same store. Each way is warmed up (``--warmup``
calls), then called ``--calls`` times, one call at a time, in rounds that
alternate the three ways (so a slow moment of the machine falls on all three
alike), each call with the next of 20 distinct queries (``limit`` 5, as the
user ``alice``: the same search, the same scope, the same answer). Timed on the
client, from just before the request to the parsed answer: the round trip a
client sees. The MCP clients are the ``mcp`` SDK's own (``mcp.Client``); the
HTTP one is httpx, keep-alive.

Printed: p50, p90 and p99 per way, and each MCP way's p50 minus the HTTP
search's (what the protocol costs on top of the same search).
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentd.access.scopes import GLOBAL, Scope  # noqa: E402
from agentd.app import App  # noqa: E402
from agentd.config import load_config  # noqa: E402
from agentd.store.memories import NewMemory  # noqa: E402

PERSONA = """
name = "buddy"
model = "offline"
max_reply_tokens = 512
channels = ["general"]
skills = ["remember", "recall"]
system_prompt = "You are buddy."
"""
QUERIES = [
    "What programming language should I learn?",
    "where does the user live",
    "favorite color",
    "what did we decide about the release",
    "the dog's name",
    "which editor do I use",
    "coffee or tea",
    "when is the meeting",
    "what is my job",
    "holiday plans",
    "the database we picked",
    "my sister's birthday",
    "allergies",
    "preferred airline",
    "the budget for the project",
    "which city was the conference in",
    "my phone model",
    "what music do I like",
    "the name of the cat",
    "how do I take my coffee",
]
SUBJECTS = ["color", "city", "language", "editor", "drink", "pet", "team", "music", "airline", "food"]


def seed(home: Path, count: int) -> None:
    """``count`` memories of buddy: a tenth alice's, the rest global."""
    app = App(load_config(home, environ={}))
    items = [
        NewMemory(
            "buddy",
            Scope.user("alice") if i % 10 == 0 else GLOBAL,
            "fact",
            f"Memory {i}: the {SUBJECTS[i % len(SUBJECTS)]} noted on day {i // len(SUBJECTS)} is item {i * 7 % 101}",
            {},
        )
        for i in range(count)
    ]
    for start in range(0, len(items), 500):
        app.memory.add_many([app.memory.validate(m) for m in items[start : start + 500]])
    app.close()


def start_daemon(home: Path) -> tuple[subprocess.Popen[str], str]:
    exe = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    proc = subprocess.Popen(
        [exe, "--config", str(home), "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    line = lines.get(timeout=120)
    if "listening on" not in line:
        raise SystemExit(f"agentd serve did not start: {line}")
    return proc, line.split("listening on ")[1].split()[0]


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def run(home: Path, url: str, calls: int, warmup: int) -> dict[str, list[float]]:
    exe = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    stdio = StdioServerParameters(
        command=exe, args=["--config", str(home), "mcp", "--persona", "buddy", "--user", "alice"], env=env
    )
    times: dict[str, list[float]] = {"mcp stdio": [], "mcp http": [], "POST /v1/memory/search": []}

    async def main() -> None:
        http = httpx.AsyncClient(base_url=url, timeout=60)
        mcp_http = create_mcp_http_client()
        transport = streamable_http_client(f"{url}/mcp?persona=buddy&user=alice", http_client=mcp_http)
        async with Client(stdio) as over_stdio, Client(transport) as over_http, http:

            async def recall(client: Client, query: str) -> None:
                result = await client.call_tool("recall", {"query": query, "limit": 5})
                assert not result.is_error, result
                assert result.structured_content["results"], result

            async def search(query: str) -> None:
                response = await http.post(
                    "/v1/memory/search", json={"query": query, "persona": "buddy", "userId": "alice", "limit": 5}
                )
                assert response.status_code == 200, response.text
                assert response.json()["results"], response.text

            ways: dict[str, Callable[[str], Awaitable[None]]] = {
                "mcp stdio": lambda q: recall(over_stdio, q),
                "mcp http": lambda q: recall(over_http, q),
                "POST /v1/memory/search": search,
            }
            for i in range(warmup):
                for way in ways.values():
                    await way(QUERIES[i % len(QUERIES)])
            for i in range(calls):
                query = QUERIES[i % len(QUERIES)]
                for name, way in ways.items():
                    started = time.perf_counter()
                    await way(query)
                    times[name].append((time.perf_counter() - started) * 1000)
        await mcp_http.aclose()

    anyio.run(main)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--memories", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentd-mcp-bench-") as tmp:
        root = Path(tmp)
        (root / "personas").mkdir()
        (root / "personas" / "buddy.toml").write_text(PERSONA)
        home = root / "agentd.toml"
        home.write_text(
            '[database]\nurl = "sqlite:///agentd.db"\n[logging]\nlevel = "warning"\n[runtime]\nworkers = 0\n'
        )
        seed(home, args.memories)
        proc, url = start_daemon(home)
        try:
            times = run(home, url, args.calls, args.warmup)
        finally:
            proc.terminate()
            proc.wait(30)
    print(
        f"{args.memories:,} memories, {args.calls} calls per way (after {args.warmup} warm-up), limit 5, one at a time"
    )
    print(f"{'way':<24} {'p50':>8} {'p90':>8} {'p99':>8}")
    base = statistics.median(times["POST /v1/memory/search"])
    for name, samples in times.items():
        difference = statistics.median(samples) - base
        extra = "" if name.startswith("POST") else f"   ({difference:+.2f} ms against the HTTP search)"
        print(
            f"{name:<24} {percentile(samples, 0.5):>6.2f}ms {percentile(samples, 0.9):>6.2f}ms "
            f"{percentile(samples, 0.99):>6.2f}ms{extra}"
        )


if __name__ == "__main__":
    main()
