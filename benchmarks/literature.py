"""The Complexity Trap's cost comparison, replayed on the corpus's long trajectories.

Replays every trajectory of ``../shared/corpus/openhands_llm_completions`` (OpenHands,
GLM-4.6, 40-91 turns) and ``../shared/corpus/swe_agent_traj`` (SWE-agent) under raw /
``complexity-trap-masking`` / ``complexity-trap-summary``, prices each replay with the
paper's price models and cache accounting (``opctx.lab.literature``), and prints beside
the paper's Table 1 (§4) the change of input tokens and cost against raw, per trajectory
(``--per-trajectory``) and in total, with the median turn at which the running cost drops
below raw for good. ``--json``: one object per (strategy, price model). ``--timing``: the
median replay time of the longest trajectory under each strategy (``--repeat`` runs, raw
beside them in the same process; the figure depends on the machine and its load).

    PYTHONPATH=. python benchmarks/literature.py [--corpus DIR] [--json] [--per-trajectory] [--timing]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

from opctx.importers import parse_path
from opctx.lab.history import as_history
from opctx.lab.literature import PAPER_TABLE1, STRATEGIES, compare_costs

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
FOLDERS = ("openhands_llm_completions", "swe_agent_traj")


def load_trajectories(corpus: Path, min_turns: int = 1) -> list:
    """Every trajectory of the two folders with at least ``min_turns`` agent turns."""
    out = []
    for folder in FOLDERS:
        top = corpus / folder
        if not top.is_dir():
            continue
        for path in sorted(top.iterdir()):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    sessions = parse_path(path, on_error="skip")
                except Exception as exc:  # a file the importers refuse: said, not fatal
                    print(f"{path}: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
                    continue
            for s in sessions:
                h = as_history(s)
                if sum(1 for m in h.messages if m.get("role") == "assistant") >= min_turns:
                    out.append(h)
    return out


def timing(history, repeat: int) -> list[dict]:
    """Median replay time of one trajectory per strategy, raw first (the baseline)."""
    from opctx.lab.replay import replay

    replay(history, "none", keep_contexts=False)  # warm the estimator's caches once
    rows = []
    for name, preset in STRATEGIES.items():
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            replay(history, preset, keep_contexts=False)
            times.append(time.perf_counter() - started)
        rows.append({"strategy": name, "median_s": round(statistics.median(times), 4)})
    base = rows[0]["median_s"]
    for row in rows:
        row["ratio_to_raw"] = round(row["median_s"] / base, 2) if base else None
    return rows


def _print(totals: list[dict], per: object, show_per: bool, n: int, seconds: float) -> None:
    print(f"{n} trajectories replayed and priced in {seconds:.1f} s; cache: the paper's accounting "
          "(shared prefix read, no TTL); summaries: structural text, the summariser's call modelled")
    print(f"{'prices':36} {'strategy':8} {'tokens %':>9} {'cost %':>8} {'paper %':>8} {'summ. %':>8} "
          f"{'breakeven':>9} {'raw $/traj':>10} {'paper raw $':>11}")
    for t in totals:
        paper = t["paper_cost_change_pct"]
        be = "-" if t["breakeven_turn_median"] is None else f"{t['breakeven_turn_median']:g}"
        print(f"{t['prices']:36} {t['strategy']:8} {t['input_tokens_change_pct']:9.1f} {t['cost_change_pct']:8.1f} "
              f"{'' if paper is None else f'{paper:.1f}':>8} {t['summary_calls_cost_share_pct']:8.1f} {be:>9} "
              f"{t['raw_cost_per_session_usd']:10.3f} {PAPER_TABLE1[t['prices']]['raw_usd']:11.2f}")
    print("paper: The Complexity Trap (arXiv 2508.21433) §4 Table 1, SWE-bench Verified, 500 instances per cell")
    if show_per:
        cols = ["session", "turns", "strategy", "prices", "input_tokens_change_pct", "cost_change_pct", "breakeven_turn"]
        print(per[cols].round(1).to_string(index=False))  # type: ignore[index]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--min-turns", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--per-trajectory", action="store_true")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    corpus = Path(args.corpus)
    histories = load_trajectories(corpus, args.min_turns)
    if not histories:
        print(f"{corpus}: no trajectory found in {', '.join(FOLDERS)}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    per, totals = compare_costs(histories)
    seconds = time.perf_counter() - started
    longest = max(histories, key=lambda h: sum(1 for m in h.messages if m.get("role") == "assistant"))
    speed = timing(longest, args.repeat) if args.timing else None
    if args.json:
        out: object = totals
        if args.per_trajectory or speed:
            out = {"totals": totals}
            if args.per_trajectory:
                out["per_trajectory"] = json.loads(per.to_json(orient="records"))
            if speed:
                out["timing"] = {"session": longest.session_id, "rows": speed}
        print(json.dumps(out, indent=1))
        return 0
    _print(totals, per, args.per_trajectory, len(histories), seconds)
    if speed:
        turns = sum(1 for m in longest.messages if m.get("role") == "assistant")
        print(f"replay time of {longest.session_id} ({turns} turns), median of {args.repeat}:")
        for row in speed:
            print(f"  {row['strategy']:8} {row['median_s']:.3f} s  x{row['ratio_to_raw']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
