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
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
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

    def format_reply(self, reply: Reply) -> str:
        """A reply is sent as a rich reply to the message that asked: no name in front (in a room of
        several personas, the name of the persona that speaks, as every persona speaks through the
        one account)."""
        if reply.persona and self.room_personas(reply.channel):
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
        digest = hashlib.sha256(line.encode()).hexdigest()[:16]
        kind = "n" if reply.notice else "r"
        txn = f"agentd.{kind}.{reply.reply_to}.{reply.message_id}.{digest}"
        if reply.notice:  # a notice is not kept across restarts: a new transaction each time
            txn += f".{id(reply)}"
        await self._call(
            lambda api: api.send_message_event(RoomID(room), EventType.ROOM_MESSAGE, cast(Any, content), txn_id=txn)
        )

    async def _call(self, fn: Any, timeout: float | None = None) -> Any:
        """One homeserver call, bounded in time, with mautrix's errors mapped to agentd's."""
        api = self._api
        if api is None:
            raise NetworkUnavailable("not connected to the homeserver")
        try:
            return await asyncio.wait_for(fn(api), timeout or self.request_timeout)
        except (MatrixConnectionError, aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            raise NetworkUnavailable(f"homeserver unreachable: {exc!r}") from exc
        except MatrixRequestError as exc:
            if exc.http_status >= 500 or exc.http_status == 429 or exc.http_status == 0:
                raise NetworkUnavailable(f"homeserver error {exc.http_status}: {exc}") from exc
            raise NetworkRefused(f"homeserver refused ({exc.http_status} {exc.errcode}): {exc.message}") from exc

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
        while self._typing.get(room, 0) > 0:
            changed.clear()
            with contextlib.suppress(NetworkUnavailable, NetworkRefused):
                await self._call(lambda api: api.set_typing(RoomID(room), timeout=30_000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 20.0)
        self._typing.pop(room, None)
        with contextlib.suppress(NetworkUnavailable, NetworkRefused):
            await self._call(lambda api: api.set_typing(RoomID(room), timeout=0))

    # -- the sync loop --------------------------------------------------------------------------------

    async def run_network(self) -> None:
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
        first = "since" not in self.net
        while True:
            data = await self._call(
                lambda api: api.sync(
                    since=self.net.get("since"), timeout=int(self.sync_timeout * 1000), filter_id=filter_id
                ),
                self.sync_timeout + 30,
            )
            backoff.reset()
            await self._on_sync(data, skip_timeline=first)
            await self.all_posted()  # the token moves on only once its messages are with the daemon
            self.net["since"] = data["next_batch"]
            self.state.save()
            first = False

    async def _login(self) -> None:
        api = self._api
        assert api is not None
        if self._token:
            api.api.token = self._token
            try:
                who = await self._call(lambda a: a.whoami())
            except NetworkRefused as exc:
                raise NetworkRefused(f"the access token for {self.user_id} was refused: {exc}") from exc
            if who.user_id != self.user_id:
                raise NetworkRefused(f"the access token is {who.user_id}'s, not {self.user_id}'s")
            return
        device = self.net.get("device_id")
        try:
            answer = await self._call(
                lambda a: a.login(
                    identifier=UserID(self.user_id),
                    password=self._password,
                    device_name="agentd",
                    device_id=DeviceID(device) if device else None,
                )
            )
        except NetworkRefused as exc:
            raise NetworkRefused(f"login as {self.user_id} was refused: {exc}") from exc
        self._token = answer.access_token
        self.net["device_id"] = str(answer.device_id)
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
        text = (
            "This room is end-to-end encrypted, and agentd cannot read encrypted messages: "
            "talk to me in an unencrypted room. Leaving."
        )
        notice = Reply(0, 0, "", "", text, room, notice=True)
        with contextlib.suppress(NetworkUnavailable, NetworkRefused):
            await self.send_line(notice, text)
        with contextlib.suppress(NetworkUnavailable, NetworkRefused):
            await self._call(lambda api: api.leave_room(RoomID(room)))

    async def _on_event(self, room: str, event: dict[str, Any]) -> None:
        sender = str(event.get("sender", ""))
        content = event.get("content", {})
        if event.get("type") != "m.room.message" or sender == self.user_id or not isinstance(content, dict):
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
        mentions = content.get("m.mentions") or {}
        pill = f"matrix.to/#/{self.user_id}" in str(content.get("formatted_body", ""))
        if self.user_id in (mentions.get("user_ids") or []) or pill:
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
