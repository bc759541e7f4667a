"""No silent waits: ``agentd chat`` and ``agentd post`` say what they wait for, a daemon that is
not running is reported at once, and a model that never answers ends the turn with an error
naming the model, its address and the persona's timeout."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conftest import KEY_ENV, agentd_cli, write_home
from tests.support.fakeopenai import FakeOpenAI, Turn, fake_persona


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_a_model_that_never_answers_ends_with_its_name_address_and_timeout(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """The fake server accepts and says nothing; the persona allows 2 s of silence. The command
    says at once which model at which address it waits for, then fails naming both and the
    timeout, and the model was asked once (a silent model is not waited for again)."""
    persona = fake_persona(fake_openai.url) + "model_timeout_seconds = 2\n"
    home = write_home(tmp_path / "home", "", {"fake": persona})
    fake_openai.queue(Turn(hang=True))
    result = agentd_cli("chat", "fake", "-m", "hello?", config=home, env={KEY_ENV: "test-key"})
    fake_openai.release()
    assert result.returncode == 1, result.stderr
    first = result.stderr.splitlines()[0]
    assert f"waiting for model 'openai/fake-model' at {fake_openai.url}" in first
    assert "2 s" in first
    assert "llm_timeout" in result.stderr
    assert f"model 'openai/fake-model' at {fake_openai.url} sent nothing for 2 s (timed out)" in result.stderr
    assert "model_timeout_seconds" in result.stderr
    assert len(fake_openai.chat_requests()) == 1


@pytest.mark.slow
def test_a_refused_model_connection_is_said_in_plain_words(tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    home = write_home(tmp_path / "home", "[models]\nretries = 0\n", {"fake": fake_persona(url)})
    result = agentd_cli("chat", "fake", "-m", "hello?", config=home, env={KEY_ENV: "test-key"})
    assert result.returncode == 1, result.stderr
    assert f"model 'openai/fake-model' at {url} could not be reached (connection refused" in result.stderr
    assert "is the model server running there?" in result.stderr
    assert "litellm" not in result.stderr


def test_post_without_a_daemon_fails_at_once_and_says_where(tmp_path: Path) -> None:
    """No daemon: the error names the address at once (no --busy-wait retrying); --wait waits, then says so."""
    port = _free_port()
    home = write_home(tmp_path / "home", f"[daemon]\nport = {port}\n")
    result = agentd_cli("post", "general", "hi", config=home)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: agentd is not running at http://127.0.0.1:{port} (connection refused): start it with "
        "`agentd serve`, or pass --wait SECONDS to wait for it"
    )
    waited = agentd_cli("post", "general", "hi", "--wait", "1", config=home)
    assert waited.returncode == 1
    assert f"waiting up to 1 s for agentd at http://127.0.0.1:{port}" in waited.stderr
    assert "start it with `agentd serve`" in waited.stderr


def test_post_says_what_it_waits_for_and_a_silent_model_ends_it_with_an_error(daemons, fake_openai) -> None:
    """Through a running daemon: post says at once where the message went and which model at which
    address answers it, and a model that never answers ends the wait with the model's error (the
    persona's 2 s), not the command's own timeout."""
    persona = fake_persona(fake_openai.url) + "model_timeout_seconds = 2\n"
    d = daemons("", personas={"fake": persona})
    fake_openai.queue(Turn(hang=True))
    result = agentd_cli("post", "general", "hello?", "--persona", "fake", "--url", d.url, config=d.home)
    fake_openai.release()
    assert result.returncode == 1, result.stderr
    first = result.stderr.splitlines()[0]
    assert f"posted to #general at {d.url}" in first
    assert f"waiting for model 'openai/fake-model' at {fake_openai.url}" in first
    assert "sent nothing for 2 s (timed out)" in result.stderr
    assert "llm_timeout" in result.stderr
