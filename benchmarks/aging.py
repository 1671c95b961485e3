"""TurnAger on a 2,000-message history: cost of one prepare after the first (spec §3).

The engine calls the ager once per turn with the history grown by a message or two; the
ager remembers its decisions and only looks at the new messages and the results crossing
a gate (aging.py, "Speed"). Also timed: the same growth with the branch re-read as new
dicts, and a rewind (not a prefix-extension: one full pass with the token counts cached).
Baseline beside it: a cold ager (fresh caches) on the same history, which is what every
prepare would cost without the caches.

Prints the median and p95 milliseconds per prepare over ``--turns`` turns (target
< 50 ms), the cold cost, the ratio, and what aging cleared.

Run:  .venv/bin/python benchmarks/aging.py [--messages 2000 --turns 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.context.aging import TurnAger  # noqa: E402
from opctx.lab.synthetic_history import make_history  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--min-tokens", type=int, default=800, help="size gate (lower it to see more clearing)")
    args = ap.parse_args(argv)
    full = make_history(args.messages + args.turns, seed=1)
    now = {"t": full[args.messages - 1]["timestamp"]}
    ager = TurnAger(min_tokens=args.min_tokens, clock=lambda: now["t"])

    start = time.perf_counter()
    aged, report = ager.age(full[: args.messages])
    first_ms = (time.perf_counter() - start) * 1000

    warm = []
    for k in range(1, args.turns + 1):
        history = full[: args.messages + k]
        now["t"] = history[-1]["timestamp"]
        start = time.perf_counter()
        aged, report = ager.age(history)
        warm.append((time.perf_counter() - start) * 1000)

    # the branch re-read from the store: equal dicts, new objects (once per user turn in process_user_turn)
    reread = []
    for k in range(1, args.turns + 1):
        history = [dict(m) for m in full[: args.messages + k]]
        start = time.perf_counter()
        ager.age(history)
        reread.append((time.perf_counter() - start) * 1000)

    # not a prefix-extension (a rewind): one full pass, with the token counts still cached
    rewind = []
    for k in range(1, 6):
        history = full[: args.messages - 10 * k]
        ager._tracker.build(history)  # time the ager's own fallback, not a reference rebuild
        start = time.perf_counter()
        ager.age(history)
        rewind.append((time.perf_counter() - start) * 1000)

    cold = []
    for _ in range(3):
        fresh = TurnAger(min_tokens=args.min_tokens, clock=lambda: now["t"])
        fresh.estimator.clear_cache()
        start = time.perf_counter()
        fresh.age(full[: args.messages + args.turns])
        cold.append((time.perf_counter() - start) * 1000)

    warm.sort()
    median = statistics.median(warm)
    print(f"history: {args.messages} messages (+{args.turns} turns)")
    print(f"first prepare (cold caches): {first_ms:.1f} ms")
    print(f"prepare after the first: median {median:.2f} ms, p95 {warm[int(0.95 * len(warm))]:.2f} ms")
    reread.sort()
    print(f"branch re-read as new dicts: median {statistics.median(reread):.2f} ms, p95 {reread[int(0.95 * len(reread))]:.2f} ms")
    print(f"after a rewind (full pass, warm token cache): median {statistics.median(rewind):.1f} ms")
    print(f"cold prepare baseline (fresh ager, empty token cache): median {statistics.median(cold):.1f} ms")
    print(f"ratio cold / warm: {statistics.median(cold) / median:.1f}x")
    print(
        f"last prepare cleared {report.redacted} tool results, freed {report.tokens_freed} tokens, "
        f"{report.references_protected} kept because cited"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
