"""What the daemon tells monitoring about itself: its log (:mod:`agentd.observe.log`), Prometheus metrics
(:mod:`agentd.observe.metrics`) and traces (:mod:`agentd.observe.tracing`).

A bottom-layer package: the runtime, the model client and the API call into it with one-line hooks,
and it imports nothing of agentd's above the config. Each module imports its library only when it
is switched on.
"""
