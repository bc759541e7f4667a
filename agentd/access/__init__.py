"""Who may see what: where a memory lives and where a search may look (:mod:`~agentd.access.scopes`),
who a call acts for when it does not say (:mod:`~agentd.access.identity`), and who reads a channel
(:mod:`~agentd.access.visibility`).

``scopes`` is bottom-layer (the config checks names with its rule); ``identity`` and ``visibility``
read the config and the store, a layer up (tests/test_layers.py gives each part its layer)."""
