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

Each preset's line gives the median over the ten sessions of the per-session median
(``--runs``) CPU seconds per 1,000 requests, its ratio to the target (``TARGET_S``: the
replay cost must stay under one second per 1,000 requests), and the worst session (the
session's id and request count). The first run of a session under a preset is printed
apart ("first runs"): it may pay for counting texts no earlier replay in the process
counted (the estimator's cache is shared), which the later runs find counted. ``--json
FILE`` writes the same figures as JSON.

Run: ``.venv/bin/python benchmarks/long_replays.py [--runs 3] [--presets default,codex]
[--sizes ""] [--json out.json]`` (an empty ``--sizes`` skips part 3)
"""

from __future__ import annotations

import argparse
import json
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
TARGET_S = 1.0  # CPU seconds per 1,000 requests a replay must stay under


def cpu_of(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def longest(db: str, k: int) -> list:
    ids = [r[0] for r in sqlite3.connect(db).execute("SELECT id FROM sessions")]
    histories = [load_history(db, sid) for sid in ids]
    return sorted(histories, key=lambda h: -h.n_requests)[:k]


def corpus_part(histories: list, presets: list[str], runs: int) -> dict[str, dict]:
    """Per preset: the figures of part 1-2 (also returned, for ``--json``)."""
    requests = sum(h.n_requests for h in histories)
    print(f"1-2. ten longest corpus sessions: {[h.n_requests for h in histories]} requests ({requests} in all)")
    print(f"  {'preset':<31} cpu s per 1,000 requests (target {TARGET_S:g} s): median of the ten, "
          "x target, worst session; all ten together; the ten in a loop")
    out = {}
    for preset in presets:
        per_session, firsts, singles = [], [], 0.0
        for h in histories:
            cpus = [cpu_of(lambda h=h, p=preset: replay(h, p, keep_contexts=False))[0] for _ in range(runs)]
            singles += statistics.median(cpus)
            per_session.append(1000 * statistics.median(cpus) / max(1, h.n_requests))
            firsts.append(1000 * cpus[0] / max(1, h.n_requests))
        loops = [cpu_of(lambda p=preset: [replay(h, p, keep_contexts=False) for h in histories]) for _ in range(2)]
        loop_cpu = statistics.median(c for c, _ in loops)
        median = statistics.median(per_session)
        worst = max(range(len(histories)), key=per_session.__getitem__)
        out[preset] = {
            "s_per_1000_median": median,
            "x_target": median / TARGET_S,
            "worst_s_per_1000": per_session[worst],
            "worst_session": str(histories[worst].session_id),
            "worst_requests": histories[worst].n_requests,
            "first_run_s_per_1000_median": statistics.median(firsts),
            "first_run_worst_s_per_1000": max(firsts),
            "all_ten_s_per_1000": 1000 * singles / requests,
            "per_session_s_per_1000": per_session,
            "loop_cpu_s": loop_cpu,
            "loop_wall_s": min(w for _, w in loops),
            "loop_over_singles": loop_cpu / singles,
        }
        print(f"  {preset:<31} {median:6.2f} s  x{median / TARGET_S:5.2f}  worst {per_session[worst]:7.2f} s "
              f"({str(histories[worst].session_id)[:8]}, {histories[worst].n_requests} req);  "
              f"first runs {statistics.median(firsts):6.2f} s (worst {max(firsts):6.2f} s);  "
              f"all ten {1000 * singles / requests:6.2f} s;  "
              f"loop {loop_cpu:6.2f} s cpu ({min(w for _, w in loops):6.2f} s wall) "
              f"= x{loop_cpu / singles:4.2f} the single runs")
    return out


def synthetic_part(presets: list[str], sizes: list[int]) -> dict[str, dict[int, float]]:
    """Per preset: cpu s per 1,000 requests at each size (also returned, for ``--json``)."""
    full = make_history(max(sizes), seed=3)
    print(f"3. synthetic session cut to {sizes} messages: cpu s per 1,000 requests")
    out = {}
    for preset in presets:
        cells, out[preset] = [], {}
        for n in sizes:
            history = full[:n]
            requests = sum(1 for m in history if m.get("role") == "assistant")
            cpu, _ = cpu_of(lambda history=history, p=preset: replay(history, p, keep_contexts=False))
            out[preset][n] = 1000 * cpu / requests
            cells.append(f"{n}: {1000 * cpu / requests:5.2f}")
        print(f"  {preset:<31} " + "  ".join(cells))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--sizes", default="1000,2000,4000,8000")
    parser.add_argument("--db", default=None, help="an opctx database holding the corpus (skips the import)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    logging.getLogger("opctx").setLevel(logging.ERROR)
    presets = [p for p in args.presets.split(",") if p]
    load = os.getloadavg()
    print(f"load average {' '.join(f'{x:.1f}' for x in load)} on {os.cpu_count()} cores")
    doc: dict = {"target_s_per_1000": TARGET_S, "runs": args.runs, "load_before": load}
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        if db is None and (CORPUS / "manifest.json").is_file():
            from opctx.importers import import_paths

            db = str(Path(tmp) / "corpus.db")
            import_paths([CORPUS], db, on_error="skip")
        if db is not None:
            histories = longest(db, 10)
            replay(histories[0], "none", keep_contexts=False)  # tokenizer load, imports
            doc["corpus"] = corpus_part(histories, presets, args.runs)
        else:
            print(f"no corpus at {CORPUS}: part 1-2 skipped")
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        if sizes:
            doc["synthetic"] = synthetic_part(presets, sizes)
    doc["load_after"] = os.getloadavg()
    print(f"load average {' '.join(f'{x:.1f}' for x in doc['load_after'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
