"""Summary quality on recorded compactions: which facts each strategy keeps, and at what size.

Reads every transcript under ``--corpus`` (any folder of transcripts or an opctx database;
folders are imported once into opctx's cache with ``opctx.lab.sources.open_database``),
keeps the sessions that recorded a compaction with a visible summary (Claude Code; Codex
summaries are encrypted), and scores the retention probes of ``opctx.lab.probes`` at each
recorded compaction for each strategy: the client's own summary (``recorded``), opctx's
structural summary, observation masking, the sanity rows ``keep-all`` / ``drop-all``, any
preset (``--strategies``) and, with ``--llm URL --model NAME [--prompt claude-code]``, a
real model's summaries through its OpenAI-compatible endpoint and the summary cache
(``--offline`` answers from the cache only).

Printed: retention by family and strategy (pooled over the cuts), the median context
size after each strategy (the tokens-vs-retention frontier), probes per cut, the weak
families (drop-all >= 20 %), and how many of the recorded Claude Code compactions have
probes at all. ``--json`` prints exactly::

    {"strategies": {name: {"retention_pct": {family: x}, "context_tokens_median": n, "cuts": n}},
     "probes_per_cut_median": n, "weak_families": [...]}

Run:  .venv/bin/python benchmarks/summary_quality.py [--corpus DIR] [--json] [--strategies a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = Path(os.environ.get("OPCTX_CORPUS") or ROOT.parent / "shared" / "corpus")


def load(corpus: Path) -> list:
    """The recorded histories of ``corpus`` that compacted (a folder is imported once, cached)."""
    from opctx.lab.history import as_history
    from opctx.lab.probes import cuts_of
    from opctx.lab.sources import open_database

    db = open_database(corpus)
    from opctx.lab.frames import sessions_df

    df = sessions_df(db)
    histories = [as_history((str(db), sid)) for sid in df[df["n_compactions"] > 0]["session_id"]]
    return [h for h in histories if h.compactions and (cuts_of(h) or h.client == "claude-code")]


def coverage(histories: list) -> tuple[int, int]:
    """(recorded Claude Code compactions with probes, recorded Claude Code compactions)."""
    from opctx.lab.probes import extract_probes

    comps = [(h, c) for h in histories if h.client == "claude-code" for c in h.compactions]
    return sum(1 for h, c in comps if extract_probes(h.messages, c.stream_index)), len(comps)


def summaries_from(args: argparse.Namespace) -> Any:
    if not args.llm and not args.offline:
        return None
    from opctx.lab.summaries import CallSettings, LLMSummaries

    settings = CallSettings(max_input_tokens=args.max_input_tokens, concurrency=args.concurrency)
    if args.offline:
        return LLMSummaries.from_cache(args.model, args.prompt, cache=args.cache or True, settings=settings)
    return LLMSummaries(args.llm, args.model, args.prompt, cache=args.cache or True, settings=settings)


def print_report(report: dict, covered: tuple[int, int], elapsed: float, llm: Any) -> None:
    from opctx.lab.probes import FAMILIES

    print(f"{'strategy':<24}" + "".join(f"{f:>14}" for f in FAMILIES) + f"{'tokens (med)':>14}{'cuts':>6}")
    rows = sorted(report["strategies"].items(), key=lambda kv: kv[1]["context_tokens_median"])
    for name, s in rows:
        cells = "".join(f"{'-' if s['retention_pct'].get(f) is None else format(s['retention_pct'][f], '.1f') + ' %':>14}"
                        for f in FAMILIES)
        print(f"{name:<24}{cells}{s['context_tokens_median']:>14,}{s['cuts']:>6}")
    print(f"\nprobes per cut (median): {report['probes_per_cut_median']}")
    print(f"weak families (drop-all >= 20 %): {report['weak_families'] or 'none'}")
    print(f"recorded Claude Code compactions with probes: {covered[0]} of {covered[1]}")
    if llm is not None:
        print(f"summariser: {llm!r}, usage {llm.usage()}")
    print(f"elapsed {elapsed:.1f} s (the machine may be shared)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--json", action="store_true", help="print the JSON report only")
    parser.add_argument("--strategies", default="recorded,structural,masking,keep-all,drop-all",
                        help="comma-separated: recorded, structural, masking, keep-all, drop-all, presets")
    parser.add_argument("--llm", help="OpenAI-compatible API root for real summaries (adds the 'llm' strategy)")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompt", default="claude-code")
    parser.add_argument("--cache", help="summary cache file (default: opctx's per-user cache)")
    parser.add_argument("--offline", action="store_true", help="LLM summaries from the cache only")
    parser.add_argument("--max-input-tokens", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args(argv)
    if not args.corpus.exists():
        print(f"corpus not found: {args.corpus}", file=sys.stderr)
        return 2
    from opctx.lab.probes import evaluate

    started = time.perf_counter()
    histories = load(args.corpus)
    llm = summaries_from(args)
    ev = evaluate(histories, [s.strip() for s in args.strategies.split(",") if s.strip()], summaries=llm)
    report = ev.report()
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        print_report(report, coverage(histories), time.perf_counter() - started, llm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
