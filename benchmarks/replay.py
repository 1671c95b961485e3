"""Replay and sweep benchmarks (opctx.lab).

What it measures, each printed as median (and p95) of several runs, with the
ratio to a baseline run side by side:

1. replay of the longest corpus session (most messages) with the ``default``
   preset, against the ``none`` preset (the cost of the strategy itself);
2. replay of a 1,300-message synthetic session (target: < 2 s) with ``default``,
   against ``none``, and the same session cut to 325 / 650 / 1,300 messages:
   an incremental replay costs about linearly in the length (time per message
   about constant), not quadratically;
3. a sweep of 50 configurations over every corpus session, serially and with a
   2-worker dask ``LocalCluster`` (processes; target: < 60 s), ratio
   parallel/serial;
4. frames over a database of 10,000 small sessions (2,000 with ``--quick``):
   ``sessions_df``, cheap ``nodes_df`` columns, text/token columns for 100
   sessions, ``turns_df`` for 100 sessions, against the naive baseline of
   loading and parsing every node's JSON.

Wall-clock and CPU (``process_time``) medians are both printed, with the load
average: on a shared machine the wall clock of a single-threaded replay is
inflated by other processes, its CPU time much less.

The corpus is imported into a temporary database first (``opctx.importers``);
without a corpus (``OPCTX_CORPUS`` or ../shared/corpus) parts 1 and 3 run on
synthetic sessions instead and say so.

Run: ``.venv/bin/python benchmarks/replay.py [--runs N] [--quick]``
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.lab.history import SessionSpec, load_history  # noqa: E402
from opctx.lab.replay import replay  # noqa: E402
from opctx.lab.scenarios import build_scenario_sessions, generate_session  # noqa: E402
from opctx.lab.sweep import sweep  # noqa: E402

CORPUS = Path(os.environ.get("OPCTX_CORPUS", ROOT.parent / "shared" / "corpus"))


class Times(list):
    """Wall-clock seconds of each run, with the CPU seconds alongside (``.cpu``)."""

    cpu: list[float]


def timed(fn, runs: int) -> Times:
    out = Times()
    out.cpu = []
    for _ in range(runs):
        started, cpu = time.perf_counter(), time.process_time()
        fn()
        out.append(time.perf_counter() - started)
        out.cpu.append(time.process_time() - cpu)
    return out


def describe(label: str, times: list[float], baseline: list[float] | None = None) -> str:
    med = statistics.median(times)
    p95 = sorted(times)[max(0, int(round(0.95 * len(times))) - 1)]
    text = f"{label:<58} median {med:7.3f} s  p95 {p95:7.3f} s"
    cpu = getattr(times, "cpu", None)
    if cpu:
        text += f"  cpu {statistics.median(cpu):7.3f} s"
    if baseline:
        text += f"  x{med / statistics.median(baseline):5.2f} vs baseline"
    return text


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


def import_corpus(db_path: Path) -> list[SessionSpec]:
    from opctx.importers import import_paths

    report = import_paths([CORPUS], db_path, on_error="skip")
    return [SessionSpec(str(db_path), w["session_id"]) for w in report.written]


def _quiet() -> None:
    logging.getLogger("opctx").setLevel(logging.ERROR)


def fifty_configs() -> list[dict]:
    configs: list[dict] = []
    windows = [32_000, 64_000, 128_000, 200_000]
    for preset in ("none", "default", "claude-code", "hermes", "codex", "observation-masking"):
        for w in windows:
            configs.append({"preset": preset, "context_window": w})
    for trigger in (0.5, 0.6, 0.7, 0.9):
        for w in windows:
            configs.append({"preset": "default", "context_window": w, "trigger_pct": trigger})
    for m in (3, 5, 20, 40):
        for w in (32_000, 128_000):
            configs.append({"preset": "observation-masking", "context_window": w, "keep_last": m})
    configs += [{"preset": "default", "context_window": 64_000, "keep_ratio": r} for r in (0.05, 0.2)]
    assert len(configs) == 50, len(configs)
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs per replay measurement")
    parser.add_argument("--quick", action="store_true", help="fewer runs, sweep over 10 configurations")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    # engine warnings (auto-compaction disabled, unknown models) are expected in a sweep
    _quiet()

    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "bench.db"
        have_corpus = (CORPUS / "manifest.json").is_file()
        if have_corpus:
            started = time.perf_counter()
            specs = import_corpus(db_path)
            print(f"imported {len(specs)} corpus sessions in {time.perf_counter() - started:.1f} s")
        else:
            specs = [SessionSpec(str(db_path), s) for s in build_scenario_sessions(db_path, n=8, n_turns=30)]
            print(f"no corpus at {CORPUS}: using {len(specs)} synthetic sessions")
        histories = {s: load_history(s.db_path, s.session_id) for s in specs}
        longest = max(specs, key=lambda s: len(histories[s].messages))
        hist = histories[longest]
        print(f"\n1. longest session {longest.session_id}: {len(hist.messages)} messages, "
              f"{hist.n_requests} requests, model {hist.model or '?'}")
        replay(hist, "none")  # warm caches (tokenizer load, imports)
        base = timed(lambda: replay(hist, "none", keep_contexts=False), runs)
        dflt = timed(lambda: replay(hist, "default", keep_contexts=False), runs)
        print(describe("replay none (baseline)", base))
        print(describe("replay default", dflt, base))

        synthetic = generate_session(7, n_turns=140).messages[:1300]
        print(f"\n2. synthetic session: {len(synthetic)} messages (target < 2 s)")
        base = timed(lambda: replay(synthetic, "none", keep_contexts=False), runs)
        dflt = timed(lambda: replay(synthetic, "default", keep_contexts=False), runs)
        mask = timed(lambda: replay(synthetic, "observation-masking", keep_contexts=False), runs)
        print(describe("replay none (baseline)", base))
        print(describe("replay default", dflt, base))
        print(describe("replay observation-masking", mask, base))
        print("   incremental: cost per message at three lengths (default preset)")
        for n in (325, 650, 1300):
            t = timed(lambda n=n: replay(synthetic[:n], "default", keep_contexts=False), runs)
            print(describe(f"replay default, {n} messages", t)
                  + f"  {1000 * statistics.median(t.cpu) / n:6.2f} ms cpu/message")
        print(f"   ({load()})")

        configs = fifty_configs()[:10] if args.quick else fifty_configs()
        print(f"\n3. sweep: {len(configs)} configurations x {len(specs)} sessions (target < 60 s)")
        print(f"   ({load()})")
        started, cpu = time.perf_counter(), time.process_time()
        serial = sweep(specs, configs, progress=False)
        t_serial = time.perf_counter() - started
        print(f"{'sweep serial (baseline)':<58} {t_serial:7.1f} s   cpu {time.process_time() - cpu:7.1f} s"
              f"   errors: {serial['error'].notna().sum()}")
        for error, n in serial["error"].dropna().value_counts().head(3).items():
            print(f"   {n} x {error}")
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            with Client(cluster) as client:
                client.run(_quiet)
                started = time.perf_counter()
                parallel = sweep(specs, configs, executor=client.get_executor(), progress=False)
                t_par = time.perf_counter() - started
        print(f"   ({load()})")
        same = serial.equals(parallel)
        print(f"{'sweep dask LocalCluster, 2 worker processes':<58} {t_par:7.1f} s   x{t_par / t_serial:5.2f} vs serial; identical frame: {same}")
        if not same:
            for col in serial.columns:
                if not serial[col].equals(parallel[col]):
                    print(f"   differs: {col} ({serial[col].dtype} vs {parallel[col].dtype})")

        frames_part(Path(tmp), 2_000 if args.quick else 10_000)


def frames_part(tmp: Path, n_sessions: int) -> None:
    import json
    import sqlite3

    from opctx.dag.session_db import DagSessionDB
    from opctx.lab import frames

    path = tmp / "many.db"
    template = generate_session(1, n_turns=2).messages[:6]
    db = DagSessionDB(str(path))
    started = time.perf_counter()
    for i in range(n_sessions):
        sid = db.create_session(session_id=f"s{i:05d}", model="claude-sonnet-4-5", source="scenario")
        ids = [f"{m['id']}_{i}" for m in template]
        db.append_messages(sid, [dict(m, id=ids[j], parent_id=ids[j - 1] if j else None) for j, m in enumerate(template)])
    db.close()
    print(f"\n4. frames over {n_sessions} sessions ({6 * n_sessions} nodes), built in {time.perf_counter() - started:.1f} s")

    def naive() -> None:
        conn = sqlite3.connect(path)
        rows = conn.execute("SELECT session_id, id, type, created_at, data_json FROM nodes").fetchall()
        [json.loads(r[4]) for r in rows]
        conn.close()

    base = timed(naive, 3)
    print(describe("baseline: every node row + json.loads(data_json)", base))
    print(describe("sessions_df()", timed(lambda: frames.sessions_df(path), 3), base))
    print(describe("nodes_df() default (SQL columns only)", timed(lambda: frames.nodes_df(path), 3), base))
    print(describe("nodes_df(columns=[id, kind, created_at])",
                   timed(lambda: frames.nodes_df(path, columns=["id", "kind", "created_at"]), 3), base))
    some = [f"s{i:05d}" for i in range(0, n_sessions, max(1, n_sessions // 100))][:100]
    print(describe("nodes_df(text, tokens) for 100 sessions",
                   timed(lambda: frames.nodes_df(path, columns=["id", "text", "tokens"], session_ids=some), 3), base))
    print(describe("turns_df for 100 sessions", timed(lambda: frames.turns_df(path, session_ids=some), 3), base))
    print(describe("edges_df()", timed(lambda: frames.edges_df(path), 3), base))


if __name__ == "__main__":
    main()
