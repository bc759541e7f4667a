"""The web page at ``/`` and its files under ``/ui/`` (package data of :mod:`agentd.web`).

The page and its files need no API key (:data:`PUBLIC_PATHS`): the page asks for
the key when the API answers 401, and sends it on every call.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from agentd._exceptions import NotFound

router = APIRouter(include_in_schema=False)

#: The page's files and their media types.
FILES = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
#: Paths served without the API key.
PUBLIC_PATHS = frozenset({"/", *(f"/ui/{name}" for name in FILES)})
#: The page's content security policy: its own files and the API only.
CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"


@cache
def _read(name: str) -> bytes:
    return (resources.files("agentd.web") / name).read_bytes()


@router.get("/")
def index() -> HTMLResponse:
    """The page."""
    return HTMLResponse(_read("index.html"), headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})


@router.get("/ui/{name}")
def asset(name: str) -> Response:
    """One of the page's files."""
    media = FILES.get(name)
    if media is None:
        raise NotFound("file", name)
    return Response(_read(name), media_type=media, headers={"Cache-Control": "no-cache"})
