"""Recall quality on a labelled conversational set: precision and recall per query type, per embedder.

    python bench/recall_quality.py                                   # the set in tests/data, both local models
    python bench/recall_quality.py --set tests/data/recall_heldout.json --model e5-small-v2 -v
    python bench/recall_quality.py --everyday --model e5-small-v2   # the everyday set (testkit/everyday.py)

The set (JSON, see tests/data/recall_set.json) has a small store of memories of
several users, persona-wide and channel memories, and labelled queries: what
each should recall (``recall``), what it may recall either way (``maybe``);
every other memory within the query's reach should not be recalled. Follow-up
queries carry the user's earlier messages (``history``), which go through
the user-history recall and seeding as a turn does.

Every query is asked as automatic retrieval asks it (``MemoryService.search``
with ``limit = [memory] max_per_reply`` and the ``min_score`` threshold, defaults 3 and
0.5) in a fresh SQLite store. Per query type it prints: precision (recalled
memories that should be, among recalled memories that are labelled either
way), recall (recalled memories that should be, over ``min(len(recall),
limit)``: the most that could be recalled), and how many queries that should
recall nothing recalled something.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.recall_quality import main  # noqa: E402

if __name__ == "__main__":
    main(__doc__ or "")
