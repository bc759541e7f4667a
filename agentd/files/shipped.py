"""Files shipped with agentd: the annotated ``agentd.toml`` and the example personas.

They live at the top of the repository (``agentd.toml``, ``personas/``); a built
wheel carries them inside the package as ``agentd/_shipped/`` (see
``[tool.hatch.build.targets.wheel.force-include]`` in ``pyproject.toml``), so an
installed agentd runs with no file of its own around.
"""

from __future__ import annotations

from pathlib import Path

#: The agentd package (this module is agentd/files/shipped.py).
_PACKAGE = Path(__file__).resolve().parents[1]


def shipped_path(name: str) -> Path:
    """``agentd/_shipped/<name>`` in a wheel, ``<checkout>/<name>`` in a source checkout."""
    for candidate in (_PACKAGE / "_shipped" / name, _PACKAGE.parent / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{name} is missing from this installation of agentd (reinstall it)")


def example_config() -> Path:
    """The annotated ``agentd.toml``: every key with its default and a comment."""
    return shipped_path("agentd.toml")


def example_personas() -> Path:
    """The directory of example personas (``buddy``, ``researcher``)."""
    return shipped_path("personas")
