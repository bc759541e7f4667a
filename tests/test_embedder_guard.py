"""The embedder guard's timeouts, on an embedder that answers or hangs when the test says: what the guard
did (called the model or not, which error it raised, naming what), never how long it took. How long a
hung embedder makes a crowd of API requests wait is measured by bench/embedder_timeout.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from agentd._exceptions import EmbedderTimeout
from agentd.embedders.calibration import DEFAULT_WORDS, UNCALIBRATED
from agentd.embedders.guard import GuardedEmbedder, waiting_since

DIMENSION = 4


class Switchable:
    """An embedder that counts its calls and, once :attr:`hang` is set, holds each call until released."""

    model_id = "test/switchable"
    calibration = UNCALIBRATED
    words = DEFAULT_WORDS

    def __init__(self) -> None:
        self.calls = 0
        self.hang = False
        self.released = threading.Event()

    @property
    def dimension(self) -> int:
        return DIMENSION

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if self.hang:
            self.released.wait(60)
        rows = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        rows[:, 0] = 1.0
        return rows

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


@pytest.fixture
def model() -> Iterator[Switchable]:
    inner = Switchable()
    yield inner
    inner.released.set()  # no guard thread is left waiting after the test


def test_a_caller_that_waited_its_timeout_for_a_thread_is_refused_without_calling_the_model(
    model: Switchable,
) -> None:
    """An API request queued for one of the daemon's embedding threads behind calls to a hung model: its
    timeout counts from when it began waiting, so once that much has passed it is refused and the model is
    not called (it does not wait its timeout a second time)."""
    guard = GuardedEmbedder(model, timeout=30.0)
    assert guard.dimension == DIMENSION  # probed before: the block's first call is the query's
    with waiting_since(time.monotonic() - 31.0), pytest.raises(EmbedderTimeout) as refused:
        guard.embed_queries(["python"])
    assert model.calls == 0
    assert str(refused.value).startswith("test/switchable was not called: its caller waited")
    assert "past the timeout (30 s)" in str(refused.value)


def test_only_the_first_call_of_a_waiting_caller_counts_from_when_it_began_waiting(model: Switchable) -> None:
    guard = GuardedEmbedder(model, timeout=30.0)
    assert guard.dimension == DIMENSION
    with waiting_since(time.monotonic() - 31.0):
        with pytest.raises(EmbedderTimeout, match="was not called"):
            guard.embed_queries(["python"])
        assert guard.embed_queries(["rust"]).shape == (1, DIMENSION)  # its own timeout, from its call
    assert model.calls == 1


def test_a_caller_that_waited_less_than_its_timeout_calls_the_model(model: Switchable) -> None:
    guard = GuardedEmbedder(model, timeout=30.0)
    with waiting_since(time.monotonic() - 1.0):
        assert guard.embed_queries(["python"]).shape == (1, DIMENSION)
    assert model.calls == 1


def test_a_hung_model_ends_the_call_with_a_timeout_naming_the_model_and_keeps_its_slot(model: Switchable) -> None:
    """The hung call holds its slot until the model answers: with every slot held, the next caller is
    refused without a call to the model."""
    guard = GuardedEmbedder(model, timeout=0.2, slots=1)
    assert guard.dimension == DIMENSION
    model.hang = True
    with pytest.raises(EmbedderTimeout, match=r"^test/switchable did not answer within 0.2 s \(1 texts\)$"):
        guard.embed_queries(["python"])
    assert guard.waiting == 0  # the caller gave up waiting; the call itself still hangs
    with pytest.raises(EmbedderTimeout, match="every one of its call slots is taken by calls still waiting"):
        guard.embed_queries(["rust"])
    assert model.calls == 1
    model.released.set()
