"""The published OpenAPI schema: what the models declare, plus what only the running daemon knows.

The request models declare the fixed rules (:mod:`agentd.api.schemas`); this
fills in the limits that come from the configuration (``memory.max_text_chars``),
the daemon's personas as the examples of every field that names one (``persona``,
the OpenAI-compatible ``model``), and the two ways of sending a key (every
operation but ``/healthz`` requires one when the daemon has keys). Each operation
lists the roles it admits in ``x-agentd-roles`` (:mod:`agentd.api.roles`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from agentd._exceptions import CATALOGUE, ErrorCode
from agentd.api.openai_errors import PREFIXES as OPENAI_PREFIXES
from agentd.api.roles import ADMITTED, ROLES_EXTENSION, Policy
from agentd.config import Config
from agentd.store.lexical import CONTEXT_KEY

#: Security schemes of a daemon with an API key.
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer <key>`"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
}


def published(
    api: FastAPI, config: Config, keys_required: bool | None = None, personas: Sequence[str] = ()
) -> dict[str, Any]:
    """The schema ``/openapi.json`` serves for this daemon.

    ``keys_required`` (default: a key is configured): every operation but ``/healthz``
    declares the key schemes as its security. ``personas``: the daemon's persona names, given
    as examples wherever a request names a persona (any other name is ``404``).
    """
    if keys_required is None:
        keys_required = bool(config.daemon.api_key)
    schema = get_openapi(
        title=api.title,
        version=api.version,
        openapi_version=api.openapi_version,
        description=api.description,
        routes=api.routes,
    )
    limit = config.memory.max_text_chars
    components = schema.get("components", {}).get("schemas", {})
    if "AddMemory" in components:
        props = components["AddMemory"]["properties"]
        props["text"]["maxLength"] = limit
        props["metadata"] = _metadata(props.get("metadata", {}), limit)
    if "ImportRequest" in components:
        for variant in components["ImportRequest"].get("anyOf", []):
            items = variant.get("properties", {}).get("memories", {}).get("items")
            if items:
                items["properties"]["text"] = {**items["properties"]["text"], "maxLength": limit}
                items["properties"]["metadata"] = {"type": "object", "properties": {CONTEXT_KEY: _context(limit)}}
    if personas:
        _persona_examples(schema, list(personas))
    # How to send a key, always; which roles each operation admits is its ``x-agentd-roles``.
    schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    if keys_required:
        schema["security"] = [{"bearer": []}, {"apiKey": []}]
        _role_refusals(schema)
    else:
        for _path, operation in _operations(schema):
            operation.pop("security", None)
            operation.get("responses", {}).pop("401", None)
    return schema


def _operations(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every operation of the schema, with its path."""
    for path, item in schema.get("paths", {}).items():
        for operation in item.values():
            yield path, operation


#: Where a request names a persona: body properties and parameters called this.
PERSONA_FIELDS = ("persona", "model")


def _persona_examples(schema: dict[str, Any], names: list[str]) -> None:
    """``names`` as the examples of every field that names a persona: a client reading ``/docs``
    sees real values, and a tool that sends the schema's examples (schemathesis) reaches past
    ``404``. The OpenAI-compatible ``model`` is a persona too; no other ``model`` is in a request."""
    components = schema.get("components", {}).get("schemas", {})
    for _path, operation in _operations(schema):
        for parameter in operation.get("parameters", []):
            if parameter.get("name") in PERSONA_FIELDS:
                parameter.setdefault("schema", {})["examples"] = names
        for media in operation.get("requestBody", {}).get("content", {}).values():
            ref = media.get("schema", {}).get("$ref", "")
            body = components.get(ref.rsplit("/", 1)[-1], {}) if ref.startswith("#/components/schemas/") else {}
            for field in PERSONA_FIELDS:
                prop = body.get("properties", {}).get(field)
                if prop is not None:
                    prop["examples"] = names


def _role_refusals(schema: dict[str, Any]) -> None:
    """A 403 on every operation some valid key may not call (``x-agentd-roles`` leaves a role out):
    the role check refuses it before the route runs (:func:`agentd.api.roles.allow`). In OpenAI's
    shape on the OpenAI-compatible routes."""
    every, open_to_all = set(ADMITTED[Policy.ANY]), set(ADMITTED[Policy.OPEN])
    code = ErrorCode.FORBIDDEN
    for path, operation in _operations(schema):
        roles = set(operation.get(ROLES_EXTENSION, every))
        responses = operation.setdefault("responses", {})
        if roles != open_to_all and every - roles and "403" not in responses:
            shape = "OpenAIErrorResponse" if path.startswith(OPENAI_PREFIXES) else "ErrorResponse"
            responses["403"] = {
                "description": f"Error; code: {code} ({CATALOGUE[code].meaning})",
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{shape}"}}},
            }


def _context(limit: int) -> dict[str, Any]:
    """``metadata.context``: a bounded string (indexed for search, never shown), or null (none)."""
    return {"anyOf": [{"type": "string", "maxLength": limit}, {"type": "null"}]}


def _metadata(declared: dict[str, Any], limit: int) -> dict[str, Any]:
    """``metadata``: any object whose ``context`` is a bounded string or null."""
    shape = {"type": "object", "properties": {CONTEXT_KEY: _context(limit)}}
    return {**declared, "anyOf": [shape, {"type": "null"}]} if "anyOf" in declared else shape


def install(
    api: FastAPI,
    config: Config,
    keys_required: Callable[[], bool] | None = None,
    personas: Callable[[], Sequence[str]] | None = None,
) -> None:
    """Serve :func:`published` (built once, on first request) as ``/openapi.json``."""

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            required = keys_required() if keys_required is not None else None
            names = personas() if personas is not None else ()
            api.openapi_schema = published(api, config, required, names)
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
