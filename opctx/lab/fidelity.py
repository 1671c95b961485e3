"""Fidelity: do the Claude Code-like and Codex-like presets compact where the real agents did?

For every recorded session that really compacted (Claude Code ``compact_boundary``
+ ``isCompactSummary``, Codex ``compacted``; imported with ``recorded: True``),
``fidelity_table`` replays the session under the presets to compare (default
``claude-code`` and ``codex``) and returns one row per *recorded* compaction:

* where the recording compacted: ``recorded_index`` (stream index of the first
  message after the folded part), ``recorded_turn``, ``recorded_request`` (how
  many requests came before it), ``trigger`` (``auto``/``manual``/None, as
  recorded), ``trigger_inferred`` (``"auto"`` for a compaction without a recorded
  trigger that happened in the middle of a tool loop - a tool result before it,
  the agent's next request right after, no user message between: Codex rollouts
  do not say why they compacted, and nobody types ``/compact`` mid-turn),
  ``recorded_pre_tokens`` (the recording's own figure: Claude Code
  ``preTokens``; for Codex the importer's total of the last usage report;
  ``pre_tokens_source`` says which), ``recorded_provider_tokens`` (the
  provider's prompt count of the last request before the compaction),
  ``recorded_last_total`` (that request's prompt + output: what Claude Code 2.0.x
  and Codex compare with their threshold - Claude Code's ``preTokens`` equals it
  on the corpus), ``previous_total`` (the same for the request before it, since
  the previous compaction: the check that did *not* compact), ``client`` and
  ``client_version`` (at that point of the recording), ``estimated_tokens``
  (opctx's estimate of the request the agent was about to send: the context it
  then had - the previous compaction's protected head and summary, then
  everything since - system prompt and tools excluded), ``segment_start`` (the
  stream index that context starts from);
* for each preset ``P``: ``P_index``, ``P_turn``, ``P_tokens_before`` of the
  replay's compaction matched to this recorded one, ``P_delta_requests``
  (replay minus recording, in requests; negative = the preset compacts
  earlier), ``P_matched``, ``P_compacted`` (the engine's cut succeeded there: a
  trigger that fired where the cut found nothing to fold still counts as the
  preset's decision), ``P_check_tokens`` (the figure the matched decision was
  taken on), ``P_believed_tokens`` (what the replay's check saw at the recorded
  compaction point: compare it with ``recorded_last_total``, the provider's view),
  ``P_trigger_check`` (``"last-response"`` or ``"request"``: ``opctx.lab.replay``),
  ``P_window`` and ``P_trigger_tokens`` (the preset's auto-compact threshold for
  that recording, resolved from its client version and model:
  ``opctx.lab.presets.resolve_trigger``).

``estimated_tokens`` is the size of the request at that point, not of the session:
the context since the previous compaction (its head and summary first), estimated
as the engine does, display-only lines excluded (never sent).

Two modes, same columns (``mode`` says which):

``"resync"`` (default)
    Each recorded compaction is predicted from the context the real agent had
    just after the previous one (``RecordedHistory.resume_after``: its summary,
    what it kept, then the stream that follows); the first compaction from the
    start of the session. One early miss therefore does not decide every later
    row. A prediction is the first request of that segment where the preset's
    trigger fires.
``"free"``
    One replay of the whole session from its start; recorded compaction ``k`` is
    matched with the first request after recorded compaction ``k-1``'s point
    where the preset's trigger fired, in order, each used once.

A recorded compaction at the start of its segment (a session that *starts* from a
summary: "continued from a previous conversation") has nothing before it to
replay and gets ``replayable=False``.

Replays here use ``feed_usage=True``: until the replay diverges from the
recording the engine sees the recording's own provider counts (which include the
system prompt and tool schemas that transcripts do not contain), as the hybrid
estimate of the specification intends; in ``resync`` the recorded counts of a
segment describe exactly the context it replays. String presets and calibrated
presets get ``client_version`` from the recording; a client session whose
recording names no version is said once per call (a warning listing them).
Manual compactions (``/compact`` typed by the user) are kept in the table
(``trigger`` says which): they show when users chose to compact, but only
automatic rows measure the fidelity of a trigger (``fidelity_summary``).

>>> fidelity_summary(fidelity_table([]))
Empty DataFrame
Columns: [preset, mode, automatic, replayable, matched, within_one_request, share_within_one]
Index: []
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any

from opctx.context.provider_messages import is_display_only
from opctx.dag.messages import is_tool_result

from .history import RecordedHistory, as_history, provider_prompt_tokens

__all__ = [
    "fidelity_table",
    "fidelity_summary",
    "recorded_compaction_points",
    "preset_label",
    "DEFAULT_FIDELITY_PRESETS",
    "MODES",
]

logger = logging.getLogger(__name__)

DEFAULT_FIDELITY_PRESETS = ("claude-code", "codex")
MODES = ("resync", "free")
_SUMMARY_COLUMNS = ["preset", "mode", "automatic", "replayable", "matched", "within_one_request", "share_within_one"]


def _turns(messages: Sequence[dict]) -> list[int]:
    turns, turn = [], 0
    for m in messages:
        if m.get("role") == "user" and not is_tool_result(m):
            turn += 1
        turns.append(turn)
    return turns


def _total(msg: dict, history: RecordedHistory) -> int | None:
    """Prompt + output of a recorded request (what the clients compare with their trigger)."""
    prompt = provider_prompt_tokens(msg, history.format, history.model)
    if prompt is None:
        return None
    usage = msg.get("usage") or {}
    return prompt + int(usage.get("output_tokens") or 0)


def _inferred_trigger(messages: Sequence[dict], idx: int) -> str | None:
    """``"auto"`` for a compaction between a tool result and the agent's next request."""
    if not 0 < idx < len(messages):
        return None
    return "auto" if is_tool_result(messages[idx - 1]) and messages[idx].get("role") == "assistant" else None


def recorded_compaction_points(history: RecordedHistory, model: str | None = None) -> list[dict[str, Any]]:
    """One dict per recorded compaction of ``history``: where it happened and at what size."""
    from opctx.context.tokens import Estimator

    messages = history.messages
    model = model or history.model or None
    turns = _turns(messages)
    request_idx = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    estimator = Estimator()
    # display-only lines are never sent (opctx.context.provider_messages): they cost nothing
    tokens = [0 if is_display_only(m) else estimator.message_tokens(m, model) for m in messages]
    cum = [0]
    for t in tokens:
        cum.append(cum[-1] + t)
    points = []
    for k, rc in enumerate(history.compactions):
        start = history.compactions[k - 1].stream_index if k else 0
        if not rc.recorded:
            continue
        idx = min(rc.stream_index, len(messages))
        # the context the agent had: the previous compaction's head and summary, then the stream since
        prefix = 0
        if k:
            segment = history.resume_after(k - 1)
            prefix = sum(estimator.message_tokens(m, model) for m in segment.messages[: segment.prefix_len]
                         if not is_display_only(m))
        requests = [i for i in request_idx[: bisect.bisect_left(request_idx, idx)] if i >= start]
        totals = [t for t in (_total(messages[i], history) for i in reversed(requests)) if t is not None][:2]
        provider = next((p for p in (provider_prompt_tokens(messages[i], history.format, history.model)
                                     for i in reversed(requests)) if p is not None), None)
        points.append(
            {
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
                "client": history.client,
                "client_version": history.version_at(idx),
                "estimated_tokens": prefix + cum[idx] - cum[start],
                "segment_start": start,
                "replayable": idx > start,
                "summary_chars": len(rc.summary_text or ""),
                "_compaction": k,
            }
        )
    return points


def preset_label(preset: Any) -> str:
    """The column prefix of a preset: its name (a calibrated preset's ``name``)."""
    if isinstance(preset, str):
        return preset
    return str(getattr(preset, "name", None) or getattr(preset, "__name__", None) or type(preset).__name__)


def _version_params(preset: Any, history: RecordedHistory, version: str | None) -> dict[str, Any]:
    """``client_version`` for presets that model the recording's client (names, calibrated presets)."""
    from .presets import PRESETS

    if isinstance(preset, str):
        spec = PRESETS.get(preset)
        client = spec.client if spec is not None else None
    else:
        client = getattr(preset, "client", None)
    return {"client_version": version} if client is not None and client == history.client else {}


def _trigger_tokens(preset: Any, history: RecordedHistory, window: int, version: str | None) -> int | None:
    from .presets import PRESETS, resolve_trigger

    version = _version_params(preset, history, version).get("client_version")
    resolve = getattr(preset, "resolve", None)
    if callable(resolve):
        return resolve(context_window=window, model=history.model, client_version=version).auto_tokens
    spec = PRESETS.get(preset) if isinstance(preset, str) else None
    if spec is None or spec.client is None:
        return None
    return resolve_trigger(spec, context_window=window, model=history.model, client_version=version).auto_tokens


def _attempts(result: Any) -> list[dict[str, Any]]:
    """The requests where the preset's trigger fired (auto / emergency), compacted or not.

    A trigger that fired but whose cut found nothing to fold (the engine then
    disables auto-compaction for a while) is still the preset's decision to
    compact there: fidelity measures the trigger; ``P_compacted`` says whether
    the compaction itself succeeded.
    """
    df = result.steps_df
    fired = df[df["decision"].astype(str).isin(("auto", "emergency"))]
    return [
        {"stream_index": int(r.stream_index), "turn": int(r.turn), "tokens_before": int(r.tokens_before_compaction),
         "check_tokens": int(r.check_tokens), "compacted": bool(r.compacted)}
        for r in fired.itertuples()
    ]


def _believed(result: Any, recorded_index: int, to_original: Any = None) -> int | None:
    """``check_tokens`` of the replay's first request at or after the recorded point."""
    df = result.steps_df
    for stream_index, check in zip(df["stream_index"].tolist(), df["check_tokens"].tolist(), strict=True):
        original = to_original(stream_index) if to_original is not None else stream_index
        if original is not None and original >= recorded_index:
            return int(check)
    return None


def _match(attempt: dict[str, Any], stream_index: int, request_idx: list[int], point: dict[str, Any]) -> dict[str, Any]:
    return {
        "index": stream_index,
        "turn": attempt["turn"],
        "tokens_before": attempt["tokens_before"],
        "check_tokens": attempt["check_tokens"],
        "compacted": attempt["compacted"],
        "delta_requests": bisect.bisect_left(request_idx, stream_index) - point["recorded_request"],
    }


def _free_matches(history: RecordedHistory, preset: Any, points: list[dict], request_idx: list[int],
                  run: Any) -> tuple[list[dict | None], list[int | None], Any]:
    result = run(history, preset, history.client_version)
    attempts = _attempts(result)
    matches: list[dict | None] = []
    used: set[int] = set()
    previous_point = -1
    for point in points:
        match = None
        if point["replayable"]:
            for j, a in enumerate(attempts):
                if j in used or a["stream_index"] <= previous_point:
                    continue
                used.add(j)
                match = _match(a, a["stream_index"], request_idx, point)
                break
        matches.append(match)
        previous_point = point["recorded_index"]
    believed = [_believed(result, p["recorded_index"]) if p["replayable"] else None for p in points]
    return matches, believed, result


def _resync_matches(history: RecordedHistory, preset: Any, points: list[dict], request_idx: list[int],
                    run: Any) -> tuple[list[dict | None], list[int | None], Any]:
    matches: list[dict | None] = []
    believed: list[int | None] = []
    result = None
    for point in points:
        if not point["replayable"]:
            matches.append(None)
            believed.append(None)
            continue
        k = point["_compaction"]
        segment = history.resume_after(k - 1) if k else history
        result = run(segment, preset, history.version_at(point["segment_start"]))
        believed.append(_believed(result, point["recorded_index"], segment.original_index))
        match = None
        for a in _attempts(result):
            original = segment.original_index(a["stream_index"])
            if original is not None:
                match = _match(a, original, request_idx, point)
                break
        matches.append(match)
    return matches, believed, result


def fidelity_table(
    sessions: Iterable[Any],
    presets: Sequence[Any] = DEFAULT_FIDELITY_PRESETS,
    *,
    mode: str = "resync",
    context_window: int | None = None,
    feed_usage: bool = True,
    trigger_check: str | None = None,
    **params: Any,
) -> Any:
    """One row per recorded compaction of ``sessions`` (see the module docstring).

    ``sessions``: anything ``replay`` accepts (``SessionSpec``, ``(db, id)``,
    importer results, histories). ``presets``: preset names, calibrated presets
    (``opctx.lab.calibrate``) or engine factories. ``mode``: ``"resync"`` or
    ``"free"``. ``params``: preset parameters for every replay (e.g.
    ``aging=False`` measures the trigger alone: the replay then keeps feeding the
    recorded counts, which already include what the client cleared).
    ``trigger_check``: ``replay``'s (default: the client's way for a client preset
    on a recording of its client, ``"last-response"``).
    Sessions without recorded compactions add no rows.
    """
    import pandas as pd

    from opctx.context.tokens import real_context_window

    from .replay import replay, resolve_trigger_check

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")

    def run(history: RecordedHistory, preset: Any, version: str | None) -> Any:
        return replay(history, preset, context_window=context_window, feed_usage=feed_usage,
                      keep_contexts=False, trigger_check=trigger_check,
                      **_version_params(preset, history, version), **params)

    rows: list[dict[str, Any]] = []
    unversioned: list[str] = []
    for session in sessions:
        history = as_history(session)
        points = recorded_compaction_points(history)
        if not points:
            continue
        if history.client and history.client_version is None:
            unversioned.append(history.session_id or history.title or "?")
        request_idx = [i for i, m in enumerate(history.messages) if m.get("role") == "assistant"]
        base = {
            "session": history.session_id or history.title,
            "format": history.format,
            "model": history.model,
            "messages": len(history.messages),
            "mode": mode,
        }
        per_preset: dict[str, tuple[list[dict | None], list[int | None], int, str, Any]] = {}
        for preset in presets:
            matcher = _resync_matches if mode == "resync" else _free_matches
            matches, believed, result = matcher(history, preset, points, request_idx, run)
            window = result.context_window if result is not None else 0
            check = (result.params.get("trigger_check") if result is not None
                     else resolve_trigger_check(history, preset, trigger_check))
            per_preset[preset_label(preset)] = (matches, believed, window, check, preset)
        for k, point in enumerate(points):
            row = {**base, "compaction": k, **{c: v for c, v in point.items() if not c.startswith("_")}}
            for label, (matches, believed, window, check, preset) in per_preset.items():
                m = matches[k]
                window = window or int(context_window or history.context_window or real_context_window(history.model or None))
                row[f"{label}_window"] = window
                row[f"{label}_trigger_tokens"] = (
                    _trigger_tokens(preset, history, window, point["client_version"]) if window else None
                )
                row[f"{label}_matched"] = m is not None
                for key in ("index", "turn", "tokens_before", "check_tokens", "delta_requests"):
                    row[f"{label}_{key}"] = m[key] if m else None
                row[f"{label}_compacted"] = m["compacted"] if m else None
                row[f"{label}_believed_tokens"] = believed[k]
                row[f"{label}_trigger_check"] = check
            rows.append(row)
    if unversioned:
        logger.warning(
            "fidelity_table: %d session(s) name no client version (%s); their client presets used the "
            "default rule of opctx.lab.presets.TRIGGER_RULES", len(unversioned), ", ".join(unversioned[:5]),
        )
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    int_cols = [c for c in df.columns if c.endswith(("_index", "_turn", "_tokens_before", "_delta_requests", "_trigger_tokens",
                                                      "_window", "_check_tokens", "_believed_tokens"))]
    int_cols += ["recorded_pre_tokens", "recorded_provider_tokens", "recorded_last_total", "previous_total"]
    for col in int_cols:
        df[col] = pd.array([None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in df[col]], dtype="Int64")
    for col in ("trigger", "trigger_inferred", "format", "mode", "client"):
        df[col] = df[col].astype("category")
    return df


def fidelity_summary(table: Any, *, include_inferred: bool = False) -> Any:
    """Per preset: automatic recorded compactions, how many a replay matched, share within one request.

    Rows: ``trigger == "auto"`` (with ``include_inferred``, also ``trigger_inferred ==
    "auto"``). ``share_within_one`` = rows with ``|delta_requests| <= 1`` over
    replayable automatic rows.
    """
    import pandas as pd

    if table is None or len(table) == 0:
        return pd.DataFrame(columns=_SUMMARY_COLUMNS)
    column = "trigger_inferred" if include_inferred else "trigger"
    auto = table[table[column].astype(str) == "auto"]
    labels = [c[: -len("_delta_requests")] for c in table.columns if c.endswith("_delta_requests")]
    out = []
    for label in labels:
        replayable = auto[auto["replayable"]]
        delta = replayable[f"{label}_delta_requests"]
        within = int((delta.abs() <= 1).fillna(False).sum())
        out.append({
            "preset": label,
            "mode": str(table["mode"].iloc[0]) if "mode" in table else "",
            "automatic": len(auto),
            "replayable": len(replayable),
            "matched": int(replayable[f"{label}_matched"].sum()),
            "within_one_request": within,
            "share_within_one": within / len(replayable) if len(replayable) else math.nan,
        })
    return pd.DataFrame(out, columns=_SUMMARY_COLUMNS)
