"""The web page at ``/`` and its files under ``/ui/`` (package data of :mod:`agentd.web`), and
the API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``.

The page and its files need no API key (:data:`PUBLIC_PATHS`): the page asks for
the key when the API answers 401, and sends it on every call.

The documentation pages load Swagger UI and ReDoc from ``/docs/assets/``: the files the
``fastapi-offline`` package ships (installed with agentd), never a CDN, so ``/docs`` works
without a network.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response

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


#: The documentation pages' files (in ``fastapi_offline/static``) and their media types.
DOC_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
DOC_ASSETS_PATH = "/docs/assets"


@cache
def _doc_assets() -> Path:
    spec = resources.files("fastapi_offline") / "static"
    return Path(str(spec))


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    """The API's interactive documentation (Swagger UI), from files installed with agentd."""
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json",
        title="agentd API",
        swagger_js_url=f"{root}{DOC_ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{DOC_ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{root}{DOC_ASSETS_PATH}/favicon.png",
    )


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    """The API's reference (ReDoc), from files installed with agentd; no web fonts fetched."""
    root = request.scope.get("root_path", "")
    return get_redoc_html(
        openapi_url=f"{root}/openapi.json",
        title="agentd API",
        redoc_js_url=f"{root}{DOC_ASSETS_PATH}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{DOC_ASSETS_PATH}/favicon.png",
        with_google_fonts=False,
    )


@router.get(DOC_ASSETS_PATH + "/{name}")
def doc_asset(name: str) -> FileResponse:
    """One of the documentation pages' files."""
    media = DOC_ASSETS.get(name)
    if media is None:
        raise NotFound("file", name)
    return FileResponse(_doc_assets() / name, media_type=media, headers={"Cache-Control": "max-age=86400"})
