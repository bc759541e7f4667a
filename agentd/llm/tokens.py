"""Token counts with the model's own tokenizer, without importing litellm.

With Hugging Face downloads turned off (``agentd.llm`` does that), litellm counts
every model with tiktoken: ``o200k_base`` for names containing ``gpt-4o``,
tiktoken's own encoding for the OpenAI model names it knows, ``cl100k_base`` for
everything else (the offline model included). This module makes the same choice
with tiktoken directly — but reads a model named with a provider prefix
(``openai/gpt-4.1``) by its own name, where litellm falls back to ``cl100k_base``:
OpenAI counts that model with its own encoding — and it loads the encodings from
the BPE files litellm ships,
so a count costs neither litellm's import (seconds) nor the network. An encoding
litellm does not ship (old GPT-3 models) falls back to ``cl100k_base`` rather than
being downloaded.

Like litellm, text is encoded in pieces of :data:`CHUNK_CHARS` characters (which
bounds tiktoken's work on pathological input); a word cut at a piece's edge may
count one token more than the whole text would, so the count errs on the safe
side of the model's own by well under 2%. tests/test_models.py checks the counts
against litellm's.

Parsing a BPE file in Python takes about 0.1 s of every start, so the parsed table is
kept in agentd's cache directory (:mod:`agentd.files.cache`) as a marshal file per
encoding, tagged with tiktoken's version and the BPE file's size and modification
time; the encoding is built from it with tiktoken's public ``tiktoken.Encoding``.
A missing, stale or unreadable cache file falls back to tiktoken's own loading and
is rewritten. Either way the encoding is the one ``tiktoken.get_encoding`` builds
(tests/test_models.py checks they encode alike).
"""

from __future__ import annotations

import functools
import marshal
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd._compat.litellm import bpe_file_name, tokenizers_dir

if TYPE_CHECKING:
    import tiktoken

#: What litellm uses when it knows nothing better.
DEFAULT_ENCODING = "cl100k_base"
#: Characters encoded at a time, as litellm does (its TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS).
CHUNK_CHARS = int(os.environ.get("TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS") or 1024)
_lock = threading.Lock()


@functools.cache
def _bundled_dir() -> Path | None:
    """litellm's directory of tiktoken BPE files, found without importing litellm."""
    return tokenizers_dir()


def _bpe_file(encoding: str) -> Path | None:
    """Where the encoding's BPE file is when bundled (tiktoken names its cache files by URL hash)."""
    folder = _bundled_dir()
    return None if folder is None else folder / bpe_file_name(encoding)


def _available(encoding: str) -> bool:
    """True when the encoding's BPE file is on disk."""
    path = _bpe_file(encoding)
    return path is not None and path.is_file()


@functools.lru_cache(maxsize=256)
def encoding_name(model: str) -> str:
    """The tiktoken encoding litellm counts ``model`` with (and agentd does)."""
    import tiktoken

    if "gpt-4o" in model:
        name = "o200k_base"
    else:
        try:
            name = tiktoken.encoding_name_for_model(model.rsplit("/", 1)[-1])
        except KeyError:
            name = DEFAULT_ENCODING
    return name if name == DEFAULT_ENCODING or _available(name) else DEFAULT_ENCODING


_encodings: dict[str, tiktoken.Encoding] = {}
#: Bumped when the cache file's layout changes.
_CACHE_FORMAT = 1


def cache_path(name: str) -> Path:
    """Where the parsed table of encoding ``name`` is cached."""
    from agentd.files.cache import cache_dir

    return cache_dir() / "tiktoken" / f"{name}.marshal"


def _cache_tag(name: str) -> tuple[Any, ...]:
    """What a cache file must have been made from: tiktoken's version and the BPE file."""
    import tiktoken

    path = _bpe_file(name)
    size = mtime = 0
    if path is not None:
        try:
            stat = path.stat()
            size, mtime = stat.st_size, stat.st_mtime_ns
        except OSError:
            pass
    return (_CACHE_FORMAT, name, tiktoken.__version__, size, mtime)


def _from_cache(name: str, tag: tuple[Any, ...]) -> dict[str, Any] | None:
    """The encoding's constructor arguments from the cache file, or None if it is not usable."""
    from agentd.files.cache import read_bytes

    data = read_bytes(cache_path(name))
    if data is None:
        return None
    try:
        stored_tag, pat_str, special, tokens, extra = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return None
    if (
        stored_tag != tag
        or not isinstance(pat_str, str)
        or not isinstance(special, dict)
        or not isinstance(tokens, list)
        or not isinstance(extra, dict)
    ):
        return None
    # The ranks are 0..n-1 (checked when written), so the tokens in rank order are enough.
    ranks = dict(zip(tokens, range(len(tokens)), strict=True))
    return {"name": name, "pat_str": pat_str, "special_tokens": special, "mergeable_ranks": ranks, **extra}


def _to_cache(tag: tuple[Any, ...], constructor: dict[str, Any]) -> None:
    """Keep the constructor arguments for the next start (skipped if they do not fit the format)."""
    from agentd.files.cache import write_atomic

    ranks: dict[bytes, int] = constructor["mergeable_ranks"]
    tokens = sorted(ranks, key=ranks.__getitem__)
    if [ranks[t] for t in tokens] != list(range(len(tokens))):
        return  # ranks with gaps: not this format
    extra = {k: v for k, v in constructor.items() if k not in ("name", "pat_str", "special_tokens", "mergeable_ranks")}
    write_atomic(
        cache_path(tag[1]), marshal.dumps((tag, constructor["pat_str"], constructor["special_tokens"], tokens, extra))
    )


def _load(name: str) -> tiktoken.Encoding:
    """Encoding ``name`` built from the cached table, else by tiktoken (then cached)."""
    import tiktoken

    tag = _cache_tag(name)
    constructor = _from_cache(name, tag)
    if constructor is not None:
        return tiktoken.Encoding(**constructor)
    import tiktoken_ext.openai_public  # tiktoken's plugin of OpenAI's encodings

    make = tiktoken_ext.openai_public.ENCODING_CONSTRUCTORS.get(name)
    if make is None:
        return tiktoken.get_encoding(name)
    constructor = make()
    encoding = tiktoken.Encoding(**constructor)
    _to_cache(tag, constructor)
    return encoding


def _encoding(name: str) -> tiktoken.Encoding:
    """The encoding, loaded once (a second thread asking meanwhile waits for that load)."""
    with _lock:
        if name not in _encodings:
            folder = _bundled_dir()
            if folder is not None:
                # tiktoken reads its BPE files from this directory instead of fetching them;
                # litellm sets the same variable to the same directory when it is imported.
                os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
            _encodings[name] = _load(name)
        return _encodings[name]


def tokenizer_name(model: str) -> str:
    """A name for ``model``'s tokenizer (models sharing one share cached counts)."""
    return f"tiktoken:{encoding_name(model)}"


#: Texts up to this many characters have their counts kept, in the last :data:`KEPT_COUNTS`
#: counted per model: a daemon counts the same history lines, author prefixes and prompt
#: sections turn after turn (at most ~16 MB of text held per model).
KEPT_CHARS = 2048
KEPT_COUNTS = 8192


class TiktokenCounter:
    """Counts tokens of text for one model, as litellm's ``token_counter`` does."""

    def __init__(self, model: str) -> None:
        self.name = tokenizer_name(model)
        self._encoding = _encoding(encoding_name(model))
        self._kept = functools.lru_cache(maxsize=KEPT_COUNTS)(self._encode_count)

    def count(self, text: str) -> int:
        """Tokens in ``text`` by the model's tokenizer."""
        return self._kept(text) if len(text) <= KEPT_CHARS else self._encode_count(text)

    def kept(self) -> int:
        """How many counts are kept now."""
        return self._kept.cache_info().currsize

    def _encode_count(self, text: str) -> int:
        encode = self._encoding.encode_ordinary
        return sum(len(encode(text[i : i + CHUNK_CHARS])) for i in range(0, len(text), CHUNK_CHARS))


@functools.lru_cache(maxsize=64)
def counter_for(model: str) -> TiktokenCounter:
    """One shared counter per model."""
    return TiktokenCounter(model)
