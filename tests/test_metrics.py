"""``GET /metrics``: a real Prometheus (Debian's) scrapes a real ``agentd serve`` while turns run, and
its HTTP API answers for the series; worker processes count each turn once; label values stay
bounded whatever users and channels write; who may read the metrics; the Grafana dashboard asks
only for series the daemon serves."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from agentd.api.keys import KeyBook
from tests.conftest import REPO, write_home
from tests.support import COUNTS_TURNS_ON_METRICS, wait_for
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona
from tests.support.processes import Process, start_on_a_free_port
from tests.support.serve import Serve
from tests.support.workers import channels_of_both_workers, post_all, wait_answered

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DASHBOARD = REPO / "examples" / "grafana-agentd.json"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def total(scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for (n, ls), v in scraped.items() if n == name and set(labels.items()) <= set(ls))


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Any]:
    """``start(target_url)``: Debian's Prometheus on a loopback port, scraping ``target_url``'s
    ``/metrics`` every second; returns a function that runs an instant query. Prometheus listens
    where ``--web.listen-address`` says and cannot report a port the system chose (port 0), so it
    starts on a free port, and again on another if that one was taken first
    (:func:`~tests.support.processes.start_on_a_free_port`)."""
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    procs: list[Process] = []

    def start(target: str) -> Any:
        conf = tmp_path / "prometheus.yml"
        host = target.removeprefix("http://")
        conf.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            f"scrape_configs:\n  - job_name: agentd\n    static_configs:\n      - targets: ['{host}']\n"
        )

        def launch(port: int) -> Process:
            args = [PROMETHEUS, f"--config.file={conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
            procs.append(Process([*args, f"--web.listen-address=127.0.0.1:{port}"], tmp_path / "prometheus.log"))
            return procs[-1]

        port, _process = start_on_a_free_port(
            launch, lambda p, _s: _ready(f"http://127.0.0.1:{p}/-/ready"), "Prometheus", 60
        )
        api = f"http://127.0.0.1:{port}/api/v1"

        def query(expr: str) -> list[dict[str, Any]]:
            answer = httpx.get(f"{api}/query", params={"query": expr}, timeout=10).json()
            assert answer["status"] == "success", answer
            return list(answer["data"]["result"])

        return query

    yield start
    for proc in procs:
        proc.stop()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def value(result: list[dict[str, Any]]) -> float:
    """The value of an instant query that gives one series (0 when it gives none)."""
    return float(result[0]["value"][1]) if result else 0.0


def test_a_real_prometheus_scrapes_the_turns_of_a_real_daemon(
    tmp_path: Path, fake_openai: FakeOpenAI, prometheus: Any
) -> None:
    home = write_home(tmp_path / "home", "", {"fake": fake_persona(fake_openai.url)})
    daemon = Serve(home)
    try:
        query = prometheus(daemon.url)
        turns = 3
        for i in range(turns):
            fake_openai.queue(Turn(text=f"reply number {i} has six words"))
            body = {"persona": "fake", "channel": "general", "user": f"user{i}", "message": f"hello {i}"}
            with httpx.stream("POST", daemon.url + "/v1/chat", json=body, timeout=60) as answer:
                assert answer.status_code == 200, answer.read()
                assert "event: done" in "\n".join(answer.iter_lines())
        wait_for(
            lambda: value(query('sum(agentd_turns_total{persona="fake",status="answered"})')) == turns,
            60,
            "Prometheus to have scraped every answered turn",
        )
        # Each stage of each answered turn is observed once; the tokens are the fake model's
        # usage (11 prompt tokens per call, a completion token per word).
        stages = query("sum by (stage) (agentd_turn_stage_seconds_count)")
        assert {r["metric"]["stage"]: float(r["value"][1]) for r in stages} == dict.fromkeys(
            ("history", "retrieval", "assemble", "model_first_token", "model_total", "store"), turns
        )
        tokens = query('sum by (kind) (agentd_model_tokens_total{persona="fake",model="openai/fake-model"})')
        assert {r["metric"]["kind"]: float(r["value"][1]) for r in tokens} == {
            "prompt": 11 * turns,
            "completion": 6 * turns,
        }
        assert value(query('sum(agentd_model_cost_usd_total{model="openai/fake-model"})')) == 0.0
        assert value(query('sum(agentd_retrieval_total{outcome="ok"})')) == turns
        assert query("agentd_pending_messages")
        # The gauge falls to 0 when the turn's record is stored, which can be just after the scrape
        # that counted the turn as answered: wait for a scrape that saw it fall.
        wait_for(lambda: value(query("agentd_pending_messages")) == 0, 30, "a scrape with nothing pending")
        assert value(query('sum(agentd_http_requests_total{route="/v1/chat",method="POST",status="200"})')) == turns
        assert value(query('sum(agentd_http_request_duration_seconds_count{route="/v1/chat"})')) == turns
    finally:
        daemon.stop()


def test_worker_processes_count_each_turn_once(tmp_path: Path) -> None:
    """``[runtime] workers = 2``: turns answered in two processes, counted by the process that
    answered each, summed once at the scrape."""
    home = write_home(tmp_path / "home", "[runtime]\nworkers = 2\n")
    daemon = Serve(home)
    try:
        channels = channels_of_both_workers(4)
        accepted = post_all(daemon.url, channels, 3)
        wait_answered(home, [mid for _c, mid in accepted])

        def answered() -> float:
            return total(
                samples(httpx.get(daemon.url + "/metrics", timeout=30).text), "agentd_turns_total", status="answered"
            )

        # The reply is stored before the worker counts it: wait for the count, then make sure it stays.
        wait_for(lambda: answered() == len(accepted), 30, "every answered turn to be counted")
        scraped = samples(httpx.get(daemon.url + "/metrics", timeout=30).text)
        assert total(scraped, "agentd_turns_total") == len(accepted)
        assert total(scraped, "agentd_turn_stage_seconds_count", stage="store") == len(accepted)
        assert total(scraped, "agentd_workers", state="up") == 2
    finally:
        daemon.stop()


def test_label_values_stay_bounded_whatever_users_and_channels_write(daemons: Any) -> None:
    d = daemons()

    def traffic(i: int) -> None:
        d.chat(f"message {i} from someone new", channel=f"room-{i}", user=f"person-{i}")
        d.client.get(f"/v1/channels/room-{i}/messages")
        d.client.get(f"/no/such/path/{i}")
        d.client.get("/metrics")

    def series() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
        return {key for key in samples(d.client.get("/metrics").text) if key[0].startswith("agentd_")}

    traffic(0)
    before = series()
    for i in range(1, 13):
        traffic(i)
    after = series()
    assert after == before, sorted(after - before)
    values = {v for _name, labels in after for _k, v in labels}
    assert not any("person-" in v or "room-" in v or "/no/such" in v for v in values), sorted(values)


def test_only_admin_and_metrics_keys_read_the_metrics(daemons: Any) -> None:
    d = daemons()
    book = KeyBook(d.app.store)
    metrics_key = book.create("metrics", "prometheus", ()).token
    adapter_key = book.create("adapter", "irc", ("general",), ("irc:*",)).token
    admin_key = book.create("admin", "ops", ()).token

    def get(path: str, key: str | None) -> int:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.get(d.url + path, headers=headers, timeout=30).status_code

    assert get("/metrics", None) == 401  # keys exist now: the loopback daemon is no longer open
    assert get("/metrics", metrics_key) == 200
    assert get("/v1/usage", metrics_key) == 200
    assert get("/metrics", admin_key) == 200
    assert get("/metrics", adapter_key) == 403
    assert get("/v1/usage", adapter_key) == 403
    # Read-only: nothing else.
    assert get("/v1/personas", metrics_key) == 403
    assert get("/v1/channels/general/messages", metrics_key) == 403
    chat = httpx.post(
        d.url + "/v1/chat",
        json={"persona": "fake", "channel": "general", "user": "x", "message": "hi"},
        headers={"Authorization": f"Bearer {metrics_key}"},
        timeout=30,
    )
    assert chat.status_code == 403, chat.text


def test_metrics_can_be_turned_off(daemons: Any) -> None:
    d = daemons("[telemetry]\nmetrics = false\n")
    answer = d.client.get("/metrics")
    assert answer.status_code == 404, answer.text
    assert "telemetry" in answer.json()["error"]["message"]


def test_every_dashboard_expression_asks_for_a_series_the_daemon_serves(daemons: Any) -> None:
    d = daemons()
    d.chat("hello")
    d.client.get("/healthz")
    served = {family.name for family in text_string_to_metric_families(d.client.get("/metrics").text)}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    assert len(exprs) >= 10
    asked: set[str] = set()
    for expr in exprs:
        for name in re.findall(r"\bagentd_[a-z_]+", expr):
            asked.add(re.sub(r"_(total|bucket|count|sum|created)$", "", name))
    missing = asked - served
    assert not missing, f"the dashboard asks for series the daemon does not serve: {sorted(missing)}"
    # And it shows the four a dashboard needs first: turns, their stages, tokens, the backlog.
    assert {"agentd_turns", "agentd_turn_stage_seconds", "agentd_model_tokens", "agentd_pending_messages"} <= asked


def test_each_daemon_on_one_postgresql_counts_the_turns_it_answered(request: pytest.FixtureRequest) -> None:
    """Three daemons share one store, each answering the channels it owns: scraped one by one,
    their counts add up to the turns answered, none counted twice."""
    url, daemons_ = request.getfixturevalue("cluster")
    posted = 30
    for i in range(posted):
        answer = httpx.post(
            daemons_[i % 3].url + f"/v1/channels/c{i % 10:02d}/messages",
            json={"user": "ann", "text": f"note {i}"},
            timeout=60,
        )
        assert answer.status_code == 202, answer.text

    def answered() -> list[float]:
        return [
            total(samples(httpx.get(d.url + "/metrics", timeout=30).text), "agentd_turns_total", status="answered")
            for d in daemons_
        ]

    wait_for(lambda: sum(answered()) == posted, 120, "every turn to be counted by the daemon that answered it")
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            replies = conn.execute(sa.text("SELECT count(*) FROM messages WHERE role = 'assistant'")).scalar_one()
    finally:
        engine.dispose()
    assert replies == posted
    counts = answered()
    assert sum(counts) == posted, counts


@pytest.mark.local_actors(COUNTS_TURNS_ON_METRICS)
def test_a_failed_turn_counts_as_failed_and_its_stages_are_not_observed(daemons: Any, fake_openai: FakeOpenAI) -> None:
    d = daemons()

    def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return samples(d.client.get("/metrics").text)

    before = scraped()
    fake_openai.queue(Turn(status=400))  # a request the provider refuses: not retried, the turn fails
    events = d.chat("this one fails")
    assert events[-1].event == "error", events[-1]
    after = scraped()
    assert total(after, "agentd_turns_total", persona="fake", status="failed") == (
        total(before, "agentd_turns_total", persona="fake", status="failed") + 1
    )
    answered = [total(s, "agentd_turns_total", status="answered") for s in (before, after)]
    assert answered[0] == answered[1]
    store = ("agentd_turn_stage_seconds_count", (("stage", "store"),))
    assert after.get(store, 0) == before.get(store, 0)
