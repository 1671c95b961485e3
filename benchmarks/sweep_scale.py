"""A sweep at corpus scale: the six presets over 10,000 generated sessions on dask.

What it measures (a corpus of 10,000 sessions):

1. **the scaled run** - ``sweep`` of the six presets (``default, claude-code, hermes,
   codex, observation-masking, none``) over ``--sessions`` (default 10,000)
   sessions of the scenario generator (``opctx.lab.scenarios``, 20 turns each,
   ~180 messages), on a dask ``LocalCluster`` of two single-threaded worker
   processes, rows streamed into a Parquet file as tasks finish (``sweep(...,
   out=...)``). Each worker gets a ``ScenarioSpec(seed, 20)`` and generates its
   session itself, so nothing large travels and no database is needed.
   Reported: sessions per second (wall clock), replays per second, the peak
   resident memory of each worker process (``resource.getrusage`` ``ru_maxrss``
   run on the workers through ``client.run``; target: under 1 GB each), the rows
   in the file (must equal sessions x 6).
2. **the baseline, side by side** - the same sweep serially in this process over
   ``--baseline`` sessions (default 100, seeds taken from the same range): the
   per-session cost of one core, and the speed-up of the cluster over it
   (ideal: 2.0 with two workers on two free cores; a shared machine shows less).

Timings are wall clock (what a user waits) and CPU seconds (of this process for
the baseline, of the worker processes for the cluster run, through
``client.run``): other processes on a shared machine inflate the wall clock, not
the CPU time, so the CPU cost per session and the rate it allows on free cores are
printed too, with the load average. Run:

    .venv/bin/python benchmarks/sweep_scale.py                    # 10,000 sessions
    .venv/bin/python benchmarks/sweep_scale.py --sessions 400     # a quick run
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

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


def run_cluster(specs: list[ScenarioSpec], out: Path, workers: int) -> dict:
    import distributed

    logging.getLogger("distributed").setLevel(logging.ERROR)
    grid = {"preset": preset_names()}
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None, memory_limit=0,
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as client:
        cpu_before = client.run(_cpu_seconds)
        started = time.perf_counter()
        sweep(specs, grid, executor=client.get_executor(), progress=sys.stderr.isatty(), out=out)
        seconds = time.perf_counter() - started
        peaks = client.run(_peak_rss_bytes)
        cpu = sum(after - cpu_before[w] for w, after in client.run(_cpu_seconds).items())
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(out).metadata.num_rows
    return {"seconds": seconds, "cpu": cpu, "peaks": peaks, "rows": rows, "configs": len(grid["preset"])}


def run_serial(specs: list[ScenarioSpec]) -> dict:
    grid = {"preset": preset_names()}
    cpu, started = time.process_time(), time.perf_counter()
    df = sweep(specs, grid, progress=False)
    return {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu,
            "rows": len(df), "errors": int(df["error"].notna().sum())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions of the cluster run")
    parser.add_argument("--baseline", type=int, default=100, help="sessions of the serial baseline")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="the Parquet file (default: a temporary folder)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the sweep's per-configuration notes are not news here

    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
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
        rate = len(specs) / result["seconds"]
        print(f"cluster: {args.workers} dask workers (processes, 1 thread each), {len(specs)} sessions x "
              f"{result['configs']} presets, rows streamed to Parquet: {result['seconds']:.1f} s wall, "
              f"{rate:.2f} sessions/s, {rate * result['configs']:.1f} replays/s")
        print(f"  CPU of the workers: {result['cpu']:.1f} s, {result['cpu'] / len(specs) * 1000:.0f} ms/session "
              f"(baseline {base['cpu'] / len(base_specs) * 1000:.0f} ms/session in one process); "
              f"on {args.workers} free cores: {args.workers * len(specs) / result['cpu']:.2f} sessions/s")
        print(f"rows in {out.name}: {result['rows']} (expected {len(specs) * result['configs']})")
        for address, peak in sorted(result["peaks"].items()):
            print(f"  worker {address}: peak RSS {peak / 2**20:.0f} MiB")
        worst = max(result["peaks"].values())
        print(f"peak worker memory {worst / 2**20:.0f} MiB: {'under' if worst < GB else 'OVER'} the 1 GB target")
        print(f"speed-up of the cluster over the serial baseline: {rate * per_session:.2f}x "
              f"(ideal {args.workers}.00x on {args.workers} free cores)")
        if args.sessions < 10_000:
            print(f"projected for 10,000 sessions at this rate: {10_000 / rate / 60:.0f} min")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    ok = result["rows"] == len(specs) * result["configs"] and worst < GB
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
