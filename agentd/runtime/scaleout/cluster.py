"""Several daemons on one PostgreSQL: which daemon answers which (persona, channel).

Only on PostgreSQL (a SQLite store has one daemon, and this module is never
loaded there). The runtime's dispatcher there is a :class:`ClusterRouter`: it hands
every accepted turn to :meth:`Cluster.route`:

* if this daemon owns the (persona, channel) — it holds its advisory lock
  (:mod:`agentd.store.cluster`) — the turn goes to the local actor;
* if nobody does, this daemon takes the lock and becomes the owner: it answers
  the channel's pending messages in id order, this one among them (a daemon that
  died may have left some);
* else the owner is told (``NOTIFY``) and answers it; this daemon relays the
  turn's events to the request's own sink (``POST /v1/chat`` on any daemon).

Every ``[cluster] heartbeat_seconds`` each daemon checks its lock connection
and sweeps the store for pending messages: those of keys it owns that it is not
answering yet (a lost notification), and those of keys nobody owns (their owner
died: this daemon takes the lock and answers them). That sweep is the runtime's
own recovery path (``resume_pending``), restricted to what a daemon owns.

A message is dispatched once per daemon: the in-flight set is read and the
pending messages dispatched under one lock. Across daemons, only one holds the
lock; and should two ever answer (a daemon cut off from the server keeps
answering what it had started), the store keeps the first complete reply only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from agentd._exceptions import StoreError
from agentd.config import ClusterConfig
from agentd.observe.log import get_logger
from agentd.runtime.actors.local import LocalActors
from agentd.runtime.dispatch import Parts
from agentd.runtime.events import Done, Error, Event, event_from_json
from agentd.runtime.messages import ActorKey, Sink, Turn, resumed_turn
from agentd.store import Store
from agentd.store.cluster import ClusterLink

log = get_logger("agentd.cluster")

#: A remote turn's sink is forgotten after this long without its last event.
REMOTE_SINK_SECONDS = 3600.0
#: Relayed event rows are cleaned every this many heartbeats.
CLEANUP_EVERY = 60


class Host(Protocol):
    """What the cluster needs of the runtime."""

    @property
    def accepting(self) -> bool:
        """False once the runtime is stopping: nothing new is dispatched."""
        ...

    def dispatch(self, turn: Turn) -> None:
        """Send a turn to its local actor (tracked as in flight)."""
        ...

    def inflight_messages(self) -> set[int]:
        """The message ids of the turns in flight here."""
        ...

    def deliver(self, turn: Turn, event: Event) -> None:
        """Give another daemon's event to this daemon's listeners (channel followers)."""
        ...


def _discard(_event: Event) -> None:
    pass


class Cluster:
    """This daemon's part in a cluster of daemons sharing one PostgreSQL store."""

    def __init__(self, store: Store, config: ClusterConfig, personas: Collection[str], host: Host) -> None:
        self._store = store
        self._config = config
        self._personas = personas
        self._host = host
        # Reentrant: a sweep picks up under it, and a takeover in route() does too.
        self._lock = threading.RLock()
        self._remote: dict[str, tuple[float, Sink]] = {}
        self._remote_lock = threading.Lock()
        self._stop = threading.Event()
        self._link = ClusterLink(
            store.engine,
            config.lease_seconds,
            on_turn=self._on_turn,
            on_event=self._on_event,
            on_reconnect=self._on_reconnect,
        )
        self._heartbeat: threading.Thread | None = None

    @property
    def name(self) -> str:
        """This daemon's name in the cluster."""
        return self._link.name

    @property
    def serial(self) -> threading.RLock:
        """Held while turns are dispatched. The runtime holds it from storing a message to routing it,
        so a sweep never finds that message pending and dispatches it first."""
        return self._lock

    def owned(self) -> frozenset[ActorKey]:
        """The (persona, channel) pairs this daemon answers now."""
        return self._link.owned()

    def start(self) -> Cluster:
        """Connect, listen, and start the heartbeat."""
        self._link.start()
        self._heartbeat = threading.Thread(target=self._beat, name="agentd-cluster-heartbeat", daemon=True)
        self._heartbeat.start()
        log.info("cluster_joined", daemon=self.name, heartbeat_s=self._config.heartbeat_seconds)
        return self

    def close(self) -> None:
        """Stop the heartbeat and close the connections: every lock is released, and the other
        daemons take over this one's channels (and its messages still pending) within a heartbeat."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(self._config.heartbeat_seconds + 5)
        self._link.close()

    # -- the runtime's side ------------------------------------------------------------------

    def route(self, turn: Turn) -> None:
        """An accepted turn (its message stored): answer it here if this daemon owns or can take its
        key, else tell the owner and relay the owner's events to ``turn.sink``."""
        key = turn.key
        with self._lock:
            if self._link.owns(key):
                # Not just this turn: a message another daemon stored before it, whose NOTIFY has
                # not arrived yet, is answered first (per-channel order follows the commits).
                self._pickup(key, {turn.message_id: turn})
                return
            if self._link.try_own(key):
                log.info("cluster_took", persona=key[0], channel=key[1], daemon=self.name)
                self._pickup(key, {turn.message_id: turn})
                return
        with self._remote_lock:
            self._remote[turn.request_id] = (time.monotonic(), turn.sink)
        self._link.forward(key, turn.message_id)

    def publish(self, turn: Turn, event: Event) -> None:
        """Send a local turn's event to the other daemons (their channel followers, a remote chat)."""
        self._link.publish(
            {
                "r": turn.request_id,
                "p": turn.persona,
                "c": turn.channel,
                "u": turn.user,
                "m": turn.message_id,
                "e": event.as_json(),
            }
        )

    def sweep(self) -> int:
        """Dispatch the pending messages of the keys this daemon owns or can take; how many."""
        if not self._host.accepting:
            return 0
        try:
            with self._store.read() as conn:
                keys = self._store.messages.pending_keys(conn)
        except StoreError as exc:
            log.warning("cluster_sweep_failed", error=exc.message)
            return 0
        count = 0
        for key in keys:
            if key[0] not in self._personas:
                continue
            with self._lock:
                owned = self._link.owns(key)
                if not owned and not self._link.try_own(key):
                    continue
                if not owned:
                    log.info("cluster_took", persona=key[0], channel=key[1], daemon=self.name)
                count += self._pickup(key, {})
        return count

    # -- internals ---------------------------------------------------------------------------

    def _pickup(self, key: ActorKey, turns: Mapping[int, Turn]) -> int:
        """Dispatch ``key``'s pending messages not in flight here, oldest first (call under the lock).

        ``turns``: turns already built for some of them (with their request's sink).
        In flight is read before the store: a message answered in between is no longer
        pending, and nothing else dispatches while the lock is held.
        """
        busy = self._host.inflight_messages()
        try:
            with self._store.read() as conn:
                pending = self._store.messages.pending(conn, key)
        except StoreError as exc:
            log.warning("cluster_pickup_failed", persona=key[0], channel=key[1], error=exc.message)
            pending = []
        count = 0
        sent: set[int] = set()
        for msg in pending:
            if msg.id in busy:
                continue
            self._host.dispatch(turns.get(msg.id) or resumed_turn(msg, _discard))
            sent.add(msg.id)
            count += 1
        for message_id, turn in turns.items():  # not read back (the read failed): still answered
            if message_id not in sent and message_id not in busy:
                self._host.dispatch(turn)
                count += 1
        return count

    def _on_turn(self, key: ActorKey, message_id: int) -> None:
        if not self._host.accepting or not self._link.owns(key):
            return  # not ours: the owner answers it, or a sweep finds it
        with self._lock:
            if self._link.owns(key):
                self._pickup(key, {})

    def _on_event(self, data: dict[str, Any]) -> None:
        event = event_from_json(data["e"])
        turn = Turn(str(data["r"]), str(data["p"]), str(data["c"]), str(data["u"]), int(data["m"]), "", _discard)
        self._host.deliver(turn, event)
        with self._remote_lock:
            entry = self._remote.get(turn.request_id)
            if entry is not None and isinstance(event, Done | Error):
                del self._remote[turn.request_id]
        if entry is not None:
            try:
                entry[1](event)
            except Exception:
                log.exception("remote_sink_failed", request_id=turn.request_id)

    def _on_reconnect(self) -> None:
        log.info("cluster_listening_again", daemon=self.name)
        self.sweep()

    def _beat(self) -> None:
        beats = 0
        while not self._stop.wait(self._config.heartbeat_seconds):
            beats += 1
            try:
                self._link.check()
                self.sweep()
                self._forget_stale_sinks()
                if beats % CLEANUP_EVERY == 0:
                    self._link.cleanup()
            except Exception:  # the heartbeat must go on
                log.exception("cluster_heartbeat_failed")

    def _forget_stale_sinks(self) -> None:
        cutoff = time.monotonic() - REMOTE_SINK_SECONDS
        with self._remote_lock:
            for request_id in [r for r, (t, _) in self._remote.items() if t < cutoff]:
                del self._remote[request_id]


class ClusterRouter:
    """A :class:`~agentd.runtime.dispatch.Dispatcher`: local actors for the channels this daemon owns,
    the owner's for the others (the :class:`Host` of this daemon's :class:`Cluster`)."""

    #: Routing a message of a channel this daemon takes over dispatches every pending message of
    #: that channel, so each message is committed and routed on its own (a batch's later messages
    #: would be dispatched twice).
    batch = 1

    def __init__(self, parts: Parts) -> None:
        self._inflight = parts.inflight
        self._local = LocalActors(parts)
        self._accepting = True
        app = parts.app
        try:
            self._cluster = Cluster(app.store, app.config.cluster, tuple(app.personas), self).start()
        except BaseException:
            self._local.stop(0.0)
            raise
        self._inflight.add_outward(self._cluster.publish)

    def serial(self) -> AbstractContextManager[Any]:
        """The cluster's lock: no sweep of the pending messages runs between storing and routing."""
        return self._cluster.serial

    def route(self, turn: Turn) -> None:
        """Here, or by the daemon that owns the channel."""
        self._cluster.route(turn)

    def resume_pending(self, sink: Sink) -> int:
        """The pending messages of the channels this daemon owns or can take."""
        return self._cluster.sweep()

    def health(self, timeout: float) -> dict[str, Any]:
        """The local actors', and this daemon's part in the cluster."""
        answer = self._local.health(timeout)
        return {**answer, "cluster": {"daemon": self._cluster.name, "channels": len(self._cluster.owned())}}

    def learning_idle(self, timeout: float) -> bool:
        """The local background jobs'."""
        return self._local.learning_idle(timeout)

    def worker_pids(self) -> list[int | None]:
        """None: turns are answered in this process."""
        return []

    def stop(self, grace: float) -> None:
        """Stop the local actors, then leave the cluster (the others take this daemon's channels)."""
        self._accepting = False
        self._local.stop(grace)
        self._cluster.close()

    # -- the cluster's host -------------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """False once :meth:`stop` began."""
        return self._accepting

    def dispatch(self, turn: Turn) -> None:
        """Send a turn to its local actor (the cluster decided this daemon answers it)."""
        self._local.route(turn)

    def inflight_messages(self) -> set[int]:
        """The message ids of the turns in flight here."""
        return self._inflight.message_ids()

    def deliver(self, turn: Turn, event: Event) -> None:
        """Another daemon's event: to this runtime's listeners, as if the turn ran here."""
        self._inflight.deliver(turn, event)


__all__ = ["Cluster", "ClusterRouter", "Host"]
