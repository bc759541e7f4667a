"""The shapes agentd answers with, defined once for the daemon and its clients.

:mod:`agentd.schemas.responses` holds one pydantic model per answer of the HTTP API: the API
serves them (``response_model``, so the OpenAPI schema shows them) and :mod:`agentd.client`
parses the same answers into the same classes. They import only the error catalogue and
pydantic models as light as themselves (layer 1, beside the client), so every interface above
can use them and a client pays for no more than the shapes.
"""
