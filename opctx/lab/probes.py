"""Summary quality, measured: retention probes over recorded compactions and any strategy.

``probe_table(sessions, strategies=..., *, summaries=...)`` answers *which facts a
continuation needs survive a compaction*, per strategy, on the recorded histories. At
each cut the probes (``extract_probes``, families ``artifact``, ``recall``,
``continuation``, ``instruction``; see ``opctx.lab._probe_extract``, every name
re-exported here) are taken from the history before the cut and scored against the
context the next request would send after compacting there with each strategy.

Cuts
====
By default the recorded compactions whose client summary is visible (Claude Code's
``compact_boundary`` + ``isCompactSummary``, ``metadata.compaction`` on the summary node;
Codex stores its summaries encrypted, so its compactions are left out) and that have a
history before them. ``cuts=[i, ...]`` puts cuts at stream indices of every session
instead (or ``cuts=f`` with ``f(history)`` giving them per history). The history before
the cut is ``messages[:i]`` of the expanded stream
(``opctx.lab.history``): the protected head and what the recording folded. The
recording's kept tail (``kept_ids``) is emitted right after the cut, so it belongs to
what follows. The *next request* is the first assistant message after the kept tail;
every strategy's context ends with the stream from the cut up to it (the kept tail, the
user's next message): what that request sends besides the compacted part.

Strategies (``STRATEGIES`` are the default)
===========================================
``recorded``
    the client's real summary (a user message, as the client sends it) after the
    protected head: what the client kept.
``structural``
    the same layout with opctx's structural summary (``Summarizer.structural``: every
    folded message as a one-line ``[role] first words``, bounded like the engine's
    fallback) in place of the client's.
``masking``
    no summary: the whole history with tool results older than the last
    ``MASK_KEEP_LAST`` (10, the Complexity Trap's M) masked (``ObservationMasker``).
``keep-all`` / ``drop-all``
    the sanity rows: everything before the cut kept verbatim (retains 100 % by
    construction: ``ProbeEvaluation.keep_all_ok``), and nothing before the cut (retains
    only what the next request restates). A family where drop-all retains 20 % or
    more (``WEAK_SHARE``) is *weak*: its probes are facts the continuation gets back
    anyway.
a preset name (``"default"``, ``"claude-code"``, ``"hermes"``, ...)
    the engine configured as that preset, its history before the cut appended to an
    in-memory session, compacted there by hand (``EngineDriver.compact``, the user's
    ``/compact``) and prepared (aging included): the preset's own cut, tail and summary.
``summaries=LLMSummaries(...)`` adds the strategy ``llm`` (the recorded layout with that
model's summary of the folded messages, made with ``summarise_many``: bounded concurrency
and the cache) and gives the presets that summariser. A failed LLM summary falls back to
the structural one; the rows say so (``fell_back``, ``error``).

The table and the figures
=========================
``probe_table`` has one row per (session, cut, strategy, family): ``probes``,
``retained``, ``retention`` (a share; ``NaN`` with no probe), ``context_tokens`` (opctx's
estimate of the context scored, display-only lines excluded), ``summary`` (what made the
summary), ``fell_back`` / ``error``, ``summary_input_tokens`` / ``summary_output_tokens``
(what the summariser read and wrote, for the cost model). ``evaluate`` returns a ``ProbeEvaluation`` with the table, one
row per probe and strategy (``scores``: the probe, its evidence, the matched text and
where), the probes per cut and the summary records. ``retention_pct`` pools each
strategy's probes over the cuts (retained / probes); ``report()`` is the JSON of
``benchmarks/summary_quality.py``.

>>> import pandas as pd
>>> from opctx.lab.history import RecordedHistory, RecordedCompaction
>>> msgs = [
...     {"id": "u1", "role": "user", "content": "Fix calc.py. Never change the tests."},
...     {"id": "a1", "role": "assistant", "content": "", "tool_calls": [
...         {"id": "t1", "name": "Write", "arguments": {"file_path": "src/calc.py", "content": "x"}}]},
...     {"id": "r1", "role": "tool", "tool_call_id": "t1", "name": "Write", "content": "ok"},
...     {"id": "a2", "role": "assistant", "content": "done"},
... ]
>>> comp = RecordedCompaction(stream_index=3, node_id="s", summary_text="Wrote src/calc.py.")
>>> h = RecordedHistory(msgs, [comp], session_id="demo")
>>> t = probe_table([h], ["recorded", "keep-all", "drop-all"])
>>> t.pivot_table(index="family", columns="strategy", values="retention").round(2)
strategy      drop-all  keep-all  recorded
family
artifact           0.0       1.0       1.0
continuation       0.0       1.0       0.0
instruction        0.0       1.0       0.0
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opctx.context.provider_messages import is_display_only

from ._probe_extract import (
    FAMILIES,
    IDENTIFIERS_PER_MESSAGE,
    OVERLAP_THRESHOLD,
    RULES,
    Probe,
    ProbeScore,
    context_lines,
    extract_probes,
    is_user_request,
    normalise,
    score_probes,
)
from .history import RecordedCompaction, RecordedHistory, as_history

__all__ = [
    "FAMILIES",
    "RULES",
    "OVERLAP_THRESHOLD",
    "IDENTIFIERS_PER_MESSAGE",
    "STRATEGIES",
    "SANITY",
    "WEAK_SHARE",
    "MASK_KEEP_LAST",
    "Probe",
    "ProbeScore",
    "Cut",
    "StrategyContext",
    "ProbeEvaluation",
    "extract_probes",
    "score_probes",
    "is_user_request",
    "context_lines",
    "normalise",
    "cuts_of",
    "strategy_context",
    "evaluate",
    "probe_table",
    "weak_families",
]

STRATEGIES = ("recorded", "structural", "masking", "keep-all", "drop-all")
SANITY = ("keep-all", "drop-all")
# drop-all retaining this share of a family or more makes the family "weak"
WEAK_SHARE = 0.20
# observation masking keeps the last M tool results (Lindenbauer et al. 2025, M=10)
MASK_KEEP_LAST = 10


@dataclass
class Cut:
    """A point of a history where the context is compacted, and the request that follows it."""

    history: RecordedHistory
    index: int
    next_request: int
    compaction: RecordedCompaction | None = None

    @property
    def session(self) -> str:
        return self.history.session_id or self.history.title or "history"

    @property
    def before(self) -> list[dict]:
        return self.history.messages[: self.index]

    @property
    def after(self) -> list[dict]:
        """What the next request sends besides the compacted part (kept tail, next user message)."""
        return self.history.messages[self.index: self.next_request]

    @property
    def protected(self) -> list[dict]:
        ids = set(self.compaction.protected_ids) if self.compaction else set()
        return [m for m in self.before if m.get("id") in ids]

    @property
    def folded(self) -> list[dict]:
        ids = set(self.compaction.protected_ids) if self.compaction else set()
        return [m for m in self.before if m.get("id") not in ids and not is_display_only(m)]


@dataclass
class StrategyContext:
    """The context one strategy leaves at a cut, and how its summary was made."""

    messages: list[dict]
    summary: str = ""
    fell_back: bool = False
    error: str | None = None
    record: Any = None  # the SummaryRecord of an LLM summary (a preset's: its SummaryUsage)


def _visible_summary(history: RecordedHistory, comp: RecordedCompaction) -> bool:
    return history.client != "codex" and bool((comp.summary_text or "").strip())


def cuts_of(history: RecordedHistory, cuts: Sequence[int] | Callable[[RecordedHistory], Sequence[int]] | None = None) -> list[Cut]:
    """The cuts of a history: its recorded compactions with a visible summary, or ``cuts``
    (stream indices, or a function of the history giving them)."""
    msgs = history.messages
    out = []
    if callable(cuts):
        cuts = list(cuts(history))
    if cuts is None:
        points = [(c.stream_index, c) for c in history.compactions if c.stream_index > 0 and _visible_summary(history, c)]
    else:
        points = [(int(i), None) for i in cuts if 0 < int(i) <= len(msgs)]
    for index, comp in points:
        start = index + (len(comp.kept_ids) if comp else 0)
        nxt = next((j for j in range(start, len(msgs)) if msgs[j].get("role") == "assistant"), len(msgs))
        out.append(Cut(history, index, nxt, comp))
    return out


def _summary_message(text: str, like: dict | None = None) -> dict:
    base = dict(like) if like else {"id": "summary", "role": "user"}
    return {**base, "role": "user", "content": text, "type": "compactionSummary"}


def _structural(cut: Cut) -> str:
    from opctx.context.summarize import Summarizer

    return Summarizer(None).structural(cut.folded)


def strategy_context(
    cut: Cut, strategy: str, *, llm_record: Any = None, summaries: Any = None,
    context_window: int | None = None, params: dict | None = None,
) -> StrategyContext:
    """The messages the next request would send after compacting at ``cut`` with ``strategy``."""
    if strategy == "keep-all":
        return StrategyContext(cut.before + cut.after)
    if strategy == "drop-all":
        return StrategyContext(list(cut.after))
    if strategy == "masking":
        from .presets import ObservationMasker

        aged, _ = ObservationMasker(MASK_KEEP_LAST).age(cut.before + cut.after)
        return StrategyContext(aged)
    if strategy == "recorded":
        if cut.compaction is None:
            raise ValueError(f"{cut.session}@{cut.index}: no recorded compaction at this cut")
        summary = _summary_message(cut.compaction.summary_text, cut.compaction.summary_message)
        return StrategyContext(cut.protected + [summary] + cut.after, summary="recorded")
    if strategy == "structural":
        return StrategyContext(cut.protected + [_summary_message(_structural(cut))] + cut.after, summary="structural")
    if strategy == "llm":
        if llm_record is None:
            raise ValueError("the llm strategy needs summaries=LLMSummaries(...)")
        text, fell_back = (llm_record.text, False) if llm_record.ok else (_structural(cut), True)
        ctx = cut.protected + [_summary_message(text)] + cut.after
        return StrategyContext(ctx, summary=getattr(summaries, "label", "llm"), fell_back=fell_back,
                               error=llm_record.error, record=llm_record)
    return _preset_context(cut, strategy, summaries, context_window, params or {})


def _preset_context(cut: Cut, preset: str, summaries: Any, window: int | None, params: dict) -> StrategyContext:
    """The engine as ``preset``, compacted by hand at the cut, then prepared (aging included)."""
    from opctx.context.tokens import real_context_window
    from opctx.dag.session_db import DagSessionDB

    from ._engine_driver import EngineDriver
    from ._summary_meter import SummaryMeter
    from .presets import PRESETS, build_engine
    from .replay import ReplayClock, with_client_version

    if preset not in PRESETS:
        raise ValueError(f"unknown strategy {preset!r}: one of {', '.join(STRATEGIES)}, 'llm' or a preset ({', '.join(PRESETS)})")
    history = cut.history
    model = history.model or ""
    window = int(window or history.context_window or real_context_window(model or None))
    stamps = [m.get("timestamp") for m in cut.before if isinstance(m.get("timestamp"), (int, float))]
    clock = ReplayClock(max(stamps) if stamps else 0.0)
    db = DagSessionDB(":memory:", clock=clock)
    session_id = db.create_session(title="probes", model=model, source="probes")
    kw = with_client_version(history, preset, dict(params))
    meter = SummaryMeter(summaries) if summaries is not None else None  # what the summariser cost
    engine = build_engine(preset, session_db=db, clock=clock, context_window=window, model=model,
                          summarizer_provider=meter, **kw)
    driver = EngineDriver(engine, db, session_id, model, window)
    try:
        parent = None
        for i, msg in enumerate(cut.before):
            parent = driver.append(msg, parent, clock.now, i)["id"]
        slot = meter.begin() if meter is not None else 0
        comp = driver.compact(reason="recorded")
        branch = driver.branch()
        context = driver.context(driver.prepare(branch))
    finally:
        driver.close()
    ok = comp is not None and getattr(comp, "ok", False)
    fell_back = bool(getattr(comp, "fell_back_to_structural", False)) and summaries is not None
    label = (getattr(summaries, "label", "provider") if summaries is not None else "structural") if ok else "none"
    error = getattr(comp, "error", None) if comp is not None and (not ok or fell_back) else None
    return StrategyContext(list(context) + cut.after, summary=label, fell_back=fell_back, error=error,
                           record=meter.usage(slot) if meter is not None else None)


def _tokens(messages: Sequence[dict], model: str, estimator: Any) -> int:
    return sum(estimator.message_tokens(m, model or None) for m in messages if not is_display_only(m))


@dataclass
class ProbeEvaluation:
    """What ``evaluate`` measured: the table, every probe's score, the probes per cut."""

    table: Any
    scores: Any
    probes: dict[str, list[Probe]] = field(default_factory=dict)
    records: list[Any] = field(default_factory=list)

    def retention(self) -> Any:
        """Pooled retention per strategy (rows) and family (columns): retained / probes."""
        g = self.table.groupby(["strategy", "family"], observed=True)[["retained", "probes"]].sum()
        share = (g["retained"] / g["probes"].where(g["probes"] > 0)).unstack("family")
        return share.reindex(columns=[f for f in FAMILIES if f in share.columns])

    def weak_families(self, threshold: float = WEAK_SHARE) -> list[str]:
        return weak_families(self.table, threshold)

    @property
    def keep_all_ok(self) -> bool:
        """keep-all retains every probe at every cut (the metric's upper bound holds)."""
        rows = self.table[self.table["strategy"] == "keep-all"]
        return bool((rows["retained"] == rows["probes"]).all())

    def report(self) -> dict[str, Any]:
        """The JSON of ``benchmarks/summary_quality.py``."""
        share = self.retention()
        out: dict[str, Any] = {"strategies": {}}
        per_cut = self.table.drop_duplicates(["session", "cut", "strategy"])
        for name in share.index:
            rows = per_cut[per_cut["strategy"] == name]
            out["strategies"][str(name)] = {
                "retention_pct": {f: (None if math.isnan(v) else round(100 * float(v), 1)) for f, v in share.loc[name].items()},
                "context_tokens_median": int(statistics.median(rows["context_tokens"])) if len(rows) else 0,
                "cuts": int(len(rows)),
            }
        counts = [len(p) for p in self.probes.values()]
        out["probes_per_cut_median"] = statistics.median(counts) if counts else 0
        out["weak_families"] = self.weak_families()
        return out


def weak_families(table: Any, threshold: float = WEAK_SHARE) -> list[str]:
    """Families whose drop-all rows retain ``threshold`` or more of their probes (pooled)."""
    rows = table[table["strategy"] == "drop-all"]
    out = []
    for family in FAMILIES:
        fam = rows[rows["family"] == family]
        probes = int(fam["probes"].sum())
        if probes and int(fam["retained"].sum()) / probes >= threshold:
            out.append(family)
    return out


def _histories(sessions: Any, recorded_only: bool = True) -> list[RecordedHistory]:
    """Histories from a database path (its sessions that compacted, or all of them with
    ``recorded_only=False``), or anything ``as_history`` accepts, one or a list."""
    if isinstance(sessions, (str, os.PathLike)):
        from .frames import sessions_df

        df = sessions_df(sessions)
        ids = df[df["n_compactions"] > 0]["session_id"].tolist() if recorded_only else df["session_id"].tolist()
        return [as_history((str(sessions), sid)) for sid in ids]
    if isinstance(sessions, RecordedHistory) or (isinstance(sessions, tuple) and len(sessions) == 2):
        return [as_history(sessions)]
    return [as_history(s) for s in sessions]


def _strategy_rows(cut: Cut, strategy: str, ctx: StrategyContext, probes: list[Probe], tokens: int) -> tuple[list[dict], list[dict]]:
    scores = score_probes(probes, ctx.messages)
    base = {"session": cut.session, "cut": cut.index, "format": cut.history.format, "strategy": strategy,
            "summary": ctx.summary or "-", "context_tokens": tokens, "fell_back": ctx.fell_back, "error": ctx.error}
    record = ctx.record if ctx.record is not None and ctx.record.ok else None
    # what the summariser read and wrote (opctx.lab.prices.request_cost prices them)
    base["summary_input_tokens"] = record.input_tokens if record else 0
    base["summary_output_tokens"] = record.output_tokens if record else 0
    rows = []
    for family in FAMILIES:
        fam = [s for s in scores if s.probe.family == family]
        kept = sum(s.retained for s in fam)
        rows.append({**base, "family": family, "probes": len(fam), "retained": kept,
                     "retention": kept / len(fam) if fam else math.nan})
    detail = [{"session": cut.session, "cut": cut.index, "strategy": strategy, **s.to_dict()} for s in scores]
    return rows, detail


def evaluate(
    sessions: Any,
    strategies: Sequence[str] = STRATEGIES,
    *,
    summaries: Any = None,
    judge: Any = None,
    cuts: Sequence[int] | Callable[[RecordedHistory], Sequence[int]] | None = None,
    context_window: int | None = None,
    params: dict | None = None,
) -> ProbeEvaluation:
    """Probes at every cut of ``sessions`` scored against every strategy (module docstring).

    ``summaries``: an ``LLMSummaries`` (adds the ``llm`` strategy; the presets use it).
    ``judge``: an ``opctx.lab.judge.LLMJudge`` (off by default) adds ``judge_*`` columns.
    ``params`` go to the preset strategies.
    """
    import pandas as pd

    from opctx.context.tokens import Estimator

    names = list(dict.fromkeys([*strategies, *(["llm"] if summaries is not None else [])]))
    all_cuts = [c for h in _histories(sessions, recorded_only=cuts is None) for c in cuts_of(h, cuts)]
    llm = summaries.summarise_many([c.folded for c in all_cuts]) if summaries is not None and "llm" in names else []
    estimator = Estimator()
    rows: list[dict] = []
    detail: list[dict] = []
    probes_by_cut: dict[str, list[Probe]] = {}
    for k, cut in enumerate(all_cuts):
        probes = extract_probes(cut.history.messages, cut.index)
        probes_by_cut[f"{cut.session}@{cut.index}"] = probes
        for name in names:
            if name == "recorded" and cut.compaction is None:
                continue
            ctx = strategy_context(cut, name, llm_record=llm[k] if llm else None, summaries=summaries,
                                   context_window=context_window, params=params)
            new_rows, new_detail = _strategy_rows(cut, name, ctx, probes, _tokens(ctx.messages, cut.history.model, estimator))
            if judge is not None:
                verdict = judge.judge(probes, ctx.messages)
                for row in new_rows:
                    row.update(verdict.columns())
            rows.extend(new_rows)
            detail.extend(new_detail)
    table = pd.DataFrame(rows, columns=None if rows else ["session", "cut", "strategy", "family", "probes",
                                                          "retained", "retention", "context_tokens"])
    return ProbeEvaluation(table, pd.DataFrame(detail), probes_by_cut, list(llm))


def probe_table(
    sessions: Any,
    strategies: Sequence[str] = STRATEGIES,
    *,
    summaries: Any = None,
    judge: Any = None,
    cuts: Sequence[int] | Callable[[RecordedHistory], Sequence[int]] | None = None,
    context_window: int | None = None,
    params: dict | None = None,
) -> Any:
    """One row per (session, cut, strategy, family); see the module docstring and ``evaluate``."""
    return evaluate(sessions, strategies, summaries=summaries, judge=judge, cuts=cuts,
                    context_window=context_window, params=params).table
