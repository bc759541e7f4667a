"""prometheus-client's value class, chosen again once ``PROMETHEUS_MULTIPROC_DIR`` is set.

prometheus-client picks how a metric keeps its values (in memory, or in files shared by the
daemon's worker processes) once, when it is first imported, and offers no call to pick again.
agentd sets the directory later (at ``agentd serve``'s start), so it overwrites the module's
``ValueClass`` with what ``get_value_class`` chooses now; metrics made afterwards use it.
"""

from __future__ import annotations

import os
import tempfile

#: What :func:`choose_value_class_again` relies on, each checked by :func:`broken`.
ASSUMPTIONS = {
    "get_value_class": "prometheus_client.values has get_value_class(), which reads PROMETHEUS_MULTIPROC_DIR "
    "when called",
    "ValueClass": "prometheus_client.values.ValueClass is what a metric made afterwards keeps its values in",
}


def choose_value_class_again() -> None:
    """Make metrics created from now on keep their values as ``PROMETHEUS_MULTIPROC_DIR`` now says."""
    from prometheus_client import values

    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]


def broken() -> list[str]:
    """The :data:`ASSUMPTIONS` the installed prometheus-client breaks, each named (empty: all hold)."""
    from prometheus_client import Counter, values

    if not callable(getattr(values, "get_value_class", None)) or not hasattr(values, "ValueClass"):
        return list(ASSUMPTIONS.values())
    failed: list[str] = []
    before, env = values.ValueClass, os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    with tempfile.TemporaryDirectory(prefix="agentd-prometheus-check-") as directory:
        try:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
            chosen = values.get_value_class()  # type: ignore[no-untyped-call]
            if chosen is before:
                failed.append(ASSUMPTIONS["get_value_class"])
            values.ValueClass = chosen
            Counter("agentd_compat_check", "checks the value class", registry=None).inc()
            if not os.listdir(directory):
                failed.append(ASSUMPTIONS["ValueClass"])
        finally:
            values.ValueClass = before
            if env is None:
                os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            else:
                os.environ["PROMETHEUS_MULTIPROC_DIR"] = env
    return failed
