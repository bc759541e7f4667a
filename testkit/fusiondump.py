"""What each search fused, written down so that a ranking rule can be replayed without the store.

``--dump FILE`` of bench/longmemeval.py and bench/locomo.py records, for every hybrid
search, exactly what :func:`agentd.memory.ranking.rank` was given (the fusion weights
of this query; each candidate's cosine, bm25, whether the vector side found it, its
creation time; the search's ``now`` and the calendar days the query names), the
query, and which candidates have no content word (a search skips those). The file's
header holds the service's fusion before it is chosen per query. bench/fusion_replay.py then re-ranks the records with
the real ``rank`` under any :class:`~agentd.memory.fusion.Fusion` and prints the
benches' metrics. The recorder wraps the ``rank`` that ``MemoryService`` calls; it
changes nothing about the search.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict
from datetime import date, datetime
from pathlib import Path
from typing import Any

import agentd.memory.service as service_module
from agentd.memory.fusion import Evidence, Fusion
from agentd.memory.intent import has_content
from agentd.memory.ranking import Ranked, rank
from agentd.relevance import Calibration, Recency


class Recorder:
    """Records the arguments of every ``rank`` call a ``MemoryService`` makes while installed."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.header: dict[str, Any] = {}
        self._saved: Callable[..., list[Ranked]] | None = None

    def __enter__(self) -> Recorder:
        self._saved = service_module.rank
        service_module.rank = self._rank  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            service_module.rank = self._saved  # type: ignore[assignment]

    def _rank(
        self,
        candidates: dict[int, Evidence],
        created: Mapping[int, datetime],
        calibration: Calibration,
        recency: Recency,
        now: datetime,
        limit: int | None,
        min_relevance: float,
        fusion: Fusion | None = None,
        days: Collection[date] = (),
    ) -> list[Ranked]:
        fusion = fusion or Fusion()
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
        return rank(candidates, created, calibration, recency, now, limit, min_relevance, fusion, days)

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
    :meth:`~agentd.memory.fusion.Fusion.for_query`) and a record per question."""
    header = {"bench": bench, "limit": limit, **recorder.header, "fusion": asdict(fusion)}
    path.write_text(json.dumps({**header, "questions": records}))
