"""The adapter base: a chat network on one side, a running agentd on the other.

A network adapter implements three things (see :class:`Adapter`): ``run_network``
(connect, call :meth:`Adapter.receive` for each message that should reach agentd,
reconnect forever, set and clear ``network_ready``), ``send_line`` (write one line
to a room or a user) and ``line_limit`` (the most bytes one line may carry). The
base does the rest:

* **Mapping.** A room maps to a channel (``rooms`` given, else
  ``<network>-<room name>``); a direct message to the private channel
  ``dm-<network>-<sender>``; a sender to the agentd user ``<network>:<sender>``.
* **Posting** with :meth:`AsyncAgentdClient.post`, in order, retried with backoff
  while the daemon is away. A post whose answer was lost (the daemon died after
  storing it) is found again among the channel's messages rather than posted twice.
* **Following** every mapped channel's feed, resumed with ``Last-Event-ID`` from the
  last event id read, across reconnects and daemon restarts.
* **Delivering** each reply to a message this adapter posted, split to the
  network's line limit (:mod:`agentd.adapters.split`), in order, once: the reply is
  recorded in the state file when it arrives and removed when its last line was
  written, so neither a network reconnect nor a daemon restart drops or repeats it.
  (If the adapter itself is killed between writing a reply and saving the state,
  that reply is sent again on start: at least once across adapter crashes.)
* **Never dropping silently.** A post the daemon refuses (a 4xx: two personas
  answer the channel, an unknown persona, a key not allowed there) is answered
  with a short notice saying what to do ("two personas answer here: start with
  buddy: or ircbot:"), at most one per user every ``notice_interval`` seconds; a
  ``429`` is retried after its ``Retry-After`` and noticed only if the daemon is
  still busy after ``busy_patience`` seconds. ``persona`` names the persona that
  answers private messages that address none (where several would).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx

from agentd._exceptions import NetworkRefused, NetworkUnavailable
from agentd.adapters.split import split_text
from agentd.adapters.state import AdapterState
from agentd.client import ApiError, AsyncAgentdClient, AsyncFeed, Backoff, DaemonUnreachable
from agentd.observe.log import get_logger
from agentd.schemas.responses import PersonaOut

#: Messages the adapter posted in a room whose sender it keeps (the room's replies address them).
ROOM_ASKED = 50
#: Turn errors after which the message will still be answered (so no notice is sent).
_TRANSIENT = frozenset({"shutting_down", "interrupted", "overflow", "feed_overflow"})
#: What a delivery may raise while the network is away (the reply is written again later).
_PAUSED = (NetworkUnavailable, ConnectionError, OSError, TimeoutError)
_COUNTS = {2: "two", 3: "three", 4: "four", 5: "five"}


@dataclass(frozen=True)
class Inbound:
    """A message from the network for agentd: who sent it, its text, and the room (``None``: direct)."""

    sender: str
    text: str
    room: str | None = None
    #: Where the network wants the answer (e.g. a Matrix thread); kept with the pending reply.
    meta: Mapping[str, str] = field(default_factory=dict)
    #: The persona whose own identity (an IRC nick) it was sent to privately (``None``: the bot's).
    persona: str | None = None


@dataclass(frozen=True)
class Reply:
    """A persona's reply to deliver: to ``room`` (``None``: privately to ``sender``);
    ``notice``: the adapter's own short notice, not a persona's reply."""

    message_id: int
    reply_to: int
    channel: str
    sender: str
    text: str
    room: str | None = None
    meta: Mapping[str, str] = field(default_factory=dict)
    notice: bool = False
    #: The persona that wrote it (its own identity on the network speaks it, where it has one).
    persona: str | None = None
    #: A reply cut short (the daemon stopped mid-turn): shown as it is, marked cut; the daemon
    #: answers the message again after its next start, and that answer is delivered too.
    partial: bool = False


class Adapter(ABC):
    """Bridges one chat network to a running agentd (subclass per network)."""

    #: The network's name: the prefix of user ids and of default channel names.
    network: ClassVar[str] = "net"

    def __init__(
        self,
        client: AsyncAgentdClient,
        state_path: Path,
        rooms: Mapping[str, str] | None = None,
        *,
        persona: str | None = None,
        notice_interval: float = 60.0,
        busy_patience: float = 300.0,
    ) -> None:
        self.client = client
        self.state = AdapterState(state_path)
        self.rooms = dict(rooms or {})
        #: The persona that answers private messages which address none (``None``: the daemon decides).
        self.persona = persona
        self.notice_interval = notice_interval
        self.busy_patience = busy_patience
        #: The daemon's personas (name, channels ...), as last read by :meth:`refresh_personas`.
        self.personas: list[PersonaOut] = []
        #: The personas each configured channel is bound to, as last read (several: a room).
        self.bindings: dict[str, list[str]] = {}
        for room in self.rooms:
            self.state.routes[self.channel_for_room(room)] = {"room": room}
        self.network_ready = asyncio.Event()
        self.log = get_logger(f"agentd.adapters.{self.network}")
        self._inbox: asyncio.Queue[Inbound] = asyncio.Queue()
        self._outbox: asyncio.Queue[Reply] = asyncio.Queue()
        self._feeds: dict[str, AsyncFeed] = {}
        self._opened: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._claimed: set[str] = set()  # ids of the messages this process posted
        self._noticed: dict[str, float] = {}  # user -> when the last notice was sent
        self._unposted = 0  # messages received and not yet posted (or refused)
        self._all_posted = asyncio.Event()
        self._all_posted.set()

    # -- what a network adapter implements -----------------------------------------------

    @abstractmethod
    async def run_network(self) -> None:
        """Connect to the network, :meth:`receive` its messages, reconnect with backoff; never return."""

    @abstractmethod
    async def send_line(self, reply: Reply, line: str) -> None:
        """Write one line of ``reply`` (raise ``ConnectionError`` if it cannot be written now)."""

    @abstractmethod
    def line_limit(self, reply: Reply) -> int:
        """The most UTF-8 bytes one line of ``reply`` may carry."""

    # -- mapping (override for another rule) ------------------------------------------------

    def channel_for_room(self, room: str) -> str:
        """The agentd channel of a room: as configured, else ``<network>-<room>``."""
        return self.rooms.get(room) or f"{self.network}-{room.lstrip('#&+!').lower()}"

    def channel_for_sender(self, sender: str, persona: str | None = None) -> str:
        """The private channel of one network user (with one persona's own identity: its own)."""
        if persona is not None:
            return f"dm-{self.network}-{persona.lower()}-{sender.lower()}"
        return f"dm-{self.network}-{sender.lower()}"

    def room_personas(self, channel: str) -> list[str]:
        """The personas of ``channel`` when it is a room (several bound), else none."""
        bound = self.bindings.get(channel, [])
        return bound if len(bound) > 1 else []

    def user_for(self, sender: str) -> str:
        """The agentd user of one network user (memories and history follow it)."""
        return f"{self.network}:{sender.lower()}"

    def format_reply(self, reply: Reply) -> str:
        """The text sent: in a room, addressed to whoever asked (a room's persona speaking as itself
        says what it says: its reply answers the room)."""
        return f"{reply.sender}: {reply.text}" if reply.room is not None and reply.sender else reply.text

    def split(self, reply: Reply, text: str) -> list[str]:
        """The pieces ``text`` is sent in: lines of at most :meth:`line_limit` bytes (override for
        a network that takes whole messages)."""
        return split_text(text, self.line_limit(reply))

    # -- hooks (override to act on them) ------------------------------------------------------------

    def on_posted(self, inbound: Inbound, channel: str, message_id: int) -> None:
        """``inbound`` is stored by the daemon as ``message_id`` (called before the state is saved)."""
        return

    def on_delivered(self, reply: Reply) -> None:
        """The whole of ``reply`` was written to the network."""
        return

    # -- personas ------------------------------------------------------------------------------------

    async def refresh_personas(self) -> None:
        """Read the daemon's personas again (kept if the daemon is away)."""
        try:
            self.personas = await asyncio.wait_for(self.client.personas(), 30.0)
            self.bindings = await asyncio.wait_for(self.client.bindings(), 30.0)
        except Exception as exc:  # the daemon may be away; the names are read again next time
            self.log.info("personas_unavailable", error=repr(exc))

    @property
    def persona_names(self) -> list[str]:
        """The daemon's persona names."""
        return [p.name for p in self.personas]

    def notice_for(self, channel: str, error: ApiError) -> str:
        """The short notice for a post the daemon refused: what happened and what to do."""
        if error.status == 429:
            return "agentd is busy right now and could not take your message: please send it again in a few minutes."
        if error.field == "persona":
            names = [p.name for p in self.personas if any(
                fnmatch.fnmatchcase(channel, glob) for glob in p.channels
            )]  # fmt: skip
            if len(names) > 1:
                count = _COUNTS.get(len(names), str(len(names)))
                return f"{count} personas answer here: start with {' or '.join(f'{n}:' for n in names)}"
            if not names:
                return "no persona answers here yet: ask the operator to bind one to this channel."
        if error.status in (401, 403):
            return "this bridge may not post here (its API key): ask the operator."
        return f"your message was not taken ({error.reason[:200]})"

    async def _notify(self, inbound: Inbound, channel: str, text: str) -> None:
        """Send ``inbound``'s sender a notice, unless they got one in the last ``notice_interval`` s."""
        user = self.user_for(inbound.sender)
        now = time.monotonic()
        last = self._noticed.get(user)
        if last is not None and now - last < self.notice_interval:
            self.log.info("notice_suppressed", user=user, channel=channel)
            return
        self._noticed[user] = now
        self.log.info("notice", user=user, channel=channel, text=text)
        self._outbox.put_nowait(Reply(0, 0, channel, inbound.sender, text, inbound.room, inbound.meta, notice=True))

    # -- running ---------------------------------------------------------------------------------

    async def receive(self, inbound: Inbound) -> None:
        """Hand a network message to agentd (called by :meth:`run_network`; returns at once)."""
        self._unposted += 1
        self._all_posted.clear()
        self._inbox.put_nowait(inbound)

    async def all_posted(self) -> None:
        """Wait until every message received so far is stored by the daemon (or refused, and noticed)."""
        await self._all_posted.wait()

    async def run(self) -> None:
        """Run until cancelled."""
        await self.refresh_personas()  # which channels are rooms, before their feeds are read
        for channel in list(self.state.routes):
            self._follow(channel)
        for key, entry in sorted(self.state.pending.items(), key=lambda kv: int(kv[0])):
            if "reply" in entry:  # arrived before a restart, not yet delivered
                self._outbox.put_nowait(self._reply(int(key), entry))
            elif not entry.get("partial", {}).get("sent", True):
                self._outbox.put_nowait(self._reply(int(key), entry, "partial"))
        try:
            await asyncio.gather(self.run_network(), self._post_loop(), self._deliver_loop())
        finally:
            for task in list(self._tasks):
                task.cancel()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _route_of(self, channel: str) -> dict[str, str]:
        return self.state.routes.get(channel, {})

    def _reply(self, user_message_id: int, entry: dict[str, Any], kind: str = "reply") -> Reply:
        """The :class:`Reply` for ``entry[kind]``: its ``reply``, or the ``partial`` one before it."""
        reply = entry[kind]
        room = self._route_of(entry["channel"]).get("room")
        meta = dict(entry.get("meta", {}))
        persona = reply.get("persona")
        return Reply(
            int(reply["id"]),
            user_message_id,
            entry["channel"],
            entry["sender"],
            reply["text"],
            room,
            meta,
            False,
            persona,
            kind == "partial",
        )

    # -- the daemon's side --------------------------------------------------------------------

    def _follow(self, channel: str) -> None:
        if channel in self._feeds:
            return
        feed = self.client.follow(channel, last_event_id=self.state.cursors.get(channel))
        self._feeds[channel] = feed
        self._opened[channel] = asyncio.Event()
        self._spawn(self._follow_loop(channel, feed))

    async def _follow_loop(self, channel: str, feed: AsyncFeed) -> None:
        backoff = Backoff(first=1.0)
        while True:
            try:
                async for event in feed:
                    if event.event == "open":
                        self._opened[channel].set()
                        backoff.reset()
                    elif event.event == "message":
                        self._on_message(channel, event.data)
                    elif event.event == "error":
                        self._on_error(event.data)
            except ApiError as exc:  # e.g. a channel name the daemon refuses
                self.log.warning("feed_refused", channel=channel, error=str(exc))
            await asyncio.sleep(backoff.next())

    def _on_message(self, channel: str, m: dict[str, Any]) -> None:
        key = str(m["id"])
        if self.room_personas(channel) and self._route_of(channel).get("room"):
            self._on_room_message(channel, m)
        elif m.get("role") == "user" and str(m.get("author", "")).startswith(f"{self.network}:"):
            self.state.pending.setdefault(key, {"channel": channel, "sender": m["author"].split(":", 1)[1]})
        elif m.get("role") == "assistant" and str(m.get("reply_to")) in self.state.pending:
            entry = self.state.pending[str(m["reply_to"])]
            said = {"id": m["id"], "text": m["content"], "persona": m.get("persona")}
            cut = m.get("status") == "interrupted"
            if "reply" not in entry and not cut:
                entry["reply"] = said
                self._outbox.put_nowait(self._reply(int(m["reply_to"]), entry))
            elif "reply" not in entry and "partial" not in entry:  # shown cut; the full answer follows
                entry["partial"] = {**said, "text": m["content"] + " […]", "sent": False}
                self._outbox.put_nowait(self._reply(int(m["reply_to"]), entry, "partial"))
        self.state.cursors[channel] = key
        self.state.save()

    def _on_room_message(self, channel: str, m: dict[str, Any]) -> None:
        """A room's message: every persona's complete reply goes out, each once (a reply to another
        persona's too), spoken by its persona, addressed to the sender when it answers a message
        this adapter posted; it is kept under its own id until delivered. The adapter's posted
        messages are kept (their senders) for the replies, the newest :data:`ROOM_ASKED` per room."""
        if m.get("role") == "user":
            if str(m.get("author", "")).startswith(f"{self.network}:"):
                self.state.pending.setdefault(
                    str(m["id"]), {"channel": channel, "sender": m["author"].split(":", 1)[1]}
                )
            asked = [k for k, e in self.state.pending.items() if e.get("channel") == channel and "reply" not in e]
            for key in sorted(asked, key=int)[:-ROOM_ASKED]:
                del self.state.pending[key]
        elif m.get("role") == "assistant" and m.get("status") == "complete":
            asked_by = self.state.pending.get(str(m.get("reply_to")), {})
            said = {"id": m["id"], "text": m["content"], "persona": m.get("persona")}
            entry: dict[str, Any] = {"channel": channel, "sender": "", "reply": said}
            if "reply" not in asked_by:
                entry["sender"] = asked_by.get("sender", "")
                entry.update({"meta": asked_by["meta"]} if "meta" in asked_by else {})
            self.state.pending[str(m["id"])] = entry
            self._outbox.put_nowait(self._reply(int(m["id"]), entry))

    def _on_error(self, data: dict[str, Any]) -> None:
        key = str(data.get("user_message_id"))
        entry = self.state.pending.get(key)
        if entry is None or "reply" in entry or data.get("code") in _TRANSIENT:
            return
        entry["reply"] = {"id": 0, "text": f"(no reply: {data.get('message', 'error')})"}
        self.state.save()
        self._outbox.put_nowait(self._reply(int(key), entry))

    async def _post_loop(self) -> None:
        while True:
            inbound = await self._inbox.get()
            if inbound.room is not None:
                channel = self.channel_for_room(inbound.room)
                self.state.routes.setdefault(channel, {"room": inbound.room})
            else:
                channel = self.channel_for_sender(inbound.sender, inbound.persona)
                route = {"dm": inbound.sender, **({"persona": inbound.persona} if inbound.persona else {})}
                self.state.routes.setdefault(channel, route)
            self._follow(channel)
            try:
                await self._post(channel, inbound)
            finally:
                self._unposted -= 1
                if self._unposted == 0:
                    self._all_posted.set()

    async def _post(self, channel: str, inbound: Inbound) -> None:
        """Post once: retried while the daemon is away, never stored twice."""
        user = self.user_for(inbound.sender)
        backoff = Backoff(first=0.5, cap=10.0)
        since = int(self.state.cursors.get(channel) or 0)
        maybe_stored = False
        busy_since: float | None = None
        persona = inbound.persona
        if persona is None and inbound.room is None and self.persona is not None:
            if not self.personas:
                await self.refresh_personas()
            if addresses_persona(inbound.text, self.persona_names) is None:
                persona = self.persona
        while True:
            await self._opened[channel].wait()
            try:
                if maybe_stored:
                    found = await self._find_stored(channel, user, inbound.text, since)
                    if found is not None:
                        self._posted(channel, found, inbound)
                        return
                # A room is read by everyone in it; a private message only by its sender.
                visibility = "shared" if inbound.room is not None else "direct"
                posted = await self.client.post(channel, user, inbound.text, persona=persona, visibility=visibility)
                self._posted(channel, posted.id, inbound)
                return
            except DaemonUnreachable as exc:
                # A refused connection never reached the daemon; anything else may have.
                maybe_stored = maybe_stored or not isinstance(exc.__cause__, httpx.ConnectError)
                self.log.info("daemon_unreachable", channel=channel, retry_in="backoff")
            except ApiError as exc:
                if exc.status == 429:  # busy: wait as asked, and give up (with a notice) only after a while
                    busy_since = time.monotonic() if busy_since is None else busy_since
                    if time.monotonic() - busy_since < self.busy_patience:
                        self.log.info("daemon_busy", channel=channel, retry_after=exc.retry_after)
                        await asyncio.sleep(exc.retry_after if exc.retry_after is not None else backoff.next())
                        continue
                if exc.status < 500:
                    self.log.warning("post_refused", channel=channel, user=user, error=str(exc))
                    if exc.field == "persona" or not self.personas:
                        await self.refresh_personas()
                    await self._notify(inbound, channel, self.notice_for(channel, exc))
                    return
            await asyncio.sleep(backoff.next())

    async def _find_stored(self, channel: str, user: str, text: str, since: int) -> int | None:
        """The id of our message if the daemon stored it though its answer was lost."""
        for m in await self.client.messages(channel, after=since, limit=1000):
            mine = m.role == "user" and m.author == user and m.content == text
            if mine and str(m.id) not in self._claimed:
                return m.id
        return None

    def _posted(self, channel: str, message_id: int, inbound: Inbound) -> None:
        self._claimed.add(str(message_id))
        feed = self._feeds[channel]
        if feed.last_event_id is None:  # a new channel: read it from just before our message
            feed.last_event_id = str(message_id - 1)
        entry = self.state.pending.setdefault(str(message_id), {"channel": channel, "sender": inbound.sender})
        entry["sender"] = inbound.sender  # the network's spelling
        if inbound.meta:
            entry["meta"] = dict(inbound.meta)
        self.on_posted(inbound, channel, message_id)
        self.state.save()

    # -- the network's side ------------------------------------------------------------------------

    async def _deliver_loop(self) -> None:
        while True:
            reply = await self._outbox.get()
            entry = self.state.pending.get(str(reply.reply_to))
            if not reply.notice and (entry is None or (reply.partial and "reply" in entry)):
                continue  # already delivered (queued twice across a restart), or the full answer came
            lines = self.split(reply, self.format_reply(reply)) or ["…"]
            sent = 0
            backoff = Backoff(first=0.2, cap=5.0)
            while sent < len(lines):
                await self.network_ready.wait()
                try:
                    await self.send_line(reply, lines[sent])
                    sent += 1
                except _PAUSED as exc:
                    self.log.info("delivery_paused", error=repr(exc), sent=sent, lines=len(lines))
                    await asyncio.sleep(backoff.next())
                except NetworkRefused as exc:  # e.g. no longer allowed in the room: nothing to retry
                    self.log.warning("undeliverable", channel=reply.channel, reply=reply.message_id, error=str(exc))
                    break
            if reply.notice:
                continue
            if reply.partial and entry is not None:  # the message stays pending: its answer follows
                entry["partial"]["sent"] = True
                self.state.save()
                continue
            self.state.pending.pop(str(reply.reply_to), None)
            self.state.save()
            self.on_delivered(reply)
            self.log.info("delivered", channel=reply.channel, reply=reply.message_id, lines=len(lines))


def addresses_persona(text: str, names: Sequence[str]) -> str | None:
    """The persona ``text`` addresses: ``NAME: ...``, ``NAME, ...`` or ``@NAME`` (as the daemon reads it)."""
    for name in sorted(names, key=len, reverse=True):
        if re.match(rf"\s*@?{re.escape(name)}\s*[:,]", text, re.IGNORECASE) or re.search(
            rf"(?<![\w@])@{re.escape(name)}(?![\w-])", text, re.IGNORECASE
        ):
            return name
    return None


async def run_adapter(adapter: Adapter) -> None:
    """Run ``adapter`` until cancelled (Ctrl-C), then close its client."""
    try:
        await adapter.run()
    finally:
        with contextlib.suppress(Exception):
            await adapter.client.aclose()
