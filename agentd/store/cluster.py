"""PostgreSQL as the meeting point of several daemons: advisory locks and LISTEN/NOTIFY.

Each daemon opens three connections of its own, outside the pool:

* the **lock connection** holds session-level advisory locks, one per (persona,
  channel) the daemon answers (:func:`lock_key`). A lock lives as long as its
  connection: a daemon that stops, crashes or is killed loses its locks when
  the server sees the connection close, and another daemon can take them. A
  daemon whose host vanishes without closing the connection keeps them until
  the server gives up on it: TCP keepalives and ``tcp_user_timeout``, set on
  both ends of this connection, bound that to ``[cluster] lease_seconds``. The
  daemon itself checks the connection every heartbeat; when it is lost, the
  daemon forgets every lock it held (and takes them again only if free).
* the **listen connection** receives notifications on two channels:
  ``agentd_turns`` (a message was accepted for a (persona, channel): its owner
  picks it up) and ``agentd_events`` (a turn's event, for channel followers on
  every daemon).
* the **notify connection** sends them, in batches, from one thread, so one
  daemon's notifications arrive in the order they were sent. A payload larger
  than NOTIFY allows (8000 bytes) is stored in ``cluster_events`` and its row's
  id is sent instead.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import sqlalchemy as sa

from agentd._exceptions import StoreError
from agentd.observe.log import get_logger
from agentd.timing.backoff import Backoff

log = get_logger("agentd.cluster")

#: (persona, channel).
Key = tuple[str, str]
#: Notifications: a message was accepted for a key (its owner picks it up).
TURNS = "agentd_turns"
#: Notifications: one event of a turn, for every daemon's channel followers.
EVENTS = "agentd_events"
#: NOTIFY payloads must be shorter than 8000 bytes; larger ones go through ``cluster_events``.
MAX_PAYLOAD_BYTES = 7900
#: How long rows of ``cluster_events`` are kept (every daemon has read them long before).
EVENT_ROWS_KEEP_SECONDS = 300
#: Bounds on every statement and connection attempt of these connections.
STATEMENT_TIMEOUT_MS = 5000
CONNECT_TIMEOUT_S = 5
#: Notifications sent in one transaction at most.
BATCH = 500


def lock_key(key: Key) -> int:
    """The advisory lock id of a (persona, channel): 64 bits of a keyed hash (two keys sharing one
    id would only mean that one daemon answers both)."""
    digest = hashlib.blake2b(f"{key[0]}\x00{key[1]}".encode(), digest_size=8, person=b"agentd-owner").digest()
    return int.from_bytes(digest, "big", signed=True)


class ClusterLink:
    """One daemon's connections to the others, through PostgreSQL.

    ``on_turn(key, message_id)`` and ``on_event(data)`` are called on the listen
    thread for notifications from any daemon (``on_event`` only for other
    daemons' events); ``on_reconnect()`` after the listen connection was lost and
    made again (notifications may have been missed meanwhile).
    """

    def __init__(
        self,
        engine: sa.Engine,
        lease_seconds: float,
        *,
        on_turn: Callable[[Key, int], None],
        on_event: Callable[[dict[str, Any]], None],
        on_reconnect: Callable[[], None],
    ) -> None:
        url = engine.url.set(drivername="postgresql")
        self._conninfo = url.render_as_string(hide_password=False)
        self._engine = engine
        self._lease = lease_seconds
        self._on_turn = on_turn
        self._on_event = on_event
        self._on_reconnect = on_reconnect
        #: This daemon's name in the cluster (its own events are not delivered back to it).
        self.name = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self._owned: set[Key] = set()
        self._lock_conn: psycopg.Connection[Any] | None = None
        self._outbox: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- life --------------------------------------------------------------------------

    def start(self) -> ClusterLink:
        """Open the lock connection, start listening and sending."""
        try:
            self._lock_conn = self._connect("lock")
            listen = self._connect("listen")  # listening before anything is sent: nothing falls in a gap
            listen.execute(f"LISTEN {TURNS}")
            listen.execute(f"LISTEN {EVENTS}")
        except psycopg.Error as exc:
            if self._lock_conn is not None:
                self._lock_conn.close()
            where = self._engine.url.render_as_string(hide_password=True)
            raise StoreError(f"cannot connect to {where} to work with the other daemons: {exc}") from exc
        for target, name, arg in ((self._listen, "listen", listen), (self._send, "notify", None)):
            thread = threading.Thread(target=target, args=(arg,), name=f"agentd-cluster-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued, stop listening, and close the connections (releasing every lock)."""
        self._outbox.put(None)
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        with self._lock:
            if self._lock_conn is not None:
                self._lock_conn.close()
                self._lock_conn = None
            self._owned.clear()

    def _connect(self, role: str) -> psycopg.Connection[Any]:
        # The server drops a silent peer's connection (and its locks) after about lease_seconds,
        # and this end gives up on a silent server as soon.
        idle = max(1, int(self._lease / 3))
        interval = max(1, int(self._lease / 6))
        user_timeout_ms = int(self._lease * 1000)
        options = (
            f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c lock_timeout={STATEMENT_TIMEOUT_MS} "
            f"-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval={interval} -c tcp_keepalives_count=3 "
            f"-c tcp_user_timeout={user_timeout_ms}"
        )
        return psycopg.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            keepalives=1,
            keepalives_idle=idle,
            keepalives_interval=interval,
            keepalives_count=3,
            tcp_user_timeout=user_timeout_ms,
            options=options,
            application_name=f"agentd {self.name} {role}",
        )

    # -- ownership ---------------------------------------------------------------------

    def owns(self, key: Key) -> bool:
        """True while this daemon holds ``key``'s lock."""
        with self._lock:
            return key in self._owned

    def owned(self) -> frozenset[Key]:
        """Every key this daemon holds."""
        with self._lock:
            return frozenset(self._owned)

    def try_own(self, key: Key) -> bool:
        """Hold ``key`` (True), unless another daemon does (False); never waits on the other."""
        with self._lock:
            if key in self._owned:
                return True
            if self._lock_conn is None:
                return False
            try:
                row = self._lock_conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(key),)).fetchone()
            except psycopg.Error as exc:
                self._lost(exc)
                return False
            if row is not None and row[0]:
                self._owned.add(key)
                return True
            return False

    def check(self) -> bool:
        """The heartbeat: is the lock connection alive? If it was lost, connect again (holding nothing)."""
        with self._lock:
            if self._lock_conn is not None:
                try:
                    self._lock_conn.execute("SELECT 1")
                    return True
                except psycopg.Error as exc:
                    self._lost(exc)
            try:
                self._lock_conn = self._connect("lock")
            except psycopg.Error as exc:
                log.warning("cluster_reconnect_failed", error=str(exc).strip())
            return False

    def _lost(self, exc: psycopg.Error) -> None:
        """The lock connection failed: every lock may be gone (call with the lock held)."""
        log.error("cluster_locks_lost", error=str(exc).strip(), held=len(self._owned))
        self._owned.clear()
        if self._lock_conn is not None:
            try:
                self._lock_conn.close()
            except psycopg.Error:
                pass
        self._lock_conn = None

    # -- notifications -----------------------------------------------------------------

    def forward(self, key: Key, message_id: int) -> None:
        """Tell ``key``'s owner (whichever daemon it is) that ``message_id`` waits for it."""
        self._outbox.put((TURNS, json.dumps({"p": key[0], "c": key[1], "m": message_id})))

    def publish(self, data: dict[str, Any]) -> None:
        """Send one event to the other daemons (in order, after those published before)."""
        self._outbox.put((EVENTS, json.dumps({**data, "o": self.name}, separators=(",", ":"))))

    def cleanup(self) -> None:
        """Delete relayed event rows every daemon has read long ago."""
        with self._engine.begin() as conn:
            conn.execute(
                sa.text(
                    "DELETE FROM cluster_events "
                    "WHERE created_at < now() AT TIME ZONE 'UTC' - :keep * interval '1 second'"
                ),
                {"keep": EVENT_ROWS_KEEP_SECONDS},
            )

    def _send(self, _unused: None) -> None:
        conn: psycopg.Connection[Any] | None = None
        closing = False
        while not closing:
            first = self._outbox.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < BATCH:
                try:
                    item = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    closing = True
                    break
                batch.append(item)
            conn = self._deliver(conn, batch)
        if conn is not None:
            conn.close()

    def _deliver(
        self, conn: psycopg.Connection[Any] | None, batch: list[tuple[str, str]]
    ) -> psycopg.Connection[Any] | None:
        """Send ``batch`` in one transaction (twice at most); return the connection to use next."""
        for attempt in (1, 2):
            try:
                if conn is None or conn.closed:
                    conn = self._connect("notify")
                with conn.transaction():
                    for channel, payload in batch:
                        if len(payload.encode()) > MAX_PAYLOAD_BYTES:
                            row = conn.execute(
                                "INSERT INTO cluster_events (payload, created_at) "
                                "VALUES (%s, now() AT TIME ZONE 'UTC') RETURNING id",
                                (payload,),
                            ).fetchone()
                            assert row is not None
                            payload = json.dumps({"o": self.name, "ref": int(row[0])})
                        conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
                return conn
            except psycopg.Error as exc:
                # Lost notifications: followers still read every stored message, and pending
                # messages are found by the owners' heartbeat.
                log.warning("cluster_notify_failed", error=str(exc).strip(), batch=len(batch), attempt=attempt)
                if conn is not None:
                    conn.close()
                conn = None
        return conn

    def _listen(self, conn: psycopg.Connection[Any] | None) -> None:
        # Without jitter: one daemon's connection, not a crowd's.
        pause = Backoff(first=0.2, cap=self._lease / 2, jitter=0.0)
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = self._connect("listen")
                    conn.execute(f"LISTEN {TURNS}")
                    conn.execute(f"LISTEN {EVENTS}")
                    self._on_reconnect()
                for note in conn.notifies(timeout=0.5):
                    self._received(note.channel, note.payload)
                pause.reset()
            except psycopg.Error as exc:
                log.warning("cluster_listen_lost", error=str(exc).strip())
                if conn is not None:
                    conn.close()
                conn = None
                self._stop.wait(pause.next())
            except Exception:  # a bug in a handler must not stop the cluster's ears
                log.exception("cluster_notification_failed")
        if conn is not None:
            conn.close()

    def _received(self, channel: str, payload: str) -> None:
        data = json.loads(payload)
        if channel == TURNS:
            self._on_turn((str(data["p"]), str(data["c"])), int(data["m"]))
            return
        if data.get("o") == self.name:
            return
        if "ref" in data:
            with self._engine.connect() as conn:
                stored = conn.execute(
                    sa.text("SELECT payload FROM cluster_events WHERE id = :id"), {"id": data["ref"]}
                ).scalar_one_or_none()
            if stored is None:
                log.warning("cluster_event_gone", ref=data["ref"])
                return
            data = json.loads(stored)
        self._on_event(data)
