"""Long replays: cost per 1,000 requests of every preset, alone and in a loop (target < 1 s).

For each preset of ``opctx.lab.presets.PRESETS`` (structural summaries: no LLM):

1. the corpus's ten longest sessions (most requests; ``OPCTX_CORPUS`` or ../shared/corpus,
   imported into a temporary database, or ``--db`` an opctx database already holding
   them), each replayed ``--runs`` times: median CPU seconds per 1,000 requests, per
   session and over the ten;
2. the ten replayed in a loop, twice: a loop costing more than the sum of its single
   runs would mean state growing across replays (caches, module-level state);
3. a synthetic session (``opctx.lab.synthetic_history.make_history``) cut to 1,000 ..
   8,000 messages: the time per 1,000 requests stays flat when replay cost is linear in
   the history.

CPU time (``process_time``) is printed beside the wall clock: on a shared machine the
wall clock of a single-threaded replay is inflated by other processes.

Run: ``.venv/bin/python benchmarks/long_replays.py [--runs 3] [--presets default,codex]``
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.lab.history import load_history  # noqa: E402
from opctx.lab.presets import PRESETS  # noqa: E402
from opctx.lab.replay import replay  # noqa: E402
from opctx.lab.synthetic_history import make_history  # noqa: E402

CORPUS = Path(os.environ.get("OPCTX_CORPUS", ROOT.parent / "shared" / "corpus"))


def cpu_of(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def longest(db: str, k: int) -> list:
    ids = [r[0] for r in sqlite3.connect(db).execute("SELECT id FROM sessions")]
    histories = [load_history(db, sid) for sid in ids]
    return sorted(histories, key=lambda h: -h.n_requests)[:k]


def corpus_part(histories: list, presets: list[str], runs: int) -> None:
    requests = sum(h.n_requests for h in histories)
    print(f"1-2. ten longest corpus sessions: {[h.n_requests for h in histories]} requests ({requests} in all)")
    for preset in presets:
        per_session, singles = [], 0.0
        for h in histories:
            cpus = [cpu_of(lambda h=h, p=preset: replay(h, p, keep_contexts=False))[0] for _ in range(runs)]
            singles += statistics.median(cpus)
            per_session.append(1000 * statistics.median(cpus) / max(1, h.n_requests))
        loops = [cpu_of(lambda p=preset: [replay(h, p, keep_contexts=False) for h in histories]) for _ in range(2)]
        loop_cpu = statistics.median(c for c, _ in loops)
        print(f"  {preset:<20} per 1,000 requests: median {statistics.median(per_session):5.2f} s cpu, "
              f"max {max(per_session):5.2f} s, all ten {1000 * singles / requests:5.2f} s;  "
              f"loop {loop_cpu:6.2f} s cpu ({min(w for _, w in loops):6.2f} s wall) "
              f"= x{loop_cpu / singles:4.2f} the single runs")


def synthetic_part(presets: list[str], sizes: list[int]) -> None:
    full = make_history(max(sizes), seed=3)
    print(f"3. synthetic session cut to {sizes} messages: cpu s per 1,000 requests")
    for preset in presets:
        cells = []
        for n in sizes:
            history = full[:n]
            requests = sum(1 for m in history if m.get("role") == "assistant")
            cpu, _ = cpu_of(lambda history=history, p=preset: replay(history, p, keep_contexts=False))
            cells.append(f"{n}: {1000 * cpu / requests:5.2f}")
        print(f"  {preset:<20} " + "  ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--sizes", default="1000,2000,4000,8000")
    parser.add_argument("--db", default=None, help="an opctx database holding the corpus (skips the import)")
    args = parser.parse_args()
    logging.getLogger("opctx").setLevel(logging.ERROR)
    presets = [p for p in args.presets.split(",") if p]
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        if db is None and (CORPUS / "manifest.json").is_file():
            from opctx.importers import import_paths

            db = str(Path(tmp) / "corpus.db")
            import_paths([CORPUS], db, on_error="skip")
        if db is not None:
            histories = longest(db, 10)
            replay(histories[0], "none", keep_contexts=False)  # tokenizer load, imports
            corpus_part(histories, presets, args.runs)
        else:
            print(f"no corpus at {CORPUS}: part 1-2 skipped")
        synthetic_part(presets, [int(s) for s in args.sizes.split(",")])
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
