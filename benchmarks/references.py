"""ReferenceTracker against the specification's quadratic scan (spec §3.3).

Prints, on the synthetic coding-agent history of ``opctx.lab.synthetic_history``:

* build time of ``ReferenceTracker`` over N messages (median of ``--repeat`` runs) for
  N in ``--sizes`` (default up to 10,000; target < 0.5 s at 10,000), with the compiled
  core (the default where it is built) and the pure-Python path side by side;
* ``_quadratic_reference_scan`` timed beside them where affordable (``--quadratic-max``,
  default 3,000 messages) and the ratios quadratic / tracker;
* agreement with the quadratic scan: cited messages found by both / by the scan, and
  whether each core's map is identical (cited ids, tool ids, snippets): both are exact;
* the CPU time beside the wall time (the machine is shared: CPU time is the steadier
  figure when other jobs run), and, at the largest size, how the compiled build's time
  splits between assembling the texts, the compiled core and the Python around it;
* one incremental ``add`` after a 10,000-message build (median and p95 over 200 new
  messages; target < 5 ms), both cores;
* adversarial texts: 200,000 characters of capitals, hex, one word... (each must stay
  linear: the seed's CamelCase regex and hex-run lookup keys were quadratic there), and an
  adversarial history for the pure-Python word-substring table: a snippet that recurs in
  every message inside 50 new words holding it (time per 1,000 messages at two sizes:
  flat when linear);
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

from opctx.context import references  # noqa: E402
from opctx.context.references import (  # noqa: E402
    HAVE_COMPILED_CORE,
    MAX_DISTINCTIVE,
    STOP_WORDS,
    ReferenceTracker,
    _quadratic_reference_scan,
)
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


CORES = (["compiled"] if HAVE_COMPILED_CORE else []) + ["python"]


def recurring_snippet_history(n: int) -> list[dict]:
    """30 snippets nobody cites (past the word table's direct checks), then ``abcq`` in every
    message beside 50 new words holding it: each message cites the previous one."""
    history = [{"id": "s", "role": "user", "content": " ".join(f"`zzq{i}`" for i in range(30))}]
    for j in range(n):
        words = " ".join(f"xabcq{j}_{k}" for k in range(50))
        history.append({"id": f"m{j}", "role": "user", "content": f"`abcq` {words}"})
    return history


def tracker(core: str) -> ReferenceTracker:
    return ReferenceTracker(compiled=core == "compiled")


def agreement(fast, slow) -> str:
    both = len(fast.cited_message_ids & slow.cited_message_ids)
    share = both / max(1, len(slow.cited_message_ids))
    identical = (
        fast.cited_message_ids == slow.cited_message_ids
        and fast.cited_tool_use_ids == slow.cited_tool_use_ids
        and fast.quoted_snippets_by_msg == slow.quoted_snippets_by_msg
    )
    return f"{share:.4f}" + (" =" if identical else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sizes", default="1000,3000,10000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quadratic-max", type=int, default=3000)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    biggest = make_history(max(sizes) + 200, seed=0)
    chars = sum(len(message_text(m)) for m in biggest[: max(sizes)]) / max(sizes)
    print(f"synthetic history: {chars:.0f} text characters per message on average")
    if not HAVE_COMPILED_CORE:
        print("compiled core NOT built: pure-Python figures only")
    print("agreement: share of the quadratic scan's cited messages found; '=' the whole map is identical")
    print(f"{'messages':>9}{'core':>10}{'tracker s':>11}{'cpu s':>8}{'quadratic s':>13}{'ratio':>8}{'cited':>8}{'agreement':>12}")
    cpu_by_size: dict[tuple[int, str], float] = {}
    for n in sizes:
        history = biggest[:n]
        slow_s, slow = timed(lambda h=history: _quadratic_reference_scan(h), 1) if n <= args.quadratic_max else (None, None)
        for core in CORES:
            fast_s, fast_cpu, fast = timed_both(lambda h=history, c=core: tracker(c).build(h), args.repeat)
            cpu_by_size[n, core] = fast_cpu
            if slow is not None:
                print(
                    f"{n:>9}{core:>10}{fast_s:>11.3f}{fast_cpu:>8.3f}{slow_s:>13.3f}{slow_s / fast_s:>8.1f}"
                    f"{len(fast.cited_message_ids):>8}{agreement(fast, slow):>12}"
                )
            else:
                print(f"{n:>9}{core:>10}{fast_s:>11.3f}{fast_cpu:>8.3f}{'-':>13}{'-':>8}{len(fast.cited_message_ids):>8}{'-':>12}")
    n = max(sizes)
    if HAVE_COMPILED_CORE:
        # where the compiled build's time goes: the texts, the core (extraction, window
        # scan, filing, citing, all in C), and the Python around it (message keys, the map)
        history = biggest[:n]
        _, text_s, texts = timed_both(lambda: [message_text(m) for m in history], args.repeat)

        def core_only():
            scanner = references._refscan.Scanner(MAX_DISTINCTIVE, STOP_WORDS)
            for t in texts:
                scanner.add(t)
            return scanner

        _, core_s, scanner = timed_both(core_only, args.repeat)
        total = cpu_by_size[n, "compiled"]
        print(
            f"{n} messages, compiled build CPU split: message_text {text_s:.3f} s, compiled core {core_s:.3f} s "
            f"({scanner.comparisons:,} in-place comparisons, {scanner.live_strings:,} strings on file at the end), "
            f"Python around it {max(0.0, total - text_s - core_s):.3f} s"
        )
        print(f"pure-Python / compiled at {n}: {cpu_by_size[n, 'python'] / total:.1f}x")
    for core in CORES:
        print(f"CPU per 1,000 messages ({core}): " + ", ".join(f"{m}: {1000 * cpu_by_size[m, core] / m:.3f} s" for m in sizes))
    for name, text in ADVERSARIAL.items():
        pair = [{"id": "a", "role": "user", "content": text}, {"id": "b", "role": "user", "content": text}]
        walls = [timed(lambda p=pair, c=core: tracker(c).build(p), 1)[0] for core in CORES]
        print(f"adversarial {name} ({len(text):,} chars, twice): " + ", ".join(f"{c} {w:.3f} s" for c, w in zip(CORES, walls, strict=True)))
    for n_msgs in (1000, 4000):
        recurring = recurring_snippet_history(n_msgs)
        cpus = [timed_both(lambda c=core, h=recurring: tracker(c).build(h), 1)[1] for core in CORES]
        print(
            f"adversarial recurring snippet, {n_msgs} messages, CPU per 1,000: "
            + ", ".join(f"{c} {1000 * w / n_msgs:.3f} s" for c, w in zip(CORES, cpus, strict=True))
        )
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
        slow_s, slow = timed(lambda: _quadratic_reference_scan(real), 1)
        for core in CORES:
            fast_s, fast_cpu, fast = timed_both(lambda c=core: tracker(c).build(real), args.repeat)
            print(
                f"real corpus, {len(real)} messages ({chars:.0f} chars each), {core}: tracker {fast_s:.3f} s "
                f"(cpu {fast_cpu:.3f} s), quadratic {slow_s:.3f} s, ratio {slow_s / fast_s:.1f}, cited "
                f"{len(fast.cited_message_ids)}/{len(slow.cited_message_ids)}, agreement {agreement(fast, slow)}"
            )
    for core in CORES:
        incremental = tracker(core)
        incremental.build(biggest[:n])
        per_add = []
        for msg in biggest[n : n + 200]:
            start = time.perf_counter()
            incremental.add(msg)
            per_add.append((time.perf_counter() - start) * 1000)
        per_add.sort()
        print(
            f"incremental add after {n} messages ({core}): median {statistics.median(per_add):.3f} ms, "
            f"p95 {per_add[int(0.95 * len(per_add))]:.3f} ms (200 adds)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
