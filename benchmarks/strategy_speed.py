"""How long a replay of a long trajectory takes under each strategy of the literature.

Replays the longest trajectory of ``../shared/corpus/openhands_llm_completions`` (or the
path given) under every strategy preset, ``none`` beside them in the same process as the
baseline; prints the median of ``--repeat`` runs per strategy, its ratio to ``none``, the
turns, the compactions and the observations masked. Timing figures depend on the machine
and its load: say which when quoting them.

    PYTHONPATH=. python benchmarks/strategy_speed.py [PATH] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from opctx.importers import parse_path
from opctx.lab._strategy_specs import STRATEGY_PRESETS
from opctx.lab.history import as_history
from opctx.lab.replay import replay

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "openhands_llm_completions"


def _longest(folder: Path):
    histories = [as_history(s) for p in sorted(folder.iterdir()) for s in parse_path(p, on_error="skip")]
    return max(histories, key=lambda h: sum(1 for m in h.messages if m.get("role") == "assistant"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(CORPUS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    path = Path(args.path)
    if not path.exists():
        print(f"{path}: not found (pass a trajectory or a folder of them)", file=sys.stderr)
        return 2
    history = _longest(path) if path.is_dir() else as_history(parse_path(path)[0])
    turns = sum(1 for m in history.messages if m.get("role") == "assistant")
    replay(history, "none")  # warm the tokenizer and the caches once
    rows = []
    for name in ["none", *STRATEGY_PRESETS]:
        times, result = [], None
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = replay(history, name)
            times.append(time.perf_counter() - started)
        steps = result.steps_df
        rows.append({"strategy": name, "median_s": statistics.median(times), "turns": turns,
                     "compactions": len(result.compactions),
                     "masked": int(steps["redacted"].max()) if len(steps) else 0})
    base = rows[0]["median_s"]
    for row in rows:
        row["ratio_to_none"] = row["median_s"] / base if base else float("nan")
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{history.session_id}: {turns} turns, {len(history.messages)} messages")
        for row in rows:
            print(f"{row['strategy']:32s} {row['median_s']:7.3f}s  x{row['ratio_to_none']:5.2f}  "
                  f"compactions {row['compactions']:3d}  masked {row['masked']:3d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
