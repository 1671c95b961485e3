"""Fidelity: do the Claude Code-like and Codex-like presets compact where the real agents did?

For every recorded session that really compacted (Claude Code ``compact_boundary``
+ ``isCompactSummary``, Codex ``compacted``; imported with ``recorded: True``),
``fidelity_table`` replays the session under the presets to compare (default
``claude-code`` and ``codex``) and returns one row per *recorded* compaction:

* where the recording compacted: ``recorded_index`` (stream index of the first
  message after the folded part), ``recorded_turn``, ``recorded_request`` (how
  many requests came before it), ``trigger`` (``auto``/``manual``/None),
  ``recorded_pre_tokens`` (the recording's own ``preTokens`` where it has one),
  ``recorded_provider_tokens`` (the provider's prompt count of the last request
  before the compaction), ``estimated_tokens`` (opctx's estimate of the history
  before it, system prompt and tools excluded);
* for each preset ``P``: ``P_index``, ``P_turn``, ``P_tokens_before`` of the
  replay's compaction matched to this recorded one, ``P_delta_requests``
  (replay minus recording, in requests; negative = the preset compacts
  earlier), and ``P_matched`` (whether any replay compaction could be matched).

Matching: recorded compaction ``k`` is matched with the first replay compaction
that happens after recorded compaction ``k-1``'s point (or from the start), in
order; once used, a replay compaction is not reused. A recorded compaction at
stream index 0 (a session that *starts* from a summary: "continued from a
previous conversation") has nothing before it to replay and gets
``replayable=False``.

Replays here use ``feed_usage=True``: up to the first divergence the engine
sees the recording's own provider counts (which include the system prompt and
tool schemas that transcripts do not contain), as the hybrid estimate of the
specification intends. Manual compactions (``/compact`` typed by the user) are
kept in the table (``trigger`` says which): they show when users chose to
compact, which is useful next to an automatic policy, but only ``auto`` rows
measure the fidelity of a trigger.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import Any

from opctx.dag.messages import is_tool_result

from .history import RecordedHistory, as_history, provider_prompt_tokens

__all__ = ["fidelity_table", "recorded_compaction_points", "DEFAULT_FIDELITY_PRESETS"]

DEFAULT_FIDELITY_PRESETS = ("claude-code", "codex")


def _turns(messages: Sequence[dict]) -> list[int]:
    turns, turn = [], 0
    for m in messages:
        if m.get("role") == "user" and not is_tool_result(m):
            turn += 1
        turns.append(turn)
    return turns


def recorded_compaction_points(history: RecordedHistory, model: str | None = None) -> list[dict[str, Any]]:
    """One dict per recorded compaction of ``history``: where it happened and at what size."""
    from opctx.context.tokens import Estimator

    messages = history.messages
    turns = _turns(messages)
    request_idx = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    estimator = Estimator()
    cum = [0]
    for m in messages:
        cum.append(cum[-1] + estimator.message_tokens(m, model or history.model or None))
    points = []
    for rc in history.compactions:
        if not rc.recorded:
            continue
        idx = rc.stream_index
        provider = None
        for j in range(min(idx, len(messages)) - 1, -1, -1):
            if messages[j].get("role") == "assistant":
                provider = provider_prompt_tokens(messages[j], history.format, history.model)
                if provider is not None:
                    break
        points.append(
            {
                "recorded_index": idx,
                "recorded_turn": turns[idx - 1] if 0 < idx <= len(turns) else 0,
                "recorded_request": bisect.bisect_left(request_idx, idx),
                "trigger": rc.trigger,
                "recorded_pre_tokens": rc.pre_tokens,
                "recorded_provider_tokens": provider,
                "estimated_tokens": cum[min(idx, len(messages))],
                "replayable": idx > 0,
                "summary_chars": len(rc.summary_text or ""),
            }
        )
    return points


def fidelity_table(
    sessions: Iterable[Any],
    presets: Sequence[str] = DEFAULT_FIDELITY_PRESETS,
    *,
    context_window: int | None = None,
    feed_usage: bool = True,
) -> Any:
    """One row per recorded compaction of ``sessions`` (see the module docstring).

    ``sessions``: anything ``replay`` accepts (``SessionSpec``, ``(db, id)``,
    importer results, histories). Sessions without recorded compactions add no
    rows.
    """
    import pandas as pd

    from .replay import replay

    rows: list[dict[str, Any]] = []
    for session in sessions:
        history = as_history(session)
        points = recorded_compaction_points(history)
        if not points:
            continue
        request_idx = [i for i, m in enumerate(history.messages) if m.get("role") == "assistant"]
        base = {
            "session": history.session_id or history.title,
            "format": history.format,
            "model": history.model,
            "messages": len(history.messages),
        }
        preset_matches: dict[str, list[dict[str, Any] | None]] = {}
        windows: dict[str, int] = {}
        for preset in presets:
            result = replay(history, preset, context_window=context_window, feed_usage=feed_usage, keep_contexts=False)
            windows[preset] = result.context_window
            replay_comps = [c for c in result.compactions if c.reason in ("auto", "emergency")]
            matches: list[dict[str, Any] | None] = []
            used: set[int] = set()
            previous_point = -1
            for point in points:
                match = None
                if point["replayable"]:
                    for j, c in enumerate(replay_comps):
                        if j in used or c.stream_index <= previous_point:
                            continue
                        used.add(j)
                        match = {
                            "index": c.stream_index,
                            "turn": c.turn,
                            "tokens_before": c.tokens_before,
                            "delta_requests": bisect.bisect_left(request_idx, c.stream_index)
                            - point["recorded_request"],
                        }
                        break
                matches.append(match)
                previous_point = point["recorded_index"]
            preset_matches[preset] = matches
        for k, point in enumerate(points):
            row = {**base, "compaction": k, **point}
            for preset in presets:
                m = preset_matches[preset][k]
                row[f"{preset}_window"] = windows[preset]
                row[f"{preset}_matched"] = m is not None
                row[f"{preset}_index"] = m["index"] if m else None
                row[f"{preset}_turn"] = m["turn"] if m else None
                row[f"{preset}_tokens_before"] = m["tokens_before"] if m else None
                row[f"{preset}_delta_requests"] = m["delta_requests"] if m else None
            rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    int_cols = [c for c in df.columns if c.endswith(("_index", "_turn", "_tokens_before", "_delta_requests"))]
    int_cols += ["recorded_pre_tokens", "recorded_provider_tokens"]
    for col in int_cols:
        df[col] = pd.array([None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in df[col]], dtype="Int64")
    df["trigger"] = df["trigger"].astype("category")
    df["format"] = df["format"].astype("category")
    return df
