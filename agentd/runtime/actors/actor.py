"""PersonaActor: one persona in one channel, one message at a time."""

from __future__ import annotations

from types import TracebackType
from typing import Any

import pykka

from agentd.runtime.messages import ActorCrashed, ActorKey, Turn, TurnFinished
from agentd.runtime.pipeline.respond import Responder


class PersonaActor(pykka.ThreadingActor):
    """Answers the turns of one (persona, channel) in arrival order.

    Its mailbox is the channel's queue, so replies keep their order; different
    channels have different actors and run concurrently. Expected failures are
    handled in the responder (an ``Error`` event); a bug escapes ``on_receive``,
    pykka stops the actor, and :meth:`on_failure` tells the supervisor, which
    restarts it and re-sends what was still queued.
    """

    use_daemon_thread = True

    def __init__(self, key: ActorKey, responder: Responder, supervisor: pykka.ActorRef[Any], generation: int) -> None:
        super().__init__()
        self._key = key
        self._responder = responder
        self._supervisor = supervisor
        self._generation = generation
        self._current: str | None = None

    def on_receive(self, message: Any) -> None:
        """Answer a :class:`Turn`; other messages are ignored."""
        if not isinstance(message, Turn):
            return
        self._current = message.request_id
        # A turn cancelled while queued (shutdown) does not start: respond() returns at once.
        self._responder.respond(message)
        self._current = None
        self._report(TurnFinished(self._key, message.request_id))

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Report the crash (and the turn it interrupted) to the supervisor."""
        self._report(
            ActorCrashed(
                self._key,
                self._current,
                f"{getattr(exception_type, '__name__', 'Error')}: {exception_value}",
                self._generation,
            )
        )

    def _report(self, message: TurnFinished | ActorCrashed) -> None:
        try:
            self._supervisor.tell(message)
        except pykka.ActorDeadError:
            pass  # shutdown stopped the supervisor first: nobody is left to tell
