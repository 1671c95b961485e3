"""Recorded aging: Claude Code's microcompactions vs the claude-code preset.

Imports every Claude Code transcript of ``--corpus`` (default ``../shared/corpus``; any
folder of ``*.jsonl`` transcripts works) that records a ``microcompact_boundary`` and
prints, per mode (``resync``, ``free``) and per threshold (the default rule, nothing
fitted; ``loso``: the warning threshold fitted leave-one-session-out, sessions sharing a
boundary uuid left out together), the share of recorded microcompactions predicted
within one request, exactly, the median Jaccard overlap of the cleared tool-call ids and
the median relative error of the tokens saved. Figures are deterministic; the time is
the median over ``--runs`` runs of each table.

Run:  .venv/bin/python benchmarks/aging_fidelity.py [--corpus DIR] [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.importers.claude_code import parse_claude_code_jsonl  # noqa: E402
from opctx.lab.aging_fidelity import aging_fidelity_summary, aging_fidelity_table  # noqa: E402


def sessions_of(folder: Path) -> list:
    out = []
    for path in sorted(folder.rglob("*.jsonl")):
        if path.parent.name == "subagents" or path.name.startswith("agent-"):
            continue
        with open(path, "rb") as fh:
            if b"microcompact_boundary" not in fh.read():
                continue
        out.append(parse_claude_code_jsonl(str(path), with_subagents=False)[0])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}", file=sys.stderr)
        return 2
    sessions = sessions_of(args.corpus)
    report: dict = {"sessions": len(sessions), "figures": {}}
    for mode in ("resync", "free"):
        for fit in (None, "loso"):
            times, table = [], None
            for _ in range(max(1, args.runs)):
                start = time.perf_counter()
                table = aging_fidelity_table(sessions, mode=mode, fit=fit)
                times.append(time.perf_counter() - start)
            summary = aging_fidelity_summary(table)["claude-code"]
            summary["groups"] = int(table["group"].nunique()) if len(table) else 0
            summary["median_seconds"] = round(statistics.median(times), 3)
            report["figures"][f"{mode}/{fit or 'default'}"] = summary
    if args.json:
        print(json.dumps(report, sort_keys=True))
        return 0
    print(f"sessions with recorded microcompactions: {report['sessions']}")
    print(f"{'mode/threshold':<16} {'rows':>4} {'pred':>4} {'<=1 req':>7} {'exact':>5} "
          f"{'jaccard':>7} {'saved err':>9} {'s':>6}")
    for key, s in report["figures"].items():
        jac = f"{s['median_jaccard']:.3f}" if s["median_jaccard"] is not None else "-"
        err = f"{s['median_tokens_saved_error']:.1%}" if s["median_tokens_saved_error"] is not None else "-"
        print(f"{key:<16} {s['rows']:>4} {s['predicted']:>4} {s['within_one_request']:>7} {s['exact_request']:>5} "
              f"{jac:>7} {err:>9} {s['median_seconds']:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
