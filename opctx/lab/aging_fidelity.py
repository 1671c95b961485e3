"""Recorded aging vs modelled aging: Claude Code's microcompactions, request by request.

``aging_fidelity_table(sessions, presets=("claude-code",), mode="resync")`` has one
row per recorded microcompaction (a display-only node with ``metadata.microcompaction``,
see ``opctx.importers.claude_code``) and says, per preset, where the preset's model of
the client (``opctx.lab.microcompact``) cleared tool results and which ones. It is
the real-world check of the specification's tool-result aging.

Columns
=======
``session_id, group, uuid, client_version, recorded_request`` (0-based index of the
request the boundary preceded), ``recorded_stream_index``, ``recorded_context_tokens``
(the client's own count just before: the provider's prompt count of the previous
request; plus its output and the characters / 4 of what came after when the rule
has ``count_since_last_request``),
``recorded_pre_tokens``, ``recorded_tokens_saved``, ``recorded_cleared`` (ids), then
per preset ``{preset}_request``, ``{preset}_delta_requests`` (predicted minus recorded;
missing where the preset never cleared), ``{preset}_jaccard`` (overlap of the cleared
tool-call ids), ``{preset}_tokens_saved``, ``{preset}_pre_tokens``,
``{preset}_warning_tokens`` (the threshold it ran with), and ``mode``.

Modes
=====
* ``free``: the preset replayed over the whole session from its start
  (``opctx.lab.replay.replay(history, "claude-code", microcompact=<rule>)``): its own
  cleared set, the engine's own compactions; the ager compares, as the client does,
  the provider's count of the last request the recording holds. The clearings are
  read off the replay (a step whose context holds newly cleared results). Each
  recorded boundary is matched to the nearest predicted clearing not yet matched.
  ``simulate_microcompaction`` is the engine-free variant (the replay's estimate plus
  the recording's unseen overhead, measured at its first request).
* ``resync``: each recorded boundary is predicted from the state the real client had
  just after the previous one: the recorded cleared set, and the recording's own
  count of the context (provider count of the last request plus what followed, the
  quantity Claude Code compares with its threshold, ``opctx.lab.microcompact``). The first clearing the preset
  makes from there is the prediction. One early miss does not decide later rows.

Recorded compactions (manual ``/compact`` in these files) reset the context in both
modes: results before them are gone, the summary takes their place.

Presets
=======
``"claude-code"`` is ``opctx.lab.microcompact.rule_for(window)`` with the window of
the recording's model; a ``(label, MicrocompactRule)`` pair runs any variant. Nothing
in the default rule is fitted on the corpus (every number has a public source, see
``opctx.lab.microcompact``). ``fit="loso"`` replaces the warning threshold by one fitted
leave-one-session-out: for the sessions of a group (sessions sharing a boundary uuid
are one group, a session saved in two files), the smallest ``recorded_context_tokens``
of the *other* groups' boundaries; the row says which threshold it ran with.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from .history import RecordedHistory, as_history, provider_prompt_tokens, shared_key_roots
from .microcompact import (
    CLEARED_TEXT,
    MicrocompactEvent,
    MicrocompactRule,
    clearable_results,
    plan_clearing,
    result_tokens,
    rule_for,
)

__all__ = [
    "MODES",
    "recorded_microcompactions",
    "simulate_microcompaction",
    "aging_fidelity_table",
    "aging_fidelity_summary",
]

MODES = ("resync", "free")


def _sent(msg: dict) -> bool:
    """Is a stream message part of what the client sends (display-only lines are not)?"""
    return not (msg.get("display_only") or msg.get("role") == "system")


def _requests(messages: Sequence[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]


def recorded_microcompactions(history: RecordedHistory) -> list[dict[str, Any]]:
    """The recorded microcompactions of a history, in order, with the request each preceded."""
    out = []
    n_requests = 0
    for i, msg in enumerate(history.messages):
        if msg.get("role") == "assistant":
            n_requests += 1
        mc = msg.get("microcompaction")
        if not isinstance(mc, dict):
            continue
        out.append({
            "stream_index": i,
            "request": n_requests,  # requests made before it = index of the one it preceded
            "uuid": mc.get("uuid"),
            "trigger": mc.get("trigger"),
            "pre_tokens": mc.get("pre_tokens"),
            "tokens_saved": mc.get("tokens_saved"),
            "tool_call_ids": [str(t) for t in mc.get("tool_call_ids") or ()],
            "client_version": history.version_at(i),
        })
    return out


class _Walk:
    """The recording's stream as the client's context, request by request.

    ``context`` holds the sent messages since the last recorded compaction (the
    summary first); ``tokens_at(i)`` is the client's count before the request at
    stream index ``i`` (``count="estimate"``: overhead + estimate of the context with
    cleared results replaced; ``count="recorded"``: the recording's own count).
    """

    def __init__(self, history: RecordedHistory, rule: MicrocompactRule, model: str | None) -> None:
        from opctx.context.tokens import Estimator

        self.history = history
        self.rule = rule
        self.messages = history.messages
        estimator = Estimator()
        self.est = history.derived(
            ("aging_fidelity_tokens", model),
            lambda: [estimator.message_tokens(m, model) for m in self.messages],
        )
        self.cleared_cost = estimator.message_tokens({"role": "tool", "content": CLEARED_TEXT}, model)
        self.compaction_at = {c.stream_index: c for c in history.compactions}
        self.summary_tokens = {
            c.stream_index: estimator.message_tokens(c.summary_message or {"role": "user", "content": c.summary_text}, model)
            for c in history.compactions
        }
        self.overhead = self._overhead()

    def _overhead(self) -> int:
        """Provider count minus estimate at the first request that has a count (>= 0)."""
        running = 0
        for i, msg in enumerate(self.messages):
            if i in self.compaction_at:
                running = self.summary_tokens[i]
            if msg.get("role") == "assistant":
                count = provider_prompt_tokens(msg, self.history.format, self.history.model)
                if count is not None:
                    return max(0, count - running)
            if _sent(msg):
                running += self.est[i]
        return 0

    def run(self, start: int, end: int, cleared: set[str], *, count: str, stop_at_first: bool) -> list[MicrocompactEvent]:
        """Clearings the rule makes before the requests at stream indices in ``[start, end)``."""
        rule, messages = self.rule, self.messages
        context: list[dict] = []
        context_tokens = 0  # estimate of the sent context, cleared results as cleared
        since_last = 0  # chars / 4 of what was sent since the last request (recorded count)
        last_count: int | None = None
        last_estimate: int | None = None  # the estimate at the previous request, as sent
        request = 0
        events: list[MicrocompactEvent] = []
        cleared = set(cleared)
        for i, msg in enumerate(messages[:end]):
            if i in self.compaction_at:
                context, context_tokens = [], self.summary_tokens[i]
                last_count, since_last = None, 0
            if msg.get("role") == "assistant":
                if i >= start:
                    now = self.overhead + context_tokens
                    if count == "recorded" and last_count is not None:
                        tokens = last_count + (since_last if rule.count_since_last_request else 0)
                    elif rule.count_since_last_request or last_estimate is None:
                        tokens = now
                    else:
                        tokens = last_estimate
                    plan = plan_clearing(clearable_results(context, rule, cleared), tokens, rule)
                    if plan is not None:
                        ids, pre, saved = plan
                        cleared.update(ids)
                        freed = sum(self.est[j] - self.cleared_cost for j in self._positions(context, ids))
                        context_tokens -= freed
                        if last_count is not None:
                            since_last -= saved
                        events.append(MicrocompactEvent(request, list(ids), pre, saved, int(tokens), i))
                        if stop_at_first:
                            return events
                request += 1
                last_estimate = self.overhead + context_tokens
                provider = provider_prompt_tokens(msg, self.history.format, self.history.model)
                if provider is not None:
                    usage = msg.get("usage") or {}
                    last_count = provider
                    since_last = int(usage.get("output_tokens") or 0)
            elif _sent(msg):
                since_last += result_tokens(msg, rule.chars_per_token) if msg.get("role") == "tool" \
                    else self.est[i]
            if _sent(msg):
                msg_tokens = self.cleared_cost if (msg.get("role") == "tool" and str(msg.get("tool_call_id")) in cleared) \
                    else self.est[i]
                context.append({**msg, "_stream_index": i})
                context_tokens += msg_tokens
        return events

    @staticmethod
    def _positions(context: list[dict], ids: Iterable[str]) -> list[int]:
        wanted = set(ids)
        return [m["_stream_index"] for m in context if m.get("role") == "tool" and str(m.get("tool_call_id")) in wanted]


def simulate_microcompaction(history: Any, rule: MicrocompactRule | None = None, *, model: str | None = None) -> list[MicrocompactEvent]:
    """Every clearing ``rule`` makes over a whole recording, with its own state (``free``)."""
    history = as_history(history)
    model = model or history.model or None
    rule = rule or _default_rule(history)
    walk = _Walk(history, rule, model)
    return walk.run(0, len(history.messages), set(), count="estimate", stop_at_first=False)


def _default_rule(history: RecordedHistory) -> MicrocompactRule:
    from opctx.context.tokens import real_context_window

    window = int(history.context_window or real_context_window(history.model or None))
    return rule_for(window)


def _jaccard(a: Iterable[str], b: Iterable[str]) -> float | None:
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return None
    return len(sa & sb) / len(sa | sb)


def _groups(histories: list[RecordedHistory], points: list[list[dict]]) -> list[str]:
    """A group label per history: histories sharing a boundary uuid or a source session id are one."""
    keys = [[f"u:{p['uuid']}" for p in pts if p.get("uuid")] + [f"s:{s}" for s in history.source_session_ids]
            for history, pts in zip(histories, points, strict=True)]
    return [histories[root].session_id or f"group-{root}" for root in shared_key_roots(keys)]


def _recorded_context(walk: _Walk, point: dict) -> int | None:
    """The client's own count just before a recorded boundary's request."""
    messages = walk.messages
    requests = [i for i in _requests(messages) if i < point["stream_index"]]
    if not requests:
        return None
    last = requests[-1]
    count = provider_prompt_tokens(messages[last], walk.history.format, walk.history.model)
    if count is None:
        return None
    if not walk.rule.count_since_last_request:
        return count
    usage = messages[last].get("usage") or {}
    tokens = count + int(usage.get("output_tokens") or 0)
    for j in range(last + 1, point["stream_index"]):
        msg = messages[j]
        if _sent(msg):
            tokens += result_tokens(msg, walk.rule.chars_per_token) if msg.get("role") == "tool" else walk.est[j]
    return tokens


def _preset_rules(presets: Sequence[Any], history: RecordedHistory) -> list[tuple[str, MicrocompactRule]]:
    out = []
    for preset in presets:
        if isinstance(preset, tuple) and len(preset) == 2 and isinstance(preset[1], MicrocompactRule):
            out.append((str(preset[0]), preset[1]))
        elif preset == "claude-code":
            out.append((preset, _default_rule(history)))
        else:
            raise ValueError(f"aging_fidelity_table models Claude Code's microcompaction: presets are "
                             f"'claude-code' or (label, MicrocompactRule) pairs, got {preset!r}")
    return out


def aging_fidelity_table(
    sessions: Iterable[Any],
    presets: Sequence[Any] = ("claude-code",),
    mode: str = "resync",
    *,
    fit: str | None = None,
) -> Any:
    """One row per recorded microcompaction (module docstring: columns, modes, ``fit``)."""
    import pandas as pd

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if fit not in (None, "loso"):
        raise ValueError(f"fit must be None or 'loso', got {fit!r}")
    histories = [as_history(s) for s in sessions]
    points = [recorded_microcompactions(h) for h in histories]
    groups = _groups(histories, points)
    rules = [_preset_rules(presets, h) for h in histories]
    contexts = [[_recorded_context(_Walk(h, r[0][1] if r else _default_rule(h), h.model or None), p) for p in pts]
                for h, r, pts in zip(histories, rules, points, strict=True)]
    rows: list[dict[str, Any]] = []
    for h_index, (history, pts) in enumerate(zip(histories, points, strict=True)):
        if not pts:
            continue
        base = [{
            "session_id": history.session_id, "group": groups[h_index], "uuid": p["uuid"],
            "client_version": p["client_version"], "recorded_request": p["request"],
            "recorded_stream_index": p["stream_index"], "recorded_context_tokens": contexts[h_index][k],
            "recorded_pre_tokens": p["pre_tokens"], "recorded_tokens_saved": p["tokens_saved"],
            "recorded_cleared": len(p["tool_call_ids"]), "mode": mode,
        } for k, p in enumerate(pts)]
        for label, rule in rules[h_index]:
            if fit == "loso":
                others = [c for g, ctx in zip(groups, contexts, strict=True) if g != groups[h_index]
                          for c in ctx if c is not None]
                if others:
                    rule = replace(rule, warning_tokens=int(min(others)))
            walk = _Walk(history, rule, history.model or None)
            predicted = _predict(walk, pts, mode)
            for row, point, event in zip(base, pts, predicted, strict=True):
                row[f"{label}_warning_tokens"] = rule.warning_tokens
                row[f"{label}_request"] = event.request if event else None
                row[f"{label}_delta_requests"] = event.request - point["request"] if event else None
                row[f"{label}_jaccard"] = _jaccard(event.tool_call_ids, point["tool_call_ids"]) if event else 0.0
                row[f"{label}_tokens_saved"] = event.tokens_saved if event else None
                row[f"{label}_pre_tokens"] = event.pre_tokens if event else None
        rows.extend(base)
    df = pd.DataFrame(rows)
    for col in df.columns:
        if col.endswith(("_request", "_delta_requests", "_tokens_saved", "_pre_tokens", "_warning_tokens")) \
                or col in ("recorded_context_tokens", "recorded_pre_tokens", "recorded_tokens_saved"):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    return df


def _predict(walk: _Walk, points: list[dict], mode: str) -> list[MicrocompactEvent | None]:
    """The predicted clearing matched to each recorded boundary (module docstring: modes)."""
    n = len(walk.messages)
    if mode == "resync":
        out: list[MicrocompactEvent | None] = []
        requests = _requests(walk.messages)
        for k in range(len(points)):
            if k == 0:
                start = 0
            else:
                # the request the previous boundary preceded was made after its clearing:
                # the next decision is before the request after it
                after = [i for i in requests if i > points[k - 1]["stream_index"]]
                start = after[1] if len(after) > 1 else n
            # up to the next recorded boundary: past it the recording's counts reflect that one
            end = points[k + 1]["stream_index"] if k + 1 < len(points) else n
            cleared: set[str] = set()
            for earlier in points[:k]:
                cleared.update(earlier["tool_call_ids"])
            events = walk.run(start, end, cleared, count="recorded", stop_at_first=True)
            out.append(events[0] if events else None)
        return out
    events = _replay_events(walk.history, walk.rule)
    unmatched = list(events)
    matched: list[MicrocompactEvent | None] = []
    for point in points:
        if not unmatched:
            matched.append(None)
            continue
        best = min(unmatched, key=lambda e: (abs(e.request - point["request"]), e.request))
        unmatched.remove(best)
        matched.append(best)
    return matched


def _replay_events(history: RecordedHistory, rule: MicrocompactRule) -> list[MicrocompactEvent]:
    """The clearings of the ``claude-code`` preset with ``rule`` in a replay of ``history``."""
    from .replay import replay

    result = replay(history, "claude-code", client_version=history.client_version, microcompact=rule,
                    keep_contexts=True)
    originals = {str(m.get("tool_call_id")): m for m in history.messages if m.get("role") == "tool"}
    events: list[MicrocompactEvent] = []
    seen: set[str] = set()
    for step in range(len(result.steps_df)):
        context = result.context(step)
        cleared = [str(m.get("tool_call_id")) for m in context if m.get("_microcompacted")]
        new = [t for t in cleared if t not in seen]
        if not new:
            continue
        seen.update(new)
        saved = sum(result_tokens(originals[t], rule.chars_per_token) for t in new if t in originals)
        left = sum(tokens for _, tokens in clearable_results(context, rule, seen))
        events.append(MicrocompactEvent(step, new, saved + left, saved, 0,
                                        int(result.steps_df["stream_index"].iloc[step])))
    return events


def aging_fidelity_summary(table: Any, presets: Sequence[str] = ("claude-code",)) -> dict[str, dict[str, Any]]:
    """Per preset: rows, predicted, within one request, median Jaccard, median saved-tokens error."""
    out: dict[str, dict[str, Any]] = {}
    for label in presets:
        delta = table[f"{label}_delta_requests"]
        jacc = [float(v) for v in table[f"{label}_jaccard"] if v == v and v is not None]
        saved = [abs(int(p) - int(r)) / int(r) for p, r in zip(table[f"{label}_tokens_saved"],
                                                               table["recorded_tokens_saved"], strict=True)
                 if p is not None and r is not None and str(p) != "<NA>" and str(r) != "<NA>" and int(r) > 0]
        out[label] = {
            "rows": len(table),
            "predicted": int(delta.notna().sum()),
            "within_one_request": int((delta.dropna().abs() <= 1).sum()),
            "exact_request": int((delta.dropna() == 0).sum()),
            "median_jaccard": statistics.median(jacc) if jacc else None,
            "median_tokens_saved_error": statistics.median(saved) if saved else None,
        }
    return out
