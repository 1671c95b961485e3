"""ReferenceTracker against the specification's quadratic scan (spec §3.3).

Prints, on the synthetic coding-agent history of ``opctx.lab.synthetic_history``:

* build time of ``ReferenceTracker`` over N messages (median of ``--repeat`` runs) for
  N in ``--sizes`` (default up to 10,000; target < 0.5 s at 10,000);
* one incremental ``add`` after a 10,000-message build (median and p95 over 200
  new messages; target < 5 ms);
* ``_quadratic_reference_scan`` timed beside it where affordable (``--quadratic-max``,
  default 3,000 messages) and the ratio quadratic / tracker;
* agreement: cited messages found by both / found by the quadratic scan;
* the CPU time of the tracker beside its wall time (the machine is shared: CPU time is the
  steadier figure when other jobs run), and, at the largest size, how that CPU time splits
  between assembling the texts, the tokenising regex passes and the rest;
* adversarial texts: 200,000 characters of capitals, hex, one word... (each must stay
  linear: the seed's CamelCase regex and hex-run lookup keys were quadratic there);
* the same on the real corpus (every Claude Code / Codex session with provider usage,
  read at run time through the reader of ``estimator_accuracy.py``, concatenated), where
  far fewer messages are cited than in the synthetic history, which is the case where
  the quadratic scan's early exit helps least.

Run:  .venv/bin/python benchmarks/references.py [--sizes 1000,3000,10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.context.references import ReferenceTracker, _quadratic_reference_scan, _Tokens  # noqa: E402
from opctx.dag.messages import message_text  # noqa: E402
from opctx.lab.synthetic_history import make_history  # noqa: E402


def timed(fn, repeat: int) -> tuple[float, object]:
    return timed_both(fn, repeat)[0::2]


def timed_both(fn, repeat: int) -> tuple[float, float, object]:
    """Median wall time, median CPU time, last result."""
    wall, cpu, result = [], [], None
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu), result


ADVERSARIAL = {
    "capitals": "T" * 200_000,
    "capitals and digits": "T1" * 100_000,
    "hex": "a1" * 100_000,
    "one long word": "x" * 200_000,
    "long path": "ab/" * 70_000,
    "long CamelCase word": "Ab" * 100_000,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="1000,3000,10000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quadratic-max", type=int, default=3000)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    biggest = make_history(max(sizes) + 200, seed=0)
    chars = sum(len(message_text(m)) for m in biggest[: max(sizes)]) / max(sizes)
    print(f"synthetic history: {chars:.0f} text characters per message on average")
    print(f"{'messages':>9}{'tracker s':>11}{'cpu s':>8}{'quadratic s':>13}{'ratio':>8}{'cited':>8}{'agreement':>11}")
    cpu_by_size: dict[int, float] = {}
    for n in sizes:
        history = biggest[:n]
        fast_s, fast_cpu, fast = timed_both(lambda h=history: ReferenceTracker().build(h), args.repeat)
        cpu_by_size[n] = fast_cpu
        if n <= args.quadratic_max:
            slow_s, slow = timed(lambda h=history: _quadratic_reference_scan(h), 1)
            both = len(fast.cited_message_ids & slow.cited_message_ids)
            agree = f"{both / max(1, len(slow.cited_message_ids)):.4f}"
            print(
                f"{n:>9}{fast_s:>11.3f}{fast_cpu:>8.3f}{slow_s:>13.3f}{slow_s / fast_s:>8.1f}"
                f"{len(fast.cited_message_ids):>8}{agree:>11}"
            )
        else:
            print(f"{n:>9}{fast_s:>11.3f}{fast_cpu:>8.3f}{'-':>13}{'-':>8}{len(fast.cited_message_ids):>8}{'-':>11}")
    # where the time goes at the largest size: text assembly, the tokenising regex passes
    # (extraction and lookup keys), and the rest (lookups, checks, filing, citing)
    history = biggest[: max(sizes)]
    _, text_s, texts = timed_both(lambda: [message_text(m) for m in history], args.repeat)
    _, token_s, _ = timed_both(lambda: [_Tokens(t) for t in texts if t], args.repeat)
    total = cpu_by_size[max(sizes)]
    print(
        f"{max(sizes)} messages, CPU split: message_text {text_s:.3f} s, tokenising {token_s:.3f} s, "
        f"the rest (lookups, checks, filing, citing) {max(0.0, total - text_s - token_s):.3f} s"
    )
    print("CPU per 1,000 messages: " + ", ".join(f"{n}: {1000 * c / n:.3f} s" for n, c in cpu_by_size.items()))
    for name, text in ADVERSARIAL.items():
        pair = [{"id": "a", "role": "user", "content": text}, {"id": "b", "role": "user", "content": text}]
        wall, _ = timed(lambda p=pair: ReferenceTracker().build(p), 1)
        print(f"adversarial {name} ({len(text):,} chars, twice): {wall:.3f} s")
    corpus = ROOT.parent / "shared" / "corpus"
    if (corpus / "manifest.json").is_file():
        from estimator_accuracy import load_sessions

        real: list[dict] = []
        for k, session in enumerate(load_sessions(corpus)):
            for req in session.requests:
                for msg in req.appended:
                    m = dict(msg, id=f"s{k}-{len(real)}")
                    if isinstance(m.get("content"), list):
                        m["extra"] = {"blocks": m.pop("content")}
                        m["content"] = ""
                    real.append(m)
        chars = sum(len(message_text(m)) for m in real) / len(real)
        fast_s, fast = timed(lambda: ReferenceTracker().build(real), args.repeat)
        slow_s, slow = timed(lambda: _quadratic_reference_scan(real), 1)
        both = len(fast.cited_message_ids & slow.cited_message_ids)
        print(
            f"real corpus, {len(real)} messages ({chars:.0f} chars each): tracker {fast_s:.3f} s, "
            f"quadratic {slow_s:.3f} s, ratio {slow_s / fast_s:.1f}, cited {len(fast.cited_message_ids)}/"
            f"{len(slow.cited_message_ids)}, agreement {both / max(1, len(slow.cited_message_ids)):.4f}"
        )
    n = max(sizes)
    tracker = ReferenceTracker()
    tracker.build(biggest[:n])
    per_add = []
    for msg in biggest[n : n + 200]:
        start = time.perf_counter()
        tracker.add(msg)
        per_add.append((time.perf_counter() - start) * 1000)
    per_add.sort()
    print(
        f"incremental add after {n} messages: median {statistics.median(per_add):.3f} ms, "
        f"p95 {per_add[int(0.95 * len(per_add))]:.3f} ms (200 adds)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
