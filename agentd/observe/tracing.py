"""OpenTelemetry traces: off unless ``[telemetry] otlp_endpoint`` is set; then a turn is one trace.

Off (the default) nothing of OpenTelemetry is imported and every hook is a function call that
returns a shared no-op (:data:`NO_SPAN`): the pipeline's hooks are one line each and cost a few
hundred nanoseconds a turn (``bench/tracing_cost.py`` measures them). On, :func:`configure`
imports the SDK and the OTLP/HTTP exporter (the ``telemetry`` extra) and sends spans in batches
from a bounded queue (a full queue drops spans rather than slowing a turn; each export is
bounded in time); :func:`shutdown` flushes what is queued.

The hooks:

* :func:`span` opens a span under the current one, or under a W3C ``traceparent`` given as
  ``parent`` (a turn that crossed a thread, a process or the HTTP client's header);
* :func:`spanned` is the same as a decorator, for a method that is one stage;
* :func:`inject` is the current span's ``traceparent`` (carried with a turn, as a string, through
  the group commit and over a worker process's pipe);
* :func:`traced` carries the current span into a function run on another thread (a thread pool,
  the embedder's own threads), optionally as a span of its own there.

The tracer is this module's own, not OpenTelemetry's global one: the process that configured it
is the one that reports, and nothing else in the process (a library's own instrumentation) is
switched on by it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal, ParamSpec, Protocol, TypeVar

from agentd._exceptions import ConfigError
from agentd.config import TelemetryConfig

#: The extra that brings the SDK and the exporter.
EXTRA = "agentd[telemetry]"
#: Spans waiting for export, at most: past it new spans are dropped (a turn never waits for them).
MAX_QUEUE = 4096
#: Spans sent per OTLP request, at most.
MAX_BATCH = 512
#: Seconds one export (an HTTP request to the collector) may take.
EXPORT_TIMEOUT_SECONDS = 10.0
#: Seconds :func:`shutdown` waits for what is queued to be sent.
FLUSH_TIMEOUT_SECONDS = 5.0

#: What a span's attribute may be (OpenTelemetry's primitive types and sequences of them).
Attributes = Mapping[str, str | bool | int | float | tuple[str, ...]]
Kind = Literal["internal", "server", "client"]
P = ParamSpec("P")
R = TypeVar("R")


class Span(Protocol):
    """What a hook may do with its open span."""

    def set(self, key: str, value: str | bool | int | float | tuple[str, ...]) -> None:
        """Set an attribute (a value known only once the work is done: token counts, a status)."""

    def fail(self, description: str) -> None:
        """Mark the span failed (work that ended with an error that was not an exception)."""

    def rename(self, name: str) -> None:
        """Change the span's name (an HTTP request's route is known only after routing)."""


class _NoSpan:
    """The span of tracing off: a context manager that does nothing, shared by every hook."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def set(self, key: str, value: object) -> None:
        """Nothing: tracing is off."""

    def fail(self, description: str) -> None:
        """Nothing: tracing is off."""

    def rename(self, name: str) -> None:
        """Nothing: tracing is off."""


NO_SPAN = _NoSpan()

#: The SDK's tracer, provider and propagator while tracing is on (``None``: off).
_tracer: Any = None
_provider: Any = None
_propagator: Any = None


def enabled() -> bool:
    """True while spans are being recorded and exported."""
    return _tracer is not None


def configure(cfg: TelemetryConfig, where: str = "agentd.toml") -> bool:
    """Start exporting spans when ``cfg.otlp_endpoint`` is set (True); else import nothing (False).

    ``where`` names the config file in the error raised when the ``telemetry`` extra is missing.
    Called again, it replaces the tracer (the previous one is flushed first).
    """
    if not cfg.otlp_endpoint:
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError as exc:
        raise ConfigError(
            where,
            "telemetry.otlp_endpoint",
            f"is set, but OpenTelemetry is not installed ({exc.name or exc}): install the extra, "
            f"pip install '{EXTRA}', or leave otlp_endpoint empty",
        ) from None
    from agentd import __version__

    shutdown()
    global _tracer, _provider, _propagator
    provider = TracerProvider(
        resource=Resource.create({"service.name": cfg.service_name, "service.version": __version__})
    )
    exporter = OTLPSpanExporter(endpoint=cfg.otlp_endpoint.rstrip("/") + "/v1/traces", timeout=EXPORT_TIMEOUT_SECONDS)
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter,
            max_queue_size=MAX_QUEUE,
            max_export_batch_size=MAX_BATCH,
            export_timeout_millis=int(EXPORT_TIMEOUT_SECONDS * 1000),
        )
    )
    _propagator = TraceContextTextMapPropagator()
    _provider = provider
    _tracer = provider.get_tracer("agentd", __version__)
    return True


def shutdown() -> None:
    """Send what is queued (within :data:`FLUSH_TIMEOUT_SECONDS`) and stop tracing."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is not None:
        provider.force_flush(int(FLUSH_TIMEOUT_SECONDS * 1000))
        provider.shutdown()


def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    parent: str | Mapping[str, str] | None = None,
    kind: Kind = "internal",
) -> AbstractContextManager[Span]:
    """A span around the ``with`` block: a child of the current span, or, when ``parent`` is given,
    of that W3C ``traceparent`` (or of the headers' ``traceparent`` and ``tracestate``), the first
    span of a trace of its own when it is empty or not valid. An exception leaving the block is
    recorded on the span and marks it failed."""
    if _tracer is None:
        return NO_SPAN
    return _live(name, attributes, parent, kind)


def spanned(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function: each call is a span called ``name`` (when tracing is on)."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            if _tracer is None:
                return fn(*args, **kwargs)
            with _live(name, None, None, "internal"):
                return fn(*args, **kwargs)

        return run

    return decorate


def inject() -> str:
    """The current span's W3C ``traceparent`` ("" when tracing is off or no span is open)."""
    if _tracer is None:
        return ""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent", "")


def traced(fn: Callable[P, R], name: str = "", attributes: Attributes | None = None) -> Callable[P, R]:
    """``fn``, run (on whatever thread) under the span current now; inside a span of its own
    called ``name`` when one is given. Tracing off: ``fn`` itself."""
    if _tracer is None:
        return fn
    from opentelemetry import context

    captured = context.get_current()

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        token = context.attach(captured)
        try:
            if not name:
                return fn(*args, **kwargs)
            with _live(name, attributes, None, "internal"):
                return fn(*args, **kwargs)
        finally:
            context.detach(token)

    return run


class _LiveSpan:
    """An SDK span behind the :class:`Span` protocol."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, key: str, value: str | bool | int | float | tuple[str, ...]) -> None:
        self._span.set_attribute(key, value)

    def fail(self, description: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_status(Status(StatusCode.ERROR, description))

    def rename(self, name: str) -> None:
        self._span.update_name(name)


@contextmanager
def _live(
    name: str, attributes: Attributes | None, parent: str | Mapping[str, str] | None, kind: Kind
) -> Iterator[Span]:
    from opentelemetry.trace import SpanKind

    context = None
    if parent is not None:
        carrier = {"traceparent": parent} if isinstance(parent, str) else parent
        context = _propagator.extract(carrier)
    with _tracer.start_as_current_span(
        name, context=context, kind=getattr(SpanKind, kind.upper()), attributes=attributes
    ) as live:
        yield _LiveSpan(live)


__all__ = [
    "EXTRA",
    "NO_SPAN",
    "Span",
    "configure",
    "enabled",
    "inject",
    "shutdown",
    "span",
    "spanned",
    "traced",
]
