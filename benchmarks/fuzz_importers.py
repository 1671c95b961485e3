"""Benchmark: the seeded mutation fuzzer over data/samples, and type confusion of every
declared field.

Runs ``--cases`` cases (default 2,200, what tests/importers/test_fuzz.py runs) ``--repeat``
times: each case is a damaged copy of a sample, parsed strictly and leniently
(``opctx.importers.fuzz.check``). Side by side, the baseline: the same number of parses
of the intact samples. Prints the case count, the median time (wall and CPU), cases per
second, the ratio to the baseline, the outcomes per mutation, and any contract breach
(there should be none: the exit code is 1 if there is one).

Then the type-confusion fuzzer once (``field_cases`` / ``check_field``): every field of
every importer's table (``opctx.importers.fuzz.tables()``), at ``--per-field`` places of
each sample (plus an opctx JSONL export), given every JSON type it does not accept; each
case parsed both ways and what is parsed stored in an in-memory database. Prints cases,
breaches and seconds per table, and the total.

Usage: ``.venv/bin/python benchmarks/fuzz_importers.py [--cases 2200] [--repeat 3] [--seed N] [--per-field 3]``
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path

from opctx.importers import parse_path
from opctx.importers.fuzz import FuzzFailure, cases, check, sample_files

ROOT = Path(__file__).resolve().parents[1]
SUITE_SEED = 20260115  # the seed of tests/importers/test_fuzz.py


def run_cases(samples: list[Path], count: int, seed: int, folder: Path) -> tuple[collections.Counter, list[str]]:
    outcomes: collections.Counter = collections.Counter()
    failures: list[str] = []
    for case in cases(samples, count, seed=seed):
        try:
            outcome = check(case, folder)
            outcomes[(case.mutation, outcome.status)] += 1
        except FuzzFailure as exc:
            failures.append(str(exc))
        (folder / f"{case.index:05d}-{case.mutation}-{case.name}").unlink(missing_ok=True)
    return outcomes, failures


def baseline(samples: list[Path], count: int) -> int:
    for i in range(count):
        for mode in ("stop", "skip"):
            parse_path(samples[i % len(samples)], on_error=mode)
    return count


def timed(fn, repeat: int):
    wall, cpu, result = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        result = fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu), result


def run_field_cases(samples: list[Path], per_field: int, seed: int, folder: Path) -> tuple[dict, list[str], float]:
    """Type confusion: ``{table: [cases, breaches, seconds]}``, the breaches, the total seconds."""
    from opctx.dag.store import connect
    from opctx.importers.fuzz import check_field, field_cases

    by_table: dict[str, list] = collections.defaultdict(lambda: [0, 0, 0.0])
    failures: list[str] = []
    conn = connect(":memory:")
    started = time.perf_counter()
    for case in field_cases(samples, per_field=per_field, seed=seed):
        t = time.perf_counter()
        row = by_table[repr(case.table)]
        row[0] += 1
        try:
            check_field(case, folder, conn)
        except FuzzFailure as exc:
            failures.append(str(exc))
            row[1] += 1
        row[2] += time.perf_counter() - t
        (folder / f"{case.index:05d}-field-{case.name}").unlink(missing_ok=True)
    conn.close()
    return dict(by_table), failures, time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2_200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=SUITE_SEED)
    ap.add_argument("--per-field", type=int, default=3, help="places per declared field and sample")
    args = ap.parse_args()
    samples = sample_files(ROOT / "data" / "samples")
    with tempfile.TemporaryDirectory(prefix="opctx-fuzz-") as d:
        wall, cpu, (outcomes, failures) = timed(
            lambda: run_cases(samples, args.cases, args.seed, Path(d)), args.repeat)
    bwall, bcpu, _ = timed(lambda: baseline(samples, args.cases), args.repeat)
    print(f"{args.cases} cases over {len(samples)} samples (seed {args.seed}), median of {args.repeat}")
    print(f"{'run':<26} {'wall s':>8} {'cpu s':>8} {'cases/s':>9}")
    print(f"{'fuzz cases (2 parses each)':<26} {wall:8.2f} {cpu:8.2f} {args.cases / wall:9.0f}")
    print(f"{'baseline: intact samples':<26} {bwall:8.2f} {bcpu:8.2f} {args.cases / bwall:9.0f}")
    print(f"ratio fuzz/baseline: {wall / bwall:.2f}x wall, {cpu / bcpu:.2f}x cpu")
    by_kind: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for (kind, status), n in sorted(outcomes.items()):
        by_kind[kind][status] = n
    for kind, counts in by_kind.items():
        print(f"  {kind:<15} imported {counts.get('imported', 0):>4}  failed cleanly {counts.get('failed', 0):>4}")
    for f in failures[:10]:
        print("CONTRACT BROKEN:", f)
    print(f"contract breaches: {len(failures)}")
    with tempfile.TemporaryDirectory(prefix="opctx-fuzz-fields-") as d:
        with_export = sample_files(ROOT / "data" / "samples", export_to=d)
        by_table, field_failures, seconds = run_field_cases(with_export, args.per_field, args.seed, Path(d))
    print(f"\ntype confusion, {args.per_field} place(s) per declared field and sample (seed {args.seed})")
    print(f"{'table':<62} {'cases':>6} {'breaches':>8} {'seconds':>8}")
    for name, (n, broken, secs) in sorted(by_table.items()):
        print(f"{name:<62} {n:>6} {broken:>8} {secs:>8.1f}")
    total = sum(n for n, _, _ in by_table.values())
    print(f"{'total':<62} {total:>6} {len(field_failures):>8} {seconds:>8.1f}")
    for f in field_failures[:10]:
        print("CONTRACT BROKEN:", f)
    return 1 if failures or field_failures else 0


if __name__ == "__main__":
    sys.exit(main())
