"""How close are opctx's token estimates to what providers really billed?

Reads every session in the real-transcript corpus that carries provider usage:

* Claude Code (``claude_code_jsonl/**.jsonl`` and ``claude_code_hook_chat_json/*.json``):
  each API response is one ``message.id`` (split over several lines, one per content
  block) with ``message.usage``; the prompt of that request is
  ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``.
* Codex CLI (``codex_rollout_jsonl/*.jsonl``): ``event_msg`` ``token_count`` events,
  ``info.last_token_usage.input_tokens`` (cached tokens included) is the prompt of the
  request whose output items precede the event. Repeated events (same totals) are dropped.

Two comparisons, each for method = heuristic and tiktoken (raw, scale 1.0) and auto (the
per-family choice of ``tokens.FAMILY_PROFILES``, calibration scale included):

1. growth: for consecutive requests k-1, k, the provider increase ``P(k) - P(k-1)``
   against the estimate of what was appended between them (the response of k-1 and the
   tool results / user messages that followed). Pairs with an increase under
   ``--min-delta`` tokens (default 300) are skipped: there the fixed per-request noise
   dominates. Pairs across a compaction (the prompt shrinks) are skipped too.
2. whole request: ``P(k)`` against ``C + estimate(all messages so far)``, the constant C
   (system prompt, tool schemas, the client's hidden scaffolding) calibrated once per
   segment from the first request of that segment; a compaction starts a new segment.

Pairs are classed CJK-dominant when CJK characters carry >= 25% of the heuristic token
mass of the appended text, else ASCII-dominant. Also printed: the median ratio
provider/estimate per family and method, which is the calibration scale that
``tokens.FAMILY_PROFILES`` uses.

Limitations, stated: encrypted reasoning (Codex) and signed thinking blocks are not
visible text; Codex reasoning is estimated from its summary only. Claude Code injects
some scaffolding not recorded in the transcript.

Run:  .venv/bin/python benchmarks/estimator_accuracy.py [--corpus ../shared/corpus]
"""

from __future__ import annotations

import argparse
import json
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


@dataclass
class Session:
    path: Path
    fmt: str
    model: str
    requests: list[Request] = field(default_factory=list)


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
    seen_ids: set[str] = set()
    segment_start = True
    for entry in entries:
        kind = entry.get("type")
        if kind == "system" and entry.get("subtype") == "compact_boundary":
            pending = []
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
            if mid and mid not in seen_ids and isinstance(usage, dict):
                seen_ids.add(mid)
                session.model = session.model or model
                prompt = (
                    int(usage.get("input_tokens") or 0)
                    + int(usage.get("cache_read_input_tokens") or 0)
                    + int(usage.get("cache_creation_input_tokens") or 0)
                )
                session.requests.append(Request(prompt, pending, segment_start, _claude_opaque(pending)))
                pending = []
                segment_start = False
        pending.append({"role": msg.get("role") or kind, "content": msg.get("content")})
    return session if len(session.requests) >= 2 else None


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
                pending, segment_start = [], True
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
                    Request(int(last.get("input_tokens") or 0), pending[:cut], segment_start, prev_reasoning > 0)
                )
                prev_reasoning = int(last.get("reasoning_output_tokens") or 0)
                pending = pending[cut:]
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


def evaluate(sessions: list[Session], min_delta: int):
    estimators = {m: tokens.Estimator(m) for m in METHODS}
    growth = defaultdict(list)  # (class, method) -> abs pct errors
    visible = defaultdict(list)  # the same, pairs whose appended content is fully recorded
    whole = defaultdict(list)
    ratios = defaultdict(list)  # (family, method) -> provider / estimate, growth pairs
    per_session = []
    for s in sessions:
        family = tokens.model_family(s.model)
        session_rows = defaultdict(list)
        base: dict[str, float] = {}
        cumulative = dict.fromkeys(METHODS, 0)
        prev = None
        for req in s.requests:
            est = {m: estimators[m].history_tokens(req.appended, model=s.model, method=m) for m in METHODS}
            if req.segment_start:
                cumulative = dict.fromkeys(METHODS, 0)
            for m in METHODS:
                cumulative[m] += est[m]
            if req.segment_start or prev is None:
                base = {m: req.prompt_tokens - cumulative[m] for m in METHODS}
            else:
                cls = "cjk" if cjk_share(req.appended) >= 0.25 else "ascii"
                delta = req.prompt_tokens - prev
                if delta >= min_delta:
                    for m in METHODS:
                        err = abs(est[m] - delta) / delta * 100
                        growth[(cls, m)].append(err)
                        if not req.opaque:
                            visible[(cls, m)].append(err)
                        session_rows[m].append(err)
                        if est[m] > 0 and not req.opaque:
                            ratios[(family, cls, m)].append(delta / est[m])
                for m in METHODS:
                    predicted = base[m] + cumulative[m]
                    whole[(cls, m)].append(abs(predicted - req.prompt_tokens) / req.prompt_tokens * 100)
            prev = req.prompt_tokens
        per_session.append((s, {m: statistics.median(v) if v else float("nan") for m, v in session_rows.items()}))
    return growth, visible, whole, ratios, per_session


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--min-delta", type=int, default=300)
    ap.add_argument("--sessions", action="store_true", help="print one line per session")
    args = ap.parse_args(argv)
    if not (args.corpus / "manifest.json").is_file():
        print(f"corpus not found at {args.corpus}", file=sys.stderr)
        return 2
    print(f"tiktoken offline: {tokens.tiktoken_available()}  o200k_base cached: {tokens.tiktoken_available('o200k_base')}")
    sessions = load_sessions(args.corpus)
    print(f"sessions with provider usage: {len(sessions)}, requests: {sum(len(s.requests) for s in sessions)}")
    growth, visible, whole, ratios, per_session = evaluate(sessions, args.min_delta)

    def table(title: str, data) -> None:
        print(f"\n{title}")
        print(f"{'class':<7}{'method':<11}{'n':>6}{'median %':>10}{'p90 %':>9}")
        for cls in ("ascii", "cjk"):
            for m in METHODS:
                v = data.get((cls, m), [])
                print(f"{cls:<7}{m:<11}{len(v):>6}{pct(v, 0.5):>10.1f}{pct(v, 0.9):>9.1f}")

    table(f"growth: |estimate(appended) - provider increase| / increase  (increase >= {args.min_delta})", growth)
    table("growth, pairs whose appended content is fully recorded (no redacted thinking / encrypted reasoning)", visible)
    table("whole request: |C + estimate(history) - provider prompt| / prompt  (C from each segment's first request)", whole)
    print("\nmedian provider/estimate ratio on fully recorded growth pairs (calibration scale)")
    for (family, cls, m), v in sorted(ratios.items()):
        print(f"  {family:<12}{cls:<7}{m:<11}n={len(v):<5} median={statistics.median(v):.3f}  p25={pct(v, 0.25):.3f}  p75={pct(v, 0.75):.3f}")
    if args.sessions:
        print("\nper session (median growth error %)")
        for s, med in per_session:
            name = "/".join(s.path.parts[-2:])[-60:]
            print(f"  {s.fmt:<12}{s.model[:26]:<27}{len(s.requests):>5} req  " + "  ".join(f"{m}={med.get(m, float('nan')):.1f}" for m in METHODS) + f"  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
