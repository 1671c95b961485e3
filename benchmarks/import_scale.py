"""Benchmark: a flat Claude Code project folder of 10,000 small sessions.

Generates ``--files`` two-turn Claude Code transcripts (about 2 KB each: a question, a
tool call and its result, an answer, a follow-up and its answer) in one flat folder under
/tmp, as ``~/.claude/projects/<cwd>/`` holds them, then measures, ``--repeat`` times:

* ``discover``: ``iter_transcript_files`` on the folder (what the progress bar waits for);
* ``import``: ``import_paths`` into a fresh database, i.e. ``opctx import DIR``;
* ``baseline``: the discovery as it was before this change, run side by side on the
  first ``--baseline-files`` files: for every session file, list and sort its folder
  to find its flat ``agent-*.jsonl`` side files (quadratic in the folder's size).

Prints medians (wall and this process's CPU time: on a shared machine the wall time
stretches with the load, the CPU time much less), files per second and the ratio to the
baseline per file. Targets: found in < 1 s and imported in < 30 s on 2 cores.

Usage: ``.venv/bin/python benchmarks/import_scale.py [--files 10000] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from opctx.importers import import_paths, iter_transcript_files

DISCOVER_TARGET_S = 1.0
IMPORT_TARGET_S = 30.0
_AGENT_FILE = re.compile(r"^agent-[A-Za-z0-9_-]+\.jsonl$")


def session_lines(n: int) -> list[dict]:
    """A two-turn Claude Code session (about 2 KB)."""
    sid = str(uuid.UUID(int=n))
    base = {"sessionId": sid, "cwd": "/home/dev/project", "version": "2.0.76"}
    u = [f"{n:08x}-{i:04x}" for i in range(8)]
    t = [f"2026-01-{1 + n % 28:02d}T10:{i:02d}:00.000Z" for i in range(8)]

    def line(i: int, parent: int | None, kind: str, message: dict, **extra) -> dict:
        return {**base, "type": kind, "uuid": u[i], "parentUuid": None if parent is None else u[parent],
                "timestamp": t[i], "message": message, **extra}

    tool_id = f"toolu_{n:020d}"
    return [
        line(0, None, "user", {"role": "user", "content": f"Session {n}: why does test_parse_{n} fail?"}),
        line(1, 0, "assistant", {"role": "assistant", "id": f"msg_{n}_1", "model": "claude-sonnet-4-5",
                                 "content": [
                                     {"type": "tool_use", "id": tool_id, "name": "Bash",
                                      "input": {"command": f"pytest tests/test_parse.py -k {n} -x"}}]}),
        line(2, 1, "user", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id,
             "content": "FAILED tests/test_parse.py::test_parse - AssertionError: 3 != 4"}]}),
        line(3, 2, "assistant", {"role": "assistant", "id": f"msg_{n}_2", "model": "claude-sonnet-4-5",
                                 "content": [
                                     {"type": "text", "text": "The parser drops the last field; "
                                                              "the loop stops one short."}]}),
        line(4, 3, "user", {"role": "user", "content": "Fix it please."}),
        line(5, 4, "assistant", {"role": "assistant", "id": f"msg_{n}_3", "model": "claude-sonnet-4-5",
                                 "content": [
                                     {"type": "text", "text": "Changed range(n - 1) to range(n); "
                                                              "the test passes now."}],
                                 "usage": {"input_tokens": 1100, "output_tokens": 19}}),
    ]


def generate(folder: Path, files: int) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for n in range(files):
        text = "\n".join(json.dumps(x) for x in session_lines(n)) + "\n"
        path = folder / f"{uuid.UUID(int=n)}.jsonl"
        path.write_text(text, encoding="utf-8")
        total += len(text)
    return total


def baseline_discovery(folder: Path, limit: int) -> int:
    """The pre-change walk: every session file lists and sorts its folder (kept for comparison)."""
    files = sorted(str(f) for f in folder.iterdir() if f.name.endswith(".jsonl"))[:limit]
    found = 0
    for f in files:
        p = Path(f)
        for g in sorted(p.parent.iterdir()):
            if _AGENT_FILE.match(g.name) and g.is_file():
                found += 1
    return len(files)


CPU: dict[str, float] = {}  # median process CPU seconds per stage (a loaded machine stretches wall time)


def median_of(fn, repeat: int, stage: str = "") -> tuple[float, object]:
    times, cpu, result = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    CPU[stage] = statistics.median(cpu)
    return statistics.median(times), result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--baseline-files", type=int, default=2_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="opctx-scale-"))
    try:
        folder = work / "projects" / "-home-dev-project"
        size = generate(folder, args.files)
        print(f"{args.files} two-turn Claude Code sessions, {size / args.files / 1024:.1f} KB each, "
              f"in {folder}  (cpus: {os.cpu_count()})")
        disc, found = median_of(lambda: sum(1 for _ in iter_transcript_files([folder])), args.repeat,
                                "discover")

        def one_import() -> int:
            db = work / "scale.db"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            report = import_paths([folder], db, on_error="skip")
            if report.failed or report.issues:
                raise SystemExit(f"import failed: {report.failed[:3]} {report.issues[:3]}")
            return report.sessions

        imp, sessions = median_of(one_import, args.repeat, "import")
        base_n = min(args.baseline_files, args.files)
        base, _ = median_of(lambda: baseline_discovery(folder, base_n), 1, "baseline")
        print(f"{'stage':<34} {'files':>7} {'median s':>9} {'cpu s':>7} {'files/s':>9}")
        for name, stage, n, secs in (("discover (this version)", "discover", found, disc),
                                     ("import (this version)", "import", sessions, imp),
                                     ("baseline: per-file folder listing", "baseline", base_n, base)):
            print(f"{name:<34} {n:>7} {secs:9.3f} {CPU[stage]:7.2f} {n / secs:9.0f}")
        per_file = (base / base_n) / (disc / found)
        print(f"discovery per file: {per_file:.0f}x faster than the baseline at {base_n} files "
              f"(the baseline grows with the square of the folder size)")
        ok = disc < DISCOVER_TARGET_S and imp < IMPORT_TARGET_S
        print(f"targets: found < {DISCOVER_TARGET_S:.0f} s ({disc:.2f} s), imported < "
              f"{IMPORT_TARGET_S:.0f} s ({imp:.1f} s): {'OK' if ok else 'MISSED'}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
