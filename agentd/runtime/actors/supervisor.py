"""The Supervisor: owns the (persona, channel) → actor map.

It spawns an actor on a channel's first message, stops actors idle for longer
than ``runtime.idle_stop_seconds``, and restarts a crashed actor after a backoff
that doubles with each crash. More than ``runtime.max_restarts`` crashes within
``runtime.restart_window_seconds`` mark the pair unhealthy: it is reported by
:class:`HealthCheck` and its messages get an error instead of a restart loop.

Nothing accepted is dropped: the supervisor remembers every turn it routed until
the actor reports it finished, and re-sends the unfinished ones, in order, to
the restarted actor. The turn the crash interrupted ends with an error event.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import pykka

from agentd._exceptions import ErrorCode
from agentd.config import RuntimeConfig
from agentd.observe.log import get_logger
from agentd.runtime.messages import (
    ActorCrashed,
    ActorKey,
    Dispatch,
    HealthCheck,
    IdleCheck,
    Respawn,
    Turn,
    TurnFinished,
)
from agentd.timing import backoff

log = get_logger("agentd.supervisor")

#: spawn(key, supervisor, generation) -> the new actor's ref.
Spawn = Callable[[ActorKey, pykka.ActorRef[Any], int], pykka.ActorRef[Any]]
#: Ends a turn that no actor will answer: (turn, error code, message).
Unanswerable = Callable[[Turn, ErrorCode, str], None]


class Supervisor(pykka.ThreadingActor):
    """Routes turns to persona actors and keeps them alive."""

    use_daemon_thread = True

    def __init__(self, spawn: Spawn, config: RuntimeConfig, unanswerable: Unanswerable) -> None:
        super().__init__()
        self._spawn = spawn
        self._config = config
        self._unanswerable = unanswerable
        self._actors: dict[ActorKey, pykka.ActorRef[Any]] = {}
        self._generation: dict[ActorKey, int] = {}
        self._inflight: dict[ActorKey, deque[Turn]] = {}
        self._crashes: dict[ActorKey, deque[float]] = {}
        self._restarts: dict[ActorKey, int] = {}
        self._respawning: set[ActorKey] = set()
        self._unhealthy: dict[ActorKey, str] = {}
        self._last_active: dict[ActorKey, float] = {}
        self._stop_ticker = threading.Event()

    def on_start(self) -> None:
        """Start the idle-check ticker."""
        interval = max(0.05, min(self._config.idle_stop_seconds / 4, 30.0))
        me = self.actor_ref

        def tick() -> None:
            while not self._stop_ticker.wait(interval):
                try:
                    me.tell(IdleCheck())
                except pykka.ActorDeadError:
                    return

        threading.Thread(target=tick, name="agentd-idle-ticker", daemon=True).start()

    def on_stop(self) -> None:
        """Stop the ticker and every actor."""
        self._stop_ticker.set()
        for ref in self._actors.values():
            ref.stop(block=False)
        self._actors.clear()

    def on_receive(self, message: Any) -> Any:
        """Dispatch on the message type."""
        if isinstance(message, Dispatch):
            self._dispatch(message.turn)
        elif isinstance(message, TurnFinished):
            self._finished(message.key, message.request_id)
        elif isinstance(message, ActorCrashed):
            self._crashed(message)
        elif isinstance(message, Respawn):
            self._respawn(message.key)
        elif isinstance(message, IdleCheck):
            self._stop_idle()
        elif isinstance(message, HealthCheck):
            return self._health()
        return None

    # -- handlers -----------------------------------------------------------------------

    def _dispatch(self, turn: Turn) -> None:
        key = turn.key
        if key in self._unhealthy:
            self._unanswerable(turn, ErrorCode.PERSONA_UNHEALTHY, self._unhealthy[key])
            return
        self._inflight.setdefault(key, deque()).append(turn)
        self._last_active[key] = time.monotonic()
        if key in self._respawning:
            return  # re-sent, in order, when the actor is back
        ref = self._actors.get(key)
        if ref is None:
            ref = self._start(key)
        ref.tell(turn)

    def _start(self, key: ActorKey) -> pykka.ActorRef[Any]:
        generation = self._generation.get(key, 0) + 1
        self._generation[key] = generation
        ref = self._spawn(key, self.actor_ref, generation)
        self._actors[key] = ref
        log.debug("actor_started", persona=key[0], channel=key[1], generation=generation)
        return ref

    def _finished(self, key: ActorKey, request_id: str) -> None:
        queue = self._inflight.get(key)
        if queue:
            for turn in queue:
                if turn.request_id == request_id:
                    queue.remove(turn)
                    break
        self._last_active[key] = time.monotonic()

    def _crashed(self, crash: ActorCrashed) -> None:
        key = crash.key
        if crash.generation != self._generation.get(key):
            return  # a report from an actor already replaced
        self._actors.pop(key, None)
        queue = self._inflight.setdefault(key, deque())
        failed = next((t for t in queue if t.request_id == crash.request_id), None)
        if failed is not None:
            queue.remove(failed)
            self._unanswerable(
                failed, ErrorCode.INTERNAL_ERROR, f"persona {key[0]} failed while answering: {crash.error}"
            )
        now = time.monotonic()
        crashes = self._crashes.setdefault(key, deque())
        crashes.append(now)
        while crashes and now - crashes[0] > self._config.restart_window_seconds:
            crashes.popleft()
        log.error("actor_crashed", persona=key[0], channel=key[1], error=crash.error, crashes=len(crashes))
        if len(crashes) > self._config.max_restarts:
            reason = (
                f"persona {key[0]} in channel {key[1]} crashed {len(crashes)} times within "
                f"{self._config.restart_window_seconds:g} s and is not restarted; last error: {crash.error}"
            )
            self._unhealthy[key] = reason
            log.error("actor_unhealthy", persona=key[0], channel=key[1], reason=reason)
            while queue:
                self._unanswerable(queue.popleft(), ErrorCode.PERSONA_UNHEALTHY, reason)
            return
        # Doubling from restart_backoff_seconds, without jitter: one actor's restarts, not a crowd's.
        wait = backoff.delay(len(crashes) - 1, self._config.restart_backoff_seconds, math.inf, jitter=0.0)
        self._respawning.add(key)
        me = self.actor_ref
        timer = threading.Timer(wait, lambda: _tell_quietly(me, Respawn(key)))
        timer.daemon = True
        timer.start()

    def _respawn(self, key: ActorKey) -> None:
        self._respawning.discard(key)
        if key in self._unhealthy:
            return
        self._restarts[key] = self._restarts.get(key, 0) + 1
        queue = self._inflight.get(key) or deque()
        if not queue:
            return  # started again on the next message
        ref = self._start(key)
        for turn in queue:
            ref.tell(turn)

    def _stop_idle(self) -> None:
        now = time.monotonic()
        for key, ref in list(self._actors.items()):
            if not self._inflight.get(key) and now - self._last_active.get(key, now) > self._config.idle_stop_seconds:
                ref.stop(block=False)
                del self._actors[key]
                log.debug("actor_stopped_idle", persona=key[0], channel=key[1])

    def _health(self) -> dict[str, Any]:
        keys = sorted(set(self._actors) | set(self._unhealthy) | {k for k, q in self._inflight.items() if q})
        return {
            "healthy": not self._unhealthy,
            "actors": [
                {
                    "persona": k[0],
                    "channel": k[1],
                    "running": k in self._actors,
                    "inflight": len(self._inflight.get(k, ())),
                    "restarts": self._restarts.get(k, 0),
                    "healthy": k not in self._unhealthy,
                    **({"reason": self._unhealthy[k]} if k in self._unhealthy else {}),
                }
                for k in keys
            ],
        }


def _tell_quietly(ref: pykka.ActorRef[Any], message: Any) -> None:
    try:
        ref.tell(message)
    except pykka.ActorDeadError:
        pass  # the supervisor stopped meanwhile: nothing left to restart
