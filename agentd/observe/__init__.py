"""What an operator watches the daemon by: traces (:mod:`agentd.observe.tracing`). Each module here
imports its library only when it is switched on."""
