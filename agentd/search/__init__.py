"""Search: one :class:`SearchQuery` in, one :class:`SearchResult` out.

Everything that finds memories by a query goes through :class:`Searcher` (reached as
``MemoryService.search``): intent (what the query asks), the full-text and vector sides and
their fusion, dates the query names, calibration and recency (ranking), the cross-encoder for
decisions (reranking), thresholds, near misses and eligibility in shared channels.
"""

from agentd.search.engine import Searcher
from agentd.search.ranking import MemoryHit
from agentd.search.request import Ineligible, QueryVector, SearchQuery, SearchResult, SearchTimings

__all__ = ["Ineligible", "MemoryHit", "QueryVector", "SearchQuery", "SearchResult", "Searcher", "SearchTimings"]
