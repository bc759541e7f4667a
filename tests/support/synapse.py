"""A real Matrix homeserver for the tests: Synapse from PyPI (``matrix-synapse``, the test extra),
on a loopback port, with SQLite in a temporary directory, no federation, no presence, no URL
previews, rate limits out of the way, and accounts registered with the shared secret
(``/_synapse/admin/v1/register``), as an operator would with ``register_new_matrix_user``.

:class:`Synapse` starts and stops the server process (a restart keeps its database, so the
adapter's sync token and rooms survive it); :class:`MatrixUser` is a small client written
with httpx against the client-server API, independently of the adapter's library.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from tests.support import wait_for
from tests.support.processes import PORT_ATTEMPTS, free_port

SERVER_NAME = "agentd.test"
SHARED_SECRET = "agentd-test-shared-secret"
_TXN = itertools.count(1)


_HIGH = {"per_second": 1000, "burst_count": 1000}


def _config(directory: Path, port: int) -> str:
    """A minimal homeserver.yaml: one plain-HTTP client listener on loopback, SQLite."""
    limits = {
        "rc_message": _HIGH,
        "rc_registration": _HIGH,
        "rc_login": {"address": _HIGH, "account": _HIGH, "failed_attempts": _HIGH},
        "rc_joins": {"local": _HIGH, "remote": _HIGH},
        "rc_joins_per_room": _HIGH,
        "rc_invites": {"per_room": _HIGH, "per_user": _HIGH, "per_issuer": _HIGH},
        "rc_admin_redaction": _HIGH,
        "rc_3pid_validation": _HIGH,
        "rc_presence": {"per_user": _HIGH},
        "rc_delayed_event_mgmt": _HIGH,
        "rc_room_creation": _HIGH,
        "rc_reports": _HIGH,
    }
    config = {
        "server_name": SERVER_NAME,
        "pid_file": str(directory / "homeserver.pid"),
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(directory / "homeserver.db")}},
        "log_config": str(directory / "log.yaml"),
        "media_store_path": str(directory / "media"),
        "signing_key_path": str(directory / "signing.key"),
        "registration_shared_secret": SHARED_SECRET,
        "report_stats": False,
        "enable_metrics": False,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "federation_domain_whitelist": [],
        "presence": {"enabled": False},
        "url_preview_enabled": False,
        "enable_media_repo": False,
        "user_directory": {"enabled": False},
        "include_profile_data_on_invite": False,
        **limits,
    }
    return json.dumps(config, indent=1)  # YAML is a superset of JSON


_LOG = textwrap.dedent("""\
    version: 1
    formatters:
      plain: {format: '%(asctime)s %(name)s %(levelname)s %(request)s %(message)s'}
    filters:
      context: {(): synapse.logging.context.LoggingContextFilter, request: ""}
    handlers:
      file: {class: logging.FileHandler, formatter: plain, filters: [context], filename: LOGFILE}
    root: {level: WARNING, handlers: [file]}
    disable_existing_loggers: false
    """)


class Synapse:
    """A Synapse homeserver in a subprocess, its files in ``directory``."""

    def __init__(self, directory: Path) -> None:
        from signedjson.key import generate_signing_key, write_signing_keys

        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.log = directory / "homeserver.log"
        self._listen_on(free_port())
        (directory / "log.yaml").write_text(_LOG.replace("LOGFILE", str(self.log)))
        with (directory / "signing.key").open("w") as f:  # what --generate-keys writes, without a second start
            write_signing_keys(f, [generate_signing_key("a_test")])
        self.proc: subprocess.Popen[bytes] | None = None

    def _listen_on(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        (self.directory / "homeserver.yaml").write_text(_config(self.directory, self.port))

    def start(self, timeout: float = 120.0) -> None:
        """Start the server and wait until its client API answers. Synapse cannot report a port it was given
        by the system (port 0), so the first start is on a :func:`free_port`, and on a fresh one if another
        process took that one before Synapse bound it (it exits saying so); a restart keeps the port."""
        first = not (self.directory / "stdout.log").exists()
        for _ in range(PORT_ATTEMPTS if first else 1):
            out = (self.directory / "stdout.log").open("ab")
            args = [sys.executable, "-m", "synapse.app.homeserver", "-c", str(self.directory / "homeserver.yaml")]
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=self.directory)
            try:
                wait_for(self._answers, timeout, "Synapse to answer on its client API")
                return
            except AssertionError:
                taken = "Address already in use" in self._tail() + (self.log.read_text() if self.log.exists() else "")
                if not first or not taken:
                    raise
            (self.directory / "stdout.log").unlink()
            self._listen_on(free_port())
        raise AssertionError(f"Synapse found its port taken {PORT_ATTEMPTS} times:\n{self._tail()}")

    def _tail(self) -> str:
        return (self.directory / "stdout.log").read_text(errors="replace")[-3000:]

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"Synapse exited with {self.proc.returncode}:\n{self._tail()}")
        try:
            return httpx.get(f"{self.url}/_matrix/client/versions", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server (SIGKILL if it does not stop within 30 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def register(self, localpart: str, password: str, admin: bool = False) -> MatrixUser:
        """A new account, registered with the shared secret; returns it logged in."""
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = httpx.get(endpoint, timeout=10).json()["nonce"]
        mac = hmac.new(SHARED_SECRET.encode(), digestmod=hashlib.sha1)
        mac.update(
            b"\x00".join([nonce.encode(), localpart.encode(), password.encode(), b"admin" if admin else b"notadmin"])
        )
        body = {"nonce": nonce, "username": localpart, "password": password, "admin": admin, "mac": mac.hexdigest()}
        answer = httpx.post(endpoint, json=body, timeout=30)
        answer.raise_for_status()
        data = answer.json()
        return MatrixUser(self, data["user_id"], data["access_token"])


class MatrixUser:
    """A person on the homeserver: the client-server API over httpx, with its own sync loop."""

    def __init__(self, server: Synapse, user_id: str, token: str) -> None:
        self.server, self.user_id, self.token = server, user_id, token
        self.since: str | None = None
        #: Every timeline event seen, per room id, in order.
        self.timeline: dict[str, list[dict[str, Any]]] = {}
        self.invites: set[str] = set()
        #: (room id, user id) of everyone seen typing.
        self.typing: set[tuple[str, str]] = set()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
        """One request to ``/_matrix/client/v3{path}`` (retried while the server restarts)."""

        def attempt() -> httpx.Response | None:
            try:
                return httpx.request(
                    method,
                    f"{self.server.url}/_matrix/client/v3{path}",
                    json=body,
                    params=params or None,
                    headers={"Authorization": f"Bearer {self.token}"},
                    timeout=40,
                )
            except httpx.TransportError:
                return None

        answer: httpx.Response = wait_for(attempt, 60, f"the homeserver to answer {method} {path}")
        if answer.status_code >= 400:
            raise AssertionError(f"{method} {path}: {answer.status_code} {answer.text}")
        return dict(answer.json())

    def create_room(
        self, alias: str | None = None, *, invite: Sequence[str] = (), direct: bool = False, **extra: Any
    ) -> str:
        body: dict[str, Any] = {"preset": "trusted_private_chat" if direct else "public_chat", "invite": list(invite)}
        if alias:
            body["room_alias_name"] = alias
        if direct:
            body["is_direct"] = True
        body.update(extra)
        return str(self.call("POST", "/createRoom", body)["room_id"])

    def join(self, room: str) -> str:
        return str(self.call("POST", f"/join/{quote(room, safe='')}", {})["room_id"])

    def send(self, room_id: str, text: str, *, thread: str | None = None, **content: Any) -> str:
        body: dict[str, Any] = {"msgtype": "m.text", "body": text, **content}
        if thread:
            body["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread},
            }
        path = f"/rooms/{quote(room_id, safe='')}/send/m.room.message/t{time.time_ns()}-{next(_TXN)}"
        return str(self.call("PUT", path, body)["event_id"])

    def sync(self, timeout_ms: int = 500) -> None:
        """One ``/sync``: new timeline events and invitations."""
        params: dict[str, Any] = {"timeout": timeout_ms}
        if self.since:
            params["since"] = self.since
        data = self.call("GET", "/sync", **params)
        self.since = data["next_batch"]
        for room_id, room in data.get("rooms", {}).get("join", {}).items():
            self.timeline.setdefault(room_id, []).extend(room.get("timeline", {}).get("events", []))
            for event in room.get("ephemeral", {}).get("events", []):
                if event.get("type") == "m.typing":
                    self.typing.update((room_id, u) for u in event.get("content", {}).get("user_ids", []))
        self.invites.update(data.get("rooms", {}).get("invite", {}))

    def messages_from(self, room_id: str, sender: str) -> list[dict[str, Any]]:
        """``m.room.message`` events ``sender`` sent in the room (as seen so far)."""
        return [
            e for e in self.timeline.get(room_id, []) if e.get("type") == "m.room.message" and e.get("sender") == sender
        ]

    def until(
        self, room_id: str, sender: str, predicate: Any, what: str, timeout: float = 90.0
    ) -> list[dict[str, Any]]:
        """Sync until ``predicate(messages from sender)`` holds; returns those messages."""

        def check() -> list[dict[str, Any]] | None:
            self.sync()
            found = self.messages_from(room_id, sender)
            return found if predicate(found) else None

        return list(wait_for(check, timeout, what))
