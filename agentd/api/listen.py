"""The daemon's listening socket, bound before anything heavy is loaded.

``agentd serve`` binds first, so a port that is taken (or a host that does not
resolve) is reported in a fraction of a second rather than after the web
framework, the store and the models have loaded.
"""

from __future__ import annotations

import errno
import socket


class CannotListen(Exception):
    """The socket could not be bound; the message says why and what to do."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port)."""
    where = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CannotListen(
            f"cannot listen on {where}: unknown host ({exc.strerror}); check --host or [daemon] host"
        ) from exc
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            hint = "another program (another agentd?) is listening there; stop it, or pick another port with --port"
        elif exc.errno == errno.EACCES:
            hint = "this user may not listen there (ports below 1024 need privileges); pick another with --port"
        elif exc.errno == errno.EADDRNOTAVAIL:
            hint = "no network interface has that address; check --host or [daemon] host"
        else:
            hint = "check --host and --port ([daemon] host and port)"
        raise CannotListen(
            f"cannot listen on {where}: {exc.strerror.lower() if exc.strerror else exc}; {hint}"
        ) from exc
    sock.set_inheritable(True)
    return sock
