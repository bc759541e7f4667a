"""The runtime: the intake, with the way of running turns chosen once at start-up.

Chosen by what the store can do (:attr:`agentd.store.Store.capabilities`), not by its name:

* ``[runtime] workers`` above 0 on SQLite: a pool of worker processes
  (:class:`~agentd.runtime.scaleout.pool.WorkerPool`), each running local actors;
* a PostgreSQL store, which several daemons may share: local actors for the channels this
  daemon owns (:class:`~agentd.runtime.scaleout.cluster.ClusterRouter`);
* else local actors in this process (:class:`~agentd.runtime.actors.local.LocalActors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.app import App
from agentd.llm.chat import ChatModel
from agentd.observe.log import get_logger
from agentd.runtime.actors.local import LocalActors
from agentd.runtime.dispatch import Dispatcher, Parts
from agentd.runtime.inflight import Listener
from agentd.runtime.intake import Accepted, Intake
from agentd.runtime.messages import Draft

if TYPE_CHECKING:
    from agentd.runtime.scheduler import Scheduler

log = get_logger("agentd.runtime")


class Runtime(Intake):
    """The intake and the dispatcher the config asks for, behind a small synchronous API."""

    def __init__(
        self,
        app: App,
        llm: ChatModel | None = None,
        listeners: tuple[Listener, ...] = (),
        *,
        workers: int = 0,
    ) -> None:
        """``workers``: answer turns in that many worker processes (:mod:`agentd.runtime.scaleout.workers`;
        SQLite only) instead of in this process's actors."""

        def choose(parts: Parts) -> Dispatcher:
            # Imported only when chosen: the pool brings multiprocessing, the cluster psycopg.
            can = app.store.capabilities
            if workers > 0 and can.worker_processes:
                from agentd.runtime.scaleout.pool import WorkerPool

                return WorkerPool(parts, workers)
            if can.shared_by_daemons and can.advisory_locks:  # several daemons may share it
                from agentd.runtime.scaleout.cluster import ClusterRouter

                return ClusterRouter(parts)
            return LocalActors(parts)

        super().__init__(app, choose, llm, listeners)
        self._scheduler: Scheduler | None = None

    def start_schedules(self) -> None:
        """Bring the personas' routines in step with their files and start firing schedules (the
        daemon does, once it answers the pending messages; only this process schedules, never a
        worker process)."""
        from agentd.runtime.scheduler import Scheduler
        from agentd.timing.schedules import sync_routines

        changed = sync_routines(self.app.store, self.app.personas)
        if changed:
            log.info("routines_synced", changed=changed)
        self._scheduler = Scheduler(self).start()

    def stop(self, grace: float | None = None) -> None:
        """Stop firing schedules, then stop the intake (:meth:`Intake.stop`)."""
        if self._scheduler is not None:
            self._scheduler.stop()
        super().stop(grace)


__all__ = ["Accepted", "Draft", "Runtime"]
