"""When things happen: when to try again (:mod:`~agentd.timing.backoff`), when a schedule is due
(:mod:`~agentd.timing.recurrence`), and making, listing and cancelling schedules
(:mod:`~agentd.timing.schedules`, a layer up: it reads the personas and the store)."""
