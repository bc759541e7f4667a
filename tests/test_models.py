"""What agentd knows about models without importing litellm — the offline model's turns, token
counts, context windows, key variables — checked against litellm itself; and real models behind
an ``api_base``, with no key variable, against the fake OpenAI server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentd import LLMAuthError
from agentd.llm import litellm_module
from agentd.llm.chat import LitellmChat, ModelSettings
from agentd.llm.models import KEY_VARIABLES, PLACEHOLDER_KEY, key_variables, max_input_tokens, request_key
from agentd.llm.tokens import counter_for, encoding_name
from tests.conftest import REPO, agentd_cli, write_home
from tests.support.fakeopenai import FakeOpenAI, Turn

ENGLISH = "The quarterly planning meeting moved to Thursday because the venue was double booked."
CODE = "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)  # {x: [1, 2]}\n"
CJK = "我们今天去公园散步，天气非常好。会议改到星期四，因为场地被重复预订了。"
SPECIAL = "a literal <|endoftext|> and <|im_start|> in user text"


def _in_a_fresh_interpreter(code: str) -> dict[str, object]:
    """Run ``code`` in a new Python (this one has litellm loaded already); it prints JSON."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_an_offline_turn_streams_calls_tools_and_counts_without_importing_litellm() -> None:
    result = _in_a_fresh_interpreter(
        """
        import json, sys
        from agentd.llm.chat import LitellmChat, ModelSettings
        from agentd.llm.models import max_input_tokens
        from agentd.llm.tokens import counter_for

        chat = LitellmChat()
        settings = ModelSettings(model="offline", max_tokens=64)
        tools = [{"type": "function", "function": {"name": "remember", "parameters": {}}}]
        deltas = []
        said = chat.stream(settings, [{"role": "user", "content": "hello there"}], tools, deltas.append)
        asked = chat.stream(settings, [{"role": "user", "content": "remember that I like tea"}], tools, deltas.append)
        print(json.dumps({
            "text": said.text, "deltas": len(deltas), "usage": said.usage.as_json(),
            "call": [asked.tool_calls[0].name, json.loads(asked.tool_calls[0].arguments)],
            "finish": [said.finish_reason, asked.finish_reason],
            "window": max_input_tokens("offline"), "count": counter_for("offline").count("hello world"),
            "litellm": "litellm" in sys.modules,
        }))
        """
    )
    assert result["litellm"] is False
    assert str(result["text"]).startswith('You said: "hello there".')
    assert int(result["deltas"]) > 3  # streamed word by word
    assert result["call"] == ["remember", {"text": "User said: I like tea", "category": "preference"}]
    assert result["finish"] == ["stop", "tool_calls"]
    assert result["window"] == 32_768
    assert result["count"] == 2
    usage = result["usage"]
    assert isinstance(usage, dict)
    assert usage["prompt_tokens"] > 0
    assert usage["completion_tokens"] > 0


def test_an_offline_turn_stops_when_asked() -> None:
    said: list[str] = []
    turn = LitellmChat().stream(
        ModelSettings(model="offline", max_tokens=64),
        [{"role": "user", "content": "tell me something long " * 5}],
        [],
        said.append,
        should_stop=lambda: len(said) >= 2,
    )
    assert turn.interrupted
    assert turn.text == "".join(said)
    assert len(said) == 2


@pytest.mark.parametrize(
    "model",
    [
        "offline",
        "gpt-4o-mini",
        "openai/gpt-4o",
        "gpt-4",
        "gpt-3.5-turbo",
        "openai/gpt-4.1",
        "gpt-5",
        "anthropic/claude-sonnet-4-5",
        "x",
    ],
)
def test_token_counts_are_litellms(model: str) -> None:
    """The tokenizer litellm picks for the model's own name, and the same count, for English, code,
    CJK, special tokens and text longer than one encoding piece."""
    litellm = litellm_module()
    own_name = model.rsplit("/", 1)[-1]
    for text in (ENGLISH, CODE, CJK, SPECIAL, ENGLISH * 50):
        assert counter_for(model).count(text) == litellm.token_counter(model=own_name, text=text), (model, text[:20])
    from litellm.litellm_core_utils.token_counter import openai_tokenizer_encoding_name

    assert encoding_name(model) == openai_tokenizer_encoding_name(own_name)


def test_an_openai_model_with_a_provider_prefix_counts_with_its_own_encoding() -> None:
    """Where litellm would fall back to cl100k_base for "openai/gpt-4o"."""
    assert encoding_name("openai/gpt-4o") == encoding_name("gpt-4o") == "o200k_base"
    assert encoding_name("openai/gpt-4") == "cl100k_base"


def _map() -> dict[str, dict[str, object]]:
    path = Path(litellm_module().__file__).with_name("model_prices_and_context_window_backup.json")
    return {k: v for k, v in json.loads(path.read_text()).items() if isinstance(v, dict) and k != "sample_spec"}


def test_context_windows_are_litellms_model_information() -> None:
    """For every chat model litellm ships information on, as named bare and with its provider prefix."""
    litellm = litellm_module()
    names: list[str] = []
    for key, info in _map().items():
        if info.get("mode") == "chat" and info.get("litellm_provider") in KEY_VARIABLES:
            names.append(key)
            if "/" not in key:
                names.append(f"{info['litellm_provider']}/{key}")
    names += ["mystery-model", "openai/mystery-model", "ollama/llama3"]
    assert len(names) > 200
    differ = []
    for name in names:
        try:
            info = litellm.get_model_info(name)
            theirs = info.get("max_input_tokens") or info.get("max_tokens")
        except Exception:  # litellm raises for models it does not know
            theirs = None
        if max_input_tokens(name) != theirs:
            differ.append((name, max_input_tokens(name), theirs))
    assert not differ, differ[:10]


@pytest.mark.parametrize("provider", sorted(KEY_VARIABLES))
def test_the_key_variables_are_the_ones_litellm_checks(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    known = [k for k, v in _map().items() if v.get("litellm_provider") == provider]
    model = known[0] if known else "some-model"
    model = model if model.startswith(f"{provider}/") else f"{provider}/{model}"
    for variable in KEY_VARIABLES[provider]:
        monkeypatch.delenv(variable, raising=False)
    missing = litellm_module().validate_environment(model=model)["missing_keys"]
    assert set(missing) == set(KEY_VARIABLES[provider]) == set(key_variables(model) or ())


@pytest.mark.slow  # litellm starts a process when it streams
def test_a_persona_with_api_base_needs_no_key_variable(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A placeholder key is sent, not a real key from the environment meant for another server."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-key-for-openai")
    fake_openai.queue(Turn(text="hi from a local server"))
    settings = ModelSettings(model="openai/llama3", max_tokens=16, api_base=fake_openai.url, timeout=10)
    turn = LitellmChat().stream(settings, [{"role": "user", "content": "hello"}], [], lambda _t: None)
    assert turn.text == "hi from a local server"
    assert fake_openai.authorizations[-1] == f"Bearer {PLACEHOLDER_KEY}"
    # A named key variable is sent when set, and its absence is a clear error.
    monkeypatch.setenv("LOCAL_KEY", "s3cret")
    assert request_key("openai/llama3", "LOCAL_KEY", fake_openai.url) == "s3cret"
    monkeypatch.delenv("LOCAL_KEY")
    with pytest.raises(LLMAuthError, match="LOCAL_KEY"):
        request_key("openai/llama3", "LOCAL_KEY", fake_openai.url)


@pytest.mark.slow
def test_doctor_pings_each_personas_model_and_reports_latency_or_the_exact_error(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Answered, refused, and too slow (bounded by --timeout); the key check needs no litellm."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused_url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    slow = FakeOpenAI().start()
    slow.queue(Turn(text="late", delay=600))
    personas = {
        "answers": f'name = "answers"\nmodel = "openai/m"\napi_base = "{fake_openai.url}"\nsystem_prompt = "x"\n',
        "refused": f'name = "refused"\nmodel = "openai/m"\napi_base = "{refused_url}"\nsystem_prompt = "x"\n',
        "slow": f'name = "slow"\nmodel = "openai/m"\napi_base = "{slow.url}"\nsystem_prompt = "x"\n',
    }
    config = write_home(tmp_path, personas=personas)
    try:
        result = agentd_cli("doctor", "--ping", "--timeout", "8", "--json", config=config)
    finally:
        slow.stop()
    assert result.returncode == 1, result.stderr
    report = {c["check"]: c for c in json.loads(result.stdout)}
    assert report["llm answers"]["ok"]
    assert "no key variable needed" in report["llm answers"]["detail"]
    assert report["ping answers"]["ok"]
    assert "answered in" in report["ping answers"]["detail"]
    assert not report["ping refused"]["ok"]
    assert f"model 'openai/m' at {refused_url} could not be reached" in report["ping refused"]["detail"]
    assert not report["ping slow"]["ok"]
    slow_detail = report["ping slow"]["detail"]
    assert "sent nothing for 8 s (timed out)" in slow_detail or "no answer within 8 s" in slow_detail
    assert fake_openai.chat_requests()[-1]["max_tokens"] == 1


_ENCODE = textwrap.dedent(
    """
    import json, sys
    from agentd.llm.tokens import cache_path, counter_for
    had_cache = cache_path("cl100k_base").is_file()
    encoding = counter_for("offline")._encoding
    text = sys.stdin.read()
    print(json.dumps([had_cache, encoding.encode(text, allowed_special="all"), encoding.encode_ordinary(text)]))
    """
)


@pytest.mark.slow
def test_token_counts_are_tiktokens_with_and_without_the_cached_table(tmp_path: Path) -> None:
    """The parsed BPE table is cached under AGENTD_HOME; a start from the cache, from no cache and
    from a corrupt cache file encode exactly as ``tiktoken.get_encoding``, and the corrupt file is
    rewritten."""
    import tiktoken

    counter_for("offline")  # points tiktoken at the BPE files litellm ships, as agentd does
    text = ENGLISH + CODE + CJK + SPECIAL + " ünïcödé  \t\n\n  emoji 🎉🎉 " + ENGLISH * 20
    reference = tiktoken.get_encoding("cl100k_base")
    expected = [reference.encode(text, allowed_special="all"), reference.encode_ordinary(text)]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AGENTD_HOME": str(tmp_path / "home")}
    cached = tmp_path / "home" / "cache" / "tiktoken" / "cl100k_base.marshal"

    def encode() -> tuple[bool, list[list[int]]]:
        out = subprocess.run(
            [sys.executable, "-c", _ENCODE], input=text, env=env, capture_output=True, text=True, timeout=60, check=True
        )
        had_cache, *encoded = json.loads(out.stdout)
        return had_cache, encoded

    assert encode() == (False, expected)
    assert cached.is_file()
    assert encode() == (True, expected)
    cached.write_bytes(cached.read_bytes()[:1000])  # cut short
    assert encode() == (True, expected)
    assert cached.stat().st_size > 1000  # made again
    assert encode() == (True, expected)


def test_kept_counts_are_the_tokenizers_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count served again from the kept counts is the tokenizer's; long texts and the oldest
    counts beyond the bound are not kept."""
    from agentd.llm import tokens

    monkeypatch.setattr(tokens, "KEPT_COUNTS", 4)
    counter = tokens.TiktokenCounter("offline")  # a fresh counter with the bound above
    encoding = counter._encoding
    texts = ["alice: ", ENGLISH, CODE, CJK, SPECIAL, "alice: "]
    for _ in range(3):
        assert [counter.count(t) for t in texts] == [len(encoding.encode_ordinary(t)) for t in texts]
    assert counter.kept() == 4
    long_text = ENGLISH * 100
    assert len(long_text) > tokens.KEPT_CHARS
    assert counter.count(long_text) == counter._encode_count(long_text)
    assert counter.kept() == 4
