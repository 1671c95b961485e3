"""Recorded aging vs modelled aging: Claude Code's microcompactions, request by request.

``aging_fidelity_table(sessions, presets=("claude-code",), mode="resync")`` has one row
per clearing the recording shows and says, per preset, where the preset's model of the
client (``opctx.lab.microcompact``) cleared tool results and which ones. It is the
real-world check of the specification's tool-result aging.

What the recording shows
========================
* ``source="boundary"``: a ``microcompact_boundary`` line (Claude Code 2.1.8-2.1.62;
  a display-only node with ``metadata.microcompaction``, see
  ``opctx.importers.claude_code``), with the client's own ``preTokens``,
  ``tokensSaved`` and cleared ids.
* ``source="saved results"`` (``silent_clearings``): earlier clients clear without a
  line, but with their ``tengu_compact_mc_files`` flag they save each cleared result to
  ``<session>/tool-results/<id>.txt``. A result whose file holds what the message holds
  (the importer keeps the path; a size spill keeps a shorter inline preview and is not
  one) that no boundary names was cleared silently; the clearing is placed before the
  first later request whose provider count fell by at least ``SILENT_DROP_TOKENS`` from
  the one before, with no compaction in between (results folded by a compaction were
  saved by the compaction's own request and are not rows). Such a row has no client
  figures (``recorded_pre_tokens`` empty, ``recorded_tokens_saved`` = the model's size
  of the saved results).

Columns
=======
``session_id, group, uuid, source, client_version, recorded_request`` (0-based index of
the request the clearing preceded), ``recorded_stream_index``,
``recorded_context_tokens`` (the last response's prompt + output before it: what the
client compares), ``recorded_pre_tokens``, ``recorded_tokens_saved``,
``recorded_cleared``, ``auto_compact`` / ``settings_evidence`` (the client settings the
row ran with: ``opctx.lab.client_settings``), then per preset ``{P}_predicted``,
``{P}_request``, ``{P}_delta_requests`` (predicted minus recorded), ``{P}_jaccard``
(overlap of the cleared ids; for a ``saved results`` row, the share of the predicted
ids among the saved ones, which bound what was cleared there from above),
``{P}_exact_set`` (the same ids; for a ``saved results`` row, all of them saved), ``{P}_tokens_saved``,
``{P}_pre_tokens``, ``{P}_warning_tokens`` (the threshold it ran with), ``{P}_rule``,
and ``mode``. A row the preset did not predict is scored like any other: Jaccard 0, no
exact set, 0 tokens saved (its saved-tokens error is 100 %).

Modes
=====
* ``resync``: each clearing is predicted from the state the real client had just after
  the previous one (the cleared ids the recording shows, its own counts): the first
  clearing the rule makes from there is the prediction. One early miss does not decide
  later rows.
* ``free``: the preset replayed over the whole session from its start
  (``opctx.lab.replay.replay(history, "claude-code", microcompact=<rule>)``): its own
  cleared set and compactions, clearings read off the replay; each recorded clearing is
  matched to the nearest predicted one not yet matched. ``simulate_microcompaction`` is
  the engine-free variant (the rule over the recording's counts, its own cleared set).

Recorded compactions reset the context in both modes.

Presets and settings
====================
``"claude-code"`` is the rule of the recording's client version
(``microcompact.rule_for_version``) with the client settings of ``settings``:
``"loso"`` (default: the setting the *other* session groups of its rule show),
``"recording"`` (read off the session itself: in sample), ``"default"`` (the client's
defaults). A ``(label, MicrocompactRule)`` pair runs any variant. Nothing here is fitted
to the rows it scores.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from .client_settings import ClientSettings, settings_for
from .history import RecordedHistory, as_history, provider_prompt_tokens, shared_key_roots
from .microcompact import (
    MicrocompactEvent,
    MicrocompactRule,
    candidates,
    clearable_results,
    plan_clearing,
    result_tokens,
    rule_for,
    rule_for_version,
)

__all__ = [
    "MODES",
    "SILENT_DROP_TOKENS",
    "recorded_microcompactions",
    "silent_clearings",
    "simulate_microcompaction",
    "aging_fidelity_table",
    "aging_fidelity_summary",
]

MODES = ("resync", "free")
# the fall of the provider's count that places a silent clearing: every clearing saves at
# least 20,000 (chars / 4) tokens; half of it leaves room for what the request added (assumed)
SILENT_DROP_TOKENS = 10_000


def _requests(messages: Sequence[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]


def recorded_microcompactions(history: RecordedHistory) -> list[dict[str, Any]]:
    """The recorded microcompaction lines of a history, in order, with the request each preceded."""
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
            "source": "boundary",
        })
    return out


def _silently_saved(history: RecordedHistory) -> dict[str, int]:
    """Stream index of each result the client saved on clearing it with no line about it."""
    named = {str(t) for m in history.messages if isinstance(m.get("microcompaction"), dict)
             for t in m["microcompaction"].get("tool_call_ids") or ()}
    return {str(m["tool_call_id"]): i for i, m in enumerate(history.messages)
            if m.get("role") == "tool" and m.get("spilled_file") and m.get("inline_output") is None
            and m.get("tool_call_id") is not None and str(m["tool_call_id"]) not in named
            and not m.get("cleared_by")}


def silent_clearings(history: RecordedHistory) -> list[dict[str, Any]]:
    """Clearings the recording shows without a line (module docstring, ``saved results``)."""
    saved = _silently_saved(history)
    if not saved:
        return []
    messages = history.messages
    requests = _requests(messages)
    compactions = sorted(c.stream_index for c in history.compactions)
    prompts = {i: provider_prompt_tokens(messages[i], history.format, history.model) for i in requests}
    events: dict[int, list[str]] = {}
    for cid, where in saved.items():
        before = None
        for i in requests:
            if i <= where:
                before = prompts[i] if prompts[i] is not None else before
                continue
            if any(where < c <= i for c in compactions):
                break  # folded by a compaction first: saved by the compaction's own request
            if prompts[i] is not None and before is not None and prompts[i] + SILENT_DROP_TOKENS < before:
                events.setdefault(i, []).append(cid)
                break
            before = prompts[i] if prompts[i] is not None else before
    out = []
    for i, ids in sorted(events.items()):
        out.append({
            "stream_index": i, "request": requests.index(i), "uuid": None, "trigger": "auto",
            "pre_tokens": None, "tool_call_ids": ids, "client_version": history.version_at(i),
            "tokens_saved": sum(result_tokens(messages[saved[c]]) for c in ids), "source": "saved results",
        })
    return out


def _all_clearings(history: RecordedHistory) -> list[dict[str, Any]]:
    return sorted(recorded_microcompactions(history) + silent_clearings(history),
                  key=lambda p: (p["stream_index"], p["source"]))


class _Walk:
    """The client's decisions over a recording: its own counts, the rule, a cleared set."""

    def __init__(self, history: RecordedHistory, rule: MicrocompactRule) -> None:
        self.history = history
        self.rule = rule
        self.messages = history.messages
        self.compaction_at = {c.stream_index for c in history.compactions}

    def last_total(self, index: int, start: int) -> int | None:
        """The last response's prompt + output before ``index`` since ``start``."""
        for j in range(index - 1, start - 1, -1):
            msg = self.messages[j]
            if msg.get("role") == "assistant":
                prompt = provider_prompt_tokens(msg, self.history.format, self.history.model)
                if prompt is not None:
                    return prompt + int((msg.get("usage") or {}).get("output_tokens") or 0)
        return None

    def run(self, start: int, end: int, cleared: set[str], *, stop_at_first: bool) -> list[MicrocompactEvent]:
        """Clearings the rule makes before the requests at stream indices in ``[start, end)``."""
        events: list[MicrocompactEvent] = []
        cleared = set(cleared)
        segment = 0
        request = 0
        for i, msg in enumerate(self.messages[:end]):
            if i in self.compaction_at:
                segment = i
            if msg.get("role") != "assistant":
                continue
            if i >= start:
                count = self.last_total(i, segment)
                plan = None if count is None else plan_clearing(
                    candidates(self.messages[segment:i], self.rule, cleared), count, self.rule)
                if plan is not None:
                    ids, pre, saved = plan
                    cleared.update(ids)
                    events.append(MicrocompactEvent(request, list(ids), pre, saved, int(count), i))
                    if stop_at_first:
                        return events
            request += 1
        return events


def simulate_microcompaction(history: Any, rule: MicrocompactRule | None = None, *, model: str | None = None,
                             ) -> list[MicrocompactEvent]:
    """Every clearing ``rule`` makes over a whole recording with its own cleared set (the
    recording's counts; ``rule``: default the recording's version rule, client defaults)."""
    history = as_history(history)
    rule = rule or _version_rule(history, ClientSettings())
    return _Walk(history, rule).run(0, len(history.messages), set(), stop_at_first=False)


def _version_rule(history: RecordedHistory, settings: ClientSettings) -> MicrocompactRule:
    from opctx.context.tokens import real_context_window

    window = int(history.context_window or real_context_window(history.model or None))
    rule = rule_for_version(history.client_version, context_window=window, model=history.model or None,
                            auto_compact=settings.auto_compact)
    return rule if rule is not None else rule_for(window)


def _jaccard(a: Iterable[str], b: Iterable[str]) -> float | None:
    sa, sb = set(a), set(b)
    if not sa and not sb:
        return None
    return len(sa & sb) / len(sa | sb)


def _set_score(event: MicrocompactEvent | None, point: dict) -> float | None:
    """Jaccard of the cleared ids; for a silent clearing, the share of the predicted ids
    that the recording saved (its saved results are an upper bound of what was cleared
    there: results saved later by a compaction's own request can join them)."""
    if event is None:
        return 0.0
    if point["source"] == "boundary":
        return _jaccard(event.tool_call_ids, point["tool_call_ids"])
    predicted = set(event.tool_call_ids)
    return len(predicted & set(point["tool_call_ids"])) / len(predicted) if predicted else 0.0


def _exact_set(event: MicrocompactEvent | None, point: dict) -> bool:
    if event is None:
        return False
    if point["source"] == "boundary":
        return set(event.tool_call_ids) == set(point["tool_call_ids"])
    return set(event.tool_call_ids) <= set(point["tool_call_ids"])


def _groups(histories: list[RecordedHistory], points: list[list[dict]]) -> list[str]:
    """A group label per history: histories sharing a boundary uuid or a source session id are one."""
    keys = [[f"u:{p['uuid']}" for p in pts if p.get("uuid")] + [f"s:{s}" for s in history.source_session_ids]
            for history, pts in zip(histories, points, strict=True)]
    return [histories[root].session_id or f"group-{root}" for root in shared_key_roots(keys)]


def _preset_rules(presets: Sequence[Any], history: RecordedHistory, settings: ClientSettings,
                  ) -> list[tuple[str, MicrocompactRule, str]]:
    out = []
    for preset in presets:
        if isinstance(preset, tuple) and len(preset) == 2 and isinstance(preset[1], MicrocompactRule):
            out.append((str(preset[0]), preset[1], "given"))
        elif preset == "claude-code":
            row = rule_for_version(history.client_version, model=history.model or None,
                                   auto_compact=settings.auto_compact, context_window=_window(history))
            label = (f"claude-code {history.client_version}" if row is not None
                     else f"no microcompaction rule for claude-code {history.client_version!r} (2.1.21 rule)")
            out.append((preset, _version_rule(history, settings), label))
        else:
            raise ValueError(f"aging_fidelity_table models Claude Code's microcompaction: presets are "
                             f"'claude-code' or (label, MicrocompactRule) pairs, got {preset!r}")
    return out


def _window(history: RecordedHistory) -> int:
    from opctx.context.tokens import real_context_window

    return int(history.context_window or real_context_window(history.model or None))


def _base_row(history: RecordedHistory, group: str, point: dict, walk: _Walk, settings: ClientSettings,
              mode: str) -> dict[str, Any]:
    segment = max((c for c in walk.compaction_at if c <= point["stream_index"]), default=0)
    return {
        "session_id": history.session_id, "group": group, "uuid": point["uuid"], "source": point["source"],
        "client_version": point["client_version"], "recorded_request": point["request"],
        "recorded_stream_index": point["stream_index"],
        "recorded_context_tokens": walk.last_total(point["stream_index"], segment),
        "recorded_pre_tokens": point["pre_tokens"], "recorded_tokens_saved": point["tokens_saved"],
        "recorded_cleared": len(point["tool_call_ids"]), "auto_compact": settings.auto_compact,
        "settings_evidence": settings.evidence, "mode": mode,
    }


def aging_fidelity_table(
    sessions: Iterable[Any],
    presets: Sequence[Any] = ("claude-code",),
    mode: str = "resync",
    *,
    settings: str = "loso",
    silent: bool = True,
) -> Any:
    """One row per clearing the recordings show (module docstring: columns, modes, settings).

    ``silent``: also the clearings shown only by saved results (``silent_clearings``).
    """
    import pandas as pd

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    histories = [as_history(s) for s in sessions]
    points = [_all_clearings(h) if silent else recorded_microcompactions(h) for h in histories]
    groups = _groups(histories, points)
    chosen = settings_for(histories, settings, groups)
    rows: list[dict[str, Any]] = []
    for h_index, (history, pts) in enumerate(zip(histories, points, strict=True)):
        if not pts:
            continue
        rules = _preset_rules(presets, history, chosen[h_index])
        base = [_base_row(history, groups[h_index], p, _Walk(history, rules[0][1] if rules else MicrocompactRule()),
                          chosen[h_index], mode) for p in pts]
        for label, rule, rule_label in rules:
            predicted = _predict(_Walk(history, rule), pts, mode, chosen[h_index])
            for row, point, event in zip(base, pts, predicted, strict=True):
                row[f"{label}_warning_tokens"] = rule.warning_tokens
                row[f"{label}_rule"] = rule_label
                row[f"{label}_predicted"] = event is not None
                row[f"{label}_request"] = event.request if event else None
                row[f"{label}_delta_requests"] = event.request - point["request"] if event else None
                row[f"{label}_jaccard"] = _set_score(event, point)
                row[f"{label}_exact_set"] = _exact_set(event, point)
                row[f"{label}_tokens_saved"] = event.tokens_saved if event else 0
                row[f"{label}_pre_tokens"] = event.pre_tokens if event else None
        rows.extend(base)
    df = pd.DataFrame(rows)
    for col in df.columns:
        if col.endswith(("_request", "_delta_requests", "_tokens_saved", "_pre_tokens", "_warning_tokens")) \
                or col in ("recorded_context_tokens", "recorded_pre_tokens", "recorded_tokens_saved"):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    return df


def _predict(walk: _Walk, points: list[dict], mode: str, settings: ClientSettings) -> list[MicrocompactEvent | None]:
    """The predicted clearing matched to each recorded one (module docstring: modes)."""
    n = len(walk.messages)
    if mode == "resync":
        out: list[MicrocompactEvent | None] = []
        requests = _requests(walk.messages)
        for k in range(len(points)):
            if k == 0:
                start = 0
            else:
                # the request the previous clearing preceded was made after it: the next
                # decision is before the request after that one
                after = [i for i in requests if i >= points[k - 1]["stream_index"]]
                start = after[1] if len(after) > 1 else n
            # up to the next recorded clearing: past it the recording's counts reflect that one
            end = points[k + 1]["stream_index"] + 1 if k + 1 < len(points) else n
            end = max(end, points[k]["stream_index"] + 1)
            cleared: set[str] = set()
            for earlier in points[:k]:
                cleared.update(earlier["tool_call_ids"])
            events = walk.run(start, min(end, n), cleared, stop_at_first=True)
            out.append(events[0] if events else None)
        return out
    events = _replay_events(walk.history, walk.rule, settings)
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


def _replay_events(history: RecordedHistory, rule: MicrocompactRule, settings: ClientSettings,
                   ) -> list[MicrocompactEvent]:
    """The clearings of the ``claude-code`` preset with ``rule`` in a replay of ``history``."""
    from .replay import replay

    result = replay(history, "claude-code", client_version=history.client_version, microcompact=rule,
                    keep_contexts=True, **settings.params())
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
        saved = sum(result_tokens(originals[t], rule) for t in new if t in originals)
        left = sum(tokens for _, tokens in clearable_results(context, rule, seen))
        events.append(MicrocompactEvent(step, new, saved + left, saved, 0,
                                        int(result.steps_df["stream_index"].iloc[step])))
    return events


def aging_fidelity_summary(table: Any, presets: Sequence[str] = ("claude-code",)) -> dict[str, dict[str, Any]]:
    """Per preset: rows, predicted, on the exact request, within one, exact cleared set,
    median Jaccard, median saved-tokens error (every row: an unpredicted one saved 0)."""
    out: dict[str, dict[str, Any]] = {}
    for label in presets:
        if len(table) == 0:
            out[label] = {"rows": 0, "predicted": 0, "exact_request": 0, "within_one_request": 0, "exact_set": 0,
                          "median_jaccard": None, "median_tokens_saved_error": None}
            continue
        delta = table[f"{label}_delta_requests"]
        jacc = [float(v) for v in table[f"{label}_jaccard"] if v == v and v is not None]
        saved = [abs(int(p) - int(r)) / int(r) for p, r in zip(table[f"{label}_tokens_saved"],
                                                               table["recorded_tokens_saved"], strict=True)
                 if str(p) != "<NA>" and str(r) != "<NA>" and r is not None and int(r) > 0]
        out[label] = {
            "rows": len(table),
            "predicted": int(delta.notna().sum()),
            "exact_request": int((delta.dropna() == 0).sum()),
            "within_one_request": int((delta.dropna().abs() <= 1).sum()),
            "exact_set": int(table[f"{label}_exact_set"].sum()),
            "median_jaccard": statistics.median(jacc) if jacc else None,
            "median_tokens_saved_error": statistics.median(saved) if saved else None,
        }
    return out
