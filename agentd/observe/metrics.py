"""Prometheus metrics: the series, the one-line hooks that count them, and ``GET /metrics``' text.

The runtime, the model client and the API call the hooks below (:func:`turn_ended`,
:func:`turn_stages`, :func:`model_call`, :func:`recalled`, :func:`http_request`); each is a no-op
until :func:`enable` turned metrics on (``[telemetry] metrics``, default on), so a process that
never serves (the CLI, the tests of other parts) pays one attribute check per hook.

Multiprocess-safe: ``agentd serve`` makes a fresh directory for this daemon
(:func:`use_fresh_directory`, before its worker processes start) and names it in
``PROMETHEUS_MULTIPROC_DIR``; every process of the daemon (it, and the workers it forks) then
counts into its own files there, and :func:`render` adds them up, so a turn answered in a worker is
counted once, by the worker. The gauges (pending messages, workers, the embedder, the
background backlog) are not kept in files at all: they are read live from the daemon's own
state when Prometheus scrapes (:class:`Live`), so a dead worker cannot leave a stale one behind.
Several daemons on one PostgreSQL are each scraped on their own: each counts the turns it
answered.

Label values are bounded: personas and models come from the config, routes are the matched
route's template (never the raw path), and nothing is labelled by user, channel or message text.
prometheus-client is imported by :func:`enable` only (a CLI command never imports it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The environment variable prometheus-client reads to count in files shared by processes.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: ``Content-Type`` of :func:`render`'s answer (Prometheus' text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The stages a turn's ``turn`` log line times, as ``agentd_turn_stage_seconds``' ``stage`` label.
STAGES = ("history", "retrieval", "assemble", "model_first_token", "model_total", "store")
#: How a turn ended (``agentd_turns_total``'s ``status``).
STATUSES = ("answered", "failed", "interrupted", "refused")
#: Seconds: from a millisecond lookup to a minute-long model answer.
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Seconds a schedule fired after it was due.
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)
#: The ``route`` label of a request no route matched (a 404, a probe for some other server).
UNMATCHED_ROUTE = "unmatched"


def _rooms_series(counter: Any) -> Any:
    """``agentd_persona_turns_stopped_total``: rooms' chains stopped at ``max_persona_turns``."""
    return counter(
        "agentd_persona_turns_stopped",
        "Personas a reply in a room called on that did not answer: the chain had reached "
        "[channels.NAME] max_persona_turns (by the persona whose reply named them).",
        ["persona"],
        registry=None,
    )


class _Series:
    """The counters and histograms, made once per process by :func:`enable`."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        from agentd._compat.prometheus import choose_value_class_again

        # The value class was chosen when prometheus-client was first imported; choose again now
        # that PROMETHEUS_MULTIPROC_DIR may be set (files shared by the daemon's processes).
        choose_value_class_again()
        self.turns = Counter(
            "agentd_turns", "Turns by persona and how they ended.", ["persona", "status"], registry=None
        )
        self.stages = Histogram(
            "agentd_turn_stage_seconds",
            "Seconds each stage of an answered turn took.",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=None,
        )
        self.tokens = Counter(
            "agentd_model_tokens",
            "Tokens sent to (prompt) and received from (completion) the models, every call "
            "(replies, delegations, extraction).",
            ["persona", "model", "kind"],
            registry=None,
        )
        self.cost = Counter(
            "agentd_model_cost_usd",
            "What the model calls cost in US dollars by litellm's cost map (0 for the offline model and "
            "models the map does not price).",
            ["persona", "model"],
            registry=None,
        )
        self.budget_refusals = Counter(
            "agentd_budget_refusals_total",
            "Model calls not made because a spend cap was reached (cap: max_tokens_per_day, "
            "max_cost_usd_per_day, or users.max_tokens_per_day for the user cap).",
            ["persona", "cap"],
            registry=None,
        )
        self.recall = Counter(
            "agentd_recall",
            "What automatic recall injected into prompts (memories, episodes) and showed (near misses).",
            ["persona", "kind"],
            registry=None,
        )
        self.retrieval = Counter(
            "agentd_retrieval",
            "Automatic retrieval by outcome (ok, timeout, error, skipped).",
            ["outcome"],
            registry=None,
        )
        self.chains_stopped = _rooms_series(Counter)
        self.http = Counter(
            "agentd_http_requests",
            "HTTP requests by route template, method and status.",
            ["route", "method", "status"],
            registry=None,
        )
        self.http_seconds = Histogram(
            "agentd_http_request_duration_seconds",
            "Seconds from a request's arrival to the end of its response (a stream: until it closed).",
            ["route"],
            buckets=HTTP_BUCKETS,
            registry=None,
        )

        self.schedules = Counter(
            "agentd_schedules_fired",
            "Schedules by persona and outcome: fired (a turn was started), missed (more than "
            "[schedules] max_lateness_seconds late), deferred (admission control asked to wait).",
            ["persona", "outcome"],
            registry=None,
        )
        self.lateness = Histogram(
            "agentd_schedule_lateness_seconds",
            "Seconds from a schedule's due time to the commit of its firing's trigger message.",
            buckets=LATENESS_BUCKETS,
            registry=None,
        )

    def all(self) -> tuple[Any, ...]:
        return (
            self.schedules,
            self.lateness,
            self.turns,
            self.stages,
            self.tokens,
            self.cost,
            self.budget_refusals,
            self.recall,
            self.retrieval,
            self.chains_stopped,
            self.http,
            self.http_seconds,
        )


_series: _Series | None = None
_lock = threading.Lock()
_directory: Path | None = None


def enable(on: bool = True) -> bool:
    """Turn counting on in this process (``[telemetry] metrics``); idempotent. Returns whether it is on."""
    global _series
    if on and _series is None:
        with _lock:
            if _series is None:
                _series = _Series()
    return _series is not None


def enabled() -> bool:
    """True when this process counts."""
    return _series is not None


def use_fresh_directory() -> Path:
    """A new, empty directory for this daemon's processes to count in, named in
    ``PROMETHEUS_MULTIPROC_DIR`` for them (call before any worker starts and before :func:`enable`);
    :func:`remove_directory` removes it at exit. Files a previous daemon left are never read."""
    global _directory
    made = Path(tempfile.mkdtemp(prefix="agentd-metrics-"))
    os.environ[MULTIPROC_ENV] = str(made)
    _directory = made
    return made


def remove_directory() -> None:
    """Remove the directory :func:`use_fresh_directory` made (the daemon is stopping)."""
    global _directory
    if _directory is not None:
        shutil.rmtree(_directory, ignore_errors=True)
        _directory = None


# -- the hooks ---------------------------------------------------------------------------------


def turn_ended(persona: str, status: str) -> None:
    """A turn of ``persona`` ended: ``answered``, ``failed``, ``interrupted`` or ``refused``."""
    if _series is not None:
        _series.turns.labels(persona, status).inc()


def persona_turns_stopped(persona: str, count: int) -> None:
    """``persona``'s reply called on ``count`` personas past ``[channels.NAME] max_persona_turns``."""
    if _series is not None and count:
        _series.chains_stopped.labels(persona).inc(count)


def turn_stages(
    history_ms: float, retrieval_ms: float, assemble_ms: float, first_token_ms: float, model_ms: float, store_ms: float
) -> None:
    """An answered turn's stage times, in milliseconds (what its ``turn`` log line says)."""
    if _series is not None:
        timed = (history_ms, retrieval_ms, assemble_ms, first_token_ms, model_ms, store_ms)
        for stage, ms in zip(STAGES, timed, strict=True):
            _series.stages.labels(stage).observe(ms / 1000)


def model_call(persona: str, model: str, prompt_tokens: int, completion_tokens: int, cost_usd: float) -> None:
    """One model call's usage and cost."""
    if _series is not None:
        _series.tokens.labels(persona, model, "prompt").inc(prompt_tokens)
        _series.tokens.labels(persona, model, "completion").inc(completion_tokens)
        _series.cost.labels(persona, model).inc(cost_usd)


def budget_refused(persona: str, cap: str, user: bool = False) -> None:
    """A model call of ``persona`` was not made: ``cap`` (a persona's, or the user's when ``user``) is reached."""
    if _series is not None:
        _series.budget_refusals.labels(persona, f"users.{cap}" if user else cap).inc()


#: ``RecallStatus`` → ``agentd_retrieval_total``'s ``outcome``.
_OUTCOMES = {"ok": "ok", "timeout": "timeout", "error": "error"}


def recalled(persona: str, status: str, memories: int, episodes: int, near_misses: int) -> None:
    """What a turn's automatic recall injected, and how its retrieval went (``status``: a RecallStatus;
    disabled and unavailable count as ``skipped``)."""
    if _series is not None:
        _series.retrieval.labels(_OUTCOMES.get(status, "skipped")).inc()
        _series.recall.labels(persona, "memories").inc(memories)
        _series.recall.labels(persona, "episodes").inc(episodes)
        _series.recall.labels(persona, "near_misses").inc(near_misses)


def schedule_fired(persona: str, outcome: str, lateness: float | None = None) -> None:
    """A due schedule of ``persona``: ``fired`` (``lateness`` seconds after its time), ``missed`` or ``deferred``."""
    if _series is not None:
        _series.schedules.labels(persona, outcome).inc()
        if lateness is not None:
            _series.lateness.observe(max(0.0, lateness))


#: HTTP methods counted by name (any other is ``OTHER``: the label stays bounded).
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def http_request(route: str, method: str, status: int, seconds: float) -> None:
    """One HTTP request, by its route's template (never the raw path)."""
    if _series is not None:
        _series.http.labels(route, method if method in _METHODS else "OTHER", str(status)).inc()
        _series.http_seconds.labels(route).observe(seconds)


# -- the scrape --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Live:
    """The gauges, read from the daemon's state when it is scraped."""

    #: User messages accepted and not answered yet (in this daemon).
    pending: int = 0
    #: Worker processes running, and those down (being restarted); both 0 without workers.
    workers_up: int = 0
    workers_down: int = 0
    #: Whether an embedding model is configured, and its calls waiting for an answer now.
    embedder: bool = False
    embedder_waiting: int = 0
    #: Channels each background job (``episodes``, ``extract``) has not caught up with.
    backlog: Mapping[str, int] = field(default_factory=dict)


class _LiveCollector:
    """A collector over one :class:`Live` reading."""

    def __init__(self, live: Live) -> None:
        self._live = live

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        live = self._live
        yield GaugeMetricFamily(
            "agentd_pending_messages", "User messages accepted and not answered yet.", value=live.pending
        )
        workers = GaugeMetricFamily("agentd_workers", "Worker processes by state (up, down).", labels=["state"])
        workers.add_metric(["up"], live.workers_up)
        workers.add_metric(["down"], live.workers_down)
        yield workers
        yield GaugeMetricFamily(
            "agentd_embedder_configured", "1 when an embedding model is configured.", value=int(live.embedder)
        )
        yield GaugeMetricFamily(
            "agentd_embedder_calls_waiting",
            "Embedding calls waiting for the model now (growing: the model is slow or hung).",
            value=live.embedder_waiting,
        )
        backlog = GaugeMetricFamily(
            "agentd_background_backlog_channels",
            "Channels with messages a background job (episodes, extract) has not processed yet.",
            labels=["job"],
        )
        for job, count in sorted(live.backlog.items()):
            backlog.add_metric([job], count)
        yield backlog


def render(live: Live | None = None) -> bytes:
    """Every series in Prometheus' text format: this daemon's processes' counts added up, and ``live``."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    elif _series is not None:
        for series in _series.all():
            registry.register(series)
    if live is not None:
        registry.register(_LiveCollector(live))
    return bytes(generate_latest(registry))


__all__ = [
    "CONTENT_TYPE",
    "STAGES",
    "STATUSES",
    "UNMATCHED_ROUTE",
    "Live",
    "enable",
    "enabled",
    "http_request",
    "model_call",
    "recalled",
    "remove_directory",
    "render",
    "turn_ended",
    "turn_stages",
    "use_fresh_directory",
]
