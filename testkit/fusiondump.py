"""What each search fused, written down so that a ranking rule can be replayed without the store.

``--dump FILE`` of bench/longmemeval.py and bench/locomo.py records, for every hybrid
search, exactly what :meth:`agentd.search.ranking.Ranker.rank` was given (the fusion weights
of this query; each candidate's cosine, bm25, whether the vector side found it, its
creation time; the search's ``now`` and the calendar days the query names), the
query, and which candidates have no content word (a search skips those). The file's
header holds the service's fusion before it is chosen per query. bench/fusion_replay.py then re-ranks the records with
the real ranking under any :class:`~agentd.search.fusion.Fusion` and prints the
benches' metrics. The recorder wraps the ``Ranker`` the search
(agentd/search/engine.py) ranks with; it changes nothing about the search.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict
from datetime import date, datetime
from pathlib import Path
from typing import Any

import agentd.search.engine as engine_module
from agentd.embedders.calibration import Calibration
from agentd.search.fusion import Evidence, Fusion
from agentd.search.intent import has_content
from agentd.search.ranking import Ranked, Ranker
from agentd.search.recency import Recency


class Recorder:
    """Records what every ranking of the search ranked while installed (its ``Ranker``)."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.header: dict[str, Any] = {}
        self._saved: Callable[..., Ranker] | None = None

    def __enter__(self) -> Recorder:
        self._saved = engine_module.Ranker  # type: ignore[attr-defined]
        setattr(engine_module, "Ranker", self._ranker)  # noqa: B010 (the class is replaced for the duration)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            setattr(engine_module, "Ranker", self._saved)  # noqa: B010

    def _ranker(self, calibration: Calibration, recency: Recency, fusion: Fusion) -> _Recording:
        return _Recording(self, Ranker(calibration, recency, fusion))

    def record(
        self,
        ranker: Ranker,
        candidates: dict[int, Evidence],
        created: Mapping[int, datetime],
        now: datetime,
        days: Collection[date],
    ) -> None:
        """Keep what one ranking was given."""
        calibration, recency, fusion = ranker.calibration, ranker.recency, ranker.fusion
        self.header = {
            "calibration": [calibration.midpoint, calibration.scale],
            "recency": [recency.half_life_days, recency.weight],
        }
        self.last = {
            "weights": [fusion.lexical_weight, fusion.lexical_saturation],
            "now": now.isoformat(),
            "days": [d.isoformat() for d in days],
            "candidates": [
                [mid, e.cosine, e.bm25, e.dense_known, created[mid].isoformat()]
                for mid, e in candidates.items()
                if mid in created
            ],
        }

    def take(self, query: str, texts: Mapping[int, str], **labels: Any) -> dict[str, Any]:
        """The last search's record with its ``query``, the ids without a content word, and ``labels``."""
        record = self.last or {"now": "", "days": [], "candidates": []}
        self.last = None
        empty = [c[0] for c in record["candidates"] if not has_content(texts.get(c[0], ""))]
        return {"query": query, **record, "no_content": empty, **labels}


def write(
    path: Path, recorder: Recorder, fusion: Fusion, bench: str, limit: int, records: list[dict[str, Any]]
) -> None:
    """Write the dump: one JSON object with the search settings (``fusion``: the service's, before
    :meth:`~agentd.search.fusion.Fusion.for_query`) and a record per question."""
    header = {"bench": bench, "limit": limit, **recorder.header, "fusion": asdict(fusion)}
    path.write_text(json.dumps({**header, "questions": records}))


class _Recording:
    """A :class:`Ranker` that tells its recorder what it ranks, then ranks it unchanged."""

    def __init__(self, recorder: Recorder, ranker: Ranker) -> None:
        self._recorder = recorder
        self._ranker = ranker

    def rank(
        self,
        candidates: dict[int, Evidence],
        created: Mapping[int, datetime],
        now: datetime,
        *,
        min_relevance: float,
        limit: int | None = None,
        days: Collection[date] = (),
    ) -> list[Ranked]:
        """What :meth:`Ranker.rank` returns, recorded."""
        self._recorder.record(self._ranker, candidates, created, now, days)
        return self._ranker.rank(candidates, created, now, min_relevance=min_relevance, limit=limit, days=days)
