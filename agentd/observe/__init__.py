"""What the daemon tells monitoring about itself: Prometheus metrics (:mod:`agentd.observe.metrics`).

A bottom-layer package: the runtime, the model client and the API call into it with one-line hooks,
and it imports nothing of agentd's above the config.
"""
