"""Recall: what a turn brings back before the model is called, through one entry point.

:meth:`Recaller.recall` takes a :class:`RecallRequest` and returns one :class:`Recalled`:
the user's earlier exchanges (:mod:`agentd.recall.earlier`), memories and episodes found by
meaning within a time limit (:mod:`agentd.recall.retrieval`, :mod:`agentd.recall.episodes`)
and the user's profile. :mod:`agentd.recall.known_facts` is the memory service's
``/context`` block. Storing, importing, extracting and learning memories stay in
:mod:`agentd.memory`, whose :meth:`~agentd.memory.MemoryService.search` is the one search
function everything here ranks through.
"""

from agentd.recall.recaller import Recalled, Recaller, RecallRequest, RecallTimes
from agentd.recall.status import RecallStatus

__all__ = ["RecallRequest", "RecallStatus", "RecallTimes", "Recalled", "Recaller"]
