"""A sweep at corpus scale: the six presets over generated sessions on a dask cluster.

What it measures (default: 1,000 sessions; ``--sessions 10000`` for the corpus-sized run):

1. **the scaled run** - ``sweep`` of the six presets (``default, claude-code, hermes,
   codex, observation-masking, none``) over ``--sessions`` sessions of the scenario
   generator (``opctx.lab.scenarios``, 20 turns each, ~180 messages), on a dask
   ``LocalCluster`` of two single-threaded worker processes that is already running
   (its start-up is timed apart: a researcher's cluster is up before the sweep), which
   the sweep reaches by its address (``sweep(..., scheduler=address)``, as with
   ``$OPCTX_DASK_SCHEDULER``), rows streamed into a Parquet file as tasks finish
   (``sweep(..., out=...)``). Each worker gets a ``ScenarioSpec(seed, 20)`` and generates
   its session itself, so nothing large travels and no database is needed.
   Reported: sessions per second (wall clock), replays per second, the peak
   resident memory of each worker process (``resource.getrusage`` ``ru_maxrss``
   run on the workers through ``client.run``; target: under 1 GB each), the rows
   in the file (must equal sessions x 6).
2. **the baseline, side by side** - the same sweep serially in this process over
   ``--baseline`` sessions (default 100, seeds taken from the same range): the
   per-session cost of one core, and the speed-up of the cluster over it
   (ideal: 2.0 with two workers on two free cores; a shared machine shows less).
3. **the fixed price of a cluster** (``--overhead``) - what ``min_parallel_s`` in
   ``opctx.lab._sweep_engine`` rests on: a tiny sweep (one 2-turn session, one
   configuration per task) through fresh workers (connect, import the replay code on
   them, ship the tasks), again through the same, now warm, workers, and serially;
   the medians of ``--runs`` fresh clusters.

Timings are wall clock (what a user waits) and CPU seconds (of this process for
the baseline, of the worker processes for the cluster run, through
``client.run``): other processes on a shared machine inflate the wall clock, not
the CPU time, so the CPU cost per session and the rate it allows on free cores are
printed too, with the load average. Run:

    .venv/bin/python benchmarks/sweep_scale.py                    # 1,000 sessions
    .venv/bin/python benchmarks/sweep_scale.py --sessions 10000   # the corpus-sized run
    .venv/bin/python benchmarks/sweep_scale.py --overhead         # the price of a cluster
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.lab.presets import preset_names  # noqa: E402
from opctx.lab.scenarios import ScenarioSpec  # noqa: E402
from opctx.lab.sweep import sweep  # noqa: E402

N_TURNS = 20
GB = 1024**3


def _peak_rss_bytes() -> int:
    """This process's peak resident set (Linux reports ``ru_maxrss`` in KiB)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _cpu_seconds() -> float:
    return time.process_time()


def _local_cluster(workers: int) -> Any:
    import distributed

    logging.getLogger("distributed").setLevel(logging.ERROR)
    return distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                    dashboard_address=None, memory_limit=0, silence_logs=logging.ERROR)


def run_cluster(specs: list[ScenarioSpec], out: Path, workers: int) -> dict:
    import distributed

    grid = {"preset": preset_names()}
    started = time.perf_counter()
    with _local_cluster(workers) as cluster, distributed.Client(cluster.scheduler_address,
                                                                set_as_default=False) as client:
        start_s = time.perf_counter() - started
        cpu_before = client.run(_cpu_seconds)
        started = time.perf_counter()
        sweep(specs, grid, scheduler=cluster.scheduler_address, progress=sys.stderr.isatty(), out=out)
        seconds = time.perf_counter() - started
        peaks = client.run(_peak_rss_bytes)
        cpu = sum(after - cpu_before[w] for w, after in client.run(_cpu_seconds).items())
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(out).metadata.num_rows
    return {"seconds": seconds, "cpu": cpu, "peaks": peaks, "rows": rows, "configs": len(grid["preset"]),
            "start_s": start_s}


def _timed(**kwargs: Any) -> float:
    started = time.perf_counter()
    sweep(**kwargs)
    return time.perf_counter() - started


def run_overhead(workers: int, runs: int, tasks: int) -> dict:
    """The fixed price of handing a tiny sweep to fresh and to warm workers, against serial."""
    import statistics

    grid = [{"preset": "none", "label": f"none-{i}"} for i in range(tasks)]
    tiny = {"sessions": [ScenarioSpec(1, 2)], "grid": grid, "progress": False, "configs_per_task": 1}
    fresh, warm, serial = [], [], []
    for _ in range(runs):
        serial.append(_timed(executor="serial", **tiny))
        with _local_cluster(workers) as cluster:
            fresh.append(_timed(scheduler=cluster.scheduler_address, min_parallel_s=0, **tiny))
            warm.append(_timed(scheduler=cluster.scheduler_address, min_parallel_s=0, **tiny))
    return {"fresh": statistics.median(fresh), "warm": statistics.median(warm),
            "serial": statistics.median(serial), "runs": runs, "tasks": tasks}


def run_serial(specs: list[ScenarioSpec]) -> dict:
    grid = {"preset": preset_names()}
    cpu, started = time.process_time(), time.perf_counter()
    df = sweep(specs, grid, progress=False)
    return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu,
            "rows": len(df), "errors": int(df["error"].notna().sum())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1_000, help="sessions of the cluster run")
    parser.add_argument("--baseline", type=int, default=100, help="sessions of the serial baseline")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="the Parquet file (default: a temporary folder)")
    parser.add_argument("--overhead", action="store_true", help="measure the fixed price of a cluster only")
    parser.add_argument("--runs", type=int, default=3, help="fresh clusters of --overhead")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the sweep's per-configuration notes are not news here

    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if args.overhead:
        return report_overhead(args)
    # the baseline's seeds are spread over the same range as the cluster's sessions
    step = max(1, args.sessions // max(1, args.baseline))
    base_specs = [ScenarioSpec(seed, N_TURNS) for seed in range(1, args.sessions + 1, step)][: args.baseline]
    base = run_serial(base_specs)
    per_session = base["seconds"] / len(base_specs)
    print(f"baseline: serial, this process, {len(base_specs)} sessions x 6 presets: "
          f"{base['seconds']:.1f} s wall, {base['cpu']:.1f} s CPU, {per_session * 1000:.0f} ms/session, "
          f"{1 / per_session:.2f} sessions/s, {base['errors']} failed replays")

    specs = [ScenarioSpec(seed, N_TURNS) for seed in range(1, args.sessions + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "sweep_rows.parquet"
        result = run_cluster(specs, out, args.workers)
        report_cluster(args, specs, base, base_specs, result, out)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    worst = max(result["peaks"].values())
    ok = result["rows"] == len(specs) * result["configs"] and worst < GB
    return 0 if ok else 1


def report_cluster(args: argparse.Namespace, specs: list, base: dict, base_specs: list, result: dict,
                   out: Path) -> None:
    per_session = base["seconds"] / len(base_specs)
    rate = len(specs) / result["seconds"]
    print(f"cluster: {args.workers} dask workers (processes, 1 thread each; started in {result['start_s']:.1f} s, "
          f"not counted), reached by address, {len(specs)} sessions x {result['configs']} presets, rows "
          f"streamed to Parquet: {result['seconds']:.1f} s wall, {rate:.2f} sessions/s, "
          f"{rate * result['configs']:.1f} replays/s")
    print(f"  CPU of the workers: {result['cpu']:.1f} s, {result['cpu'] / len(specs) * 1000:.0f} ms/session "
          f"(baseline {base['cpu'] / len(base_specs) * 1000:.0f} ms/session in one process); "
          f"on {args.workers} free cores: {args.workers * len(specs) / result['cpu']:.2f} sessions/s")
    print(f"rows in {out.name}: {result['rows']} (expected {len(specs) * result['configs']})")
    for address, peak in sorted(result["peaks"].items()):
        print(f"  worker {address}: peak RSS {peak / 2**20:.0f} MiB")
    worst = max(result["peaks"].values())
    print(f"peak worker memory {worst / 2**20:.0f} MiB: {'under' if worst < GB else 'OVER'} the 1 GB target")
    print(f"sessions/s: cluster {rate:.2f} vs serial {1 / per_session:.2f}: {rate * per_session:.2f}x "
          f"(ideal {args.workers}.00x on {args.workers} free cores)")
    if args.sessions < 10_000:
        print(f"projected for 10,000 sessions at this rate: {10_000 / rate / 60:.0f} min")


def report_overhead(args: argparse.Namespace) -> int:
    from opctx.lab._sweep_engine import MIN_PARALLEL_SECONDS

    result = run_overhead(args.workers, args.runs, tasks=2 * args.workers)
    fresh = result["fresh"] - result["serial"]
    warm = result["warm"] - result["serial"]
    print(f"tiny sweep ({result['tasks']} tasks of one 2-turn session, medians of {result['runs']} fresh "
          f"{args.workers}-worker clusters): serial {result['serial']:.3f} s, fresh workers "
          f"{result['fresh']:.3f} s, warm workers {result['warm']:.3f} s")
    print(f"fixed price of the cluster: {fresh:.2f} s fresh, {warm:.3f} s warm; with {args.workers} workers the "
          f"cluster wins once the serial work exceeds {fresh * args.workers / (args.workers - 1):.1f} s "
          f"(fresh) / {warm * args.workers / (args.workers - 1):.2f} s (warm) on free cores")
    print(f"MIN_PARALLEL_SECONDS = {MIN_PARALLEL_SECONDS}")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
