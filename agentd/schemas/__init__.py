"""The shapes agentd answers with, defined once for the daemon and its clients.

:mod:`agentd.schemas.responses` holds one pydantic model per answer of the HTTP API: the API
serves them (``response_model``, so the OpenAPI schema shows them) and :mod:`agentd.client`
parses the same answers into the same classes. They sit at the bottom of the layers (they
import nothing of agentd but the error catalogue), so every interface can use them.
"""
