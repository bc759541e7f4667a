"""Imported first by the worker processes' fork server (:mod:`agentd.runtime.scaleout.workers`), and
nowhere else: from then on the fork server, and every worker it forks, ignores SIGTERM.

A service manager may signal the daemon's whole process group at once (systemd's default,
``KillMode=control-group``; ``timeout``; a terminal's Ctrl-C). The daemon stops its workers
itself, with its grace period, when it gets the signal; a worker that died of it instead would
drop its replies in flight, and a fork server that died of it would take with it the daemon's
means of waiting for its workers. Each still ends when the daemon is gone: the fork server when
its pipe from the daemon closes, a worker when its own does (``worker_orphaned``).
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
