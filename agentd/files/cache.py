"""Files agentd derives from installed ones and keeps between runs, to start faster.

They live in ``$AGENTD_HOME/cache`` when ``AGENTD_HOME`` is set, else in the
platform's user cache directory (``~/.cache/agentd``). Everything here can be
deleted at any time: each file is rebuilt from its source when it is missing,
unreadable or stale, and a cache that cannot be written is skipped, never an error.
Files are written atomically (a temporary file renamed over the old one), so a
reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

#: The same variable as ``agentd.config.HOME_ENV`` (not imported: that module costs pydantic).
_HOME_ENV = "AGENTD_HOME"


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$AGENTD_HOME/cache``, else the platform's user cache directory for agentd."""
    env = os.environ if environ is None else environ
    if env.get(_HOME_ENV):
        return Path(env[_HOME_ENV]).expanduser().resolve() / "cache"
    from platformdirs import user_cache_path

    return user_cache_path("agentd", appauthor=False)


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when it is missing or unreadable."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def write_atomic(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically; False (and nothing written) when that fails."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return False
