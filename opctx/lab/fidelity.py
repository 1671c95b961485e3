"""Fidelity: do the Claude Code-like and Codex-like presets compact where the real agents did?

``fidelity_table(sessions, presets, mode=...)`` has one row per *recorded* compaction
(Claude Code ``compact_boundary`` + ``isCompactSummary``, Codex ``compacted``; imported
with ``recorded: True``) and, in ``table.attrs["predictions"]``
(``fidelity_predictions(table)``), one row per compaction a preset *predicted*, matched
or not: the negative evidence. ``fidelity_summary`` puts both together: per preset,
client and client version, the recorded automatic compactions predicted within one
request (recall) beside the predicted compactions the client never made (false
positives, precision).

Rows (one per recorded compaction)
==================================
Where the recording compacted: ``recorded_index`` (stream index of the first message
after the folded part), ``recorded_turn``, ``recorded_request`` (requests before it),
``trigger`` (``auto``/``manual``/None, as recorded), ``trigger_inferred`` (``"auto"``
for a compaction without a recorded trigger between a tool result and the agent's next
request: Codex does not record why, and nobody types ``/compact`` mid-turn),
``recorded_pre_tokens`` (Claude Code ``preTokens``; for Codex the importer's total of the
last usage report; ``pre_tokens_source`` says which), ``recorded_provider_tokens``,
``recorded_last_total`` / ``previous_total`` (prompt + output of the last request and of
the one before), ``recorded_check_tokens`` (what the client compares there, by its
version's rule: ``opctx.lab.client_rules.check_tokens``), ``client``,
``client_version``, ``estimated_tokens`` (opctx's estimate of the request the agent was
about to send: the previous compaction's head and summary, then the stream since;
display-only lines excluded), ``segment_start``, ``context_flag`` / ``context_reason``
(the replayed context disagrees with the client's count by more than the estimate's
error, ``CONTEXT_TOLERANCE``: the stream is not what the client sent, and why it may be).

Per preset ``P``: ``P_index``, ``P_turn``, ``P_tokens_before``, ``P_delta_requests``
(predicted minus recorded, in requests), ``P_matched``, ``P_compacted``,
``P_check_tokens`` (the figure the matched decision was taken on), ``P_believed_tokens``
(the preset's figure at the recorded point), ``P_trigger_check``, ``P_window``,
``P_trigger_tokens`` (the threshold that ran: version, model, settings and parameters
applied), ``P_auto_compact`` (the client setting it ran with), ``P_rule`` /
``P_rule_source`` (the rule and where it was read; a version no sourced rule covers says
so, and its rows count as misses), ``P_method`` (``client-check`` or ``replay``).

Modes
=====
``"resync"`` (default)
    Each recorded compaction is predicted from the context the real agent had just after
    the previous one. A client preset on its own client's recordings decides as the
    client does, over the recording's own counts (``client-check``: the client's figure
    and threshold, request by request; the counts already hold whatever the client
    cleared). Other presets, and ``trigger_check="request"``, replay each segment
    (``RecordedHistory.resume_after``). The prediction is the first firing of the segment.
``"free"``
    One replay of the whole session from its start; recorded compaction ``k`` is matched
    with the first firing after recorded compaction ``k-1``'s point, in order. A client
    preset on its own client's recording whose compaction falls on the very request where
    the client compacted rejoins the recording there (``replay(..., follow_recording=True)``:
    it has the client's state, and what the client sent next, its summary and re-attached
    files included, is in the recorded counts); one that compacted elsewhere goes on alone.

Every segment is scored, also those that end without an automatic compaction (a manual
one, the end of the recording, a session that never compacted): a firing there is a
false positive. A firing within one request of a recorded manual compaction is counted
apart (``outcome="manual"``).

Client settings (``settings=``, ``opctx.lab.client_settings``): ``"loso"`` (default;
the auto-compaction setting the *other* session groups of the rule show), ``"recording"``
(read off the session itself), ``"default"`` (the client's defaults: on).

>>> fidelity_summary(fidelity_table([]))
Empty DataFrame
Columns: [preset, client, client_version, mode, automatic, replayable, matched, within_one_request, share_within_one, false_positives, precision, recall]
Index: []
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from opctx.context.provider_messages import is_display_only
from opctx.dag.messages import is_tool_result

from .client_rules import check_tokens, rule_for
from .client_settings import ClientSettings, settings_for
from .history import RecordedHistory, provider_prompt_tokens, recorded_branches, shared_key_roots

__all__ = [
    "fidelity_table",
    "fidelity_summary",
    "fidelity_predictions",
    "recorded_compaction_points",
    "preset_label",
    "DEFAULT_FIDELITY_PRESETS",
    "MODES",
    "CONTEXT_TOLERANCE",
    "compaction_segments",
    "segment_checks",
]

logger = logging.getLogger(__name__)

DEFAULT_FIDELITY_PRESETS = ("claude-code", "codex")
MODES = ("resync", "free")
# how far the replayed context may differ from the client's own count before a row is
# flagged: twice the estimator's measured median growth error (4.6 %,
# benchmarks/estimator_accuracy.py), rounded up (assumed)
CONTEXT_TOLERANCE = 0.10
_SUMMARY_COLUMNS = ["preset", "client", "client_version", "mode", "automatic", "replayable", "matched",
                    "within_one_request", "share_within_one", "false_positives", "precision", "recall"]


def _turns(messages: Sequence[dict]) -> list[int]:
    turns, turn = [], 0
    for m in messages:
        if m.get("role") == "user" and not is_tool_result(m):
            turn += 1
        turns.append(turn)
    return turns


def _total(msg: dict, history: RecordedHistory) -> int | None:
    """Prompt + output of a recorded request."""
    prompt = provider_prompt_tokens(msg, history.format, history.model)
    if prompt is None:
        return None
    return prompt + int((msg.get("usage") or {}).get("output_tokens") or 0)


def _inferred_trigger(messages: Sequence[dict], idx: int) -> str | None:
    """``"auto"`` for a compaction between a tool result and the agent's next request."""
    if not 0 < idx < len(messages):
        return None
    return "auto" if is_tool_result(messages[idx - 1]) and messages[idx].get("role") == "assistant" else None


def _context_check(history: RecordedHistory, start: int, idx: int, prefix: int, cum: list[int],
                   provider: int | None) -> tuple[bool, str]:
    """Does the replayed context before a compaction agree with the client's own count?

    The unseen part (system prompt, tools) is what the segment's first counted request had
    beyond its estimate; the context at the compaction is that plus the estimate of the
    stream. A gap over ``CONTEXT_TOLERANCE`` of the client's count is flagged.
    """
    if provider is None:
        return False, ""
    first = next((j for j in range(start, idx) if history.messages[j].get("role") == "assistant"
                  and provider_prompt_tokens(history.messages[j], history.format, history.model)), None)
    if first is None:
        return False, ""
    overhead = provider_prompt_tokens(history.messages[first], history.format, history.model) \
        - (prefix + cum[first] - cum[start])
    believed = prefix + cum[idx] - cum[start] + overhead
    gap = provider - believed
    if abs(gap) <= CONTEXT_TOLERANCE * provider:
        return False, ""
    if gap > 0:
        why = ("the stream holds less than the client sent: lines of another branch (a session resumed from "
               "before a compaction, a rewind) or lines the importer could not place")
    else:
        why = "the stream holds more than the client sent: the client cleared or dropped content on its own"
    return True, (f"the replayed context is about {believed:,} tokens where the client counted {provider:,} "
                  f"({gap / provider:+.0%}): {why}")


def recorded_compaction_points(history: RecordedHistory, model: str | None = None) -> list[dict[str, Any]]:
    """One dict per recorded compaction of ``history``: where it happened and at what size."""
    from opctx.context.tokens import Estimator

    messages = history.messages
    model = model or history.model or None
    turns = _turns(messages)
    request_idx = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    estimator = Estimator()
    tokens = [0 if is_display_only(m) else estimator.message_tokens(m, model) for m in messages]
    cum = [0]
    for t in tokens:
        cum.append(cum[-1] + t)
    points = []
    for k, rc in enumerate(history.compactions):
        start = history.compactions[k - 1].stream_index if k else 0
        if not rc.recorded or rc.node_id in history.scored_elsewhere:
            continue
        idx = min(rc.stream_index, len(messages))
        prefix = 0
        if k:
            segment = history.resume_after(k - 1)
            prefix = sum(estimator.message_tokens(m, model) for m in segment.messages[: segment.prefix_len]
                         if not is_display_only(m))
        requests = [i for i in request_idx[: bisect.bisect_left(request_idx, idx)] if i >= start]
        totals = [t for t in (_total(messages[i], history) for i in reversed(requests)) if t is not None][:2]
        provider = next((p for p in (provider_prompt_tokens(messages[i], history.format, history.model)
                                     for i in reversed(requests)) if p is not None), None)
        version = history.version_at(idx)
        rule, _ = rule_for(history.client, version) if history.client else (None, False)
        flag, reason = _context_check(history, start, idx, prefix, cum, totals[0] if totals else None)
        points.append({
            "recorded_index": idx,
            "recorded_turn": turns[idx - 1] if 0 < idx <= len(turns) else 0,
            "recorded_request": bisect.bisect_left(request_idx, idx),
            "trigger": rc.trigger,
            "trigger_inferred": rc.trigger or _inferred_trigger(messages, idx),
            "recorded_pre_tokens": rc.pre_tokens,
            "pre_tokens_source": rc.pre_tokens_source,
            "recorded_provider_tokens": provider,
            "recorded_last_total": totals[0] if totals else None,
            "previous_total": totals[1] if len(totals) > 1 else None,
            "recorded_check_tokens": check_tokens(messages, idx, rule.count, start=start, fmt=history.format,
                                                  model=history.model) if rule is not None else None,
            "client": history.client,
            "client_version": version,
            "estimated_tokens": prefix + cum[idx] - cum[start],
            "segment_start": start,
            "replayable": idx > start,
            "context_flag": flag,
            "context_reason": reason,
            "summary_chars": len(rc.summary_text or ""),
            "_compaction": k,
        })
    return points


def preset_label(preset: Any) -> str:
    """The column prefix of a preset: its name (a calibrated preset's ``name``)."""
    if isinstance(preset, str):
        return preset
    return str(getattr(preset, "name", None) or getattr(preset, "__name__", None) or type(preset).__name__)


def _preset_client(preset: Any) -> str | None:
    from .presets import PRESETS

    if isinstance(preset, str):
        spec = PRESETS.get(preset)
        return spec.client if spec is not None else None
    return getattr(preset, "client", None)


@dataclass
class _Run:
    """How one preset runs on one session: its client parameters and thresholds."""

    preset: Any
    label: str
    own_client: bool
    params: dict[str, Any]  # client parameters the replay gets (version, settings, given ones)
    resolution: Any  # TriggerResolution at the session's start (None: not a client preset)

    def resolve(self, history: RecordedHistory, window: int, version: str | None) -> Any:
        from .presets import CLIENT_PARAMETERS, PRESETS, resolve_trigger

        if not self.own_client:
            return None
        given = {k: v for k, v in self.params.items() if k in CLIENT_PARAMETERS and k != "client_version"}
        resolve = getattr(self.preset, "resolve", None)
        if callable(resolve):
            extra = {k: v for k, v in given.items() if k == "auto_compact"}
            return resolve(context_window=window, model=history.model, client_version=version, **extra)
        return resolve_trigger(PRESETS[self.preset], context_window=window, model=history.model,
                               client_version=version, **given)


def _runs(history: RecordedHistory, presets: Sequence[Any], settings: ClientSettings, params: dict[str, Any],
          window: int, foreign: bool) -> list[_Run]:
    from .presets import CLIENT_PARAMETERS

    runs = []
    for preset in presets:
        client = _preset_client(preset)
        own = client is not None and client == history.client
        if client is not None and not own and not foreign:
            continue  # a client preset runs on its own client's recordings unless asked
        run_params: dict[str, Any] = {}
        if own:
            run_params["client_version"] = history.version_at(0) if history.messages else history.client_version
            run_params.update(settings.params())
            run_params.update({k: v for k, v in params.items() if k in CLIENT_PARAMETERS})
        run = _Run(preset, preset_label(preset), own, run_params, None)
        run.resolution = run.resolve(history, window, run_params.get("client_version"))
        runs.append(run)
    return runs


def _resolution_columns(run: _Run, window: int) -> dict[str, Any]:
    res = run.resolution
    if res is None:
        return {"window": window, "trigger_tokens": None, "auto_compact": None, "rule": None, "rule_source": None,
                "rule_known": True}
    return {
        "window": window,
        "trigger_tokens": res.auto_tokens if res.auto_compact else None,
        "auto_compact": res.auto_compact,
        "rule": res.rule_label,
        "rule_source": res.source,
        "rule_known": bool(res.known),
    }


# -- predictions -----------------------------------------------------------------------------------


@dataclass
class _Firing:
    index: int  # stream index of the request the preset compacts before
    turn: int
    tokens_before: int | None
    check_tokens: int | None
    compacted: bool


def compaction_segments(history: RecordedHistory) -> list[tuple[int, int, int | None]]:
    """``(start, end, k)``: the stream between recorded compactions; ``k`` = the compaction
    that ends it (None: the end of the recording)."""
    bounds = [(c.stream_index, k) for k, c in enumerate(history.compactions) if c.recorded]
    out, start = [], 0
    for idx, k in bounds:
        out.append((start, min(idx, len(history.messages)), k))
        start = idx
    out.append((start, len(history.messages), None))
    return out


def segment_checks(history: RecordedHistory, start: int, end: int, count: str) -> list[tuple[int, int]]:
    """``(request index, figure)`` of every check the client makes in the segment ``[start, end)``.

    The checks before each request of the segment and, where a recorded compaction ends
    it, the one before the request that followed it (the check that compacted), counted
    over the segment's own messages (``count``: ``client_rules.CHECK_COUNTS``). Codex
    checks only mid-turn (after a response that asked for tools).
    """
    messages = history.messages
    codex = history.client == "codex"
    points = [i for i in range(start, end) if messages[i].get("role") == "assistant"]
    if end < len(messages):
        points.append(end)
    out = []
    for i in points:
        if codex and not _needs_follow_up(messages, start, i):
            continue
        figure = check_tokens(messages, i, count, start=start, fmt=history.format, model=history.model)
        if figure is not None:
            request = next((j for j in range(i, len(messages)) if messages[j].get("role") == "assistant"), i)
            out.append((request, figure))
    return out


def _client_firing(history: RecordedHistory, run: _Run, start: int, end: int, window: int,
                   turns: list[int]) -> _Firing | None:
    """The first check of the segment ``[start, end)`` that reaches the client's threshold."""
    version = history.version_at(start)
    res = run.resolve(history, window, version)
    if res is None or not res.auto_compact:
        return None
    for request, count in segment_checks(history, start, end, res.rule.count):
        if count >= res.auto_tokens:
            return _Firing(request, turns[request], count, count, True)
    return None


def _needs_follow_up(messages: Sequence[dict], start: int, index: int) -> bool:
    """Codex compacts mid-turn: the response before ``index`` asked for tools."""
    for j in range(index - 1, start - 1, -1):
        if messages[j].get("role") == "assistant":
            return bool(messages[j].get("tool_calls"))
        if messages[j].get("role") == "user" and not is_tool_result(messages[j]):
            return False
    return False


def _replay(history: RecordedHistory, run: _Run, *, context_window: int | None, feed_usage: bool,
            trigger_check: str | None, params: dict[str, Any], version: str | None = None,
            follow_recording: bool = False) -> Any:
    from .presets import CLIENT_PARAMETERS
    from .replay import replay

    other = {k: v for k, v in params.items() if k not in CLIENT_PARAMETERS}
    client = dict(run.params)
    if run.own_client:
        client["client_version"] = version if version is not None else client.get("client_version")
    if run.own_client and run.preset == "claude-code" and "microcompact" not in other:
        from .microcompact import rule_for_version

        # the version's own clearing, with the session's settings (its warning moves with them)
        rule = rule_for_version(client.get("client_version"), model=history.model or None,
                                auto_compact=client.get("auto_compact"),
                                context_window=int(context_window or _window(history)))
        other["microcompact"] = rule if rule is not None else False
    return replay(history, run.preset, context_window=context_window, feed_usage=feed_usage, keep_contexts=False,
                  trigger_check=trigger_check, follow_recording=follow_recording, **client, **other)


def _attempts(result: Any) -> list[_Firing]:
    """The requests where the replay's trigger fired (auto / emergency), compacted or not."""
    df = result.steps_df
    fired = df[df["decision"].astype(str).isin(("auto", "emergency"))]
    return [_Firing(int(r.stream_index), int(r.turn), int(r.tokens_before_compaction), int(r.check_tokens),
                    bool(r.compacted)) for r in fired.itertuples()]


def _believed(result: Any, recorded_index: int, to_original: Any = None) -> int | None:
    """``check_tokens`` of the replay's first request at or after the recorded point."""
    df = result.steps_df
    for stream_index, check in zip(df["stream_index"].tolist(), df["check_tokens"].tolist(), strict=True):
        original = to_original(stream_index) if to_original is not None else stream_index
        if original is not None and original >= recorded_index:
            return int(check)
    return None


def _window(history: RecordedHistory, context_window: int | None = None) -> int:
    from opctx.context.tokens import real_context_window

    return int(context_window or history.context_window or real_context_window(history.model or None))


def _resync_firings(history: RecordedHistory, run: _Run, window: int, turns: list[int], replay_kw: dict[str, Any],
                    ) -> tuple[list[_Firing | None], list[int | None], str]:
    """Per segment, the first firing and the figure at its end (resync mode)."""
    client_check = run.own_client and replay_kw["trigger_check"] in (None, "last-response")
    firings: list[_Firing | None] = []
    believed: list[int | None] = []
    for k, (start, end, _comp) in enumerate(compaction_segments(history)):
        if client_check:
            firings.append(_client_firing(history, run, start, end, window, turns))
            res = run.resolve(history, window, history.version_at(start))
            believed.append(check_tokens(history.messages, end, res.rule.count, start=start, fmt=history.format,
                                         model=history.model) if res is not None and end > start else None)
            continue
        segment = history.resume_after(k - 1) if k else history
        if end <= start:
            firings.append(None)
            believed.append(None)
            continue
        result = _replay(segment, run, **replay_kw, version=history.version_at(start))
        first = None
        for attempt in _attempts(result):
            original = segment.original_index(attempt.index)
            if original is not None and start <= original < end + 1:
                first = _Firing(original, attempt.turn, attempt.tokens_before, attempt.check_tokens, attempt.compacted)
                break
        firings.append(first)
        believed.append(_believed(result, end, segment.original_index))
    return firings, believed, "client-check" if client_check else "replay"


def _free_firings(history: RecordedHistory, run: _Run, replay_kw: dict[str, Any],
                  follow_recording: bool = True) -> tuple[list[_Firing], Any]:
    # a client preset on its own client's recording, compacting on the very request where the
    # client did, has the client's state there: it takes the recording's counts again
    result = _replay(history, run, **replay_kw, follow_recording=follow_recording and run.own_client)
    return _attempts(result), result


# -- the table --------------------------------------------------------------------------------------


def _match_free(points: list[dict], firings: list[_Firing]) -> list[_Firing | None]:
    """Recorded compaction ``k`` <- the first firing after compaction ``k-1``'s point, each used once."""
    matches: list[_Firing | None] = []
    used: set[int] = set()
    previous = -1
    for point in points:
        match = None
        if point["replayable"]:
            for j, firing in enumerate(firings):
                if j in used or firing.index <= previous:
                    continue
                used.add(j)
                match = firing
                break
        matches.append(match)
        previous = point["recorded_index"]
    return matches


def _outcome(firing: _Firing, request_idx: list[int], auto_requests: list[int], manual_requests: list[int]) -> str:
    request = bisect.bisect_left(request_idx, firing.index)
    if any(abs(request - r) <= 1 for r in auto_requests):
        return "hit"
    if any(abs(request - r) <= 1 for r in manual_requests):
        return "manual"
    return "false positive"


def _prediction_rows(history: RecordedHistory, label: str, mode: str, firings: Iterable[_Firing | None],
                     points: list[dict], request_idx: list[int], known: bool) -> list[dict[str, Any]]:
    auto = [p["recorded_request"] for p in points if (p["trigger"] or p["trigger_inferred"]) == "auto"]
    manual = [p["recorded_request"] for p in points if (p["trigger"] or p["trigger_inferred"]) != "auto"]
    # the part a branch shares with an earlier history of its session was scored there
    shared = max((c.stream_index for c in history.compactions if c.node_id in history.scored_elsewhere), default=-1)
    rows = []
    for firing in firings:
        if firing is None or firing.index < shared:
            continue
        outcome = _outcome(firing, request_idx, auto, manual)
        rows.append({
            "session": history.session_id or history.title, "client": history.client,
            "client_version": history.version_at(firing.index), "mode": mode, "preset": label,
            "predicted_index": firing.index, "predicted_request": bisect.bisect_left(request_idx, firing.index),
            "check_tokens": firing.check_tokens, "compacted": firing.compacted,
            "outcome": outcome if known or outcome != "hit" else "unsourced", "rule_known": known,
        })
    return rows


def _delta(firing: _Firing | None, request_idx: list[int], point: dict) -> int | None:
    return None if firing is None else bisect.bisect_left(request_idx, firing.index) - point["recorded_request"]


def _session_rows(history: RecordedHistory, runs: list[_Run], points: list[dict], mode: str, window: int,
                  replay_kw: dict[str, Any], follow_recording: bool = True) -> tuple[list[dict], list[dict]]:
    request_idx = [i for i, m in enumerate(history.messages) if m.get("role") == "assistant"]
    turns = _turns(history.messages)
    base = {"session": history.session_id or history.title, "format": history.format, "model": history.model,
            "messages": len(history.messages), "mode": mode}
    rows = [{**base, "compaction": k, **{c: v for c, v in p.items() if not c.startswith("_")}}
            for k, p in enumerate(points)]
    predictions: list[dict] = []
    seg_of = {p["_compaction"]: j for j, p in enumerate(points)}
    for run in runs:
        check = replay_kw["trigger_check"] or ("last-response" if run.own_client else "request")
        if mode == "resync":
            firings, believed_seg, method = _resync_firings(history, run, window, turns, replay_kw)
            segments = compaction_segments(history)
            matches = [None] * len(points)
            believed = [None] * len(points)
            for (_start, _end, comp), firing, b in zip(segments, firings, believed_seg, strict=True):
                if comp is not None and comp in seg_of:
                    matches[seg_of[comp]] = firing if points[seg_of[comp]]["replayable"] else None
                    believed[seg_of[comp]] = b
            all_firings: list[_Firing | None] = list(firings)
        else:
            all_firings, result = _free_firings(history, run, replay_kw, follow_recording)
            matches = _match_free(points, all_firings)
            believed = [_believed(result, p["recorded_index"]) if p["replayable"] else None for p in points]
            method = "replay"
        columns = _resolution_columns(run, window)
        known = columns["rule_known"]
        for row, point, match, b in zip(rows, points, matches, believed, strict=True):
            label = run.label
            row[f"{label}_matched"] = match is not None
            row[f"{label}_index"] = match.index if match else None
            row[f"{label}_turn"] = match.turn if match else None
            row[f"{label}_tokens_before"] = match.tokens_before if match else None
            row[f"{label}_check_tokens"] = match.check_tokens if match else None
            row[f"{label}_delta_requests"] = _delta(match, request_idx, point)
            row[f"{label}_compacted"] = match.compacted if match else None
            row[f"{label}_believed_tokens"] = b
            row[f"{label}_trigger_check"] = check
            row[f"{label}_method"] = method
            for key, value in columns.items():
                row[f"{label}_{key}"] = value
        predictions += _prediction_rows(history, run.label, mode, all_firings, points, request_idx, known)
    return rows, predictions


def _groups(histories: Sequence[RecordedHistory]) -> list[int]:
    keys = [{f"session:{s}" for s in h.source_session_ids} | {f"boundary:{u}" for c in h.compactions
                                                                for u in c.source_ids} for h in histories]
    return shared_key_roots(keys)


def fidelity_table(
    sessions: Iterable[Any],
    presets: Sequence[Any] = DEFAULT_FIDELITY_PRESETS,
    *,
    mode: str = "resync",
    context_window: int | None = None,
    feed_usage: bool = True,
    trigger_check: str | None = None,
    settings: str = "loso",
    foreign: bool = False,
    follow_recording: bool = True,
    **params: Any,
) -> Any:
    """One row per recorded compaction of ``sessions`` (module docstring); the predictions,
    matched or not, in ``table.attrs["predictions"]``.

    ``sessions``: anything ``replay`` accepts. ``presets``: preset names, calibrated
    presets (``opctx.lab.calibrate``) or engine factories. ``mode``: ``"resync"`` or
    ``"free"``. ``settings``: how each session's client settings are chosen
    (``opctx.lab.client_settings``). ``foreign``: also run a client preset on the other
    client's recordings (default: each on its own). ``params``: preset parameters for every replay (a
    client's own settings, such as ``max_output_tokens``, reach its client check too).
    ``trigger_check``: ``replay``'s (default: the client's way for a client preset on a
    recording of its client). ``follow_recording``: in ``free`` mode, whether a client
    preset's compaction on the client's own compaction request rejoins the recording
    (module docstring; ``False``: the replay goes on alone whatever it does).
    """
    import pandas as pd

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    histories = [branch for s in sessions for branch in recorded_branches(s)]
    chosen = settings_for(histories, settings, _groups(histories))
    replay_kw = {"context_window": context_window, "feed_usage": feed_usage, "trigger_check": trigger_check,
                 "params": params}
    rows: list[dict[str, Any]] = []
    predictions: list[dict[str, Any]] = []
    unsourced: set[str] = set()
    for history, setting in zip(histories, chosen, strict=True):
        points = recorded_compaction_points(history)
        if not points and not history.client:
            continue
        window = _window(history, context_window)
        runs = _runs(history, presets, setting, params, window, foreign)
        unsourced.update(f"{history.client} {r.resolution.version!r}" for r in runs
                         if r.resolution is not None and not r.resolution.known)
        session_rows, session_predictions = _session_rows(history, runs, points, mode, window, replay_kw,
                                                          follow_recording)
        rows += session_rows
        predictions += session_predictions
    if unsourced:
        logger.warning("fidelity_table: no sourced rule for %s: their compactions count as misses",
                       ", ".join(sorted(unsourced)))
    df = _frame(rows)
    df.attrs["predictions"] = pd.DataFrame(predictions)
    return df


def _frame(rows: list[dict[str, Any]]) -> Any:
    import pandas as pd

    df = pd.DataFrame(rows)
    if df.empty:
        return df
    int_cols = [c for c in df.columns if c.endswith(("_index", "_turn", "_tokens_before", "_delta_requests",
                                                      "_trigger_tokens", "_window", "_check_tokens",
                                                      "_believed_tokens"))]
    int_cols += ["recorded_pre_tokens", "recorded_provider_tokens", "recorded_last_total", "previous_total"]
    for col in int_cols:
        df[col] = pd.array([None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)
                            for v in df[col]], dtype="Int64")
    for col in ("trigger", "trigger_inferred", "format", "mode", "client"):
        df[col] = df[col].astype("category")
    return df


def fidelity_predictions(table: Any) -> Any:
    """The predictions behind a ``fidelity_table`` (one row per firing, ``outcome``:
    ``hit``, ``false positive``, ``manual`` or ``unsourced``)."""
    import pandas as pd

    predictions = getattr(table, "attrs", {}).get("predictions")
    return predictions if predictions is not None else pd.DataFrame()


def fidelity_summary(table: Any, *, include_inferred: bool = True, all_clients: bool = False,
                     by_version: bool = True) -> Any:
    """Per preset (and client, client version): recall beside precision.

    Rows: automatic compactions (``trigger == "auto"``, or with ``include_inferred`` the
    inferred mid-loop ones). A preset is scored on its own client's recordings only
    (``all_clients=True``: every row). ``within_one_request``: rows within one request
    whose version has a sourced rule; ``false_positives``: predicted compactions the
    client never made (``fidelity_predictions``); ``precision`` = hits / (hits + false
    positives); ``recall`` = ``within_one_request / automatic``.
    """
    import pandas as pd

    if table is None or len(table) == 0:
        return pd.DataFrame(columns=_SUMMARY_COLUMNS)
    column = "trigger_inferred" if include_inferred else "trigger"
    auto = table[table[column].astype(str) == "auto"]
    predictions = fidelity_predictions(table)
    labels = [c[: -len("_delta_requests")] for c in table.columns if c.endswith("_delta_requests")]
    out = []
    for label in labels:
        client = _label_client(table, label)
        rows = auto if all_clients or client is None else auto[auto["client"].astype(str) == client]
        preds = predictions[predictions["preset"] == label] if len(predictions) else predictions
        if len(preds) and not all_clients and client is not None:
            preds = preds[preds["client"] == client]
        keys = sorted({(str(c), str(v)) for c, v in zip(rows["client"], rows["client_version"], strict=True)}
                      | ({(str(c), str(v)) for c, v in zip(preds["client"], preds["client_version"], strict=True)}
                         if len(preds) else set()))
        groups = [(c, v) for c, v in keys] if by_version else []
        for group in [*groups, (client or "all", "all")]:
            out.append(_summary_row(label, table, rows, preds, group))
    return pd.DataFrame(out, columns=_SUMMARY_COLUMNS)


def _label_client(table: Any, label: str) -> str | None:
    rules = table.get(f"{label}_rule")
    if rules is None or rules.isna().all():
        return None
    first = str(rules.dropna().iloc[0])
    return "codex" if "codex" in first else "claude-code" if "claude-code" in first else None


def _summary_row(label: str, table: Any, rows: Any, preds: Any, group: tuple[str, str]) -> dict[str, Any]:
    client, version = group
    sel = rows
    p = preds
    if version != "all":
        sel = rows[(rows["client"].astype(str) == client) & (rows["client_version"].astype(str) == version)]
        p = preds[(preds["client"] == client) & (preds["client_version"].astype(str) == version)] if len(preds) else preds
    replayable = sel[sel["replayable"]]
    delta = replayable[f"{label}_delta_requests"]
    known = replayable[f"{label}_rule_known"].astype(bool) if f"{label}_rule_known" in replayable else True
    within = int(((delta.abs() <= 1).fillna(False) & known).sum())
    hits = int((p["outcome"] == "hit").sum()) if len(p) else 0
    false_pos = int((p["outcome"] == "false positive").sum()) if len(p) else 0
    return {
        "preset": label, "client": client, "client_version": version,
        "mode": str(table["mode"].iloc[0]) if "mode" in table else "",
        "automatic": len(sel), "replayable": len(replayable), "matched": int(replayable[f"{label}_matched"].sum()),
        "within_one_request": within, "share_within_one": within / len(replayable) if len(replayable) else math.nan,
        "false_positives": false_pos,
        "precision": hits / (hits + false_pos) if hits + false_pos else math.nan,
        "recall": within / len(sel) if len(sel) else math.nan,
    }
