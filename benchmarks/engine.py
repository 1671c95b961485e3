"""Benchmarks of the context engine's hot paths.

1. ``DefaultContextEngine.prepare`` once per turn on a session that grows to
   2,000 messages (append-only, the way a chat front end calls it). Target:
   under 20 ms per call after the first, median and p95. Also shown: the same
   growth with the branch re-read as new dicts before every call (the first
   prepare of each user turn in ``process_user_turn``). Baseline side by side: the same
   prepare on a cold engine every time (no per-session caches), i.e. what a
   non-incremental implementation costs. And a session that keeps an unanswered
   tool call (an interrupted tool run, common in recorded transcripts), whose
   provider messages need the pairing repair on every call, beside the whole-history
   repair each call would cost without the incremental one.
2. Many sessions served in turn by one engine (a chat server): each session ages
   with its own copy of the engine's TurnAger, against one ager shared by all
   (which remembers only a few histories, so every call becomes a full pass).
3. ``find_cut_index`` on 10,000 messages with a warm ``MessageFacts`` table
   (target: under 10 ms), against the cold call that computes every
   per-message fact and token estimate.
4. A session that stays over its window (no aging, no compaction): ``prepare`` per
   turn with the cuts carried across requests (``budget.fit_headroom`` 0.1, the default)
   against fitting every request afresh (0), the two engines called in turn on the same
   history. Also: how often each sends the previous request's messages unchanged (the
   prompt prefix a provider's cache keeps).

Run: ``.venv/bin/python benchmarks/engine.py [--messages 2000] [--sessions 12] [--cut-messages 10000]
[--over-messages 400] [--over-window 32000]``.
Prints medians and p95 in milliseconds and the cold/warm ratios. Uses the
default estimator (tiktoken ``cl100k_base`` offline when available).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from opctx.context.aging import TurnAger
from opctx.context.engine import DefaultContextEngine, to_provider_messages
from opctx.context.summarize import MessageFacts, find_cut_index
from opctx.context.types import ReferenceMap

WORDS = (
    "the schema migration adds a thread_id column to messages and backfills it from sessions "
    "while keeping the foreign keys valid; run pytest tests/dag/test_store.py -q after each step"
).split()


def text(rng: random.Random, tokens: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, int(tokens * 0.8))))


def history(n: int, seed: int = 1) -> list[dict]:
    """``n`` messages of turns: user, assistant tool call, tool result (50-1,500 tokens), answer."""
    rng = random.Random(seed)
    out: list[dict] = []
    i = 0
    while len(out) < n:
        out.append({"id": f"u{i}", "role": "user", "content": text(rng, 40), "timestamp": float(len(out))})
        out.append({
            "id": f"a{i}", "role": "assistant", "content": "",
            "tool_calls": [{"id": f"c{i}", "name": "read_file", "arguments": {"path": f"/repo/src/mod_{i}.py"}}],
            "timestamp": float(len(out)),
        })
        out.append({"id": f"t{i}", "role": "tool", "name": "read_file", "tool_call_id": f"c{i}",
                    "content": text(rng, rng.randint(50, 1_500)), "timestamp": float(len(out))})
        out.append({"id": f"f{i}", "role": "assistant", "content": text(rng, 60), "timestamp": float(len(out))})
        i += 1
    return out[:n]


def interrupted(msgs: list[dict]) -> list[dict]:
    """``msgs`` with a tool call near the start that never got its result (and one message less)."""
    lost = {"id": "lost", "role": "assistant", "content": "",
            "tool_calls": [{"id": "c-lost", "name": "bash", "arguments": {"command": "sleep 600"}}],
            "timestamp": 1.5}
    return msgs[:2] + [lost] + msgs[2:-1]


class _NoCitations:
    """A reference tracker that never finds a citation: aging clears every old big result."""

    def update(self, history: list[dict]) -> ReferenceMap:
        return ReferenceMap()


def stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return statistics.median(ordered) * 1000, p95 * 1000


def _incremental(
    msgs: list[dict], n: int, window: int, clock, *, reread: bool = False, **engine_kw
) -> tuple[float, list[float], int]:
    """Per-call times of prepare on a history growing one turn (4 messages) per call.

    ``reread``: every call gets new dicts with the same content (what ``process_user_turn``
    passes at the start of a user turn, after ``get_branch``); the copy is not timed.
    Returns the first call's time, the samples, and how many tool results the last call cleared.
    """
    engine = DefaultContextEngine(context_window=window, clock=clock, **engine_kw)
    agent = "You are a coding agent."
    start = n - 400  # warm up on the first n-400 messages, then grow one turn (4 messages) per call
    t0 = time.perf_counter()
    engine.prepare(agent, "bench", msgs[:start], "gpt-4o", None)
    first = time.perf_counter() - t0
    samples = []
    prep = None
    for end in range(start + 4, n + 1, 4):
        history = [dict(m) for m in msgs[:end]] if reread else msgs[:end]
        t0 = time.perf_counter()
        prep = engine.prepare(agent, "bench", history, "gpt-4o", None)
        samples.append(time.perf_counter() - t0)
    return first, samples, prep.tool_results_redacted if prep else 0


def bench_prepare(n: int, window: int) -> None:
    msgs = history(n)
    clock = lambda: float(n + 10_000)  # noqa: E731 - a fixed replay clock
    first, incremental, cleared = _incremental(msgs, n, window, clock)
    _, no_aging, _ = _incremental(msgs, n, window, clock, aging=False)
    _, reread, _ = _incremental(msgs, n, window, clock, reread=True)
    # the synthetic text repeats a small vocabulary, so every big result is "cited" and kept;
    # without citations aging clears a result nearly every turn (the patch path of the caches)
    _, clearing, cleared_no_refs = _incremental(msgs, n, window, clock, references=_NoCitations())
    unpaired = interrupted(msgs)
    _, repairing, _ = _incremental(unpaired, n, window, clock)
    whole_repair = []
    for end in range(n - 20, n + 1, 4):
        t0 = time.perf_counter()
        to_provider_messages(unpaired[:end])
        whole_repair.append(time.perf_counter() - t0)
    cold = []
    for end in range(n - 20, n + 1, 4):
        fresh = DefaultContextEngine(context_window=window, clock=clock)
        t0 = time.perf_counter()
        fresh.prepare("You are a coding agent.", "bench", msgs[:end], "gpt-4o", None)
        cold.append(time.perf_counter() - t0)
    med, p95 = stats(incremental)
    amed, ap95 = stats(no_aging)
    cmed, cp95 = stats(cold)
    rmed, rp95 = stats(reread)
    xmed, xp95 = stats(clearing)
    print(f"prepare, {n}-message session, window {window:,} ({cleared} tool results cleared by aging at the end)")
    print(f"  first call (cold, {n - 400} messages):        {first * 1000:8.1f} ms")
    print(f"  incremental per turn: median {med:7.2f} ms   p95 {p95:7.2f} ms   (target < 20 ms)")
    print(f"    of which without TurnAger: median {amed:7.2f} ms   p95 {ap95:7.2f} ms")
    print(f"  branch re-read each call (new dicts): median {rmed:7.2f} ms   p95 {rp95:7.2f} ms")
    print(f"  no citations ({cleared_no_refs} results cleared): median {xmed:7.2f} ms   p95 {xp95:7.2f} ms")
    umed, up95 = stats(repairing)
    wmed, _ = stats(whole_repair)
    print(f"  an interrupted call left unanswered: median {umed:7.2f} ms   p95 {up95:7.2f} ms")
    print(f"    (converting and repairing the whole history, per call: median {wmed:7.2f} ms)")
    print(f"  cold engine per call: median {cmed:7.2f} ms   p95 {cp95:7.2f} ms")
    print(f"  speed-up of the incremental path: {cmed / med:6.1f}x")


class _SharedAger:
    """One TurnAger behind a facade the engine does not copy: shared by every session."""

    def __init__(self, ager: TurnAger):
        self.ager = ager

    def age(self, history: list[dict], references: ReferenceMap | None = None):
        return self.ager.age(history, references)


def bench_sessions(n_sessions: int, n: int, window: int) -> None:
    sessions = [history(n, seed=10 + k) for k in range(n_sessions)]
    clock = lambda: float(n + 10_000)  # noqa: E731

    def run(**engine_kw) -> list[float]:
        engine = DefaultContextEngine(context_window=window, clock=clock, **engine_kw)
        for k, msgs in enumerate(sessions):
            engine.prepare("You are a coding agent.", f"s{k}", msgs[: n - 100], "gpt-4o", None)
        samples = []
        for end in range(n - 96, n + 1, 4):
            for k, msgs in enumerate(sessions):
                t0 = time.perf_counter()
                engine.prepare("You are a coding agent.", f"s{k}", msgs[:end], "gpt-4o", None)
                samples.append(time.perf_counter() - t0)
        return samples

    own_med, own_p95 = stats(run())
    shared_med, shared_p95 = stats(run(ager=_SharedAger(TurnAger(clock=clock))))
    print(f"{n_sessions} sessions of {n} messages served in turn, prepare per call")
    print(f"  each session its own TurnAger copy: median {own_med:7.2f} ms   p95 {own_p95:7.2f} ms")
    print(f"  one TurnAger shared by all:         median {shared_med:7.2f} ms   p95 {shared_p95:7.2f} ms")
    print(f"  shared / own: {shared_med / own_med:5.1f}x")


def bench_cut(n: int, window: int) -> None:
    msgs = history(n, seed=2)
    from opctx.context.tokens import estimate_message_tokens

    t0 = time.perf_counter()
    cold_cut = find_cut_index(msgs, window, estimate=estimate_message_tokens)
    cold = time.perf_counter() - t0
    facts = MessageFacts(estimate_message_tokens)
    facts.table(msgs)
    warm = []
    for _ in range(30):
        t0 = time.perf_counter()
        cut = find_cut_index(msgs, window, facts=facts)
        warm.append(time.perf_counter() - t0)
    assert cut.index == cold_cut.index
    rekeyed = []
    copies = [dict(m) for m in msgs]  # the branch re-read from the store: new dicts, same ids
    for _ in range(5):
        facts.table(msgs)
        t0 = time.perf_counter()
        find_cut_index(copies, window, facts=facts)
        rekeyed.append(time.perf_counter() - t0)
    med, p95 = stats(warm)
    rmed, _ = stats(rekeyed)
    print(f"find_cut_index, {n:,} messages, window {window:,} (cut at {cut.index})")
    print(f"  cold (estimates every message): {cold * 1000:8.1f} ms")
    print(f"  warm table:   median {med:7.3f} ms   p95 {p95:7.3f} ms   (target < 10 ms)")
    print(f"  re-read dicts (reused by equality): median {rmed:7.2f} ms")
    print(f"  cold / warm: {cold * 1000 / med:8.0f}x")


def bench_over_window(n: int, window: int) -> None:
    from opctx.context.policy import CompactionPolicy

    msgs = history(n, seed=3)
    clock = lambda: float(n + 10_000)  # noqa: E731
    never = {"trigger.recommend_pct": None, "trigger.auto_pct": None, "trigger.emergency_pct": None,
             "aging.kind": "none", "budget.context_window": window}
    engines = {
        headroom: DefaultContextEngine(policy=CompactionPolicy().replace(**never, **{"budget.fit_headroom": headroom}),
                                       clock=clock)
        for headroom in (0.1, 0.0)
    }
    agent = "You are a coding agent."
    start = n // 2
    times: dict[float, list[float]] = {h: [] for h in engines}
    kept: dict[float, int] = dict.fromkeys(engines, 0)
    last: dict[float, list[dict]] = {h: [] for h in engines}
    truncated: dict[float, int] = dict.fromkeys(engines, 0)
    for engine in engines.values():
        engine.prepare(agent, "bench", msgs[:start], "gpt-4o", None)
    calls = 0
    for end in range(start + 4, n + 1, 4):
        calls += 1
        for headroom, engine in engines.items():
            t0 = time.perf_counter()
            prep = engine.prepare(agent, "bench", msgs[:end], "gpt-4o", None)
            times[headroom].append(time.perf_counter() - t0)
            before = last[headroom]
            kept[headroom] += len(before) > 0 and all(a is b for a, b in zip(prep.agent_messages, before, strict=False))
            last[headroom] = prep.agent_messages
            truncated[headroom] = prep.truncated_parts
    (cmed, cp95), (fmed, fp95) = stats(times[0.1]), stats(times[0.0])
    print(f"prepare, a session over its window: {n} messages, window {window:,}, no aging or compaction "
          f"({truncated[0.1]} / {truncated[0.0]} parts cut at the end)")
    print(f"  cuts carried (fit_headroom 0.1): median {cmed:7.2f} ms   p95 {cp95:7.2f} ms   "
          f"previous request resent unchanged {kept[0.1]}/{calls}")
    print(f"  fitted afresh (fit_headroom 0):  median {fmed:7.2f} ms   p95 {fp95:7.2f} ms   "
          f"previous request resent unchanged {kept[0.0]}/{calls}")
    print(f"  afresh / carried: {fmed / cmed:5.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--cut-messages", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--over-window", type=int, default=32_000, help="the window of part 4")
    parser.add_argument("--over-messages", type=int, default=400, help="the session of part 4")
    args = parser.parse_args()
    bench_prepare(args.messages, args.window)
    print()
    bench_sessions(args.sessions, 1_000, args.window)
    print()
    bench_cut(args.cut_messages, 200_000)
    print()
    bench_over_window(args.over_messages, args.over_window)


if __name__ == "__main__":
    main()
