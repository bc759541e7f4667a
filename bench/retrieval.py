"""A turn's retrieval alone: embedding the query, the memory search and the episodes' search.

    python bench/retrieval.py --queries 300 --history 10000 --memories 10000 --cache DIR

Seeds a store as ``bench/turn_cpu.py`` does (``--history`` messages in each of
``--channels`` channels, counted as indexed already, and ``--memories`` global
memories for ``buddy``), then recalls for one question after
another through the runtime's :class:`~agentd.recall.retrieval.Retriever`, as a
turn does (``[memory] max_per_reply`` memories, twice the persona's episode limit), with
nothing else running in the process: no turn, no background indexing. Prints the
wall time's p25, p50 and p90 in milliseconds, each recall measured by the
retriever itself (the ``retrieval_ms`` a turn records).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from daemon import QUESTIONS, fill, pct, seed_cached, write_home  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=300, help="measured recalls")
    parser.add_argument("--channels", type=int, default=5)
    parser.add_argument("--history", type=int, default=10000, help="earlier messages in each channel")
    parser.add_argument("--memories", type=int, default=10000, help="global memories in reach")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cache", type=Path, help="keep the seeded database here and reuse it in later runs with the same sizes"
    )
    args = parser.parse_args()

    from agentd.access.scopes import Reach
    from agentd.app import App
    from agentd.config import load_config
    from agentd.memory.episodes import Episodes
    from agentd.recall.retrieval import Retriever

    rng = random.Random(args.seed)
    home = Path(tempfile.mkdtemp(prefix="agentd-retrieval-"))
    try:
        config_path = write_home(home)
        channels = [f"dm-bench-{i}" for i in range(args.channels)]
        # The same database bench/daemon.py seeds (and the same name in --cache).
        seed_cached(config_path, channels, args.history, args.memories, rng, args.cache, args.seed)
        app = App(load_config(config_path, environ={}))
        episodes = Episodes(app.store, app.memory, app.config.episodes, app.config.channel_visibility)
        limit = app.config.memory.max_per_reply
        episode_limit = 2 * app.config.episodes.max_per_reply  # as a turn asks
        print(
            f"bench/retrieval.py: {args.queries} recalls, {args.channels} channels, history "
            f"{args.history}/channel, memories {args.memories}; cpus {os.cpu_count()}; "
            f"load {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
        )
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="agentd-retrieval") as pool:
            retriever = Retriever(app.memory, app.config.memory.retrieval_timeout_seconds, pool, episodes)

            def recall(i: int) -> float:
                reach = Reach("buddy", channels[i % len(channels)], f"user{i % 3}")
                found = retriever.recall(
                    fill(rng.choice(QUESTIONS), rng), reach, limit, enabled=True, episode_limit=episode_limit
                )
                if found.status.value != "ok":
                    raise SystemExit(f"retrieval {found.status.value}: {found.reason}")
                return found.elapsed_ms

            for i in range(20):  # warm: the model, the tokenizer, the caches
                recall(i)
            times = sorted(recall(i) for i in range(args.queries))
        print(f"  retrieval, wall ms  p25 {pct(times, 0.25):.2f}  p50 {pct(times, 0.5):.2f}  p90 {pct(times, 0.9):.2f}")
        app.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
