"""Recorded aging: Claude Code's microcompactions vs the claude-code preset, row by row.

Imports every Claude Code transcript of ``--corpus`` (default ``../shared/corpus``; any
folder of ``*.jsonl`` transcripts works); rows are the clearings they record
(``microcompact_boundary`` lines) or show by saved results (``tool-results/*.txt``: the
silent clearings of clients that write no line), and it prints, per mode (``resync``, ``free``) and per way of choosing the client's
settings (``loso``: the auto-compaction setting the *other* sessions show, the default;
``recording``: read off each session itself, in sample; ``default``: the client's
defaults), per source of the rows (``boundary`` lines, ``saved results``): the clearings
predicted on the exact request, within one, with the exact cleared set, the median
Jaccard overlap of the cleared tool-call ids and the median relative error of the tokens
saved (every row: an unpredicted one saved nothing). Nothing in the rule is fitted.
``--rows`` adds one line per clearing. Figures are deterministic; the time is the median
over ``--runs`` runs of each table.

Run:  .venv/bin/python benchmarks/aging_fidelity.py [--corpus DIR] [--runs 1] [--json] [--rows] [--modes resync]
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

SETTINGS = ("loso", "recording", "default")
ROW_COLUMNS = ("session_id", "source", "client_version", "recorded_request", "recorded_context_tokens",
               "recorded_pre_tokens", "recorded_tokens_saved", "recorded_cleared", "auto_compact",
               "claude-code_warning_tokens", "claude-code_delta_requests", "claude-code_jaccard",
               "claude-code_exact_set", "claude-code_pre_tokens", "claude-code_tokens_saved")


def sessions_of(folder: Path) -> list:
    """Every Claude Code session file: those without a clearing add no row, but what they show of
    their client's settings is what the others are scored with (``settings="loso"``)."""
    out = []
    for path in sorted(folder.rglob("*.jsonl")):
        if path.parent.name == "subagents" or path.name.startswith("agent-"):
            continue
        with open(path, "rb") as fh:
            head = fh.read(4096)
        if b'"sessionId"' not in head and b'"parentUuid"' not in head:
            continue
        out.extend(parse_claude_code_jsonl(str(path), with_subagents=False)[:1])
    return out


def _plain(value):
    if value is None or (isinstance(value, float) and value != value) or str(value) == "<NA>":
        return None
    return value.item() if hasattr(value, "item") else value


def measure(sessions: list, modes, runs: int) -> dict:
    report: dict = {"sessions": len(sessions), "figures": {}, "rows": {}}
    for mode in modes:
        for settings in SETTINGS:
            times, table = [], None
            for _ in range(max(1, runs)):
                start = time.perf_counter()
                table = aging_fidelity_table(sessions, mode=mode, settings=settings)
                times.append(time.perf_counter() - start)
            for source in ("boundary", "saved results", "all"):
                part = table if source == "all" or not len(table) else table[table["source"] == source]
                summary = aging_fidelity_summary(part)["claude-code"]
                summary["median_seconds"] = round(statistics.median(times), 3)
                report["figures"][f"{mode}/{settings}/{source}"] = summary
            report["rows"][f"{mode}/{settings}"] = [
                {c: _plain(row.get(c)) for c in ROW_COLUMNS} for row in table.to_dict("records")]
    return report


def print_report(report: dict, rows: bool) -> None:
    print(f"Claude Code sessions read: {report['sessions']}")
    print(f"{'mode/settings/source':<32} {'rows':>4} {'pred':>4} {'exact':>5} {'<=1 req':>7} {'set':>4} "
          f"{'jaccard':>7} {'saved err':>9} {'s':>6}")
    for key, s in report["figures"].items():
        jac = f"{s['median_jaccard']:.3f}" if s["median_jaccard"] is not None else "-"
        err = f"{s['median_tokens_saved_error']:.1%}" if s["median_tokens_saved_error"] is not None else "-"
        print(f"{key:<32} {s['rows']:>4} {s['predicted']:>4} {s['exact_request']:>5} {s['within_one_request']:>7} "
              f"{s['exact_set']:>4} {jac:>7} {err:>9} {s['median_seconds']:>6}")
    if not rows:
        return
    for key, table in report["rows"].items():
        print(f"\n{key}: one line per clearing (delta = predicted minus recorded request)")
        print("| session | source | version | request | client count | preTokens | saved | cleared | auto-compact |"
              " warning | delta | jaccard | exact set | model preTokens | model saved |")
        print("|---" * 15 + "|")
        for r in table:
            cells = [str(r["session_id"])[:11], r["source"], r["client_version"], r["recorded_request"],
                     r["recorded_context_tokens"], r["recorded_pre_tokens"], r["recorded_tokens_saved"],
                     r["recorded_cleared"], r["auto_compact"], r["claude-code_warning_tokens"],
                     r["claude-code_delta_requests"], r["claude-code_jaccard"], r["claude-code_exact_set"],
                     r["claude-code_pre_tokens"], r["claude-code_tokens_saved"]]
            print("| " + " | ".join("-" if c is None else f"{c:,}" if isinstance(c, int) and not isinstance(c, bool)
                                    else f"{c:.2f}" if isinstance(c, float) else str(c) for c in cells) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--rows", action="store_true", help="also print one line per clearing")
    ap.add_argument("--modes", default="resync,free", help="comma-separated: resync, free")
    args = ap.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    report = measure(sessions_of(args.corpus), modes, args.runs)
    if args.json:
        print(json.dumps(report if args.rows else {k: v for k, v in report.items() if k != "rows"}, sort_keys=True))
        return 0
    print_report(report, args.rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
