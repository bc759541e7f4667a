"""The offline embedders: the default e5-small-v2, the MiniLM alternative, and what each carries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentd.access.scopes import GLOBAL, Reach
from agentd.app import App, build_embedder
from agentd.config import load_config
from agentd.embedders.local import DEFAULT_MODEL, MINILM, LocalEmbedder
from agentd.memory import MemoryService
from agentd.search import SearchQuery

from .conftest import write_home


def test_the_default_is_e5_and_embeds_queries_and_memories_in_their_own_forms(embedder: LocalEmbedder) -> None:
    assert DEFAULT_MODEL == "e5-small-v2"
    assert embedder.model_id == "e5-small-v2-onnx-int8"
    text = "User likes Python"
    as_memory, as_query = embedder.embed([text])[0], embedder.embed_queries([text])[0]
    assert as_memory.shape == (384,)
    assert np.linalg.norm(as_memory) == pytest.approx(1.0, abs=1e-5)
    # "passage: " and "query: " prefixes: the same words, two different vectors.
    assert float(as_memory @ as_query) < 0.999


def test_one_text_gets_one_vector_whatever_it_is_batched_with(embedder: LocalEmbedder) -> None:
    text = "Melanie took the kids to the museum and they loved the dinosaur bones"
    alone = embedder.embed([text])[0]
    batched = embedder.embed(["a short one", text, "a much longer text about something else entirely, " * 5])[1]
    assert np.array_equal(alone, batched)


@pytest.mark.slow
def test_minilm_is_selectable_with_its_own_calibration_and_word_weights(tmp_path: Path) -> None:
    config = load_config(write_home(tmp_path, '[embedding]\nmodel = "all-MiniLM-L6-v2"\n'), environ={})
    minilm = build_embedder(config.embedding)
    assert isinstance(minilm, LocalEmbedder)
    assert minilm.model_id == MINILM.model_id
    assert minilm.calibration == MINILM.calibration
    assert minilm.words.lexical_weight == 1.5
    app = App(config, embedder=minilm)
    try:
        app.memory.add("buddy", GLOBAL, "User likes Python", "preference")
        [hit] = app.memory.search(SearchQuery("What programming language should I learn?", Reach("buddy"))).hits
        assert hit.memory.text == "User likes Python"
        assert hit.relevance > 0.5
        assert app.memory.fusion.lexical_weight == 1.5
    finally:
        app.close()


def test_memory_settings_override_the_embedders_word_weights(app: App, tmp_path: Path, embedder: LocalEmbedder) -> None:
    assert app.memory.fusion.lexical_weight == embedder.words.lexical_weight == 0.6
    assert app.memory.fusion.plain_weight == embedder.words.plain_weight == 0.02
    assert app.memory.fusion.date_weight == embedder.words.date_weight
    config = load_config(
        write_home(
            tmp_path / "other", "[memory.tuning]\nlexical_weight = 0.0\ndate_weight = 0.4\nplain_lexical_weight = 0.1\n"
        ),
        environ={},
    )
    service = MemoryService(app.store, embedder, config.memory, ["buddy"])
    assert service.fusion.lexical_weight == 0.0
    assert service.fusion.date_weight == 0.4
    assert service.fusion.lexical_saturation == embedder.words.lexical_saturation
    assert service.fusion.plain_weight == 0.1
    assert service.fusion.plain_saturation == embedder.words.plain_saturation


@pytest.mark.slow
def test_the_saved_optimised_graph_gives_the_same_vectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold start saves onnxruntime's optimised graph (and the verified checksums) in the cache
    directory; a warm start loads it and embeds the same; a damaged saved graph is made again."""
    monkeypatch.setenv("AGENTD_HOME", str(tmp_path))
    texts = ["what language do I like?", "Melanie took the kids to the museum", "数字 42 and emoji 🎉"]
    cold = LocalEmbedder()
    saved = list((tmp_path / "cache" / "onnx").glob("*.onnx"))
    assert len(saved) == 1
    assert (tmp_path / "cache" / "checksums.json").is_file()
    cold_vectors = [cold.embed(texts), cold.embed_queries(texts)]
    warm = LocalEmbedder()
    for before, after in zip(cold_vectors, [warm.embed(texts), warm.embed_queries(texts)], strict=True):
        np.testing.assert_allclose(after, before, atol=1e-6, rtol=0)
    saved[0].write_bytes(b"not a model")
    again = LocalEmbedder()
    np.testing.assert_allclose(again.embed(texts), cold_vectors[0], atol=1e-6, rtol=0)
    assert saved[0].stat().st_size > 1000  # made again
