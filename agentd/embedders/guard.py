"""The embedder boundary: every call bounded in time, every answer checked before use.

Whatever model is behind an :class:`~agentd.embedders.Embedder` (the offline
ONNX models, an HTTP service through litellm, one a test injects), what it
returns is only used if it is an array of ``(len(texts), dimension)`` finite
float rows of unit length (:func:`~agentd.embedders.check_vectors`). Anything else — NaN, an
infinity, a zero vector, a wrong dimension, a missing row — is an
:class:`~agentd.EmbedderBadOutput`, never a vector in the store: one such row
would poison every search whose reach includes it.

Each call runs on a daemon thread of the guard's own (kept and reused: starting a
thread per call cost a turn more than a query's embedding on a busy daemon) and
the caller waits at most ``timeout`` seconds (per ``batch_size`` texts) for it
(:class:`~agentd.EmbedderTimeout` after that). A hung call keeps its thread until
the model answers or its own HTTP timeout fires, so at most ``slots`` calls run at
once; a caller that cannot get a slot within its timeout also gets
``EmbedderTimeout``. The threads are daemon threads: a hung model never keeps the
process from exiting on SIGTERM.

A caller that queued before it could call (an API request waiting for one of the
daemon's embedding threads) says since when with :func:`waiting_since`: its first
call's timeout counts from then, so a hung model costs every request its timeout,
not its timeout again for each wave of requests queued ahead of it.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from agentd._exceptions import AgentdError, EmbedderError, EmbedderTimeout, ShuttingDown
from agentd.embedders import Embedder, check_vectors
from agentd.embedders.calibration import Calibration, WordWeights
from agentd.observe import tracing

if TYPE_CHECKING:
    import numpy as np

#: Seconds one call of up to :data:`DEFAULT_BATCH` texts may take (``[embedding] timeout_seconds``).
DEFAULT_TIMEOUT = 30.0
#: Texts per timeout unit: a call of ``n`` texts may take ``timeout * ceil(n / batch)`` seconds.
DEFAULT_BATCH = 64
#: Embedder calls that may run at once (hung ones included).
DEFAULT_SLOTS = 16
T = TypeVar("T")

#: Per thread: since when the next call's caller has been waiting (:func:`waiting_since`).
_since = threading.local()


@contextmanager
def waiting_since(started: float) -> Iterator[None]:
    """The first embedder call made on this thread inside the block counts its timeout from
    ``started`` (a ``time.monotonic()``), when its caller began waiting, not from the call."""
    _since.at = started
    try:
        yield
    finally:
        _since.at = None


class GuardedEmbedder:
    """An :class:`Embedder` whose calls are bounded in time and whose answers are checked."""

    def __init__(
        self,
        inner: Embedder,
        timeout: float = DEFAULT_TIMEOUT,
        batch: int = DEFAULT_BATCH,
        slots: int = DEFAULT_SLOTS,
    ) -> None:
        self._inner = inner
        self.timeout = timeout
        self._batch = max(1, batch)
        self._threads = _Threads(slots)
        self._dimension: int | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._waiting: set[Future[Any]] = set()

    @property
    def inner(self) -> Embedder:
        """The embedder being guarded."""
        return self._inner

    @property
    def waiting(self) -> int:
        """Calls waiting for the model's answer now (the metrics' embedder health)."""
        with self._lock:
            return len(self._waiting)

    @property
    def model_id(self) -> str:
        """The model's id (stored with the vectors)."""
        return self._inner.model_id

    @model_id.setter
    def model_id(self, value: str) -> None:
        self._inner.model_id = value

    @property
    def calibration(self) -> Calibration:
        """The model's calibration."""
        return self._inner.calibration

    @calibration.setter
    def calibration(self, value: Calibration) -> None:
        self._inner.calibration = value

    @property
    def words(self) -> WordWeights:
        """The model's hybrid-search weights."""
        return self._inner.words

    @words.setter
    def words(self, value: WordWeights) -> None:
        self._inner.words = value

    @property
    def dimension(self) -> int:
        """The model's vector size (a remote model is asked once, within the timeout)."""
        if self._dimension is None:
            self._dimension = self._bounded(lambda: int(self._inner.dimension), self.timeout, "dimension probe")
        return self._dimension

    def load(self) -> None:
        """Load a model that loads on first use (``agentd.app.LoadedOnFirstUse``) now, on this
        thread and outside any timeout: its one-time load is not a slow call."""
        load = getattr(self._inner, "load", None)
        if load is not None:
            load()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts to store, embedded within the timeout and checked."""
        return self._call(self._inner.embed, texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Search queries, embedded within the timeout and checked."""
        return self._call(self._inner.embed_queries, texts)

    def begin_queries(self, texts: Sequence[str]) -> Callable[[], np.ndarray]:
        """:meth:`embed_queries` begun now, on the guard's thread; the function returned waits for
        the answer (within the timeout, counted from now) and checks it. Meanwhile the caller
        can do work that does not need the vectors."""
        return self._begin_call(self._inner.embed_queries, texts)

    def _call(self, method: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str]) -> np.ndarray:
        return self._begin_call(method, texts)()

    def _begin_call(
        self, method: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str]
    ) -> Callable[[], np.ndarray]:
        texts = list(texts)
        dimension = self.dimension
        if not texts:
            import numpy as np

            empty = np.zeros((0, dimension), dtype=np.float32)
            return lambda: empty
        timeout = self.timeout * math.ceil(len(texts) / self._batch)
        # A span on the guard's thread, under the caller's (GenAI conventions: embeddings MODEL).
        call = tracing.traced(lambda: method(texts), f"embeddings {self.model_id}", _embedding_span(self, len(texts)))
        wait = self._begin(call, timeout, f"{len(texts)} texts")
        return lambda: check_vectors(wait(), len(texts), dimension, self.model_id)

    def close(self) -> None:
        """Stop waiting: calls waiting now, and every later call, end at once with an error
        (the process is stopping; a hung call's thread is a daemon thread and is left behind)."""
        self._closed.set()
        with self._lock:
            waiting = list(self._waiting)
        for future in waiting:
            _settle(future, error=ShuttingDown(f"{self.model_id} was not waited for: agentd is stopping"))

    def _bounded(self, work: Callable[[], T], timeout: float, what: str) -> T:
        """Run ``work`` on a daemon thread; wait at most ``timeout`` seconds for a slot and the answer."""
        return self._begin(work, timeout, what)()

    def _begin(self, work: Callable[[], T], timeout: float, what: str) -> Callable[[], T]:
        """Start ``work`` on a daemon thread (waiting at most ``timeout`` seconds for a slot); the
        function returned waits for its answer until ``timeout`` seconds after this call."""
        now = time.monotonic()
        since = getattr(_since, "at", None)
        _since.at = None  # only the first call of the waiting caller
        deadline = (since if since is not None and since < now else now) + timeout
        if self._closed.is_set():
            raise ShuttingDown(f"{self.model_id} is not called: agentd is stopping")
        if deadline <= now:
            raise EmbedderTimeout(
                f"{self.model_id} was not called: its caller waited {now - deadline + timeout:.1f} s for a turn, "
                f"past the timeout ({timeout:g} s), behind calls still waiting for it"
            )
        if not self._threads.slots.acquire(timeout=deadline - now):
            raise EmbedderTimeout(
                f"{self.model_id} did not answer in time: every one of its call slots is taken by calls "
                f"still waiting for it (timeout {timeout:g} s)"
            )
        future: Future[T] = Future()

        def run() -> None:
            try:
                _settle(future, value=work())
            except AgentdError as exc:
                _settle(future, error=exc)
            except Exception as exc:  # an embedder's own failure is the embedder's, not a bug of agentd
                error = EmbedderError(f"{self.model_id} failed: {type(exc).__name__}: {exc}")
                error.__cause__ = exc
                _settle(future, error=error)

        with self._lock:
            self._waiting.add(future)
        # Forgotten once it has an outcome, whether or not anyone waits for it.
        future.add_done_callback(self._forget)
        try:
            self._threads.start(run)
        except RuntimeError as exc:  # no thread could be started (the interpreter is stopping)
            self._forget(future)
            raise EmbedderError(f"cannot call {self.model_id}: {exc}") from exc

        def wait() -> T:
            try:
                return future.result(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise EmbedderTimeout(f"{self.model_id} did not answer within {timeout:g} s ({what})") from None
            finally:
                self._forget(future)

        return wait

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._waiting.discard(future)


class _Threads:
    """Daemon threads that run the calls, reused; each call holds one of ``slots`` until it returns.

    A call goes to an idle thread when there is one, else to a new thread: there are never more
    threads than calls that ran at once, and a hung call holds its thread and its slot.
    """

    def __init__(self, slots: int) -> None:
        #: Acquired by the caller before :meth:`start`; released when the call returns.
        self.slots = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self._idle = 0
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def start(self, call: Callable[[], None]) -> None:
        """Run ``call`` (its slot already taken) on an idle thread or a new one."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._calls.put(call)
                return
        try:
            threading.Thread(target=self._serve, args=(call,), name="agentd-embed", daemon=True).start()
        except RuntimeError:  # the interpreter is stopping
            self.slots.release()
            raise

    def _serve(self, call: Callable[[], None]) -> None:
        while True:
            try:
                call()
            finally:
                with self._lock:
                    self._idle += 1
                self.slots.release()
            call = self._calls.get()


def _settle(future: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    """Give ``future`` its outcome unless it already has one (the caller stopped waiting)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except InvalidStateError:
        pass


def _embedding_span(guard: GuardedEmbedder, count: int) -> tracing.Attributes | None:
    """An embedding call's span attributes (none made when tracing is off)."""
    if not tracing.enabled():
        return None
    return {"gen_ai.operation.name": "embeddings", "gen_ai.request.model": guard.model_id, "agentd.texts": count}


def guarded(embedder: Embedder | None, timeout: float = DEFAULT_TIMEOUT) -> GuardedEmbedder | None:
    """``embedder`` behind the boundary (itself if it already is; ``None`` stays ``None``)."""
    if embedder is None or isinstance(embedder, GuardedEmbedder):
        return embedder
    return GuardedEmbedder(embedder, timeout)
