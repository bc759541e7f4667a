"""The published OpenAPI schema: what the models declare, plus what only the running daemon knows.

The request models declare the fixed rules (:mod:`agentd.api.schemas`); this
fills in the limits that come from the configuration (``memory.max_text_chars``)
and, when the daemon has an API key, the two ways of sending it (every
operation but ``/healthz`` requires one).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from agentd.config import Config
from agentd.store.lexical import CONTEXT_KEY

#: Security schemes of a daemon with an API key.
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer <key>`"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
}


def published(api: FastAPI, config: Config) -> dict[str, Any]:
    """The schema ``/openapi.json`` serves for this daemon."""
    schema = get_openapi(
        title=api.title,
        version=api.version,
        openapi_version=api.openapi_version,
        description=api.description,
        routes=api.routes,
    )
    limit = config.memory.max_text_chars
    components = schema.get("components", {}).get("schemas", {})
    text_limits = {"type": "string", "maxLength": limit}
    if "AddMemory" in components:
        props = components["AddMemory"]["properties"]
        props["text"]["maxLength"] = limit
        props["metadata"] = _metadata(props.get("metadata", {}), limit)
    if "ImportRequest" in components:
        for variant in components["ImportRequest"].get("anyOf", []):
            items = variant.get("properties", {}).get("memories", {}).get("items")
            if items:
                items["properties"]["text"] = {**items["properties"]["text"], "maxLength": limit}
                items["properties"]["metadata"] = {
                    "type": "object",
                    "properties": {CONTEXT_KEY: text_limits},
                }
    if config.daemon.api_key:
        schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
        schema["security"] = [{"bearer": []}, {"apiKey": []}]
    else:
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                operation.pop("security", None)
                operation.get("responses", {}).pop("401", None)
    return schema


def _metadata(declared: dict[str, Any], limit: int) -> dict[str, Any]:
    """``metadata``: any object whose ``context`` (indexed for search, never shown) is a bounded string."""
    shape = {"type": "object", "properties": {CONTEXT_KEY: {"type": "string", "maxLength": limit}}}
    return {**declared, "anyOf": [shape, {"type": "null"}]} if "anyOf" in declared else shape


def install(api: FastAPI, config: Config) -> None:
    """Serve :func:`published` (built once, on first request) as ``/openapi.json``."""

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = published(api, config)
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
