"""How close are opctx's token estimates to what providers really billed?

Reads every session in the real-transcript corpus that carries provider usage:

* Claude Code (``claude_code_jsonl/**.jsonl`` and ``claude_code_hook_chat_json/*.json``):
  each API response is one ``message.id`` (split over several lines, one per content
  block) with ``message.usage``; the prompt of that request is
  ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``.
* Codex CLI (``codex_rollout_jsonl/*.jsonl``): ``event_msg`` ``token_count`` events,
  ``info.last_token_usage.input_tokens`` (cached tokens included) is the prompt of the
  request whose output items precede the event. Repeated events (same totals) are dropped.

Methods: heuristic and tiktoken (raw, scale 1.0), auto (the per-family choice of
``tokens.FAMILY_PROFILES``, calibration scale included) and held-out (auto's counter with
a scale fitted on the other half of the family's sessions: the honest check of a fitted
factor; the two folds' fitted scales are printed).

1. growth: for consecutive requests k-1, k, the provider increase ``P(k) - P(k-1)``
   against the estimate of what was appended between them (the response of k-1, its
   lines merged back into one message per ``message.id``, and the tool results / user
   messages that followed). Pairs with an increase under ``--min-delta`` tokens (default
   300) are skipped: there the fixed per-request framing dominates. Pairs across a
   compaction are skipped too. Two variants:

   * text: everything appended is estimated from its text;
   * usage: the response of k-1 is counted at the output tokens the provider reported
     for it (plus one message of framing), the rest estimated. The reported output
     includes thinking / reasoning the transcript does not show (empty or signed thinking
     blocks, encrypted reasoning), which the next prompt does contain. A logged output
     below half the visible reply's heuristic estimate is a streaming snapshot, not the
     final figure (some Claude Code versions log ``output_tokens: 1``): those pairs fall
     back to the text variant.

   Columns: median and p90 absolute % error, the token-weighted error
   ``sum|err| / sum(increase)`` (large pairs weigh more), and the median over pairs with
   an increase of at least ``--big`` (1000) tokens.
2. whole request: ``P(k)`` against ``C + estimate(all messages so far)``, the constant C
   (system prompt, tool schemas, the client's hidden scaffolding) calibrated once per
   segment from the first request of that segment; a compaction starts a new segment.

Pairs are classed CJK-dominant when CJK characters carry >= 25% of the heuristic token
mass of the appended text, else ASCII-dominant. Claude Code sessions whose usage never
carries Anthropic's cache keys come from a third-party Anthropic-compatible endpoint
under a Claude model name (its tokenizer is not Claude's) and are reported as family
``third-party``. ``--speed`` also times ``tokens.bpe_token_count`` (chunked) against one
tiktoken call on long inputs without whitespace.

Run:  .venv/bin/python benchmarks/estimator_accuracy.py [--corpus ../shared/corpus] [--sessions] [--speed]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.context import tokens  # noqa: E402

METHODS = ("heuristic", "tiktoken", "auto")


@dataclass
class Request:
    prompt_tokens: int
    appended: list[dict]  # messages appended since the previous request (provider shape)
    segment_start: bool = False
    # the appended content holds text the transcript does not record (redacted thinking,
    # encrypted reasoning): the provider counted tokens no estimator can see
    opaque: bool = False
    # the first ``reply_count`` messages of ``appended`` are the previous request's reply,
    # which the provider reported as ``reply_output_tokens`` output tokens (None: unknown)
    reply_count: int = 0
    reply_output_tokens: int | None = None


@dataclass
class Session:
    path: Path
    fmt: str
    model: str
    requests: list[Request] = field(default_factory=list)
    # Claude Code can talk to an Anthropic-compatible third-party endpoint under a Claude
    # model name. Its usage is recognisable: Anthropic's usage always carries the
    # cache_read / cache_creation keys (0 when unused); such an endpoint omits them (and
    # logs output_tokens 0 on all but the last response). Its tokenizer is not Claude's, so
    # its sessions are reported apart as "third-party".
    third_party: bool = False


# ----------------------------------------------------------------------------- readers


def _claude_entries(path: Path) -> list[dict]:
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON array of Claude Code entries")
        return [e for e in data if isinstance(e, dict)]
    entries = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                print(f"  skip {path.name}:{lineno}: not JSON ({exc.msg})", file=sys.stderr)
                continue
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


def read_claude_code(path: Path) -> Session | None:
    entries = _claude_entries(path)
    session = Session(path, "claude_code", "")
    pending: list[dict] = []
    reply_count = 0  # leading messages of ``pending`` that are the last response
    last_id = None
    seen_ids: set[str] = set()
    saw_cache_fields = False
    output_by_id: dict[str, int] = {}
    segment_start = True
    for entry in entries:
        kind = entry.get("type")
        if kind == "system" and entry.get("subtype") == "compact_boundary":
            pending, reply_count, last_id = [], 0, None
            segment_start = True
            continue
        if kind not in ("user", "assistant"):
            continue
        msg = entry.get("message")
        if not isinstance(msg, dict):
            continue
        if kind == "assistant":
            model = msg.get("model") or ""
            if model == "<synthetic>":
                continue
            mid = msg.get("id")
            usage = msg.get("usage")
            if mid and isinstance(usage, dict):
                if usage.get("input_tokens"):
                    saw_cache_fields |= any(k.startswith("cache_") for k in usage)
                # one response is logged as one line per content block, each repeating the
                # usage; streaming snapshots may carry a partial output count: keep the largest
                output_by_id[mid] = max(output_by_id.get(mid, 0), int(usage.get("output_tokens") or 0))
            if mid and mid == last_id and pending and pending[-1].get("role") == "assistant":
                # the same API message: one message in the next prompt, not one per line
                pending[-1]["content"] = _as_blocks(pending[-1]["content"]) + _as_blocks(msg.get("content"))
                continue
            if mid and mid not in seen_ids and isinstance(usage, dict):
                seen_ids.add(mid)
                session.model = session.model or model
                prompt = (
                    int(usage.get("input_tokens") or 0)
                    + int(usage.get("cache_read_input_tokens") or 0)
                    + int(usage.get("cache_creation_input_tokens") or 0)
                )
                reply_output = output_by_id.get(last_id) if last_id is not None else None
                session.requests.append(
                    Request(prompt, pending, segment_start, _claude_opaque(pending), reply_count, reply_output)
                )
                pending, reply_count = [], 0
                segment_start = False
                last_id = mid
            pending.append({"role": "assistant", "content": msg.get("content")})
            reply_count = len(pending)
        else:
            pending.append({"role": msg.get("role") or kind, "content": msg.get("content")})
    session.third_party = bool(output_by_id) and not saw_cache_fields
    return session if len(session.requests) >= 2 else None


def _as_blocks(content) -> list:
    if isinstance(content, list):
        return list(content)
    if isinstance(content, str) and content:
        return [{"type": "text", "text": content}]
    return []


def _claude_opaque(messages: list[dict]) -> bool:
    for m in messages:
        content = m.get("content")
        for b in content if isinstance(content, list) else ():
            if isinstance(b, dict) and (
                b.get("type") == "redacted_thinking" or (b.get("type") == "thinking" and not b.get("thinking"))
            ):
                return True
    return False


_CODEX_OUTPUT_TYPES = {"reasoning", "function_call", "custom_tool_call", "local_shell_call", "web_search_call"}


def _codex_message(item: dict) -> dict | None:
    kind = item.get("type")
    if kind == "message":
        return {"role": item.get("role"), "content": item.get("content")}
    if kind == "reasoning":
        summary = item.get("summary") or []
        text = "\n".join(s.get("text", "") for s in summary if isinstance(s, dict))
        return {"role": "assistant", "content": text}
    if kind in ("function_call", "custom_tool_call"):
        args = item.get("arguments") if kind == "function_call" else item.get("input")
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": item.get("call_id"), "type": "function", "function": {"name": item.get("name"), "arguments": args}}],
        }
    if kind in ("function_call_output", "custom_tool_call_output"):
        out = item.get("output")
        if isinstance(out, dict):
            out = out.get("content", json.dumps(out))
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": out}
    return None


def read_codex(path: Path) -> Session | None:
    session = Session(path, "codex", "")
    pending: list[dict] = []
    last_totals = None
    segment_start = True
    prev_reasoning = 0
    prev_output: int | None = None
    reply_count = 0
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                print(f"  skip {path.name}:{lineno}: not JSON", file=sys.stderr)
                continue
            kind, payload = entry.get("type"), entry.get("payload") or {}
            if kind == "turn_context":
                session.model = session.model or payload.get("model") or ""
            elif kind == "compacted":
                pending, segment_start, reply_count, prev_output = [], True, 0, None
            elif kind == "response_item":
                msg = _codex_message(payload)
                if msg is not None:
                    pending.append(msg)
            elif kind == "event_msg" and payload.get("type") == "token_count":
                info = payload.get("info")
                if not info:
                    continue
                totals = json.dumps(info.get("total_token_usage"), sort_keys=True)
                if totals == last_totals:
                    continue
                last_totals = totals
                last = info.get("last_token_usage") or {}
                # the request's own output items were written just before this event: they
                # belong to the NEXT request's appended set
                cut = len(pending)
                while cut > 0 and _is_output(pending[cut - 1]):
                    cut -= 1
                session.requests.append(
                    Request(
                        int(last.get("input_tokens") or 0),
                        pending[:cut],
                        segment_start,
                        prev_reasoning > 0,
                        min(reply_count, cut),
                        prev_output,
                    )
                )
                prev_reasoning = int(last.get("reasoning_output_tokens") or 0)
                prev_output = int(last.get("output_tokens") or 0) if "output_tokens" in last else None
                pending = pending[cut:]
                reply_count = len(pending)
                segment_start = False
    return session if len(session.requests) >= 2 else None


def _is_output(msg: dict) -> bool:
    return msg.get("role") == "assistant"


def load_sessions(corpus: Path) -> list[Session]:
    sessions: list[Session] = []
    for path in sorted((corpus / "claude_code_jsonl").rglob("*.jsonl")):
        s = read_claude_code(path)
        if s:
            sessions.append(s)
    for path in sorted((corpus / "claude_code_hook_chat_json").glob("*.json")):
        s = read_claude_code(path)
        if s:
            sessions.append(s)
    for path in sorted((corpus / "codex_rollout_jsonl").glob("*.jsonl")):
        s = read_codex(path)
        if s:
            sessions.append(s)
    return sessions


# ----------------------------------------------------------------------------- measures


def cjk_share(messages: list[dict]) -> float:
    total = cjk = 0.0
    for m in messages:
        for seg in tokens.message_segments(m)[0]:
            h = tokens.heuristic_tokens(seg)
            total += h
            cjk += tokens._count(tokens._CJK, seg) / tokens.HEURISTIC_CHARS_PER_TOKEN["cjk"]
    return cjk / total if total else 0.0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@dataclass
class Pair:
    """One growth pair: what the provider added between two requests, and its parts."""

    session: int
    family: str
    cls: str
    delta: int
    opaque: bool
    text: dict[str, int]  # counter -> raw text tokens of everything appended
    framing: int  # message, tool item and image overhead of everything appended
    rest_text: dict[str, int]  # the same for the messages after the previous reply
    rest_framing: int
    reply_output: int | None  # the previous reply at its reported output tokens, when usable


def _parts(est: tokens.Estimator, messages: list[dict], counters: list[str]) -> tuple[dict[str, int], int]:
    text = dict.fromkeys(counters, 0)
    framing = 0
    for m in messages:
        segments, images, tool_items = tokens.message_segments(m)
        for c in counters:
            text[c] += sum(est.count(seg, c) for seg in segments)
        framing += images * tokens.IMAGE_TOKENS + tool_items * tokens.TOOL_CALL_OVERHEAD_TOKENS
        framing += tokens.MESSAGE_OVERHEAD_TOKENS
    return text, framing


def _usable_reply_output(req: Request) -> int | None:
    """The reported output of the previous reply, if it can be the final figure.

    Some client versions log a streaming snapshot (output_tokens 1) instead of the final
    count; an output smaller than half the heuristic estimate of the reply's visible text
    cannot be final, so the text estimate is used for that pair instead.
    """
    if req.reply_output_tokens is None or req.reply_count == 0:
        return None
    visible = sum(
        tokens.heuristic_tokens(seg) for m in req.appended[: req.reply_count] for seg in tokens.message_segments(m)[0]
    )
    return req.reply_output_tokens if req.reply_output_tokens >= 0.5 * visible else None


def collect(sessions: list[Session], min_delta: int):
    """Growth pairs, and whole-request errors per (family, class, method)."""
    est = tokens.Estimator("auto")
    pairs: list[Pair] = []
    whole = defaultdict(list)
    for index, s in enumerate(sessions):
        family = report_family(s)
        auto_counter, auto_scale = est.resolve(s.model, "auto")
        counters = sorted({"heuristic", est.resolve(s.model, "tiktoken")[0], auto_counter})
        method_counter = {"heuristic": "heuristic", "tiktoken": est.resolve(s.model, "tiktoken")[0], "auto": auto_counter}
        method_scale = {"heuristic": 1.0, "tiktoken": 1.0, "auto": auto_scale}
        cumulative = dict.fromkeys(METHODS, 0)
        base: dict[str, float] = {}
        prev = None
        for req in s.requests:
            text, framing = _parts(est, req.appended, counters)
            # a prompt that shrinks by a third is a compaction or a cleared context the
            # transcript does not mark (older hook-saved logs): a new segment
            new_segment = req.segment_start or prev is None or req.prompt_tokens < 2 * prev / 3
            if new_segment:
                cumulative = dict.fromkeys(METHODS, 0)
            for m in METHODS:
                cumulative[m] += math.ceil(text[method_counter[m]] * method_scale[m]) + framing
            if new_segment:
                base = {m: req.prompt_tokens - cumulative[m] for m in METHODS}
                prev = req.prompt_tokens
                continue
            cls = "cjk" if cjk_share(req.appended) >= 0.25 else "ascii"
            for m in METHODS:
                predicted = base[m] + cumulative[m]
                whole[(family, cls, m)].append(abs(predicted - req.prompt_tokens) / req.prompt_tokens * 100)
            delta = req.prompt_tokens - prev
            prev = req.prompt_tokens
            if delta < min_delta:
                continue
            rest_text, rest_framing = _parts(est, req.appended[req.reply_count :], counters)
            pairs.append(
                Pair(index, family, cls, delta, req.opaque, text, framing, rest_text, rest_framing, None if s.third_party else _usable_reply_output(req))
            )
    return pairs, whole, {report_family(s): s.model for s in sessions}


def report_family(session: Session) -> str:
    """The model family, or ``third-party`` for a Claude name served by another endpoint."""
    return "third-party" if session.third_party else tokens.model_family(session.model)


def estimate(pair: Pair, counter: str, scale: float, variant: str) -> float:
    """``text``: everything appended, estimated; ``usage``: the previous reply at its
    reported output tokens (one message of framing on top), the rest estimated."""
    if variant == "usage" and pair.reply_output is not None:
        return pair.reply_output + tokens.MESSAGE_OVERHEAD_TOKENS + pair.rest_text[counter] * scale + pair.rest_framing
    return pair.text[counter] * scale + pair.framing


def fit_scale(pairs: list[Pair], counter: str, variant: str) -> float:
    """Median of (provider increase - what the scale does not touch) / raw text tokens."""
    ratios = []
    for p in pairs:
        if p.opaque and not (variant == "usage" and p.reply_output is not None):
            continue  # hidden reasoning would inflate the ratio
        fixed = estimate(p, counter, 0.0, variant)
        text = estimate(p, counter, 1.0, variant) - fixed
        if text > 0:
            ratios.append((p.delta - fixed) / text)
    return statistics.median(ratios) if ratios else 1.0


def held_out_halves(pairs: list[Pair]) -> list[tuple[set[int], set[int]]]:
    """Two folds: the sessions of each family alternately in half A and half B."""
    by_family: dict[str, list[int]] = defaultdict(list)
    for p in pairs:
        if p.session not in by_family[p.family]:
            by_family[p.family].append(p.session)
    half_a = {s for ids in by_family.values() for s in ids[0::2]}
    half_b = {s for ids in by_family.values() for s in ids[1::2]}
    return [(half_a, half_b), (half_b, half_a)]


def growth_errors(pairs: list[Pair], model_of_family: dict[str, str], variant: str):
    """(family, class, method) -> list of (abs pct error, delta), plus the fitted scales."""
    est = tokens.Estimator("auto")
    errors = defaultdict(list)
    for p in pairs:
        model = model_of_family[p.family]
        counter, scale = est.resolve(model, "auto")
        for m, c, sc in (
            ("heuristic", "heuristic", 1.0),
            ("tiktoken", est.resolve(model, "tiktoken")[0], 1.0),
            ("auto", counter, scale),
        ):
            err = abs(estimate(p, c, sc, variant) - p.delta)
            errors[(p.family, p.cls, m)].append((err / p.delta * 100, p.delta))
    fitted = {}
    for fold, (fit_on, test_on) in enumerate(held_out_halves(pairs)):
        for family, model in model_of_family.items():
            counter = est.resolve(model, "auto")[0]
            train = [p for p in pairs if p.family == family and p.session in fit_on]
            scale = fit_scale(train, counter, variant) if train else 1.0
            fitted[(family, fold)] = (scale, len(train))
            for p in pairs:
                if p.family == family and p.session in test_on:
                    err = abs(estimate(p, counter, scale, variant) - p.delta)
                    errors[(p.family, p.cls, "held-out")].append((err / p.delta * 100, p.delta))
    return errors, fitted


GROWTH_METHODS = (*METHODS, "held-out")


def summary(rows: list[tuple[float, int]], big: int) -> str:
    if not rows:
        return f"{0:>5}" + " " * 40
    apes = [e for e, _ in rows]
    weighted = sum(e * d for e, d in rows) / sum(d for _, d in rows)
    large = [e for e, d in rows if d >= big]
    return f"{len(rows):>5}{pct(apes, 0.5):>9.1f}{pct(apes, 0.9):>8.1f}{weighted:>10.1f}{pct(large, 0.5):>9.1f}"


def print_growth(title: str, errors, families: list[str], big: int) -> None:
    print(f"\n{title}")
    print(f"{'family':<12}{'class':<7}{'method':<11}{'n':>5}{'median%':>9}{'p90%':>8}{'weighted%':>10}{f'med>={big}':>9}")
    for cls in ("ascii", "cjk"):
        for m in GROWTH_METHODS:
            rows = [r for f in families for r in errors.get((f, cls, m), [])]
            print(f"{'all':<12}{cls:<7}{m:<11}" + summary(rows, big))
    for family in families:
        for cls in ("ascii", "cjk"):
            for m in GROWTH_METHODS:
                rows = errors.get((family, cls, m), [])
                if rows:
                    print(f"{family:<12}{cls:<7}{m:<11}" + summary(rows, big))


def speed_report(sizes_mb: tuple[int, ...] = (1, 4, 16)) -> None:
    """Milliseconds per MB of ``bpe_token_count`` (chunked) vs one tiktoken call, on inputs
    whose single-call cost grows faster than linearly. The one-call figure is skipped above
    4 MB (it takes tens of seconds there)."""
    import base64
    import random
    import time

    enc = tokens.get_encoding()
    if enc is None:
        print("speed: no offline tiktoken encoding")
        return
    rng = random.Random(1)
    prose = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    makers = {
        "one letter": lambda n: "a" * n,
        "spaces": lambda n: " " * n,
        "base64": lambda n: base64.b64encode(rng.randbytes(n * 3 // 4)).decode(),
        "prose": lambda n: (prose * (n // len(prose) + 1))[:n],
    }
    print("\nspeed: ms per MB (median of 5), chunked bpe_token_count vs one encode_ordinary call")
    print(f"{'input':<12}{'MB':>4}{'chunked':>10}{'one call':>10}")

    def ms_per_mb(fn, text: str) -> float:
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn(text)
            runs.append((time.perf_counter() - t0) * 1e9 / len(text))
        return statistics.median(runs)

    for name, make in makers.items():
        for mb in sizes_mb:
            text = make(mb * 1_000_000)
            chunked = ms_per_mb(lambda t: tokens.bpe_token_count(enc, t), text)
            whole = ms_per_mb(enc.encode_ordinary, text) if mb <= 4 else float("nan")
            print(f"{name:<12}{mb:>4}{chunked:>10.0f}{whole:>10.0f}")

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--min-delta", type=int, default=300)
    ap.add_argument("--big", type=int, default=1000, help="size filter of the last column")
    ap.add_argument("--sessions", action="store_true", help="print one line per session")
    ap.add_argument("--speed", action="store_true", help="also time long inputs without whitespace")
    args = ap.parse_args(argv)
    if not (args.corpus / "manifest.json").is_file():
        print(f"corpus not found at {args.corpus}", file=sys.stderr)
        return 2
    print(f"tiktoken offline: {tokens.tiktoken_available()}  o200k_base cached: {tokens.tiktoken_available('o200k_base')}")
    sessions = load_sessions(args.corpus)
    print(f"sessions with provider usage: {len(sessions)}, requests: {sum(len(s.requests) for s in sessions)}")
    pairs, whole, model_of_family = collect(sessions, args.min_delta)
    families = sorted(model_of_family)
    print(
        f"growth pairs (increase >= {args.min_delta}): {len(pairs)}, of which the previous reply has a usable "
        f"reported output count: {sum(p.reply_output is not None for p in pairs)}"
    )
    print(
        "columns: n, median and p90 of |estimate - increase| / increase, the token-weighted error "
        f"sum|err| / sum(increase), and the median over pairs with an increase >= {args.big}"
    )
    for variant, title in (
        ("text", "growth, everything appended estimated from its text"),
        ("usage", "growth, the previous reply at its reported output tokens, the rest estimated"),
    ):
        errors, fitted = growth_errors(pairs, model_of_family, variant)
        print_growth(title, errors, families, args.big)
        print("  held-out scales (fitted on one half of each family's sessions, applied to the other):")
        for (family, fold), (scale, n) in sorted(fitted.items()):
            print(f"    {family:<12}fold {fold}: scale {scale:.3f} from {n} pairs")
    print("\nwhole request: |C + estimate(history) - provider prompt| / prompt  (C from each segment's first request)")
    print(f"{'family':<12}{'class':<7}{'method':<11}{'n':>5}{'median%':>9}{'p90%':>8}")
    for family in ("all", *families):
        for cls in ("ascii", "cjk"):
            for m in METHODS:
                rows = [e for f in families if family in ("all", f) for e in whole.get((f, cls, m), [])]
                if rows:
                    print(f"{family:<12}{cls:<7}{m:<11}{len(rows):>5}{pct(rows, 0.5):>9.1f}{pct(rows, 0.9):>8.1f}")
    if args.speed:
        speed_report()
    if args.sessions:
        print("\nper session: median growth error % (auto), text variant / reply at its reported output")
        est = tokens.Estimator("auto")
        for index, s in enumerate(sessions):
            counter, scale = est.resolve(s.model, "auto")
            mine = [p for p in pairs if p.session == index]
            cells = []
            for variant in ("text", "usage"):
                errs = [abs(estimate(p, counter, scale, variant) - p.delta) / p.delta * 100 for p in mine]
                cells.append(f"{statistics.median(errs):5.1f}" if errs else "    -")
            name = "/".join(s.path.parts[-2:])[-60:]
            print(f"  {s.fmt:<12}{s.model[:26]:<27}{len(mine):>4} pairs  {cells[0]} / {cells[1]}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
