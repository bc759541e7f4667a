"""IRC: a small asyncio client (RFC 1459/2812) and the adapter on it.

Why not a library: ``pydle`` dispatches every line as its own task (so messages
can be handled out of order), never applies its flood-control setting and cuts
long messages by characters (breaking words, and UTF-8 once encoded); jaraco's
``irc`` runs asyncio as a port of its threaded reactor, whose rate limiter
sleeps on the event loop, and brings nine dependencies; ``bottom`` 3 needs
Python 3.12. What this adapter needs of IRC is small: registration (with a
fallback nick when the nick is taken), PING/PONG, JOIN, PRIVMSG in and out,
flood control, and reconnecting with backoff.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentd.adapters.base import Adapter, Inbound, Reply, addresses_persona
from agentd.client import AsyncAgentdClient, Backoff

#: An IRC line is at most 512 bytes with its CR LF.
LINE_BYTES = 512
#: Hostnames are at most 63 bytes: room kept for how the server shows our prefix to others.
_PREFIX_ROOM = 1 + 63


@dataclass(frozen=True)
class IrcLine:
    """One parsed IRC line: ``:prefix COMMAND params... :trailing``."""

    command: str
    params: tuple[str, ...]
    prefix: str = ""

    @property
    def nick(self) -> str:
        """The sender's nick (the prefix before ``!``)."""
        return self.prefix.split("!", 1)[0]

    @classmethod
    def parse(cls, line: str) -> IrcLine:
        """Parse one line (without CR LF); IRCv3 tags are skipped."""
        if line.startswith("@"):
            line = line.partition(" ")[2]
        prefix = ""
        if line.startswith(":"):
            prefix, _, line = line[1:].partition(" ")
        head, sep, trailing = line.partition(" :")
        parts = head.split()
        command = parts[0].upper() if parts else ""
        params = parts[1:] + ([trailing] if sep else [])
        return cls(command, tuple(params), prefix)


def _line(*params: str) -> str:
    *middle, last = params
    if any(c in p for p in params for c in "\r\n\0"):
        raise ValueError("IRC parameters cannot contain CR, LF or NUL")
    return " ".join([*middle, f":{last}"]) if last == "" or " " in last or last.startswith(":") else " ".join(params)


@dataclass
class FloodControl:
    """A token bucket: ``burst`` lines at once, then one every ``interval`` seconds."""

    burst: int = 4
    interval: float = 0.7
    _tokens: float = field(default=0.0, init=False)
    _stamp: float = field(default_factory=time.monotonic, init=False)

    def __post_init__(self) -> None:
        self._tokens = float(self.burst)

    async def take(self) -> None:
        """Wait until one more line may be sent."""
        while True:
            now = time.monotonic()
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) / self.interval)
            self._stamp = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return
            await asyncio.sleep((1.0 - self._tokens) * self.interval)


class IrcVoice:
    """One persona's own IRC connection, in a room bound to several personas: its replies are
    said with its nick, and a private message to its nick reaches it (its own private channel
    with the sender). The bot's connection hears the rooms; a voice only speaks there."""

    def __init__(self, adapter: IrcAdapter, persona: str, nick: str) -> None:
        self.adapter, self.persona, self.wanted_nick, self.nick = adapter, persona, nick, nick
        #: The rooms it joins (those of the rooms bound to its persona).
        self.rooms: set[str] = set()
        self.joined: set[str] = set()
        self.ready = asyncio.Event()
        self.flood = FloodControl()
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._user = re.sub(r"[^A-Za-z0-9]", "", nick)[:9] or "agentd"

    async def run(self) -> None:
        """Stay connected (reconnecting with backoff), never return."""
        backoff = Backoff(first=0.5, cap=30.0)
        while True:
            try:
                await self._session(backoff)
            except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as exc:
                self.adapter.log.info("irc_voice_disconnected", persona=self.persona, error=repr(exc))
            finally:
                self.ready.clear()
                self.joined.clear()
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
            await asyncio.sleep(backoff.next())

    async def say(self, command: str, target: str, line: str) -> None:
        """Say one line (``ConnectionError`` when it cannot now: the delivery waits and tries again)."""
        if not self.ready.is_set() or (target[:1] in "#&+!" and target.lower() not in self.joined):
            raise ConnectionError(f"{self.nick} is not in {target} yet")
        await self.flood.take()
        await self._send(command, target, line)

    async def _session(self, backoff: Backoff) -> None:
        a = self.adapter
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(a.host, a.port, ssl=a.tls_context()), a.connect_timeout
        )
        self._writer = writer
        self.nick = self.wanted_nick
        if a.password:
            await self._send("PASS", a.password)
        await self._send("NICK", self.nick)
        await self._send("USER", self._user, "0", "*", f"{a.realname} ({self.persona})")
        while True:
            raw = await asyncio.wait_for(reader.readline(), a.ping_interval * 2)
            if not raw:
                raise ConnectionError("the server closed the connection")
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line:
                await self._handle(IrcLine.parse(line), backoff)

    async def _handle(self, msg: IrcLine, backoff: Backoff) -> None:
        if msg.command == "PING":
            await self._send("PONG", *(msg.params or ("agentd",)))
        elif msg.command == "001":
            self.nick = msg.params[0] if msg.params else self.nick
            backoff.reset()
            for room in sorted(self.rooms):
                await self._send("JOIN", room)
            self.ready.set()
            self.adapter.log.info("irc_voice_registered", persona=self.persona, nick=self.nick)
        elif msg.command in ("432", "433", "436", "437"):
            self.nick = f"{self.nick}_"[:30]
            await self._send("NICK", self.nick)
        elif msg.command == "JOIN" and msg.nick.lower() == self.nick.lower() and msg.params:
            self.joined.add(msg.params[0].lower())
            self.adapter.log.info("irc_voice_joined", persona=self.persona, room=msg.params[0])
        elif msg.command == "KICK" and len(msg.params) > 1 and msg.params[1].lower() == self.nick.lower():
            self.joined.discard(msg.params[0].lower())
            await self._send("JOIN", msg.params[0])
        elif msg.command == "PRIVMSG" and len(msg.params) >= 2 and msg.params[0].lower() == self.nick.lower():
            text = msg.params[1]
            if msg.nick and not text.startswith("\x01") and not self.adapter.is_ours(msg.nick):
                await self.adapter.receive(Inbound(msg.nick, text.strip(), persona=self.persona))
        elif msg.command == "ERROR":
            raise ConnectionError(msg.params[-1] if msg.params else "ERROR from the server")

    async def _send(self, *params: str) -> None:
        writer = self._writer
        if writer is None:
            raise ConnectionError("not connected")
        data = (_line(*params) + "\r\n").encode("utf-8")
        async with self._lock:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), 30.0)


class IrcAdapter(Adapter):
    """agentd on IRC: answers in rooms when addressed (``NICK: ...`` or a persona's name,
    or every message with ``respond_all``) and in private messages (a private channel
    per user). In a room bound to several personas each persona speaks with its own nick
    (:class:`IrcVoice`; ``nicks`` names them, default the persona's name)."""

    network = "irc"

    def __init__(
        self,
        client: AsyncAgentdClient,
        state_path: Path,
        *,
        host: str,
        port: int,
        nick: str,
        rooms: dict[str, str],
        tls: bool = False,
        tls_verify: bool = True,
        password: str | None = None,
        realname: str = "agentd",
        respond_all: bool = False,
        persona: str | None = None,
        flood: FloodControl | None = None,
        connect_timeout: float = 15.0,
        ping_interval: float = 90.0,
        nicks: dict[str, str] | None = None,
        voices: bool = True,
    ) -> None:
        super().__init__(
            client, state_path, {room: channel for room, channel in rooms.items() if channel}, persona=persona
        )
        self.host, self.port, self.tls, self.tls_verify = host, port, tls, tls_verify
        self.wanted_nick = nick
        self.nick = nick
        self.password = password
        self.realname = realname
        self.respond_all = respond_all
        self.flood = flood or FloodControl()
        self.connect_timeout = connect_timeout
        self.ping_interval = ping_interval
        self.joined: set[str] = set()
        self.room_names = list(rooms)
        self._writer: asyncio.StreamWriter | None = None
        self._write_lock = asyncio.Lock()
        self._user = re.sub(r"[^A-Za-z0-9]", "", nick)[:9] or "agentd"
        #: persona -> the nick it speaks with in rooms (default its name).
        self.nicks = dict(nicks or {})
        self.use_voices = voices
        #: persona -> its own connection (in rooms bound to several personas).
        self.voices: dict[str, IrcVoice] = {}

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context of a connection (``None``: plain TCP)."""
        if not self.tls:
            return None
        context = ssl.create_default_context()
        if not self.tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def is_ours(self, nick: str) -> bool:
        """Whether ``nick`` is this adapter's (the bot's or a persona's voice)."""
        low = nick.lower()
        return low == self.nick.lower() or any(v.nick.lower() == low for v in self.voices.values())

    def _start_voices(self) -> None:
        """A voice for each persona of each room this adapter joins that binds several (once each)."""
        if not self.use_voices:
            return
        for room in self.room_names:
            for persona in self.room_personas(self.channel_for_room(room)):
                voice = self.voices.get(persona)
                if voice is None:
                    voice = self.voices[persona] = IrcVoice(self, persona, self.nicks.get(persona, persona))
                    self._spawn(voice.run())
                voice.rooms.add(room)

    # -- the adapter's three methods ---------------------------------------------------------

    def line_limit(self, reply: Reply) -> int:
        target = reply.room or reply.sender
        voice = self.voices.get(reply.persona or "")
        nick, user = (voice.nick, voice._user) if voice is not None else (self.nick, self._user)
        head = f":{nick}!~{user}@ PRIVMSG {target} :"
        return LINE_BYTES - 2 - len(head.encode()) - _PREFIX_ROOM

    async def send_line(self, reply: Reply, line: str) -> None:
        target = reply.room or reply.sender
        voice = self.voices.get(reply.persona or "")
        own = reply.room is not None or self.state.routes.get(reply.channel, {}).get("persona") == reply.persona
        if voice is not None and not reply.notice and own:
            await voice.say("PRIVMSG", target, line)  # the persona speaks as itself
            return
        if reply.room is not None and reply.room.lower() not in self.joined:
            raise ConnectionError(f"not in {reply.room} yet")
        await self.flood.take()
        # The adapter's own notices go as NOTICE, which clients never answer automatically.
        await self._send("NOTICE" if reply.notice else "PRIVMSG", target, line)

    async def run_network(self) -> None:
        backoff = Backoff(first=0.5, cap=30.0)
        while True:
            try:
                await self._session(backoff)
            except (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError) as exc:
                self.log.info("irc_disconnected", error=repr(exc))
            finally:
                self.network_ready.clear()
                self.joined.clear()
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
            await asyncio.sleep(backoff.next())

    # -- one connection ------------------------------------------------------------------------

    async def _session(self, backoff: Backoff) -> None:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self.tls_context()), self.connect_timeout
        )
        self._writer = writer
        self.nick = self.wanted_nick
        await self.refresh_personas()  # the daemon may be away: the names are read again on the next connection
        self._start_voices()
        if self.password:
            await self._send("PASS", self.password)
        await self._send("NICK", self.nick)
        await self._send("USER", self._user, "0", "*", self.realname)
        waited = False
        while True:
            try:
                raw = await asyncio.wait_for(reader.readline(), self.ping_interval)
            except TimeoutError:
                if waited:
                    raise TimeoutError("the server stopped answering") from None
                waited = True
                await self._send("PING", "agentd")
                continue
            waited = False
            if not raw:
                raise ConnectionError("the server closed the connection")
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line:
                await self._handle(IrcLine.parse(line), backoff)

    async def _handle(self, msg: IrcLine, backoff: Backoff) -> None:
        if msg.command == "PING":
            await self._send("PONG", *(msg.params or ("agentd",)))
        elif msg.command == "001":  # welcome: registered
            self.nick = msg.params[0] if msg.params else self.nick
            backoff.reset()
            for room in self.room_names:
                await self._send("JOIN", room)
            self.network_ready.set()
            self.log.info("irc_registered", nick=self.nick, server=self.host)
        elif msg.command in ("432", "433", "436", "437"):  # nick refused or taken: try another
            self.nick = self._next_nick(self.nick)
            await self._send("NICK", self.nick)
        elif msg.command == "JOIN" and msg.nick.lower() == self.nick.lower() and msg.params:
            self.joined.add(msg.params[0].lower())
            self.log.info("irc_joined", room=msg.params[0])
        elif msg.command in ("PART", "KICK") and msg.params:
            gone = msg.nick if msg.command == "PART" else (msg.params[1] if len(msg.params) > 1 else "")
            if gone.lower() == self.nick.lower():
                self.joined.discard(msg.params[0].lower())
                if msg.command == "KICK":
                    await self._send("JOIN", msg.params[0])
        elif msg.command == "NICK" and msg.nick.lower() == self.nick.lower() and msg.params:
            self.nick = msg.params[0]
        elif msg.command == "PRIVMSG" and len(msg.params) >= 2:
            await self._privmsg(msg.nick, msg.params[0], msg.params[1])
        elif msg.command == "ERROR":
            raise ConnectionError(msg.params[-1] if msg.params else "ERROR from the server")

    async def _privmsg(self, sender: str, target: str, text: str) -> None:
        if text.startswith("\x01") or not sender or self.is_ours(sender):
            return  # CTCP (and our own echo, or our personas' lines)
        if target.lower() == self.nick.lower():
            await self.receive(Inbound(sender, text.strip()))
            return
        if target.lower() not in {r.lower() for r in self.room_names}:
            return
        room = next(r for r in self.room_names if r.lower() == target.lower())
        text = text.strip()
        to_us = re.match(rf"@?{re.escape(self.nick)}[:,]\s*(.*)$", text, re.IGNORECASE | re.DOTALL)
        if to_us is not None:
            text = to_us.group(1).strip()
        elif not self.respond_all and addresses_persona(text, self.persona_names) is None:
            return
        if text:
            await self.receive(Inbound(sender, text, room))

    def _next_nick(self, nick: str) -> str:
        base = self.wanted_nick[:8]
        if nick == self.wanted_nick:
            return f"{base}_"
        tries = len(nick) - len(base)
        return f"{base}{'_' * min(tries + 1, 3)}" if tries < 3 else f"{base[:6]}{int(time.time()) % 1000}"

    async def _send(self, *params: str) -> None:
        writer = self._writer
        if writer is None:
            raise ConnectionError("not connected")
        data = (_line(*params) + "\r\n").encode("utf-8")
        async with self._write_lock:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), 30.0)


def parse_room(spec: str) -> tuple[str, str]:
    """``#room`` or ``#room=channel`` (the agentd channel; default ``irc-<room>``)."""
    room, _, channel = spec.partition("=")
    room = room.strip()
    if not room or room[0] not in "#&+!":
        raise ValueError(f"{spec!r}: an IRC room starts with #, &, + or !")
    return room, channel.strip()
