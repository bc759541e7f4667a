"""Throughput of ``agentd serve``: how fast messages are accepted and answered.

    python bench/daemon.py --clients 20 --channels 50 --seconds 20 --history 10000 --memories 10000

Starts ``agentd serve`` on loopback (``--port 0``) in a fresh temporary
``AGENTD_HOME`` with the shipped ``buddy`` persona on the offline model (no key,
no network, no model time) and the local embedder. Before it starts, each
channel gets ``--history`` messages of earlier conversation and the persona
``--memories`` global memories (every one in reach of every channel).

Then ``--clients`` threads, each a closed loop over its own HTTP connection,
post to ``POST /v1/channels/{c}/messages`` over ``--channels`` channels for
``--seconds`` seconds, and the daemon is left to answer everything accepted.
Closed loops post as fast as the daemon accepts, so POST→202 is at least
clients ÷ accepted/s (Little's law): it measures the daemon saturated. With
``--rate R`` the clients together offer R posts per second on a fixed schedule
instead: POST→202 at a load the daemon may sustain.
Printed (medians unless said otherwise):

* accepted/s (202s per second of posting), replies/s (replies stored while
  posting, per second; and until the last reply);
* POST→202 p50/p95 (client clock), post→reply p50/p95 (from the client sending
  the POST until the reply's ``created_at`` in the store; same machine, same clock);
* the turn's stages, p50, from the daemon's ``turn`` log lines: history (the
  query's burst, the channel's recent history, the user's earlier exchanges),
  retrieval, assembly (profile, tools, the prompt), the model, storing the reply,
  and the whole turn (which includes waiting for a ``[runtime] turn_slots`` slot);
* with the episodes: replies per second from the first post until every exchange
  was also indexed as an episode (embedded in the background, after the replies
  when the cores are full), how long after the last reply that was, and the
  daemon's CPU per reply over that time: what the replies cost with the work
  they leave behind;
* lost (accepted, never answered) and duplicated (more than one complete reply);
* the CPU time the daemon and the benchmark's own clients used while posting
  (both share the machine's cores);
* the same for a **no-op turn** in the same run, as the floor: a persona without
  tools, ``disable_memory: true`` (no retrieval, no earlier exchanges), in fresh
  channels (no history): what accepting, dispatching, assembling a tiny prompt,
  the offline model and storing the reply cost by themselves;
* the daemon's resident memory after the run, and in a second, fresh daemon with
  1, 100 and 1,000 live actors (one channel each, no-op turns): the sum of the
  proportional set sizes (PSS) of its processes (the daemon, its workers and
  their fork server), so pages the workers share are counted once.

With ``--observe off,metrics`` (``tracing`` too, once ``[telemetry] otlp_endpoint`` exists)
it measures instead what watching the daemon costs: the same load (``--clients``,
``--rate``, ``--seconds``) on the same seeded store, once per setting (``--observe-rounds``
times, interleaved), and prints per setting the replies per second and the daemon's CPU
per reply (from the first post until every reply is stored and indexed as an episode,
workers included), with the overhead against ``off`` in %: ``off`` is ``[telemetry]
metrics = false``; ``metrics`` serves ``/metrics`` and counts every series, scraped every
``--scrape-seconds`` (5) as Prometheus would; the CPU the metrics hooks of one turn take,
timed alone, is printed too.

    python bench/daemon.py --observe off,metrics --observe-rounds 3 --rate 4 --seconds 20 \
        --history 200 --memories 200 --channels 20 --clients 4

The machine this runs on may be shared: the load average is printed with the
figures (``/proc/loadavg``).
"""

from __future__ import annotations

import argparse
import http.client as http_client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

if TYPE_CHECKING:
    from agentd.store import Store

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Stages of the ``turn`` log line, as printed.
STAGES = (
    ("history", "history_ms"),
    ("retrieval", "retrieval_ms"),
    ("assembly", "assemble_ms"),
    ("model", "model_ms"),
    ("store", "store_ms"),
    ("turn", "ms"),
)
FLOOR_PERSONA = "floor"
POST_HEADERS = {"Content-Type": "application/json"}

TOPICS = [
    ("python", "programming"),
    ("rust", "programming"),
    ("gardening", "hobby"),
    ("tomatoes", "garden"),
    ("jazz", "music"),
    ("hiking", "outdoors"),
    ("espresso", "coffee"),
    ("kubernetes", "work"),
    ("sourdough", "baking"),
    ("chess", "games"),
    ("japanese", "languages"),
    ("cycling", "sport"),
    ("postgres", "databases"),
    ("watercolour", "painting"),
    ("sailing", "outdoors"),
    ("budgeting", "money"),
]
FACTS = [
    "{who} likes {topic} and practises it on {day}s",
    "{who} decided to learn more about {topic} this year",
    "The {project} project needs someone who knows {topic}",
    "{who} prefers {topic} over {other}",
    "{who} asked for a book about {topic} ({kind})",
]
QUESTIONS = [
    "what do you think about {topic} for the {project} project?",
    "any tips on {topic}? I tried it on {day}",
    "should I pick {topic} or {other} next?",
    "remind me what we said about {topic} and {kind}",
    "how long does it take to get good at {topic}?",
    "hi!",
    "thanks, that helps",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
PROJECTS = ["atlas", "borealis", "cobalt", "delta", "ember", "fjord"]


def fill(template: str, rng: random.Random) -> str:
    topic, kind = rng.choice(TOPICS)
    other = rng.choice(TOPICS)[0]
    return template.format(
        who=f"user{rng.randrange(40)}",
        topic=topic,
        kind=kind,
        other=other,
        day=rng.choice(DAYS),
        project=rng.choice(PROJECTS),
    )


# -- the home, the data, the daemon --------------------------------------------------------


def write_home(home: Path, turn_slots: int = 0, workers: str = "auto", niceness: int | None = None) -> Path:
    from agentd.files.shipped import example_personas

    personas = home / "personas"
    personas.mkdir(parents=True)
    shutil.copy(example_personas() / "buddy.toml", personas / "buddy.toml")
    (personas / f"{FLOOR_PERSONA}.toml").write_text(
        f'name = "{FLOOR_PERSONA}"\nmodel = "offline"\nmax_reply_tokens = 256\nchannels = ["floor-*"]\n'
        'skills = []\nsystem_prompt = "You answer briefly."\n'
    )
    config = home / "agentd.toml"
    config.write_text(
        '[database]\nurl = "sqlite:///bench.db"\n'
        '[embedding]\nprovider = "local"\n'
        '[logging]\nlevel = "info"\nformat = "json"\n'
        # Actors stay alive for the whole run (the memory figures count live actors).
        f"[runtime]\nidle_stop_seconds = 3600\nturn_slots = {turn_slots}\n"
        f"workers = {workers if workers.isdigit() else repr(workers)}\n"
        + (f"worker_niceness = {niceness}\n" if niceness is not None else "")
    )
    return config


def seed_cached(
    config: Path,
    channels: list[str],
    history: int,
    memories: int,
    rng: random.Random,
    cache: Path | None,
    seed_number: int,
) -> None:
    """:func:`seed` the home's ``bench.db``, or copy it from ``cache`` where an earlier run with the
    same sizes and seed left it (and leave it there after seeding)."""
    db = config.parent / "bench.db"
    seeded = None
    if cache is not None:
        seeded = cache / f"seeded-v2-{len(channels)}c-{history}h-{memories}m-{seed_number}.db"
    if seeded is not None and seeded.exists():
        shutil.copy(seeded, db)
        print(f"  seeded database copied from {seeded}", file=sys.stderr)
        return
    seed(config, channels, history, memories, rng)
    if seeded is not None:
        seeded.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(db, seeded)


def seed(config: Path, channels: list[str], history: int, memories: int, rng: random.Random) -> None:
    """``history`` messages in each channel and ``memories`` global memories for buddy."""
    from agentd.access.scopes import GLOBAL
    from agentd.app import App
    from agentd.config import load_config
    from agentd.store.memories import NewMemory
    from agentd.store.schema import channels as chans
    from agentd.store.schema import messages as msgs
    from agentd.store.schema import utcnow

    app = App(load_config(config, environ={}))
    try:
        persona = app.personas["buddy"]
        if memories:
            started = time.perf_counter()
            texts = list({fill(rng.choice(FACTS), rng) + f" (note {i})" for i in range(memories)})
            items = [NewMemory("buddy", GLOBAL, "fact", t) for t in texts]
            for start in range(0, len(items), 256):
                app.memory.add_many(items[start : start + 256])
            print(f"  seeded {len(items)} memories in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        if history:
            started = time.perf_counter()
            samples = [fill(rng.choice(QUESTIONS[:5] + FACTS), rng) for _ in range(200)]
            counted = [(t, *app.builder.count_message(persona, t)) for t in samples]
            then = utcnow() - timedelta(days=30)
            import sqlalchemy as sa

            from agentd.memory.episodes import JOB as EPISODES

            for channel in channels:
                with app.store.write() as conn:
                    # Explicit ids, so each reply names its message (reply_to), as a real exchange does.
                    first = int(conn.execute(sa.select(sa.func.max(msgs.c.id))).scalar() or 0) + 1
                    rows = []
                    for i in range(history):
                        text, tokens, counter = counted[i % len(counted)]
                        user = i % 2 == 0
                        rows.append(
                            {
                                "id": first + i,
                                "channel": channel,
                                "persona": "buddy",
                                "role": "user" if user else "assistant",
                                "author": f"u{i % 7}" if user else "buddy",
                                "content": text,
                                "source": "channel" if user else "reply",
                                "status": "answered" if user else "complete",
                                "reply_to": None if user else first + i - 1,
                                "token_count": tokens,
                                "token_counter": counter,
                                "created_at": then + timedelta(seconds=i),
                            }
                        )
                    conn.execute(sa.insert(chans).values(name=channel, created_at=then, message_count=history))
                    conn.execute(sa.insert(msgs), rows)
                    # The earlier conversation counts as indexed already (its episodes are not made
                    # here): each new exchange is then indexed as it would be in a running daemon.
                    last_user = max((r["id"] for r in rows if r["role"] == "user"), default=0)
                    if last_user:
                        app.store.cursors.advance(conn, EPISODES, channel, 0, last_user)
            print(
                f"  seeded {history} messages in each of {len(channels)} channels in "
                f"{time.perf_counter() - started:.0f} s",
                file=sys.stderr,
            )
    finally:
        app.close()


class Daemon:
    """``agentd serve --port 0`` in a subprocess; its log goes to a file."""

    def __init__(self, config: Path, log: Path) -> None:
        exe = shutil.which("agentd", path=str(Path(sys.executable).parent)) or "agentd"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        env["AGENTD_HOME"] = str(config.parent)
        self.log = log
        self._err = log.open("w")
        self.proc = subprocess.Popen(
            [exe, "--config", str(config), "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise SystemExit(f"agentd serve did not start: {line}{log.read_text()[-2000:]}")
        self.url = line.split("listening on ")[1].split()[0]

    def memory_mb(self) -> float:
        """The resident memory of the daemon and every process under it (its workers, their fork
        server) together: PSS, so a page the processes share counts once."""
        return sum(pss_mb(pid) for pid in (self.proc.pid, *descendants(self.proc.pid)))

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)

    def live_actors(self) -> int:
        health = httpx.get(self.url + "/healthz", timeout=30).json()
        return sum(1 for a in health.get("actors", []) if a.get("running"))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._err.close()

    def turn_lines(self) -> list[dict[str, Any]]:
        lines = []
        for raw in self.log.read_text().splitlines():
            try:
                entry = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if entry.get("event") == "turn" and entry.get("outcome") == "answered":
                lines.append(entry)
        return lines


# -- load -------------------------------------------------------------------------------------


@dataclass
class Sent:
    """One accepted post."""

    message_id: int
    channel: str
    sent: float  # wall clock (time.time) when the POST was sent
    ack_ms: float


@dataclass
class Phase:
    """What one phase of load did."""

    name: str
    seconds: float
    sent: list[Sent] = field(default_factory=list)
    refused: int = 0
    #: Posts answered 429 (the daemon's admission control: nothing stored; posted again after Retry-After).
    busy: int = 0
    #: The other failed posts, by HTTP status or exception.
    errors: dict[str, int] = field(default_factory=dict)
    started: float = 0.0  # wall clock
    ended: float = 0.0
    #: CPU seconds (user + system) while posting: the daemon's, and this benchmark's own clients'.
    daemon_cpu: float = 0.0
    client_cpu: float = 0.0
    #: When every exchange of the phase was indexed as an episode (wall clock; 0: not waited for),
    #: and the daemon's CPU seconds from the start of posting until then.
    indexed: float = 0.0
    indexed_cpu: float = 0.0


def drive(
    url: str,
    phase: Phase,
    clients: int,
    channels: list[str],
    seconds: float,
    body: dict[str, Any],
    rng_seed: int,
    rate: float = 0.0,
) -> None:
    """``clients`` closed loops posting to ``channels`` for ``seconds``; with ``rate`` (posts per
    second, all clients together) each client posts on a fixed schedule instead, at most one
    post in flight (a post that is late goes at once; missed ones are not made up)."""
    lock = threading.Lock()
    stop = threading.Event()
    begin = time.perf_counter()

    host, port = urlsplit(url).hostname or "127.0.0.1", urlsplit(url).port or 80

    def client(index: int) -> None:
        # http.client, not httpx: a load generator on the daemon's own two cores should take as
        # little of them as it can (httpx cost ~1.1 ms of CPU per post here, this ~0.3 ms).
        rng = random.Random(rng_seed * 1000 + index)
        mine = [c for i, c in enumerate(channels) if i % clients == index % len(channels) % clients] or channels
        http = http_client.HTTPConnection(host, port, timeout=60)
        interval = clients / rate if rate > 0 else 0.0
        due = begin + index * interval / clients
        try:
            while not stop.is_set():
                if interval:
                    wait = due - time.perf_counter()
                    if wait > 0 and stop.wait(wait):
                        break
                    due = max(due + interval, time.perf_counter())
                channel = rng.choice(mine if rng.random() < 0.7 else channels)
                payload = {"user": f"u{index % 7}", "text": fill(rng.choice(QUESTIONS), rng), **body}
                data = json.dumps(payload).encode()
                sent = time.time()
                t0 = time.perf_counter()
                try:
                    http.request("POST", f"/v1/channels/{channel}/messages", data, POST_HEADERS)
                    answer = http.getresponse()
                    content = answer.read()
                except (OSError, http_client.HTTPException) as exc:
                    http.close()  # reconnects on the next request
                    with lock:
                        phase.refused += 1
                        phase.errors[type(exc).__name__] = phase.errors.get(type(exc).__name__, 0) + 1
                    continue
                ack = (time.perf_counter() - t0) * 1000
                if answer.status == 429:
                    # Closed while waiting: the daemon may close a connection idle for longer than its
                    # keep-alive, and http.client would then fail the next request on it.
                    http.close()
                    with lock:
                        phase.busy += 1
                    if stop.wait(retry_wait(answer.getheader("Retry-After"), rng)):
                        break
                    continue
                with lock:
                    if answer.status == 202:
                        phase.sent.append(Sent(int(json.loads(content)["id"]), channel, sent, ack))
                    else:
                        phase.refused += 1
                        phase.errors[str(answer.status)] = phase.errors.get(str(answer.status), 0) + 1
        finally:
            http.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    phase.started = time.time()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    phase.ended = time.time()


def retry_wait(header: str | None, rng: random.Random) -> float:
    """How long a client waits after a 429: its ``Retry-After``, plus up to a quarter (as
    :mod:`agentd.client` does), so refused clients do not come back in step."""
    try:
        asked = max(0.0, float(header)) if header is not None else 1.0
    except ValueError:
        asked = 1.0
    return asked * (1.0 + 0.25 * rng.random())


def poll(done: Callable[[], bool], timeout: float, every: float) -> bool:
    """Ask ``done`` every ``every`` seconds until it says yes (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(every)
    return False


def started(url: str, timeout: float) -> bool:
    """Wait until every worker process of the daemon runs and answers (at once without workers)."""
    with httpx.Client(base_url=url, timeout=30) as client:

        def ready() -> bool:
            workers = client.get("/healthz").json().get("workers", [])
            return all(w.get("running") and w.get("answered") for w in workers)

        return poll(ready, timeout, 0.2)


def warm_up(url: str, channel: str) -> None:
    """One turn answered before the clock starts: the embedder and the tokenizers are warm."""
    httpx.post(url + f"/v1/channels/{channel}/messages", json={"user": "warm", "text": "warm up"}, timeout=60)
    settle(url, 60)


def settle(url: str, timeout: float) -> bool:
    """Wait until the daemon has no turn in flight."""
    with httpx.Client(base_url=url, timeout=30) as client:

        def idle() -> bool:
            health = client.get("/healthz").json()
            return not any(a.get("inflight") for a in health.get("actors", []))

        return poll(idle, timeout, 0.2)


@contextmanager
def home_store(config: Path) -> Iterator[Store]:
    """The bench home's database, opened as the daemon opens it (read while it runs, or after)."""
    from agentd.config import load_config
    from agentd.store import Store

    store = Store.open(load_config(config, environ={}).database_url)
    try:
        yield store
    finally:
        store.close()


def indexed(config: Path, channels: list[str], timeout: float) -> bool:
    """Wait until the daemon's episodes job has indexed every exchange in ``channels``: its cursor
    has reached each channel's newest user message (the replies are all stored by then)."""
    from agentd.memory.episodes import JOB

    wanted = set(channels)
    with home_store(config) as store:

        def caught_up() -> bool:
            with store.read() as conn:
                return not wanted.intersection(store.cursors.behind(conn, JOB))

        return poll(caught_up, timeout, 0.1)


def replies(config: Path, ids: list[int]) -> tuple[dict[int, tuple[int, datetime]], dict[int, str]]:
    """message id -> (complete replies, the first one's created_at); and message id -> status."""
    import sqlalchemy as sa

    from agentd.store.schema import messages as msgs

    found: dict[int, tuple[int, datetime]] = {}
    statuses: dict[int, str] = {}
    with home_store(config) as store, store.read() as conn:
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            query = (
                sa.select(msgs.c.reply_to, sa.func.count(), sa.func.min(msgs.c.created_at))
                .where(msgs.c.reply_to.in_(chunk), msgs.c.role == "assistant", msgs.c.status == "complete")
                .group_by(msgs.c.reply_to)
            )
            for reply_to, count, first in conn.execute(query):
                when = first if isinstance(first, datetime) else datetime.fromisoformat(str(first))
                found[int(reply_to)] = (int(count), when.replace(tzinfo=UTC))
            for mid, status in conn.execute(sa.select(msgs.c.id, msgs.c.status).where(msgs.c.id.in_(chunk))):
                statuses[int(mid)] = str(status)
    return found, statuses


# -- figures ----------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def report(
    phase: Phase, found: tuple[dict[int, tuple[int, datetime]], dict[int, str]], turns: list[dict[str, Any]]
) -> dict[str, Any]:
    answered, statuses = found
    ids = [s.message_id for s in phase.sent]
    # Lost: accepted, and neither answered nor ended with an error (a failed turn is not lost).
    failed = sum(1 for i in ids if i not in answered and statuses.get(i) in ("failed", "interrupted"))
    lost = sum(1 for i in ids if i not in answered) - failed
    duplicated = sum(1 for i in ids if answered.get(i, (0,))[0] > 1)
    reply_at = {i: answered[i][1].timestamp() for i in ids if i in answered}
    during = sum(1 for t in reply_at.values() if phase.started <= t <= phase.ended)
    last = max(reply_at.values(), default=phase.ended)
    e2e = [(reply_at[s.message_id] - s.sent) * 1000 for s in phase.sent if s.message_id in reply_at]
    acks = [s.ack_ms for s in phase.sent]
    mine = [t for t in turns if t.get("message_id") in set(ids)]
    # With the work the replies left behind: each exchange indexed as an episode (embedded), which
    # the daemon does in the background and, when the cores are full, after the replies.
    indexed = (
        {
            "replies_per_s_indexed": len(reply_at) / max(phase.indexed - phase.started, 1e-9),
            "indexed_after_last_reply_s": max(phase.indexed - last, 0.0),
            "daemon_cpu_ms_per_reply_indexed": phase.indexed_cpu * 1000 / max(len(reply_at), 1),
        }
        if phase.indexed
        else {}
    )
    stages = {label: pct([float(t[key]) for t in mine if key in t], 0.5) for label, key in STAGES}
    return {
        "phase": phase.name,
        "accepted": len(ids),
        "refused": phase.refused,
        "accepted_per_s": len(ids) / phase.seconds,
        "replies_per_s_while_posting": during / phase.seconds,
        "replies_per_s_to_last": len(reply_at) / max(last - phase.started, 1e-9),
        "ack_p50_ms": pct(acks, 0.5),
        "ack_p95_ms": pct(acks, 0.95),
        "reply_p50_ms": pct(e2e, 0.5),
        "reply_p95_ms": pct(e2e, 0.95),
        "daemon_cpu_s": phase.daemon_cpu,
        "client_cpu_s": phase.client_cpu,
        "daemon_cpu_ms_per_message": phase.daemon_cpu * 1000 / max(len(ids), 1),
        "stage_p50_ms": stages,
        "turns_logged": len(mine),
        "lost": lost,
        "failed": failed,
        "duplicated": duplicated,
        **indexed,
    }


def show(r: dict[str, Any]) -> None:
    print(f"\n[{r['phase']}]")
    print(f"  accepted            {r['accepted']} ({r['accepted_per_s']:.1f}/s), refused {r['refused']}")
    print(
        f"  replies/s           {r['replies_per_s_while_posting']:.1f} while posting, "
        f"{r['replies_per_s_to_last']:.1f} until the last reply"
    )
    if "replies_per_s_indexed" in r:
        print(
            f"  with the episodes   {r['replies_per_s_indexed']:.1f} replies/s until every exchange was indexed "
            f"({r['indexed_after_last_reply_s']:.1f} s after the last reply), daemon CPU "
            f"{r['daemon_cpu_ms_per_reply_indexed']:.1f} ms per reply"
        )
    print(f"  POST->202           p50 {r['ack_p50_ms']:.1f} ms   p95 {r['ack_p95_ms']:.1f} ms")
    print(f"  post->reply stored  p50 {r['reply_p50_ms']:.0f} ms   p95 {r['reply_p95_ms']:.0f} ms")
    stages = "  ".join(f"{k} {v:.1f}" for k, v in r["stage_p50_ms"].items())
    print(f"  turn stages p50 ms  {stages}   ({r['turns_logged']} turns logged)")
    print(f"  lost {r['lost']}   duplicated {r['duplicated']}   failed (error reply) {r['failed']}")
    print(
        f"  CPU while posting   daemon {r['daemon_cpu_s']:.1f} s ({r['daemon_cpu_ms_per_message']:.1f} ms per "
        f"accepted message), benchmark clients {r['client_cpu_s']:.1f} s"
    )


def cpu_seconds(pid: int, tree: bool = True) -> float:
    """User + system CPU seconds of process ``pid`` so far, with (``tree``) its running child
    processes' (the daemon's workers) (/proc/PID/stat, /proc/PID/task/*/children)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + (sum(cpu_seconds(child) for child in children(pid)) if tree else 0.0)


def children(pid: int) -> list[int]:
    """The child processes of ``pid``."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``: its children, theirs, and so on."""
    found = []
    for child in children(pid):
        found += [child, *descendants(child)]
    return found


def pss_mb(pid: int) -> float:
    """The proportional set size of process ``pid`` in MB (its private pages, plus each page it
    shares divided by the number of processes sharing it): summed over processes, a total."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def actors_rss(home: Path, counts: list[int]) -> list[tuple[int, int, float]]:
    """(wanted actors, live actors, memory MB (PSS)) in a fresh daemon, one no-op turn per channel."""
    config = home / "agentd.toml"
    daemon = Daemon(config, home / "actors.log")
    rows = []
    try:
        done = 0
        with httpx.Client(base_url=daemon.url, timeout=60) as http:
            started(daemon.url, 120)  # its workers too, models loaded
            rows.append((0, 0, daemon.memory_mb()))
            for target in counts:
                for i in range(done, target):
                    http.post(
                        f"/v1/channels/floor-a{i}/messages",
                        json={"user": "u", "text": "hello there", "persona": FLOOR_PERSONA, "disable_memory": True},
                    ).raise_for_status()
                done = target
                settle(daemon.url, 300)
                rows.append((target, daemon.live_actors(), daemon.memory_mb()))
    finally:
        daemon.stop()
    return rows


# -- overload: admission control off and on -----------------------------------------------

#: ``[daemon]`` bounds no load here reaches: admission control off.
ADMISSION_OFF = "[daemon]\nmax_pending = 1000000000\nmax_pending_per_channel = 1000000000\n"
#: The figures compared between the two modes (medians over the runs).
OVERLOAD_FIGURES = (
    "accepted_per_s",
    "busy_per_s",
    "replies_per_s_while_posting",
    "replies_per_s_to_last",
    "reply_p50_ms",
    "reply_p95_ms",
)


def overload(args: argparse.Namespace, config: Path, home: Path, channels: list[str]) -> list[dict[str, Any]]:
    """The closed-loop load on a fresh daemon with admission control off (bounds no load reaches),
    then on (the defaults), ``--overload-runs`` times. Each phase posts for ``--seconds``, then
    waits until every accepted message is answered; a 429 is counted and the client posts again
    after its ``Retry-After``."""
    base = config.read_text()
    results: list[dict[str, Any]] = []
    try:
        for run in range(args.overload_runs):
            for on in (False, True):
                config.write_text(base + ("" if on else ADMISSION_OFF))
                mode = "on" if on else "off"
                phase = Phase(f"buddy, admission {mode}, run {run + 1}", args.seconds)
                daemon = Daemon(config, home / f"daemon-{mode}-{run}.log")
                try:
                    warm_up(daemon.url, channels[0])
                    cpu = daemon.cpu_seconds()
                    drive(daemon.url, phase, args.clients, channels, args.seconds, {}, args.seed + run, args.rate)
                    phase.daemon_cpu = daemon.cpu_seconds() - cpu
                    if not settle(daemon.url, 600):
                        print("  (turns still in flight after 600 s)", file=sys.stderr)
                finally:
                    daemon.stop()
                found = replies(config, [s.message_id for s in phase.sent])
                figures = report(phase, found, daemon.turn_lines())
                results.append(
                    {
                        **figures,
                        "admission": mode,
                        "busy": phase.busy,
                        "busy_per_s": phase.busy / args.seconds,
                        "errors": phase.errors,
                    }
                )
    finally:
        config.write_text(base)
    return results


def show_overload(results: list[dict[str, Any]]) -> None:
    """Each phase, then the medians of each mode and the ratio of their replies/s."""
    for r in results:
        show(r)
        print(f"  429 (busy)          {r['busy']} ({r['busy_per_s']:.1f}/s); other errors {r['refused']} {r['errors']}")
    medians = {
        mode: {k: pct([float(r[k]) for r in results if r["admission"] == mode], 0.5) for k in OVERLOAD_FIGURES}
        for mode in ("off", "on")
    }
    print("\nmedians over the runs       admission off   admission on")
    for key in OVERLOAD_FIGURES:
        print(f"  {key:<28}{medians['off'][key]:>12.1f}{medians['on'][key]:>15.1f}")
    ratio = medians["on"]["replies_per_s_while_posting"] / max(medians["off"]["replies_per_s_while_posting"], 1e-9)
    print(f"  replies/s while posting, on ÷ off: {ratio:.2f}")
    totals = {k: sum(int(r[k]) for r in results if r["admission"] == "on") for k in ("lost", "duplicated", "refused")}
    print(
        f"  admission on, all runs: lost {totals['lost']}, duplicated {totals['duplicated']}, "
        f"errors other than 429 {totals['refused']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--channels", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of posting per phase")
    parser.add_argument("--history", type=int, default=1000, help="earlier messages in each channel")
    parser.add_argument("--memories", type=int, default=1000, help="global memories in reach")
    parser.add_argument("--actors", default="1,100,1000", help="live-actor counts for the memory figures ('' skips)")
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="posts per second offered by all clients together, on a fixed schedule (0: closed loops, "
        "each client posting again as soon as its 202 arrives)",
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the no-op-turn phase")
    parser.add_argument("--floor-only", action="store_true", help="run only the no-op-turn phase (for profiling it)")
    parser.add_argument("--turn-slots", type=int, default=0, help="[runtime] turn_slots (0: the default)")
    parser.add_argument(
        "--workers", default="auto", help='[runtime] workers: worker processes ("auto", the default; 0: none)'
    )
    parser.add_argument(
        "--worker-niceness", type=int, help="[runtime] worker_niceness: the workers' priority below the daemon's"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cache", type=Path, help="keep the seeded database here and reuse it in later runs with the same sizes"
    )
    parser.add_argument(
        "--overload",
        action="store_true",
        help="admission control: the closed-loop load with it off, then on (fresh daemons; clients honour "
        "Retry-After); prints accepted/s, 429s/s, replies/s and post->reply p95 of each, lost and duplicated",
    )
    parser.add_argument("--overload-runs", type=int, default=3, help="with --overload: how many off/on pairs")
    parser.add_argument("--keep", action="store_true", help="keep the temporary home (database, logs)")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument(
        "--observe",
        default="",
        help="measure what watching costs instead: comma-separated settings of off, metrics, tracing "
        "(tracing needs [telemetry] otlp_endpoint), the same load once per setting",
    )
    parser.add_argument("--observe-rounds", type=int, default=1, help="runs of each --observe setting, interleaved")
    parser.add_argument(
        "--scrape-seconds", type=float, default=5.0, help="with --observe metrics: GET /metrics this often"
    )
    args = parser.parse_args()
    if args.observe:
        observe_main(args)
        return

    rng = random.Random(args.seed)
    home = Path(tempfile.mkdtemp(prefix="agentd-bench-"))
    config = write_home(home, args.turn_slots, args.workers, args.worker_niceness)
    channels = [f"dm-bench-{i}" for i in range(args.channels)]
    floor_channels = [f"floor-{i}" for i in range(args.channels)]
    print(
        f"bench/daemon.py: {args.clients} clients, {args.channels} channels, {args.seconds:g} s, "
        f"history {args.history}/channel, memories {args.memories}; home {home}",
        file=sys.stderr,
    )
    results: list[dict[str, Any]] = []
    loads: list[str] = []
    try:
        seed_cached(config, channels, args.history, args.memories, rng, args.cache, args.seed)
        if args.overload:
            show_overload(overload(args, config, home, channels))
            return
        daemon = Daemon(config, home / "daemon.log")
        try:
            warm_up(daemon.url, channels[0])
            phases = [] if args.floor_only else [Phase("buddy", args.seconds)]
            bodies: list[dict[str, Any]] = [] if args.floor_only else [{}]
            lists = [] if args.floor_only else [channels]
            if args.floor_only or not args.no_floor:
                phases.append(Phase("floor (no-op turn)", args.seconds))
                bodies.append({"persona": FLOOR_PERSONA, "disable_memory": True})
                lists.append(floor_channels)
            for phase, body, chans in zip(phases, bodies, lists, strict=True):
                loads.append(f"{phase.name}: before {loadavg()}")
                cpu_before = (daemon.cpu_seconds(), cpu_seconds(os.getpid(), tree=False))
                drive(daemon.url, phase, args.clients, chans, args.seconds, body, args.seed, args.rate)
                phase.daemon_cpu = daemon.cpu_seconds() - cpu_before[0]
                phase.client_cpu = cpu_seconds(os.getpid(), tree=False) - cpu_before[1]
                loads.append(f"{phase.name}: after {loadavg()}")
                if not settle(daemon.url, 600):
                    print("  (turns still in flight after 600 s)", file=sys.stderr)
                if not body.get("disable_memory"):  # its exchanges are indexed as episodes
                    if indexed(config, chans, 600):
                        phase.indexed = time.time()
                        phase.indexed_cpu = daemon.cpu_seconds() - cpu_before[0]
                    else:
                        print("  (exchanges still not indexed after 600 s)", file=sys.stderr)
            rss = daemon.memory_mb()
        finally:
            daemon.stop()
        turns = daemon.turn_lines()
        for phase in phases:
            results.append(report(phase, replies(config, [s.message_id for s in phase.sent]), turns))
        counts = [int(c) for c in args.actors.split(",") if c.strip()]
        actor_rows = actors_rss(home, counts) if counts else []
    finally:
        if args.keep:
            print(f"kept {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)
    print(f"agentd serve, offline model, local embedder; cpus {os.cpu_count()}")
    for r in results:
        show(r)
    print(f"\ndaemon memory after the run (PSS of its processes): {rss:.0f} MB")
    if actor_rows:
        print("memory (PSS) of a fresh daemon by live actors (one no-op turn per channel):")
        for wanted, live, mb in actor_rows:
            print(f"  {wanted:>5} channels  {live:>5} live actors  {mb:7.0f} MB")
    print("load average (1/5/15 min): " + "; ".join(loads))
    if args.json:
        print(json.dumps({"results": results, "rss_mb": rss, "actors": actor_rows, "load": loads}))


# -- what watching costs (--observe) ------------------------------------------------------------

#: Each --observe setting: the ``[telemetry]`` section it runs with.
OBSERVE_SETTINGS = {
    "off": "metrics = false\n",
    "metrics": "metrics = true\n",
    "tracing": 'metrics = false\notlp_endpoint = "{otlp}"\n',
}


def observe_settings(spec: str) -> list[str]:
    """The --observe settings to run, in order; ``tracing`` is left out, with a message, while the
    config has no ``[telemetry] otlp_endpoint``; an unknown name stops the run."""
    from agentd.config import TelemetryConfig

    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in OBSERVE_SETTINGS]
    if unknown:
        raise SystemExit(f"--observe: unknown setting {unknown[0]!r}; known: {', '.join(OBSERVE_SETTINGS)}")
    if "tracing" in names and "otlp_endpoint" not in TelemetryConfig.model_fields:
        print("--observe: skipping tracing: this agentd has no [telemetry] otlp_endpoint", file=sys.stderr)
        names.remove("tracing")
    return names


class _Sink(threading.Thread):
    """An OTLP/HTTP endpoint that accepts and drops everything (for the ``tracing`` setting)."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Drop(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(daemon=True)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Drop)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def run(self) -> None:
        self.server.serve_forever()


def _scrape_while(url: str, stop: threading.Event, every: float) -> None:
    """GET /metrics every ``every`` seconds until ``stop`` (what Prometheus would cost the daemon)."""
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.wait(every):
            client.get("/metrics")


def observe_run(args: argparse.Namespace, home: Path, setting: str, cache: Path, otlp: str) -> dict[str, Any]:
    """One run of the load under one --observe setting, on a copy of the seeded store."""
    config = write_home(home, args.turn_slots, args.workers, args.worker_niceness)
    with config.open("a") as f:
        f.write("[telemetry]\n" + OBSERVE_SETTINGS[setting].format(otlp=otlp))
    channels = [f"dm-bench-{i}" for i in range(args.channels)]
    seed_cached(config, channels, args.history, args.memories, random.Random(args.seed), cache, args.seed)
    daemon = Daemon(config, home / "daemon.log")
    try:
        started(daemon.url, 120)
        warm_up(daemon.url, channels[0])
        # The seeded history is indexed as episodes first: that background work is not the load's.
        indexed(config, channels, 600)
        phase = Phase(setting, args.seconds)
        stop = threading.Event()
        scraper = threading.Thread(target=_scrape_while, args=(daemon.url, stop, args.scrape_seconds), daemon=True)
        if setting == "metrics":
            scraper.start()
        cpu_before = daemon.cpu_seconds()
        drive(daemon.url, phase, args.clients, channels, args.seconds, {}, args.seed, args.rate)
        settle(daemon.url, 600)
        indexed(config, channels, 600)  # with the work the replies leave behind (their episodes)
        stop.set()
        cpu = daemon.cpu_seconds() - cpu_before
        scrape_ms = _scrape_cpu_ms(daemon) if setting == "metrics" else 0.0
    finally:
        daemon.stop()
    found = replies(config, [s.message_id for s in phase.sent])
    r = report(phase, found, daemon.turn_lines())
    stored = max(len(found[0]), 1)
    return {"setting": setting, **r, "daemon_cpu_ms_per_reply": cpu * 1000 / stored, "scrape_cpu_ms": scrape_ms}


def _scrape_cpu_ms(daemon: Daemon, scrapes: int = 20) -> float:
    """The daemon's CPU per ``GET /metrics``, idle after the load (every series it counted is there)."""
    with httpx.Client(base_url=daemon.url, timeout=30) as client:
        client.get("/metrics")
        before = daemon.cpu_seconds()
        for _ in range(scrapes):
            client.get("/metrics")
        return (daemon.cpu_seconds() - before) * 1000 / scrapes


def observe_main(args: argparse.Namespace) -> None:
    """--observe: the same load once per setting (times --observe-rounds, interleaved); the medians
    of replies/s and CPU per reply, and the overhead against ``off``."""
    settings = observe_settings(args.observe)
    root = Path(tempfile.mkdtemp(prefix="agentd-bench-observe-"))
    sink = _Sink()
    sink.start()
    runs: list[dict[str, Any]] = []
    try:
        cache = root / "seeded"
        cache.mkdir()
        for round_ in range(args.observe_rounds):
            for setting in settings:
                print(f"  --observe {setting}, round {round_ + 1}: {loadavg()}", file=sys.stderr)
                runs.append(observe_run(args, root / f"{setting}-{round_}", setting, cache, sink.url))
    finally:
        sink.server.shutdown()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    show_observe(settings, runs, args)


#: What the metrics hooks do for one answered turn (agentd/runtime/pipeline/respond.py, agentd/llm/cost.py,
#: agentd/api/monitoring.py: the POST that brought it and the GET that read the reply), timed in a fresh
#: process counting into files as a daemon's processes do.
_HOOKS = """
import os, sys, tempfile, time
os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp()
from agentd.observe import metrics
metrics.enable()
n = int(sys.argv[1])
start = time.process_time()
for i in range(n):
    metrics.recalled("buddy", "ok", 3, 2, 1)
    metrics.model_call("buddy", "offline", 900, 40, 0.0)
    metrics.turn_ended("buddy", "answered")
    metrics.turn_stages(1.0, 4.0, 2.0, 0.5, 3.0, 1.5)
    metrics.http_request("/v1/channels/{channel}/messages", "POST", 202, 0.002)
    metrics.http_request("/v1/channels/{channel}/messages", "GET", 200, 0.002)
print((time.process_time() - start) / n * 1e6)
"""


def hook_cpu_us(turns: int = 20_000) -> float:
    """CPU microseconds the metrics hooks of one turn take (median of three runs of ``turns``)."""
    found = []
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", _HOOKS, str(turns)], capture_output=True, text=True, check=True, timeout=300
        )
        found.append(float(done.stdout.strip()))
    return statistics.median(found)


def show_observe(settings: list[str], runs: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Per setting: median replies/s and daemon CPU per reply, and the overhead against ``off``."""
    print(
        f"agentd serve, offline model, local embedder; cpus {os.cpu_count()}; {args.clients} clients, "
        f"rate {args.rate or 'closed loops'}, {args.seconds:g} s per run, {args.observe_rounds} round(s), "
        f"/metrics scraped every {args.scrape_seconds:g} s"
    )
    medians: dict[str, tuple[float, float]] = {}
    for setting in settings:
        mine = [r for r in runs if r["setting"] == setting]
        rps = statistics.median(r["replies_per_s_to_last"] for r in mine)
        cpu = statistics.median(r["daemon_cpu_ms_per_reply"] for r in mine)
        medians[setting] = (rps, cpu)
        lost = sum(r["lost"] for r in mine)
        each = ", ".join(f"{r['daemon_cpu_ms_per_reply']:.2f}" for r in mine)
        print(f"  {setting:<8} replies/s {rps:6.2f}   daemon CPU per reply {cpu:6.2f} ms (runs: {each})   lost {lost}")
    base = medians.get("off")
    if "metrics" in settings:
        hooks = hook_cpu_us()
        share = f", {100 * hooks / 1000 / base[1]:.2f} % of a reply's CPU with metrics off" if base else ""
        print(f"  metrics hooks of one turn, measured alone: {hooks:.1f} us of CPU{share}")
        scrape = statistics.median(r["scrape_cpu_ms"] for r in runs if r["setting"] == "metrics")
        rps = medians["metrics"][0]
        per_reply = scrape / max(args.scrape_seconds * rps, 1e-9)
        print(
            f"  one GET /metrics: {scrape:.1f} ms of the daemon's CPU; every {args.scrape_seconds:g} s at "
            f"{rps:.1f} replies/s: {per_reply:.2f} ms per reply"
            + (f"; hooks and scrapes together {100 * (hooks / 1000 + per_reply) / base[1]:.2f} %" if base else "")
        )
    if base is not None:
        for setting, (rps, cpu) in medians.items():
            if setting != "off":
                print(
                    f"  {setting} overhead: CPU per reply {100 * (cpu - base[1]) / base[1]:+.1f} %, "
                    f"replies/s {100 * (rps - base[0]) / base[0]:+.1f} %"
                )
    print(f"load average now: {loadavg()}")
    if args.json:
        print(json.dumps({"observe": runs}))


if __name__ == "__main__":
    main()
