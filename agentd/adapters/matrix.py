"""Matrix: the adapter on mautrix's client API (``pip install 'agentd[matrix]'``).

Why mautrix: it is maintained with the mautrix bridges (used daily on large
homeservers), typed throughout (``py.typed``, so ``mypy --strict`` reads it), on
asyncio and aiohttp (which agentd already installs through litellm: the extra
adds one package), and its client API is plain calls (``sync``, ``join_room``,
``send_message_event`` with our own transaction ids, ``set_typing``), so the
adapter keeps its own sync loop and its own exactly-once bookkeeping.
matrix-nio would do too, but brings five more packages (aiofiles, h2 pins,
pycryptodome, jsonschema, aiohttp-socks) and drives its own sync loop.

End-to-end encryption is not supported: an encrypted room is refused with a log
line and a notice in the room (libolm, which both libraries need for it, is
deprecated and unmaintained; a bot that cannot verify devices would not be sound).

Exactly once: the sync token is saved only once every message of its batch is
stored by the daemon, and the ids of the events posted are kept, so neither a
homeserver restart nor an adapter restart loses or repeats an inbound message;
each reply is sent with a transaction id made from the reply, so a send retried
after a lost answer is one event (the homeserver deduplicates per device, and
the device id is kept across logins).

Personas of their own (``[adapters.matrix.personas.NAME]``): a persona given a Matrix
account is a :class:`MatrixVoice`, logged in with its own client. In a room its replies are
sent by its account (no ``NAME:`` in front); the bot's sync still reads every room, once,
and ignores what the personas' accounts say there, so nothing is posted twice. A voice
reads only its own direct rooms: a direct message to it is answered by that persona,
privately, in the channel ``dm-matrix-<persona>-<sender>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import aiohttp
from markdown_it import MarkdownIt
from mautrix.client import ClientAPI
from mautrix.errors import MatrixConnectionError, MatrixRequestError
from mautrix.types import DeviceID, EventType, Filter, RoomAlias, RoomID, UserID

from agentd._exceptions import NetworkRefused, NetworkUnavailable
from agentd.adapters.base import Adapter, Inbound, Reply, addresses_persona
from agentd.adapters.split import split_text
from agentd.client import AsyncAgentdClient, Backoff

#: The largest event a homeserver accepts (the spec's 65536 bytes, JSON included).
EVENT_BYTES = 65_536
#: Text per message: the plain body and its HTML both travel in one event.
TEXT_BYTES = 24_000
#: Event ids of posted messages remembered (for an adapter restart in the middle of a batch).
_SEEN = 500
#: What the adapter says in an end-to-end encrypted room before it leaves.
ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted, and agentd cannot read encrypted messages: "
    "talk to me in an unencrypted room. Leaving."
)
_MD = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])


def render(text: str) -> str:
    """Markdown as Matrix HTML (``org.matrix.custom.html``); raw HTML in the text is escaped."""
    return str(_MD.render(text)).strip()


def parse_room(spec: str) -> tuple[str, str]:
    """``#alias:server`` or ``!id:server``, optionally ``=channel`` (the agentd channel)."""
    room, _, channel = spec.partition("=")
    room = room.strip()
    if not re.fullmatch(r"[#!][^:\s]+:\S+", room):
        raise ValueError(f"{spec!r}: a Matrix room is #alias:server or !id:server")
    return room, channel.strip()


def _own_join(event: dict[str, Any], user_id: str) -> bool:
    return (
        event.get("type") == "m.room.member"
        and event.get("state_key") == user_id
        and event.get("content", {}).get("membership") == "join"
    )


def _strip_fallback(body: str) -> str:
    """A rich reply's body starts with the quoted message ("> <@user> ..." lines): drop them."""
    lines = body.split("\n")
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).strip()


async def _request(api: ClientAPI | None, fn: Any, timeout: float) -> Any:
    """One homeserver call on ``api``, bounded in time, with mautrix's errors mapped to agentd's."""
    if api is None:
        raise NetworkUnavailable("not connected to the homeserver")
    try:
        return await asyncio.wait_for(fn(api), timeout)
    except (MatrixConnectionError, aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        raise NetworkUnavailable(f"homeserver unreachable: {exc!r}") from exc
    except MatrixRequestError as exc:
        if exc.http_status >= 500 or exc.http_status == 429 or exc.http_status == 0:
            raise NetworkUnavailable(f"homeserver error {exc.http_status}: {exc}") from exc
        raise NetworkRefused(f"homeserver refused ({exc.http_status} {exc.errcode}): {exc.message}") from exc


async def _sync_forever(
    adapter: MatrixAdapter,
    call: Callable[[Any, float], Awaitable[Any]],
    saved: dict[str, Any],
    filter_id: Any,
    on_sync: Callable[[dict[str, Any], bool], Awaitable[None]],
    backoff: Backoff,
) -> None:
    """Sync one account (the bot's or a persona's) until the connection fails: each batch is handled,
    and its token (``saved["since"]``) moves on only once the batch's messages are with the daemon.
    The first sync of a new account skips the timeline (what was said before it came)."""
    first = "since" not in saved
    while True:
        data = await call(
            lambda api: api.sync(
                since=saved.get("since"), timeout=int(adapter.sync_timeout * 1000), filter_id=filter_id
            ),
            adapter.sync_timeout + 30,
        )
        backoff.reset()
        await on_sync(data, first)
        await adapter.all_posted()
        saved["since"] = data["next_batch"]
        adapter.state.save()
        first = False


async def _log_in(
    api: ClientAPI, user_id: str, token: str | None, password: str | None, saved: dict[str, Any], timeout: float
) -> str:
    """Log ``api`` in as ``user_id``: with its access token (checked), else with its password (the
    device id kept in ``saved``, so transaction ids stay deduplicated); returns the access token."""
    if token:
        api.api.token = token
        try:
            who = await _request(api, lambda a: a.whoami(), timeout)
        except NetworkRefused as exc:
            raise NetworkRefused(f"the access token for {user_id} was refused: {exc}") from exc
        if who.user_id != user_id:
            raise NetworkRefused(f"the access token is {who.user_id}'s, not {user_id}'s")
        return token
    device = saved.get("device_id")
    try:
        answer = await _request(
            api,
            lambda a: a.login(
                identifier=UserID(user_id),
                password=password,
                device_name="agentd",
                device_id=DeviceID(device) if device else None,
            ),
            timeout,
        )
    except NetworkRefused as exc:
        raise NetworkRefused(f"login as {user_id} was refused: {exc}") from exc
    saved["device_id"] = str(answer.device_id)
    return str(answer.access_token)


@dataclass(frozen=True)
class PersonaAccount:
    """A persona's own Matrix account (``[adapters.matrix.personas.NAME]``, its secret from the environment)."""

    user_id: str
    access_token: str | None = None
    password: str | None = None


class MatrixVoice:
    """One persona's own Matrix account: it sends that persona's replies in rooms (joining a room
    the first time it speaks there) and reads its own direct rooms, whose messages reach that
    persona only. Rooms are read by the bot's sync: a voice reads no other timeline."""

    def __init__(self, adapter: MatrixAdapter, persona: str, account: PersonaAccount) -> None:
        self.adapter, self.persona, self.user_id = adapter, persona, account.user_id
        self._token, self._password = account.access_token, account.password
        #: Its sync token, device id and direct rooms (room -> the other user), in the state file.
        self.saved: dict[str, Any] = adapter.net["voices"].setdefault(persona, {})
        self.saved.setdefault("direct", {})
        self.joined: set[str] = set()
        #: Its credentials were refused: the bot speaks for it (with its name in front) meanwhile.
        self.refused = False
        self.api: ClientAPI | None = None

    async def call(self, fn: Any, timeout: float | None = None) -> Any:
        """One homeserver call as this persona's account."""
        return await _request(self.api, fn, timeout or self.adapter.request_timeout)

    async def send(self, room: str, content: dict[str, Any], txn: str) -> None:
        """Send one message event to ``room`` as this persona (joining it first if needed)."""
        if room not in self.joined:
            await self.call(lambda api: api.join_room(cast(RoomAlias, room), max_retries=0))
            self.joined.add(room)
        await self.call(
            lambda api: api.send_message_event(RoomID(room), EventType.ROOM_MESSAGE, cast(Any, content), txn_id=txn)
        )

    async def run(self) -> None:
        """Stay logged in and synced (reconnecting with backoff), never return."""
        backoff = Backoff(first=0.5, cap=30.0)
        log = self.adapter.log
        while True:
            try:
                await self._session(backoff)
            except NetworkUnavailable as exc:
                log.info("matrix_voice_disconnected", persona=self.persona, error=str(exc))
            except NetworkRefused as exc:  # e.g. a wrong password: said, and tried again later
                self.refused = True
                log.warning("matrix_voice_refused", persona=self.persona, user=self.user_id, error=str(exc))
            finally:
                self.joined.clear()
                if self.api is not None:
                    await self.api.api.session.close()
                    self.api = None
            await asyncio.sleep(backoff.next())

    async def _session(self, backoff: Backoff) -> None:
        a = self.adapter
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=a.sync_timeout + 60))
        self.api = ClientAPI(UserID(self.user_id), base_url=a.homeserver, client_session=session)
        self._token = await _log_in(self.api, self.user_id, self._token, self._password, self.saved, a.request_timeout)
        a.state.save()
        self.refused = False
        filter_id = await self.call(lambda api: api.create_filter(Filter.deserialize(cast(Any, _FILTER))))
        self.joined = {str(r) for r in await self.call(lambda api: api.get_joined_rooms())}
        a.log.info("matrix_voice_connected", persona=self.persona, user=self.user_id)
        await _sync_forever(a, self.call, self.saved, filter_id, self._on_sync, backoff)

    async def _on_sync(self, data: dict[str, Any], skip_timeline: bool) -> None:
        rooms = data.get("rooms", {})
        direct: dict[str, str] = self.saved["direct"]
        for event in data.get("account_data", {}).get("events", []):
            if event.get("type") == "m.direct":
                for user, ids in event.get("content", {}).items():
                    for room in ids:
                        direct.setdefault(room, user)
        for room, invited in rooms.get("invite", {}).items():
            await self._on_invite(room, invited.get("invite_state", {}).get("events", []))
        for room in rooms.get("leave", {}):
            self.joined.discard(room)
        for room, joined in rooms.get("join", {}).items():
            self.joined.add(room)
            events = [*joined.get("state", {}).get("events", []), *joined.get("timeline", {}).get("events", [])]
            if room in direct and any(e.get("type") == "m.room.encryption" for e in events):
                await self._refuse_encrypted(room)
                continue
            if skip_timeline or room not in direct:
                continue  # a room's messages are the bot's to read
            for event in joined.get("timeline", {}).get("events", []):
                await self._on_event(room, event)

    async def _refuse_encrypted(self, room: str) -> None:
        """An encrypted direct room: say so (unencrypted) and leave, as the bot does."""
        self.adapter.log.warning("matrix_encrypted_room_refused", room=room, persona=self.persona)
        notice = {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE}
        with contextlib.suppress(NetworkUnavailable, NetworkRefused):
            await self.send(room, notice, f"agentd.n.encrypted.{hashlib.sha256(room.encode()).hexdigest()[:16]}")
        with contextlib.suppress(NetworkUnavailable, NetworkRefused):
            await self.call(lambda api: api.leave_room(RoomID(room)))
        self.saved["direct"].pop(room, None)
        self.joined.discard(room)

    async def _on_invite(self, room: str, stripped: list[dict[str, Any]]) -> None:
        mine = next(
            (e for e in stripped if e.get("type") == "m.room.member" and e.get("state_key") == self.user_id), {}
        )
        inviter = str(mine.get("sender", ""))
        if not any(fnmatch.fnmatchcase(inviter, glob) for glob in self.adapter.invites):
            self.adapter.log.info("matrix_invite_declined", room=room, inviter=inviter, persona=self.persona)
            with contextlib.suppress(NetworkRefused):
                await self.call(lambda api: api.leave_room(RoomID(room)))
            return
        if mine.get("content", {}).get("is_direct"):
            self.saved["direct"][room] = inviter
        self.adapter.log.info("matrix_invite_accepted", room=room, inviter=inviter, persona=self.persona)
        with contextlib.suppress(NetworkRefused):
            await self.call(lambda api: api.join_room(cast(RoomAlias, room), max_retries=0))
            self.joined.add(room)

    async def _on_event(self, room: str, event: dict[str, Any]) -> None:
        a = self.adapter
        sender = str(event.get("sender", ""))
        content = event.get("content", {})
        if event.get("type") != "m.room.message" or a.is_ours(sender) or not isinstance(content, dict):
            return
        if content.get("msgtype") not in ("m.text", "m.emote") or event.get("event_id") in a.net["seen"]:
            return
        if (content.get("m.relates_to") or {}).get("rel_type") == "m.replace":
            return  # an edit
        text = _strip_fallback(str(content.get("body", "")))
        if text:
            meta = {"room": room, "event": str(event["event_id"])}
            await a.receive(Inbound(sender, text, None, meta, persona=self.persona))


class MatrixAdapter(Adapter):
    """agentd on Matrix: answers in rooms when addressed (the bot's display name, ``NAME:``,
    a mention pill or a persona's name; or every message with ``respond_all``), every
    message in a direct room, in the thread a message was in."""

    network = "matrix"

    def __init__(
        self,
        client: AsyncAgentdClient,
        state_path: Path,
        *,
        homeserver: str,
        user_id: str,
        access_token: str | None = None,
        password: str | None = None,
        rooms: Mapping[str, str] | None = None,
        invites: Sequence[str] = ("*",),
        respond_all: bool = False,
        persona: str | None = None,
        accounts: Mapping[str, PersonaAccount] | None = None,
        sync_timeout: float = 30.0,
        request_timeout: float = 30.0,
    ) -> None:
        super().__init__(client, state_path, persona=persona)
        if not access_token and not password:
            raise NetworkRefused(f"no access token and no password for {user_id}")
        self.homeserver = homeserver.rstrip("/")
        self.user_id = user_id
        self._token = access_token
        self._password = password
        self.wanted_rooms = dict(rooms or {})  # spec -> channel ("" for the default)
        self.invites = list(invites)
        self.respond_all = respond_all
        self.sync_timeout = sync_timeout
        self.request_timeout = request_timeout
        self.display_name = user_id[1:].split(":", 1)[0]
        self.net = self.state.network
        for key in ("channels", "direct", "names"):
            self.net.setdefault(key, {})
        self.net.setdefault("seen", [])
        self.net.setdefault("encrypted", [])
        self.net.setdefault("voices", {})
        #: persona -> its own account (the others speak through the bot's).
        self.voices = {name: MatrixVoice(self, name, account) for name, account in (accounts or {}).items()}
        self._api: ClientAPI | None = None
        self._typing: dict[str, int] = {}
        self._typing_changed: dict[str, asyncio.Event] = {}

    # -- mapping ------------------------------------------------------------------------------------

    def channel_for_room(self, room: str) -> str:
        """A configured channel, else ``matrix-<alias or id>`` (decided once per room and kept)."""
        if self.rooms.get(room):
            return self.rooms[room]
        known: dict[str, str] = self.net["channels"]
        if room not in known:
            name = str(self.net["names"].get(room) or room)
            known[room] = f"matrix-{name.lstrip('#!')}"
        return known[room]

    def is_ours(self, user_id: str) -> bool:
        """Whether ``user_id`` is this adapter's (the bot's or a persona's own account)."""
        return user_id == self.user_id or any(v.user_id == user_id for v in self.voices.values())

    def voice_for(self, reply: Reply) -> MatrixVoice | None:
        """The persona's own account that sends ``reply`` (``None``: the bot's): in a room, or in
        that persona's own direct channel."""
        voice = self.voices.get(reply.persona or "")
        if voice is None or voice.refused or reply.notice:
            return None
        own = reply.room is not None or self.state.routes.get(reply.channel, {}).get("persona") == reply.persona
        return voice if own else None

    def format_reply(self, reply: Reply) -> str:
        """A reply is sent as a rich reply to the message that asked: no name in front (in a room of
        several personas, the name of the persona that speaks, unless it speaks with its own account)."""
        if reply.persona and self.room_personas(reply.channel) and self.voice_for(reply) is None:
            return f"{reply.persona}: {reply.text}"
        return reply.text

    def line_limit(self, reply: Reply) -> int:
        return TEXT_BYTES

    def split(self, reply: Reply, text: str) -> list[str]:
        """One message, unless the text exceeds what one event carries: then pieces at line ends."""
        if len(text.encode()) <= TEXT_BYTES:
            return [text] if text.strip() else []
        pieces: list[str] = []
        for line in split_text(text, TEXT_BYTES):
            if pieces and len((pieces[-1] + "\n" + line).encode()) <= TEXT_BYTES:
                pieces[-1] += "\n" + line
            else:
                pieces.append(line)
        return pieces

    # -- sending ------------------------------------------------------------------------------------

    def _room_of(self, reply: Reply) -> str:
        return reply.room or reply.meta.get("room", "")

    async def send_line(self, reply: Reply, line: str) -> None:
        room = self._room_of(reply)
        if not room:
            raise NetworkRefused(f"no room known for reply {reply.message_id}")
        voice = self.voice_for(reply)
        if voice is not None:
            try:
                await voice.send(room, self._content(reply, line), self._txn(reply, line))
                return
            except NetworkRefused as exc:  # e.g. it may not join the room: the bot says it, named
                self.log.warning("matrix_voice_cannot_send", persona=voice.persona, room=room, error=str(exc))
                line = f"{reply.persona}: {line}"
        content, txn = self._content(reply, line), self._txn(reply, line)
        await self._call(
            lambda api: api.send_message_event(RoomID(room), EventType.ROOM_MESSAGE, cast(Any, content), txn_id=txn)
        )

    def _content(self, reply: Reply, line: str) -> dict[str, Any]:
        """The event content of one line of ``reply``: Markdown as HTML, a rich reply, in its thread."""
        content: dict[str, Any] = {"msgtype": "m.notice" if reply.notice else "m.text", "body": line}
        html = render(line)
        if html != f"<p>{line}</p>":  # plain text needs no HTML
            content["format"] = "org.matrix.custom.html"
            content["formatted_body"] = html
        asked = reply.meta.get("event")
        thread = reply.meta.get("thread")
        if thread:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": asked or thread},
            }
        elif asked:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": asked}}
        if reply.sender.startswith("@"):
            content["m.mentions"] = {"user_ids": [reply.sender]}
        if len(json.dumps(content).encode()) > EVENT_BYTES - 2048:  # room for the event's envelope
            content.pop("formatted_body", None)
            content.pop("format", None)
        return content

    @staticmethod
    def _txn(reply: Reply, line: str) -> str:
        """The transaction id of one line: the same for a send retried after a lost answer."""
        digest = hashlib.sha256(line.encode()).hexdigest()[:16]
        kind = "n" if reply.notice else "r"
        txn = f"agentd.{kind}.{reply.reply_to}.{reply.message_id}.{digest}"
        if reply.notice:  # a notice is not kept across restarts: a new transaction each time
            txn += f".{id(reply)}"
        return txn

    async def _call(self, fn: Any, timeout: float | None = None) -> Any:
        """One homeserver call as the bot, bounded in time, with mautrix's errors mapped to agentd's."""
        return await _request(self._api, fn, timeout or self.request_timeout)

    # -- typing notifications -------------------------------------------------------------------------

    def on_posted(self, inbound: Inbound, channel: str, message_id: int) -> None:
        event = inbound.meta.get("event")
        if event:
            seen: list[str] = self.net["seen"]
            seen.append(event)
            del seen[:-_SEEN]
        room = inbound.room or inbound.meta.get("room")
        if room:
            self._typing[room] = self._typing.get(room, 0) + 1
            if self._typing[room] == 1:
                self._typing_changed[room] = asyncio.Event()
                self._spawn(self._type_while_answering(room))

    def on_delivered(self, reply: Reply) -> None:
        room = self._room_of(reply)
        if room in self._typing:
            self._typing[room] -= 1
            self._typing_changed[room].set()

    async def _type_while_answering(self, room: str) -> None:
        """Typing notifications in ``room`` while a turn there runs (renewed every 20 s)."""
        changed = self._typing_changed[room]
        # In a persona's own direct room its account types; elsewhere the bot's.
        call = next((v.call for v in self.voices.values() if room in v.saved["direct"]), self._call)
        while self._typing.get(room, 0) > 0:
            changed.clear()
            with contextlib.suppress(NetworkUnavailable, NetworkRefused):
                await call(lambda api: api.set_typing(RoomID(room), timeout=30_000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 20.0)
        self._typing.pop(room, None)
        with contextlib.suppress(NetworkUnavailable, NetworkRefused):
            await call(lambda api: api.set_typing(RoomID(room), timeout=0))

    # -- the sync loop --------------------------------------------------------------------------------

    async def run_network(self) -> None:
        for voice in self.voices.values():
            self._spawn(voice.run())
        backoff = Backoff(first=0.5, cap=30.0)
        while True:
            try:
                await self._session(backoff)
            except NetworkUnavailable as exc:
                self.log.info("matrix_disconnected", error=str(exc))
            finally:
                self.network_ready.clear()
                if self._api is not None:
                    await self._api.api.session.close()
                    self._api = None
            await asyncio.sleep(backoff.next())

    async def _session(self, backoff: Backoff) -> None:
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.sync_timeout + 60))
        self._api = ClientAPI(UserID(self.user_id), base_url=self.homeserver, client_session=session)
        await self._login()
        await self.refresh_personas()
        name = await self._call(lambda api: api.get_displayname(UserID(self.user_id)))
        self.display_name = name or self.display_name
        for spec, channel in self.wanted_rooms.items():
            room = await self._join(spec)
            if room is not None and channel:
                self.rooms[room] = channel
                self.state.routes[channel] = {"room": room}
        filter_id = await self._call(lambda api: api.create_filter(Filter.deserialize(cast(Any, _FILTER))))
        self.network_ready.set()
        self.log.info("matrix_connected", user=self.user_id, homeserver=self.homeserver, name=self.display_name)
        await _sync_forever(self, self._call, self.net, filter_id, self._on_sync, backoff)

    async def _login(self) -> None:
        assert self._api is not None
        token = self._token
        self._token = await _log_in(self._api, self.user_id, token, self._password, self.net, self.request_timeout)
        if token != self._token:
            self.state.save()

    async def _join(self, spec: str) -> str | None:
        try:
            room = str(await self._call(lambda api: api.join_room(cast(RoomAlias, spec), max_retries=0)))
        except NetworkRefused as exc:
            self.log.warning("matrix_join_refused", room=spec, error=str(exc))
            return None
        if spec.startswith("#"):
            self.net["names"].setdefault(room, spec.lower())
        return room

    async def _on_sync(self, data: dict[str, Any], skip_timeline: bool) -> None:
        rooms = data.get("rooms", {})
        for event in data.get("account_data", {}).get("events", []):
            if event.get("type") == "m.direct":  # rooms this account itself marked as direct
                for user, ids in event.get("content", {}).items():
                    for room in ids:
                        self.net["direct"].setdefault(room, user)
        for room, invited in rooms.get("invite", {}).items():
            await self._on_invite(room, invited.get("invite_state", {}).get("events", []))
        for room, joined in rooms.get("join", {}).items():
            events = [*joined.get("state", {}).get("events", []), *joined.get("timeline", {}).get("events", [])]
            for event in events:
                if event.get("state_key") == "" and event.get("type") == "m.room.canonical_alias":
                    alias = event.get("content", {}).get("alias")
                    if alias:
                        self.net["names"].setdefault(room, str(alias).lower())
                elif event.get("state_key") == "" and event.get("type") == "m.room.encryption":
                    await self._refuse_encrypted(room)
            if skip_timeline or room in self.net["encrypted"]:
                continue
            timeline = joined.get("timeline", {}).get("events", [])
            just_joined = any(_own_join(e, self.user_id) for e in timeline)
            if joined.get("timeline", {}).get("limited") and not just_joined:
                # More happened than one sync carries (the adapter was away long): the oldest are not read.
                self.log.warning("matrix_timeline_gap", room=room, read=len(timeline))
            if just_joined and room not in self.net["direct"]:  # a room's history is not addressed to us
                last = max(i for i, e in enumerate(timeline) if _own_join(e, self.user_id))
                timeline = timeline[last + 1 :]
            for event in timeline:
                await self._on_event(room, event)

    async def _on_invite(self, room: str, stripped: list[dict[str, Any]]) -> None:
        mine = next(
            (e for e in stripped if e.get("type") == "m.room.member" and e.get("state_key") == self.user_id), {}
        )
        inviter = str(mine.get("sender", ""))
        if not any(fnmatch.fnmatchcase(inviter, glob) for glob in self.invites):
            self.log.info("matrix_invite_declined", room=room, inviter=inviter)
            with contextlib.suppress(NetworkRefused):
                await self._call(lambda api: api.leave_room(RoomID(room)))
            return
        if mine.get("content", {}).get("is_direct"):
            self.net["direct"][room] = inviter
        for event in stripped:
            if event.get("type") == "m.room.canonical_alias" and event.get("content", {}).get("alias"):
                self.net["names"].setdefault(room, str(event["content"]["alias"]).lower())
        self.log.info("matrix_invite_accepted", room=room, inviter=inviter, direct=room in self.net["direct"])
        await self._join(room)

    async def _refuse_encrypted(self, room: str) -> None:
        if room in self.net["encrypted"]:
            return
        self.net["encrypted"].append(room)
        self.state.save()
        self.log.warning(
            "matrix_encrypted_room_refused",
            room=room,
            reason="end-to-end encrypted rooms are not supported: invite the bot to an unencrypted room",
        )
        notice = Reply(0, 0, "", "", ENCRYPTED_NOTICE, room, notice=True)
        with contextlib.suppress(NetworkUnavailable, NetworkRefused):
            await self.send_line(notice, ENCRYPTED_NOTICE)
        with contextlib.suppress(NetworkUnavailable, NetworkRefused):
            await self._call(lambda api: api.leave_room(RoomID(room)))

    async def _on_event(self, room: str, event: dict[str, Any]) -> None:
        sender = str(event.get("sender", ""))
        content = event.get("content", {})
        if event.get("type") != "m.room.message" or self.is_ours(sender) or not isinstance(content, dict):
            return
        if content.get("msgtype") not in ("m.text", "m.emote") or event.get("event_id") in self.net["seen"]:
            return  # notices are never answered (they are how bots talk); an event seen before is not posted again
        relation = content.get("m.relates_to") or {}
        if relation.get("rel_type") == "m.replace":
            return  # an edit
        text = _strip_fallback(str(content.get("body", "")))
        meta = {"room": room, "event": str(event["event_id"])}
        if relation.get("rel_type") == "m.thread" and relation.get("event_id"):
            meta["thread"] = str(relation["event_id"])
        if room in self.net["direct"]:
            if text:
                await self.receive(Inbound(sender, text, None, meta))
            return
        stripped = self._addressed(text, content)
        if stripped is None:
            return
        if stripped:
            await self.receive(Inbound(sender, stripped, room, meta))

    def _addressed(self, text: str, content: dict[str, Any]) -> str | None:
        """The text without its address if the message is for us, else ``None``."""
        localpart = self.user_id[1:].split(":", 1)[0]
        names = {self.display_name, localpart, self.user_id}
        pattern = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        lead = re.match(rf"\s*@?(?:{pattern})\s*[:,]\s*(.*)$", text, re.IGNORECASE | re.DOTALL)
        if lead is not None:
            return lead.group(1).strip()
        mentions = set((content.get("m.mentions") or {}).get("user_ids") or [])
        ours = {self.user_id, *(v.user_id for v in self.voices.values())}  # the bot's or a persona's account
        pills = str(content.get("formatted_body", ""))
        if mentions & ours or any(f"matrix.to/#/{user}" in pills for user in ours):
            return text.strip()
        if self.respond_all or addresses_persona(text, self.persona_names) is not None:
            return text.strip()
        return None


#: What the adapter reads of /sync: no presence, no read receipts, a bounded timeline.
_FILTER: dict[str, Any] = {
    "presence": {"types": []},
    "account_data": {"types": ["m.direct"]},
    "room": {
        "ephemeral": {"types": []},
        "account_data": {"types": []},
        "state": {"types": ["m.room.canonical_alias", "m.room.encryption"], "lazy_load_members": True},
        "timeline": {"limit": 100},
    },
}
