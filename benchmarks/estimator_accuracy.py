"""How close are opctx's token estimates to what providers really counted?

Reads every transcript under ``--corpus`` with ``opctx.importers`` (any supported format,
any folder layout, with or without a ``manifest.json``) and keeps the sessions whose
requests carry provider usage. Each llm node with usage is one request; its prompt is
``input + cache_read + cache_write`` as the importer normalised it (Claude Code:
``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``; Codex:
``last_token_usage.input_tokens``, cached included). Aider's usage is rounded to two
or three digits (``2.4k sent``), so Aider sessions are left out.

What a request contained is the importer's ``reads`` of its llm node (the chain of nodes
the model saw: display-only lines are not in it). Two requests are a *pair* when the
earlier one is the latest request on the later one's chain and its context is a prefix of
the later one's; what was appended between them is the earlier request's reply and the
nodes after it. Recorded as sent, not as stored: a tool result spilled to a file counts
at the inline text the model got (``metadata.inline_output``), and the ``plan`` argument
Claude Code writes into an ``ExitPlanMode`` call after the model saved the plan to a plan
file (``.claude/plans/``) is left out, since the client filled it in from that file.

Families (keys ``family/class`` of ``--json``): ``claude`` (a Claude model whose usage
carries Anthropic's ``cache_*`` keys: Anthropic's own endpoint), ``third-party`` (a Claude
name on an endpoint whose usage lacks them: another tokenizer), ``claude-unverified``
(a Claude name in a format that keeps no raw usage), ``codex`` (Codex CLI), ``openai``
(other OpenAI models), else the model family. A pair is ``cjk`` when CJK characters
carry >= 25% of the heuristic token mass of what was appended, else ``ascii``.

Measures, each an absolute % error, median (and p90 / token-weighted in the tables):

1. growth: ``P(k) - P(j)`` against the estimate of what was appended; pairs with an
   increase under ``--min-delta`` (300) are skipped (fixed per-request framing dominates
   there), and so are pairs across a compaction, marked (a compaction or
   microcompaction boundary line) or not (the prompt shrinks by a third).

   * text: everything appended is estimated;
   * usage: the earlier request's reply is counted at the output tokens the provider
     reported for it (+ one message of framing), the rest estimated. A reported output
     below half the reply's visible heuristic estimate is a streaming snapshot (some
     Claude Code versions log ``output_tokens: 1``): those pairs use the text estimate.

2. whole request: ``P(k)`` against ``C + estimate(context)``, C (system prompt, tool
   schemas, whatever the transcript does not hold) measured once at the first request of
   each segment and carried forward: a session continued from context that is not in the
   file starts with that unseen part in C.

Methods: ``heuristic`` and ``tiktoken`` (raw text, generic structure: 4 per message, 8
per tool item), ``auto`` (``tokens.FAMILY_PROFILES`` as shipped, whose Claude constants
were fitted on this corpus, so its Claude figures are in-sample) and ``loso``: the
family's fitted constants refitted for every session with that session left out (a
session is scored only by a fit that never saw it; sessions sharing a recorded request
id, or a subagent and its parent, count as one session). ``--json`` reports the shipped
estimator (``auto``) under ``growth_*`` / ``whole_request_*``, and the leave-one-session-out
refit of the fitted families under keys that say so (``refit_loso_*``).

``--kinds`` prints the growth error broken down by content kind (text, tool inputs,
tool results, thinking, reminders, images, structure) with the per-kind ratio of what
the provider counted to cl100k, old estimator against new; ``--sessions`` one line per
session; ``--speed`` times ``tokens.bpe_token_count`` on long inputs without whitespace.

Run:  .venv/bin/python benchmarks/estimator_accuracy.py [--corpus DIR] [--json] [--kinds]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.context import _heuristic, tokens  # noqa: E402
from opctx.dag.messages import call_to_message  # noqa: E402
from opctx.importers import iter_transcript_files, parse_path  # noqa: E402
from opctx.importers.base import TranscriptError  # noqa: E402

METHODS = ("heuristic", "tiktoken", "auto")
LOSSY_FORMATS = {"aider"}
CJK_SHARE = 0.25
# the estimator as it was before the per-kind costs: one text factor, 4 per message and
# 8 per tool item, images 1,600, reasoning never counted (the "old" column of --kinds)
OLD_CLAUDE = tokens.FamilyProfile("tiktoken", tokens.OFFLINE_CL100K, 1.2)


# ----------------------------------------------------------------------------- reading


@dataclass
class Request:
    node: str
    prompt_tokens: int
    output_tokens: int | None
    context: list[str]  # ids of the nodes the request's prompt held, in order


@dataclass
class Session:
    path: str
    fmt: str
    model: str
    family: str
    group: str
    requests: list[Request] = field(default_factory=list)
    sent: dict[str, dict] = field(default_factory=dict)  # node id -> message as sent
    breaks: set[str] = field(default_factory=set)  # nodes a compaction line hangs on


def report_family(fmt: str, model: str, raw_usage: list) -> str:
    family = tokens.model_family(model)
    if family == "anthropic":
        dicts = [u for u in raw_usage if isinstance(u, dict)]
        if not dicts:
            return "claude-unverified"
        return "claude" if any(k.startswith("cache_") for u in dicts for k in u) else "third-party"
    if fmt == "codex":
        return "codex"
    if family in ("openai", "openai-legacy"):
        return "openai"
    return family


def _prompt(usage: dict) -> int:
    return sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens"))


def _plan_file_writes(calls) -> bool:
    for c in calls:
        for tc in c.metadata.get("tool_calls") or ():
            args = tc.get("arguments") if isinstance(tc, dict) else None
            if isinstance(args, dict) and "/.claude/plans/" in str(args.get("file_path", "")).replace("\\", "/"):
                return True
    return False


def sent_view(call, plan_from_file: bool) -> dict:
    """The message a recorded node was sent as (see the module docstring)."""
    msg = call_to_message(call)
    if call.role == "code" and isinstance(call.metadata.get("inline_output"), str):
        msg["content"] = call.metadata["inline_output"]
    if plan_from_file and msg.get("tool_calls"):
        calls = []
        for tc in msg["tool_calls"]:
            args = tc.get("arguments") if isinstance(tc, dict) else None
            if tc.get("name") == "ExitPlanMode" and isinstance(args, dict) and "plan" in args:
                tc = {**tc, "arguments": {k: v for k, v in args.items() if k != "plan"}}
            calls.append(tc)
        msg["tool_calls"] = calls
    return msg


def session_of(imported) -> Session | None:
    calls = imported.calls
    by_id = {c.id: c for c in calls}
    requests, raw = [], []
    for c in calls:
        meta = c.metadata
        usage = meta.get("usage")
        if c.role != "llm" or meta.get("role") == "system" or meta.get("synthetic") or not isinstance(usage, dict):
            continue
        prompt = _prompt(usage)
        if prompt <= 0:
            continue
        out = usage.get("output_tokens")
        requests.append(Request(c.id, prompt, int(out) if isinstance(out, int | float) else None, list(c.reads or ())))
        raw.append(meta.get("usage_raw"))
    if len(requests) < 2:
        return None
    model = imported.model or next((by_id[r.node].name for r in requests if by_id[r.node].name), "")
    plan = _plan_file_writes(calls)
    needed = {i for r in requests for i in (*r.context, r.node)}
    sent = {i: sent_view(by_id[i], plan) for i in needed if i in by_id and not by_id[i].metadata.get("synthetic")}
    breaks = {
        c.predecessor
        for c in calls
        if c.metadata.get("role") == "system" and str(c.metadata.get("subtype", "")).endswith("compact_boundary")
    }
    parent = (imported.meta or {}).get("parent")
    group = parent.get("session_id") if isinstance(parent, dict) else parent if isinstance(parent, str) else None
    return Session(
        imported.source_path,
        imported.format,
        model,
        report_family(imported.format, model, raw),
        group or imported.session_id,
        requests,
        sent,
        breaks,
    )


def load_sessions(corpus: Path) -> tuple[list[Session], list[str]]:
    """Every session with usage under ``corpus``, and what could not be read (and why)."""
    sessions: list[Session] = []
    problems: list[str] = []
    for path, _ in iter_transcript_files([corpus]):
        try:
            imported = parse_path(path, on_error="skip")
        except (TranscriptError, OSError) as exc:
            problems.append(str(exc))
            continue
        for one in imported:
            if one.format in LOSSY_FORMATS:
                continue
            s = session_of(one)
            if s is not None:
                sessions.append(s)
    _merge_groups(sessions)
    return sessions, problems


def _merge_groups(sessions: list[Session]) -> None:
    """Sessions that share a recorded request (a copied or resumed file) are one group."""
    owner: dict[str, str] = {}
    parent: dict[str, str] = {}

    def find(g: str) -> str:
        while parent.get(g, g) != g:
            g = parent[g]
        return g

    for s in sessions:
        for r in s.requests:
            for key in _request_keys(s, r):
                if key in owner:
                    a, b = find(owner[key]), find(s.group)
                    if a != b:
                        parent[b] = a
                else:
                    owner[key] = s.group
    for s in sessions:
        s.group = find(s.group)


def _request_keys(s: Session, r: Request) -> list[str]:
    msg = s.sent.get(r.node) or {}
    mid = msg.get("message_id")
    return [f"mid:{mid}"] if isinstance(mid, str) and mid else []


# ----------------------------------------------------------------------------- measures


@dataclass
class Sent:
    """One appended message: its parts, text counts per counter, client echoes."""

    parts: tokens.MessageParts
    raw: dict[str, dict[str, tokens.TextCount]]  # counter -> content kind -> counts
    by_kind: dict[str, int]  # cl100k tokens per content kind
    # raw tokens per counter of the inputs of tool calls whose results Claude Code
    # sends with more than the transcript holds (see CLIENT_ECHOES)
    echo: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class Pair:
    session: int
    family: str
    cls: str
    delta: int
    appended: list[Sent]
    reply_output: int | None  # usable reported output of the reply (the first message)


def cjk_share(messages: list[Sent]) -> float:
    total = cjk = 0.0
    for m in messages:
        for _, seg in m.parts.segments:
            total += tokens.heuristic_tokens(seg)
            cjk += _heuristic._count(_heuristic._CJK, seg) / tokens.HEURISTIC_CHARS_PER_TOKEN["cjk"]
    return cjk / total if total else 0.0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class Measure:
    """Per-message parts and counts, cached by node id."""

    def __init__(self, counters: list[str]):
        self.est = tokens.Estimator("auto")
        self.counters = counters
        self._memo: dict[tuple[int, str], Sent] = {}

    def sent(self, index: int, s: Session, node: str) -> Sent | None:
        key = (index, node)
        if key not in self._memo:
            msg = s.sent.get(node)
            if msg is None:
                return None
            parts = tokens.message_parts(msg)
            raw = {c: self.est.parts_count(parts, c) for c in self.counters}
            by_kind: dict[str, int] = defaultdict(int)
            for kind, seg in parts.segments:
                by_kind[kind] += self.est.count(seg, tokens.OFFLINE_CL100K)
            echo: dict[str, dict[str, int]] = {}
            if s.fmt in CLAUDE_CODE_FORMATS:
                for call in msg.get("tool_calls") or ():
                    if isinstance(call, dict) and call.get("name") in CLIENT_ECHOES:
                        text = json.dumps(call.get("arguments"), ensure_ascii=False)
                        into = echo.setdefault(call["name"], dict.fromkeys(self.counters, 0))
                        for c in self.counters:
                            into[c] += self.est.count(text, c)
            self._memo[key] = Sent(parts, raw, dict(by_kind), echo)
        return self._memo[key]


@dataclass(frozen=True, eq=False)
class Model:
    """What is scored: a family profile, plus the client echoes of the reconstruction."""

    profile: tokens.FamilyProfile
    echoes: dict[str, float] = field(default_factory=dict)


def cost(messages: list[Sent], counter: str, model: Model) -> int:
    total = sum(model.profile.message_cost(m.parts, m.raw[counter]) for m in messages)
    echo = sum(model.echoes.get(tool, 0.0) * raw[counter] for m in messages for tool, raw in m.echo.items())
    return total + math.ceil(echo)


def _usable_output(reply: Sent, reported: int | None) -> int | None:
    """The reported output of the reply if it can be the final figure (see docstring)."""
    if reported is None or reported <= 0:
        return None
    visible = sum(tokens.heuristic_tokens(seg) for _, seg in reply.parts.segments)
    return reported if reported >= 0.5 * visible else None


@dataclass
class Whole:
    """One request for the whole-request measure."""

    session: int
    family: str
    cls: str
    prompt: int
    parent: int | None  # index in the list of the request this one continues, None: new segment
    appended: list[Sent]


def collect(sessions: list[Session], measure: Measure, min_delta: int) -> tuple[list[Pair], list[Whole]]:
    """Growth pairs, and every request for the whole-request measure."""
    pairs: list[Pair] = []
    wholes: list[Whole] = []
    for index, s in enumerate(sessions):
        by_node = {r.node: r for r in s.requests}
        position: dict[str, int] = {}
        for r in s.requests:
            parent = next((by_node[i] for i in reversed(r.context) if i in by_node), None)
            linked = (
                parent is not None
                and parent.node in position
                and r.context[: len(parent.context) + 1] == [*parent.context, parent.node]
                and r.prompt_tokens >= 2 * parent.prompt_tokens / 3
                and not any(i in s.breaks for i in r.context[len(parent.context) :])
            )
            appended_ids = r.context[len(parent.context) :] if linked else r.context
            appended = [m for m in (measure.sent(index, s, i) for i in appended_ids) if m is not None]
            cls = "cjk" if cjk_share(appended) >= CJK_SHARE else "ascii"
            position[r.node] = len(wholes)
            wholes.append(Whole(index, s.family, cls, r.prompt_tokens, position[parent.node] if linked else None, appended))
            if not linked:
                continue
            delta = r.prompt_tokens - parent.prompt_tokens
            if delta < min_delta or not appended:
                continue
            reply_output = None
            if s.family != "third-party":
                reply_output = _usable_output(appended[0], parent.output_tokens)
            pairs.append(Pair(index, s.family, cls, delta, appended, reply_output))
    return pairs, wholes


def estimate(pair: Pair, counter: str, model: Model, variant: str) -> int:
    """``text``: everything appended, estimated; ``usage``: the reply at its reported
    output tokens (one message of framing on top), the rest estimated."""
    if variant == "usage" and pair.reply_output is not None:
        return pair.reply_output + tokens.MESSAGE_OVERHEAD_TOKENS + cost(pair.appended[1:], counter, model)
    return cost(pair.appended, counter, model)


# ----------------------------------------------------------------------------- fitting

# Families whose shipped constants were fitted on this corpus: scored leave-one-session-out.
FITTED_FAMILIES = {"claude": "anthropic"}
# Fewer training pairs than this and a fit keeps the shipped constants.
MIN_FIT_PAIRS = 40
CLAUDE_CODE_FORMATS = {"claude_code", "claude_code_hook"}
# What Claude Code sends after these tool calls beyond what its transcript holds, as a
# multiple of the call's input (cl100k tokens). Measured (fitted with the profile, scored
# leave-one-session-out): an AskUserQuestion result reaches the model with the questions
# and options again; a Task result with more than the subagent's final text. The numbers
# are the all-session fit that benchmarks/estimator_accuracy.py prints.
CLIENT_ECHOES = {"AskUserQuestion": 1.81, "Task": 0.31}
# The content kinds whose text scale is fitted apart (the others share ``scale``).
SCALED_KINDS = ("tool_input",)
_FEATURES = ("non-CJK tokens", *(f"non-CJK tokens of {k}" for k in SCALED_KINDS), "CJK characters",
             "numbered lines", "messages", "tool items", *CLIENT_ECHOES)


def total_count(by_kind: dict[str, tokens.TextCount], kinds=None, exclude=()) -> tokens.TextCount:
    total = tokens.TextCount()
    for kind, count in by_kind.items():
        if (kinds is None or kind in kinds) and kind not in exclude:
            total = total + count
    return total


def _features(pair: Pair, variant: str, bpt: float | None) -> tuple[list[float], float]:
    """(linear features in _FEATURES order, the part no fitted constant touches)."""
    messages = pair.appended
    fixed = 0.0
    if variant == "usage" and pair.reply_output is not None:
        messages = messages[1:]
        fixed = pair.reply_output + tokens.MESSAGE_OVERHEAD_TOKENS
    counter = tokens.OFFLINE_CL100K
    text = tokens.TextCount()
    scaled_apart = [tokens.TextCount() for _ in SCALED_KINDS]
    for m in messages:
        text = text + total_count(m.raw[counter])
        for i, kind in enumerate(SCALED_KINDS):
            scaled_apart[i] = scaled_apart[i] + total_count(m.raw[counter], kinds=(kind,))
    row = [
        text.non_cjk_tokens - sum(c.non_cjk_tokens for c in scaled_apart),
        *(c.non_cjk_tokens for c in scaled_apart),
        text.cjk_chars,
        text.numbered_lines,
        len(messages),
        sum(m.parts.tool_calls + m.parts.tool_results for m in messages),
    ]
    row += [sum(m.echo.get(tool, {}).get(counter, 0) for m in pair.appended) for tool in CLIENT_ECHOES]
    hidden = sum(m.parts.hidden_thinking_bytes for m in messages)
    fixed += hidden / bpt if bpt else 0.0
    fixed += sum(tokens.image_tokens(size, "pixels") for m in messages for size in m.parts.images)
    return row, fixed


def fit_model(pairs: list[Pair], base: tokens.FamilyProfile, variant: str = "usage") -> Model:
    """Least absolute relative error fit of every constant in ``_FEATURES``.

    Iteratively reweighted least squares on the relative residuals (converges to the
    L1 solution, robust to the pairs no estimate can explain). Hidden reasoning is
    counted at the bytes per token that visible reasoning runs in the same sessions
    (bytes per cl100k token over the fitted text scale: two passes).
    """
    if len(pairs) < MIN_FIT_PAIRS:
        # too little to fit: the shipped constants (fitted on ../shared/corpus, so an
        # honest score anywhere else)
        return Model(base, dict(CLIENT_ECHOES))
    bytes_per_cl100k = _visible_thinking_bytes_per_cl100k(pairs)
    scale = base.scale
    for _ in range(2):
        bpt = bytes_per_cl100k / scale if bytes_per_cl100k else None
        coef = _lad([_features(p, variant, bpt) for p in pairs], [p.delta for p in pairs])
        scale = float(coef[0])
    scale, *kind_scales = (float(c) for c in coef[: 1 + len(SCALED_KINDS)])
    cjk, numbered, per_message, per_item, *echoes = (float(c) for c in coef[1 + len(SCALED_KINDS) :])
    profile = replace(
        base,
        scale=round(scale, 3),
        kind_scales=tuple((k, round(v, 3)) for k, v in zip(SCALED_KINDS, kind_scales, strict=True)),
        cjk_tokens_per_char=round(cjk, 3),
        numbered_line_tokens=round(numbered, 3),
        message_tokens=max(0, round(per_message)),
        tool_call_tokens=max(0, round(per_item)),
        tool_result_tokens=max(0, round(per_item)),
        thinking_bytes_per_token=round(bpt, 2) if bpt else None,
    )
    return Model(profile, {tool: round(max(0.0, e), 3) for tool, e in zip(CLIENT_ECHOES, echoes, strict=True)})


def _lad(rows: list[tuple[list[float], float]], deltas: list[int]):
    """Coefficients minimising sum |features . c + fixed - delta| / delta."""
    import numpy as np

    x = np.array([r for r, _ in rows], float)
    d = np.array(deltas, float)
    y = d - np.array([f for _, f in rows], float)
    w = 1.0 / d
    coef = np.zeros(x.shape[1])
    for _ in range(80):
        coef, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
        w = 1.0 / d / np.sqrt(np.maximum(np.abs(x @ coef - y) / d, 1e-3))
    return coef


def _visible_thinking_bytes_per_cl100k(pairs: list[Pair]) -> float | None:
    size = count = 0
    for p in pairs:
        for m in p.appended:
            for kind, seg in m.parts.segments:
                if kind == "thinking":
                    size += len(seg.encode("utf-8"))
            count += m.by_kind.get("thinking", 0)
    return size / count if count else None


def loso_models(pairs: list[Pair], sessions: list[Session]) -> dict[int, Model]:
    """For each session of a fitted family: the model fitted without its group."""
    out: dict[int, Model] = {}
    for family, base_name in FITTED_FAMILIES.items():
        members = [p for p in pairs if p.family == family]
        base = tokens.FAMILY_PROFILES[base_name]
        groups = {sessions[p.session].group for p in members}
        fits = {g: fit_model([p for p in members if sessions[p.session].group != g], base) for g in groups}
        for i, s in enumerate(sessions):
            if s.family == family and s.group in fits:
                out[i] = fits[s.group]
    return out


# ----------------------------------------------------------------------------- reports


def method_settings(measure: Measure, s: Session, index: int, loso: dict[int, Model]):
    """(method name, counter, model) for every method scored on session ``s``."""
    echoes = CLIENT_ECHOES if s.fmt in CLAUDE_CODE_FORMATS else {}
    # a Claude name on another endpoint: as docs/tokens.md advises, registered as family
    # "unknown" (the endpoint's tokenizer is not Claude's)
    model_name = "" if s.family == "third-party" else s.model
    out = []
    for m in METHODS:
        counter, profile = measure.est.profile(model_name, m)
        out.append((m, counter, Model(profile, echoes)))
    counter, profile = measure.est.profile(model_name, "auto")
    out.append(("loso", counter, loso.get(index, Model(profile, echoes))))
    return out


def growth_errors(pairs, sessions, measure, loso, variant):
    errors = defaultdict(list)  # (family, cls, method) -> [(abs pct, delta)]
    for p in pairs:
        for m, counter, model in method_settings(measure, sessions[p.session], p.session, loso):
            err = abs(estimate(p, counter, model, variant) - p.delta) / p.delta * 100
            errors[(p.family, p.cls, m)].append((err, p.delta))
    return errors


def whole_errors(wholes: list[Whole], sessions, measure, loso):
    """|C + estimate(context) - prompt| / prompt, C carried from each segment's start."""
    errors = defaultdict(list)
    settings = {i: method_settings(measure, s, i, loso) for i, s in enumerate(sessions)}
    totals: list[dict[str, int]] = []
    bases: list[dict[str, int]] = []
    for w in wholes:
        total, base = {}, {}
        for m, counter, model in settings[w.session]:
            added = cost(w.appended, counter, model)
            if w.parent is None:
                total[m], base[m] = added, w.prompt - added
            else:
                total[m] = totals[w.parent][m] + added
                base[m] = bases[w.parent][m]
                errors[(w.family, w.cls, m)].append(abs(base[m] + total[m] - w.prompt) / w.prompt * 100)
        totals.append(total)
        bases.append(base)
    return errors


def summary(rows: list[tuple[float, int]], big: int) -> str:
    apes = [e for e, _ in rows]
    weighted = sum(e * d for e, d in rows) / sum(d for _, d in rows)
    large = [e for e, d in rows if d >= big]
    return f"{len(rows):>5}{pct(apes, 0.5):>9.1f}{pct(apes, 0.9):>8.1f}{weighted:>10.1f}{pct(large, 0.5):>9.1f}"


def print_growth(title: str, errors, families: list[str], big: int) -> None:
    print(f"\n{title}")
    print(f"{'family':<18}{'class':<7}{'method':<11}{'n':>5}{'median%':>9}{'p90%':>8}{'weighted%':>10}{f'med>={big}':>9}")
    for family in families:
        for cls in ("ascii", "cjk"):
            for m in (*METHODS, "loso"):
                rows = errors.get((family, cls, m), [])
                if rows and (m != "loso" or family in FITTED_FAMILIES):
                    print(f"{family:<18}{cls:<7}{m:<11}" + summary(rows, big))


def medians(errors, families, whole: bool = False, refit: bool = False) -> dict[str, float]:
    """Median per family/class of the shipped estimator (``auto``), or with ``refit`` of the
    leave-one-session-out refit (``loso``, families with fitted constants only)."""
    out = {}
    for family in families:
        if refit and family not in FITTED_FAMILIES:
            continue
        method = "loso" if refit else "auto"
        for cls in ("ascii", "cjk"):
            rows = errors.get((family, cls, method), [])
            values = rows if whole else [e for e, _ in rows]
            if values:
                out[f"{family}/{cls}"] = round(statistics.median(values), 2)
    return out


# The estimator before the per-kind costs (the "old" column of --kinds): one text factor,
# 4 per message, 8 per tool item, images at 1,600, reasoning never counted, no echoes.
OLD_CLAUDE = Model(tokens.FamilyProfile("tiktoken", tokens.OFFLINE_CL100K, 1.2))
_KIND_LABELS = {"text": "text", "tool_input": "tool inputs", "tool_result": "tool results",
                "thinking": "thinking (visible)", "reminder": "reminders", "other": "other"}


def kinds_report(pairs: list[Pair], sessions: list[Session], measure: Measure, loso: dict[int, Model], family: str) -> None:
    """Where the growth error came from, by content kind, old estimator against new."""
    mine = [p for p in pairs if p.family == family]
    if not mine:
        return
    counter = tokens.OFFLINE_CL100K
    new = Model(measure.est.profile(sessions[mine[0].session].model, "auto")[1], CLIENT_ECHOES)
    kinds = [k for k in tokens.CONTENT_KINDS if any(m.by_kind.get(k) for p in mine for m in p.appended)]
    columns = [*kinds, "CJK characters", "numbered lines", "hidden thinking", "images", "tool items", "messages", *CLIENT_ECHOES]
    x, deltas = [], []
    for p in mine:
        row = [sum(total_count(m.raw[counter], kinds=(k,)).non_cjk_tokens for m in p.appended) for k in kinds]
        row += [sum(total_count(m.raw[counter]).cjk_chars for m in p.appended),
                sum(total_count(m.raw[counter]).numbered_lines for m in p.appended)]
        row.append(sum(m.parts.hidden_thinking_bytes for m in p.appended) / (new.profile.thinking_bytes_per_token or 3.5))
        row.append(sum(tokens.image_tokens(size, "pixels") for m in p.appended for size in m.parts.images))
        row.append(sum(m.parts.tool_calls + m.parts.tool_results for m in p.appended))
        row.append(len(p.appended))
        row += [sum(m.echo.get(t, {}).get(counter, 0) for m in p.appended) for t in CLIENT_ECHOES]
        x.append(row)
        deltas.append(p.delta)
    coef = _lad([(row, 0.0) for row in x], deltas)
    totals = [sum(column) for column in zip(*x, strict=True)]
    text_total = sum(totals[: len(kinds)]) or 1
    print(f"\nper content kind, {family}: {len(mine)} growth pairs (text variant)")
    print("  amount: cl100k tokens (kinds: of the non-CJK text), or items; share of the text tokens;")
    print("  fitted: what the provider counted per unit, all kinds fitted at once (least absolute")
    print("  relative error, in-sample); old / new: what the estimator counts per unit")
    print(f"  {'kind':<24}{'amount':>10}{'share':>8}{'fitted':>9}{'old':>10}{'new':>8}")
    prof, old = new.profile, OLD_CLAUDE.profile
    shipped = {
        "CJK characters": (f"{old.scale:.2f}*", f"{prof.cjk_tokens_per_char or prof.scale:.2f}"),
        "numbered lines": ("0", f"{prof.numbered_line_tokens:+.2f}"),
        "hidden thinking": ("0", "1.00" if prof.thinking_bytes_per_token else "0"),
        "images": (f"{tokens.IMAGE_TOKENS} each", "1.00"),
        "tool items": (f"{old.tool_call_tokens}", f"{(prof.tool_call_tokens + prof.tool_result_tokens) / 2:g}"),
        "messages": (f"{old.message_tokens}", f"{prof.message_tokens}"),
    }
    for label, value, total in zip(columns, coef, totals, strict=True):
        share = f"{total / text_total * 100:7.1f}%" if label in kinds else " " * 8
        if label in kinds:
            old_v, new_v = f"{old.scale:.2f}", f"{prof.scale_of(label):.2f}"
        elif label in CLIENT_ECHOES:
            old_v, new_v = "0", f"{CLIENT_ECHOES[label]:.2f}"
        else:
            old_v, new_v = shipped[label]
        name = _KIND_LABELS.get(label, label if label not in CLIENT_ECHOES else f"echo of {label}")
        print(f"  {name:<24}{total:>10.0f}{share}{value:>9.2f}{old_v:>10}{new_v:>8}")
    print("  (* old: per cl100k token of CJK text; hidden thinking in payload bytes / bytes per token;")
    print("   images: pixel rule tokens; echoes: per cl100k token of the call's input)")
    print("\n  growth error of the pairs by what dominates them (>= 60% of the appended cl100k tokens),")
    print("  median absolute % (median signed %: negative = estimate too low), old / new / loso:")
    groups = defaultdict(list)
    for p in mine:
        counts = {k: sum(m.by_kind.get(k, 0) for m in p.appended) for k in kinds}
        top = max(counts, key=counts.get)
        label = _KIND_LABELS[top] if counts[top] >= 0.6 * (sum(counts.values()) or 1) else "mixed"
        names = {n for m in p.appended for n in m.echo}
        if any(m.parts.images for m in p.appended):
            label = "with images"
        elif any(m.parts.hidden_thinking_bytes for m in p.appended):
            label = "with hidden thinking"
        elif names:
            label = "with " + "/".join(sorted(names))
        groups[label].append(p)
    for label, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        cells = []
        for model_of in (lambda p: OLD_CLAUDE, lambda p: new, lambda p: loso.get(p.session, new)):
            signed = [(estimate(p, counter, model_of(p), "text") - p.delta) / p.delta * 100 for p in group]
            cells.append(f"{statistics.median(abs(e) for e in signed):5.1f} ({statistics.median(signed):+6.1f})")
        print(f"  {label:<26}{len(group):>5}  " + "  ".join(cells))


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


def run(corpus: Path, min_delta: int = 300) -> dict:
    """Everything the reports need (also used by the tests)."""
    sessions, problems = load_sessions(corpus)
    counters = sorted(
        {"heuristic", tokens.OFFLINE_CL100K}
        | {tokens.Estimator().profile(s.model, m)[0] for s in sessions for m in ("tiktoken", "auto")}
    )
    measure = Measure(counters)
    pairs, wholes = collect(sessions, measure, min_delta)
    loso = loso_models(pairs, sessions)
    families = sorted({s.family for s in sessions})
    growth = {v: growth_errors(pairs, sessions, measure, loso, v) for v in ("text", "usage")}
    whole = whole_errors(wholes, sessions, measure, loso)
    return {
        "sessions": sessions, "problems": problems, "measure": measure, "pairs": pairs,
        "loso": loso, "families": families, "growth": growth, "whole": whole,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--min-delta", type=int, default=300)
    ap.add_argument("--big", type=int, default=1000, help="size filter of the last column")
    ap.add_argument("--json", action="store_true", help="print one JSON object of medians")
    ap.add_argument("--kinds", action="store_true", help="growth error by content kind")
    ap.add_argument("--sessions", action="store_true", help="print one line per session")
    ap.add_argument("--fit", action="store_true", help="print the all-session fit (the shipped constants)")
    ap.add_argument("--speed", action="store_true", help="also time long inputs without whitespace")
    args = ap.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"corpus folder not found: {args.corpus}", file=sys.stderr)
        return 2
    r = run(args.corpus, args.min_delta)
    sessions, pairs, families = r["sessions"], r["pairs"], r["families"]
    if args.json:
        out = {
            # the estimator as shipped: what a user gets (its Claude constants were fitted on
            # ../shared/corpus, so on that corpus these Claude figures are in sample)
            "growth_usage_median_pct": medians(r["growth"]["usage"], families),
            "growth_text_median_pct": medians(r["growth"]["text"], families),
            "whole_request_median_pct": medians(r["whole"], families, whole=True),
            # a refit on the scored data, each session scored by constants fitted without it
            "refit_loso_growth_usage_median_pct": medians(r["growth"]["usage"], families, refit=True),
            "refit_loso_whole_request_median_pct": medians(r["whole"], families, whole=True, refit=True),
            "pairs": {f"{f}/{c}": sum(1 for p in pairs if p.family == f and p.cls == c) for f in families for c in ("ascii", "cjk")},
            "method": {f: "shipped" for f in families},
            "refit_method": {f: "loso" for f in families if f in FITTED_FAMILIES},
            "encodings": {f: r["measure"].est.profile(next(s.model for s in sessions if s.family == f), "auto")[0] for f in families},
        }
        out["pairs"] = {k: v for k, v in out["pairs"].items() if v}
        print(json.dumps(out, sort_keys=True))
        return 0
    print(f"tiktoken offline: {tokens.tiktoken_available()}  o200k_base: {tokens.tiktoken_available('o200k_base')}")
    print(f"sessions with provider usage: {len(sessions)} in {len({s.group for s in sessions})} groups, "
          f"requests: {sum(len(s.requests) for s in sessions)}; unreadable files: {len(r['problems'])}")
    print(f"growth pairs (increase >= {args.min_delta}): {len(pairs)}, of which the reply has a usable reported "
          f"output count: {sum(p.reply_output is not None for p in pairs)}")
    print("columns: n, median and p90 of |estimate - increase| / increase, the token-weighted error "
          f"sum|err| / sum(increase), and the median over pairs with an increase >= {args.big}")
    for variant, title in (
        ("text", "growth, everything appended estimated from its text"),
        ("usage", "growth, the reply at its reported output tokens, the rest estimated"),
    ):
        print_growth(title, r["growth"][variant], families, args.big)
    print("\nleave-one-session-out fits (one per held-out group; min .. max, median):")
    for family in FITTED_FAMILIES:
        models = [m for i, m in r["loso"].items() if sessions[i].family == family]
        if not models:
            continue
        for attr in ("scale", "cjk_tokens_per_char", "numbered_line_tokens", "message_tokens",
                     "tool_call_tokens", "thinking_bytes_per_token"):
            values = [getattr(m.profile, attr) for m in models]
            print(f"  {family:<8}{attr:<24} {min(values)} .. {max(values)}  ({statistics.median(values)})")
        for tool in CLIENT_ECHOES:
            values = [m.echoes[tool] for m in models]
            print(f"  {family:<8}{'echo of ' + tool:<24} {min(values)} .. {max(values)}  ({statistics.median(values)})")
    if args.fit:
        for family, base in FITTED_FAMILIES.items():
            model = fit_model([p for p in pairs if p.family == family], tokens.FAMILY_PROFILES[base])
            print(f"\nall-session fit, {family}: {model.profile}\n  echoes {model.echoes}")
    print("\nwhole request: |C + estimate(context) - provider prompt| / prompt  (C carried from each segment's first request)")
    print(f"{'family':<18}{'class':<7}{'method':<11}{'n':>5}{'median%':>9}{'p90%':>8}")
    for family in families:
        for cls in ("ascii", "cjk"):
            for m in (*METHODS, "loso"):
                rows = r["whole"].get((family, cls, m), [])
                if rows and (m != "loso" or family in FITTED_FAMILIES):
                    print(f"{family:<18}{cls:<7}{m:<11}{len(rows):>5}{pct(rows, 0.5):>9.1f}{pct(rows, 0.9):>8.1f}")
    if args.kinds:
        for family in FITTED_FAMILIES:
            kinds_report(pairs, sessions, r["measure"], r["loso"], family)
    if args.speed:
        speed_report()
    if args.sessions:
        print("\nper session: median growth error % (loso or auto), text / usage variant")
        for index, s in enumerate(sessions):
            mine = [p for p in pairs if p.session == index]
            _, counter, model = method_settings(r["measure"], s, index, r["loso"])[3 if s.family in FITTED_FAMILIES else 2]
            cells = []
            for variant in ("text", "usage"):
                errs = [abs(estimate(p, counter, model, variant) - p.delta) / p.delta * 100 for p in mine]
                cells.append(f"{statistics.median(errs):5.1f}" if errs else "    -")
            name = "/".join(Path(s.path).parts[-2:])[-58:]
            print(f"  {s.family:<12}{s.model[:26]:<27}{len(mine):>4} pairs  {cells[0]} / {cells[1]}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
