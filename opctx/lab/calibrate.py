"""Calibration: fit a client preset's trigger to where recorded agents really compacted.

``calibrate(sessions, "claude-code")`` reads every recorded *automatic*
compaction of the sessions (``trigger == "auto"``; with ``include_inferred`` also
compactions without a recorded trigger that happened in the middle of a tool
loop, as Codex rollouts record them), fits the trigger per client version group
and returns a ``CalibratedPreset``: a preset that ``replay`` and ``sweep``
accept wherever they accept a preset name, with its fit report.

What one compaction says
------------------------
Claude Code and Codex compare their own figure with their threshold before the next
request: the *last response*'s prompt plus output as the provider counted it, plus
what the version adds (``opctx.lab.client_rules.check_tokens``). Claude Code writes
that figure into the boundary as ``preTokens`` (on the corpus, preTokens equals the
last request's prompt + output in 5 of 7 automatic compactions and is within 160
tokens in the other 2). So a compaction at figure ``U`` whose previous check (since
the previous compaction) counted ``L`` without compacting is consistent with any
trigger in ``(L, U]``. ``U`` is ``preTokens`` where the recording has it (``source``
says ``"preTokens"``), else the client's figure at the check that compacted (Codex,
whose rollouts record only the provider's total: that total plus the estimate of its
older reasoning, ``"client figure"``), else the provider's prompt + output of the last
request (``"provider prompt+output"``); ``L`` is the client's figure at the check
before.

What a session without a compaction says
----------------------------------------
A stretch of a recording that ran to the next manual compaction, or to its end,
without an automatic one is evidence too: the trigger lies above the largest check the
client made there (``L`` of the stretch: the trigger is in ``(L, inf)``). These rows
(``kind="no compaction"``) join the consensus; the median, which needs a point, only
reports whether they agree with it. A recording that shows its client's automatic
compaction was off (``opctx.lab.client_settings``) says nothing about the trigger:
its stretches are listed and not used.

The fitted quantity is the client's own unit: *tokens before the window* for
Claude Code (``window - trigger``: 45,000 for 2.0.x at 200K), a *fraction of the
model's window* for Codex. Groups: the ``TRIGGER_RULES`` row a version falls in
(``by="rule"``, default: versions that share a rule share a fit) or the exact
version string (``by="version"``).

Estimators (robust; the rule is stated per row of the report)
--------------------------------------------------------------
``method="consensus"`` (default)
    The trigger consistent with the most rows: the range covered by the largest
    number of row intervals, its middle (its finite end when it is open on one
    side; of several such ranges, the one nearest the median ``U``). Rows whose
    interval excludes the fit are *discounted* (``reason`` says so). A row that
    disagrees with all others (a user who set ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``)
    cannot move the fit; half of the rows can.
``method="median"``
    The median of the rows' values; rows more than 3 scaled MADs (1.4826 x MAD)
    and more than 1 % from it, whose interval does not hold it either, are
    discounted and the median of the others is the fit. (A row's value is where
    the client compacted, up to one request past its trigger: a row whose interval
    holds the median agrees with it however far its value lies.)

Leave-one-session-out
---------------------
Every row also gets the fit made *without* its session (``fitted_loso``) and the
error of that fit (``error_tokens``: predicted trigger minus ``U``;
``within_interval``: the fit would have compacted at the same check). Sessions
are grouped first: two sessions that share a compaction's recorded id (a Claude
Code boundary uuid) or a recording session id (the same session saved in two
files) are one group and are left out together. Where no row of the same fit
group remains, ``fitted_loso`` is the table's value (``loso_from="table"``).
``loso_fidelity_table`` runs ``fidelity_table`` that way: each session replayed
under a preset calibrated without it.

``opctx.lab.calibrate`` is this module and is callable as the function
(``opctx.lab.calibrate(sessions, preset)``), whichever of the two an import
reached first; its other names: ``from opctx.lab.calibrate import ...``.

>>> cal = calibrate([], "claude-code")
>>> cal.name, cal.unit, cal.fits
('claude-code+calibrated', 'tokens_before_window', {})
"""

from __future__ import annotations

import logging
import math
import statistics
import sys
import threading
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .client_rules import _codex_window, js_round, rule_for
from .fidelity import (
    compaction_segments,
    fidelity_table,
    recorded_compaction_points,
    segment_checks,
)
from .history import RecordedHistory, as_history, shared_key_roots
from .presets import PRESETS, TriggerResolution, build_engine, resolve_trigger

__all__ = [
    "calibrate",
    "CalibratedPreset",
    "loso_fidelity_table",
    "session_groups",
    "consensus_fit",
    "median_fit",
    "simulated_recording",
]

logger = logging.getLogger(__name__)

METHODS = ("consensus", "median")
REPORT_COLUMNS = [
    "session", "session_group", "kind", "compaction", "client", "version", "model", "group", "window",
    "source", "observed_tokens", "previous_tokens", "observed", "interval_low", "interval_high",
    "prior", "fitted", "discounted", "reason", "fitted_loso", "loso_from", "predicted_tokens_loso",
    "error_tokens", "error_pct", "within_interval",
]
_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()


def _warn_once(key: tuple[str, str], message: str, *args: Any) -> None:
    with _WARNED_LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    logger.warning(message, *args)


# -- estimators ------------------------------------------------------------------------------------


def consensus_fit(intervals: Sequence[tuple[float, float]], points: Sequence[float]) -> tuple[float, list[bool]]:
    """The value inside the most ``[low, high]`` intervals, and which intervals hold it.

    >>> consensus_fit([(40.0, 50.0), (44.0, 46.0), (10.0, 12.0)], [45.0, 45.0, 11.0])
    (45.0, [True, True, False])
    """
    if not intervals:
        raise ValueError("no intervals to fit")
    ends = sorted({v for lo, hi in intervals for v in (lo, hi) if math.isfinite(v)})
    if not ends:
        return statistics.median(points), [True] * len(intervals)
    # elementary regions: each end, each gap between ends, below the first and above the last
    regions: list[tuple[float, float]] = [(-math.inf, ends[0])]
    for a, b in zip(ends, ends[1:], strict=False):
        regions += [(a, a), (a, b)]
    regions += [(ends[-1], ends[-1]), (ends[-1], math.inf)]

    def probe(region: tuple[float, float]) -> float:
        lo, hi = region
        if lo == hi:
            return lo
        if not math.isfinite(lo):
            return hi - 1.0
        if not math.isfinite(hi):
            return lo + 1.0
        return (lo + hi) / 2

    cover = [sum(lo <= probe(r) <= hi for lo, hi in intervals) for r in regions]
    best = max(cover)
    spans: list[tuple[float, float]] = []
    for region, c in zip(regions, cover, strict=True):
        if c != best:
            continue
        if spans and spans[-1][1] == region[0]:
            spans[-1] = (spans[-1][0], region[1])
        else:
            spans.append(region)
    centre = statistics.median(points)

    def value(span: tuple[float, float]) -> float:
        lo, hi = span
        if math.isfinite(lo) and math.isfinite(hi):
            return (lo + hi) / 2
        return hi if math.isfinite(hi) else lo

    fit = min((value(s) for s in spans), key=lambda v: (abs(v - centre), v))
    return fit, [lo <= fit <= hi for lo, hi in intervals]


def median_fit(
    points: Sequence[float], intervals: Sequence[tuple[float, float]] | None = None,
) -> tuple[float, list[bool]]:
    """The median after discounting points beyond 3 scaled MADs and 1 % of the median.

    A point whose ``[low, high]`` interval (when given) holds the median is kept
    wherever it lies.

    >>> median_fit([45.0, 44.0, 46.0, 77.0])
    (45.0, [True, True, True, False])
    >>> median_fit([45.0, 45.1, 44.9, 41.0], [(45, 46), (45.1, 46), (44.9, 46), (41, 46)])
    (44.95, [True, True, True, True])
    """
    if not points:
        raise ValueError("no points to fit")
    if intervals is not None and len(intervals) != len(points):
        raise ValueError("one interval per point")
    med = statistics.median(points)
    mad = statistics.median(abs(p - med) for p in points)
    limit = max(3 * 1.4826 * mad, 0.01 * abs(med))
    keep = [abs(p - med) <= limit for p in points]
    if intervals is not None:
        keep = [k or lo <= med <= hi for k, (lo, hi) in zip(keep, intervals, strict=True)]
    return statistics.median(p for p, k in zip(points, keep, strict=True) if k), keep


# -- session groups --------------------------------------------------------------------------------


def session_groups(histories: Sequence[RecordedHistory]) -> list[int]:
    """A group number per history: shared compaction ids or recording session ids join groups."""
    keys = [{f"session:{s}" for s in h.source_session_ids} | {f"boundary:{u}" for c in h.compactions for u in c.source_ids}
            for h in histories]
    roots: dict[int, int] = {}
    return [roots.setdefault(root, len(roots)) for root in shared_key_roots(keys)]


# -- the calibrated preset -------------------------------------------------------------------------


@dataclass(eq=False)
class CalibratedPreset:
    """A client preset with triggers fitted per version group (see the module docstring).

    Call it as an engine factory (``replay(history, cal, client_version=...)``,
    ``sweep(specs, {"preset": [cal]})``); ``params_for(version)`` gives the
    parameters for the base preset instead (``replay(h, "claude-code",
    **cal.params_for(v))``). A version whose group has no fit uses the table's
    rule; without a version, the only fit if there is one, else the table's
    default rule (said once).
    """

    base: str
    client: str
    unit: str  # "tokens_before_window" | "window_fraction"
    fits: dict[str, float] = field(default_factory=dict)
    by: str = "rule"
    method: str = "consensus"
    report: Any = None
    name: str = ""
    accepts_client_version = True

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"{self.base}+calibrated"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        fits = ", ".join(f"{k}: {v:,.4g}" for k, v in self.fits.items())
        return f"CalibratedPreset({self.name!r}, {self.unit}, {{{fits}}})"

    def group_of(self, client_version: str | None) -> str | None:
        if client_version is None:
            return None
        if self.by == "version":
            return str(client_version)
        return _rule_group(self.client, client_version)

    def params_for(self, client_version: str | None = None) -> dict[str, Any]:
        """The base preset's parameters for a recording of ``client_version``."""
        group = self.group_of(client_version)
        value = self.fits.get(group) if group is not None else None
        if value is None and client_version is None and len(self.fits) == 1:
            value = next(iter(self.fits.values()))
        elif value is None and self.fits:
            _warn_once(
                (self.name, str(group)), "%s: no fit for %s (version %r); using the table's rule",
                self.name, group or "recordings without a client version", client_version,
            )
        params: dict[str, Any] = {"client_version": client_version}
        if value is not None:
            key = "trigger_before_window" if self.unit == "tokens_before_window" else "trigger_window_fraction"
            params[key] = int(round(value)) if key == "trigger_before_window" else float(value)
        return params

    def resolve(self, *, context_window: int, model: str | None = None, client_version: str | None = None,
                **settings: Any) -> TriggerResolution:
        """The calibrated trigger for a recording (``settings``: the client's, e.g. ``auto_compact``)."""
        return resolve_trigger(self.base, context_window=context_window, model=model,
                               **{**self.params_for(client_version), **settings})

    def __call__(self, *, session_db: Any = None, clock: Callable[[], float] | None = None, context_window: int | None = None,
                 model: str | None = None, summarizer_provider: Any = None, client_version: str | None = None,
                 **params: Any) -> Any:
        kw = {"clock": clock} if clock is not None else {}
        engine = build_engine(
            self.base, session_db=session_db, context_window=context_window, model=model,
            summarizer_provider=summarizer_provider, **kw, **{**self.params_for(client_version), **params},
        )
        engine.name = self.name
        return engine


# -- the fit ---------------------------------------------------------------------------------------


def _rule_group(client: str, version: str | None) -> str:
    """The rule that applies to ``version`` (a version no sourced rule covers is its own group)."""
    rule, known = rule_for(client, version)
    return rule.label if known else f"no sourced rule for {client} {version!r}"


def _rows(histories: Sequence[RecordedHistory], groups: Sequence[int], preset: str, *, by: str,
          include_inferred: bool, context_window: int | None) -> list[dict[str, Any]]:
    from opctx.context.tokens import real_context_window

    spec = PRESETS[preset]
    rows = []
    for history, group in zip(histories, groups, strict=True):
        if history.client != spec.client:
            continue
        for point in _points(history):
            trigger = point["trigger_inferred"] if include_inferred else point["trigger"]
            if trigger != "auto" or not point["replayable"]:
                continue
            observed, previous, source = _observed(history, point)
            if observed is None:
                continue
            window = int(context_window or history.context_window or real_context_window(history.model or None))
            version = point["client_version"]
            prior_tokens = resolve_trigger(preset, context_window=window, model=history.model,
                                           client_version=version).auto_tokens
            if spec.client == "codex":
                base = _codex_window(history.model, window)
                value, prior = observed / base, prior_tokens / base
                low = previous / base if previous is not None else -math.inf
                high = value
            else:
                base = window
                value, prior = float(window - observed), float(window - prior_tokens)
                low = value
                high = float(window - previous) if previous is not None else math.inf
            rows.append({
                "session": history.session_id or history.title, "session_group": group,
                "compaction": point["_compaction"], "client": spec.client, "version": version,
                "model": history.model,
                "group": str(version) if by == "version" else _rule_group(spec.client, version), "kind": "compaction",
                "window": window, "source": source, "observed_tokens": observed, "previous_tokens": previous,
                "observed": value, "interval_low": low, "interval_high": high, "prior": prior, "_base": base,
            })
    return rows


def _observed(history: RecordedHistory, point: dict[str, Any]) -> tuple[int | None, int | None, str]:
    """``(U, L, source)`` of a recorded compaction, each the figure its client compares.

    ``U``: the client's own ``preTokens`` where the recording has it; else the client's
    figure at the check that compacted (Codex: the provider total plus its reasoning
    estimate, ``client_rules.check_tokens``); else the provider's prompt + output. ``L``:
    the client's figure at the check before it in the segment.
    """
    rule, _ = rule_for(history.client, point["client_version"])
    checks = segment_checks(history, point["segment_start"], point["recorded_index"], rule.count)
    previous = checks[-2][1] if len(checks) >= 2 else point["previous_total"]
    if point["recorded_pre_tokens"] is not None and point["pre_tokens_source"] != "provider":
        return int(point["recorded_pre_tokens"]), previous, "preTokens"
    if checks:
        return int(checks[-1][1]), previous, "client figure" if rule.count != "last-response" else "provider total"
    if point["recorded_last_total"] is not None:
        return int(point["recorded_last_total"]), previous, "provider prompt+output"
    return None, None, ""


def _negative_rows(histories: Sequence[RecordedHistory], groups: Sequence[int], preset: str, *, by: str,
                   include_inferred: bool, context_window: int | None) -> list[dict[str, Any]]:
    """The stretches that ran without an automatic compaction: the trigger lies above their
    largest check (module docstring, "What a session without a compaction says")."""
    from opctx.context.tokens import real_context_window

    from .client_settings import infer_client_settings
    spec = PRESETS[preset]
    rows = []
    for history, group in zip(histories, groups, strict=True):
        if history.client != spec.client:
            continue
        settings = history.derived("client_settings", lambda h=history: infer_client_settings(h))
        window = int(context_window or history.context_window or real_context_window(history.model or None))
        for start, end, comp in compaction_segments(history):
            ending = history.compactions[comp] if comp is not None else None
            trigger = None if ending is None else (ending.trigger or (
                "auto" if include_inferred and _mid_loop(history, ending.stream_index) else None))
            if trigger == "auto":
                continue
            version = history.version_at(start)
            rule, _ = rule_for(spec.client, version)
            checks = segment_checks(history, start, end, rule.count)
            if not checks:
                continue
            largest = max(c for _, c in checks)
            if spec.client == "codex":
                base = _codex_window(history.model, window)
                low, high, observed = largest / base, math.inf, None
            else:
                base = window
                low, high, observed = -math.inf, float(window - largest), None
            off = settings.auto_compact is False
            rows.append({
                "session": history.session_id or history.title, "session_group": group, "kind": "no compaction",
                "compaction": comp, "client": spec.client, "version": version, "model": history.model,
                "group": str(version) if by == "version" else _rule_group(spec.client, version),
                "window": window, "source": "provider checks", "observed_tokens": None,
                "previous_tokens": largest, "observed": observed, "interval_low": low, "interval_high": high,
                "prior": None, "_base": base, "_off": off, "_evidence": settings.evidence,
            })
    return rows


def _mid_loop(history: RecordedHistory, idx: int) -> bool:
    from .fidelity import _inferred_trigger

    return _inferred_trigger(history.messages, idx) == "auto"


def _points(history: RecordedHistory) -> list[dict[str, Any]]:
    return history.derived(("recorded_compaction_points", history.model), lambda: recorded_compaction_points(history))


def _fit(rows: Sequence[dict[str, Any]], method: str) -> tuple[float, list[bool]]:
    """The fit of a group's rows and, per row, whether it agrees with it.

    Compactions give a point and an interval; stretches without one an open interval
    (``kind == "no compaction"``), used by the consensus (the median has no point for
    them) unless the recording shows auto-compaction off.
    """
    positive = [i for i, r in enumerate(rows) if r["kind"] == "compaction"]
    usable = [i for i, r in enumerate(rows) if r["kind"] == "compaction" or not r.get("_off")]
    if method == "median":
        value, kept = median_fit([rows[i]["observed"] for i in positive],
                                 [(rows[i]["interval_low"], rows[i]["interval_high"]) for i in positive])
        agree = dict(zip(positive, kept, strict=True))
    else:
        value, kept = consensus_fit([(rows[i]["interval_low"], rows[i]["interval_high"]) for i in usable],
                                    [rows[i]["observed"] for i in positive])
        agree = dict(zip(usable, kept, strict=True))
    out = []
    for i, r in enumerate(rows):
        if i in agree:
            out.append(agree[i])
        else:
            out.append(not r.get("_off") and r["interval_low"] <= value <= r["interval_high"])
    return value, out


def _fit_group(members: list[dict[str, Any]], method: str, client: str) -> float:
    """Fit one group, say per row whether it agrees, and score each compaction leave-one-out."""
    rule_text = ("consistent with the most rows (trigger in (previous check, observed]; above the largest "
                 "check of a stretch without compaction)" if method == "consensus"
                 else "within 3 scaled MADs or 1 % of the median, or its interval holds the median")
    value, kept = _fit(members, method)
    for r, ok in zip(members, kept, strict=True):
        r["fitted"], r["discounted"] = value, not ok
        if r.get("_off"):
            r["reason"] = f"not used: auto-compaction off in this recording ({r['_evidence']})"
        elif r["kind"] != "compaction" and method == "median":
            r["reason"] = ("not used by the median (no compaction to place): " +
                           ("agrees with the fit" if ok else "its largest check lies above the fit"))
        else:
            r["reason"] = f"kept: {rule_text}" if ok else f"discounted: not {rule_text}"
    for r in members:
        if r["kind"] != "compaction":
            for key in ("fitted_loso", "loso_from", "predicted_tokens_loso", "error_tokens", "error_pct",
                        "within_interval"):
                r[key] = None
            continue
        others = [o for o in members if o["session_group"] != r["session_group"]]
        if any(o["kind"] == "compaction" for o in others):
            r["fitted_loso"], r["loso_from"] = _fit(others, method)[0], "fit"
        else:
            r["fitted_loso"], r["loso_from"] = r["prior"], "table"
        predicted = _predicted_tokens(r, r["fitted_loso"], client)
        r["predicted_tokens_loso"] = predicted
        r["error_tokens"] = predicted - r["observed_tokens"]
        r["error_pct"] = 100.0 * r["error_tokens"] / r["observed_tokens"]
        previous = r["previous_tokens"]
        r["within_interval"] = (previous is None or previous < predicted) and predicted <= r["observed_tokens"]
    return value


def _predicted_tokens(row: dict[str, Any], value: float, client: str) -> int:
    return int(round(value * row["_base"])) if client == "codex" else int(round(row["window"] - value))


def calibrate(
    sessions: Iterable[Any],
    preset: str = "claude-code",
    *,
    method: str = "consensus",
    by: str = "rule",
    include_inferred: bool = True,
    context_window: int | None = None,
) -> CalibratedPreset:
    """Fit ``preset``'s trigger to the recorded automatic compactions of ``sessions``.

    ``preset``: a client preset (``claude-code`` or ``codex``). ``method``:
    ``"consensus"`` or ``"median"``; ``by``: ``"rule"`` or ``"version"`` (module
    docstring). ``context_window``: the window the recordings ran at (default:
    the recorded one, else the model's). Returns a ``CalibratedPreset`` whose
    ``report`` has one row per compaction used (``REPORT_COLUMNS``).
    """
    import pandas as pd

    spec = PRESETS.get(preset)
    if spec is None or spec.client is None:
        raise ValueError(f"calibrate fits a client preset ({', '.join(n for n, s in PRESETS.items() if s.client)}), got {preset!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if by not in ("rule", "version"):
        raise ValueError(f"by must be 'rule' or 'version', got {by!r}")
    histories = [as_history(s) for s in sessions]
    groups = session_groups(histories)
    rows = _rows(histories, groups, preset, by=by, include_inferred=include_inferred, context_window=context_window)
    negative = _negative_rows(histories, groups, preset, by=by, include_inferred=include_inferred,
                              context_window=context_window)
    fits: dict[str, float] = {}
    for group in dict.fromkeys(r["group"] for r in rows):
        members = [r for r in rows if r["group"] == group] + [r for r in negative if r["group"] == group]
        fits[group] = _fit_group(members, method, spec.client)
    report_rows = rows + [r for r in negative if r["group"] in fits]
    report = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in report_rows],
                          columns=REPORT_COLUMNS)
    unit = "window_fraction" if spec.client == "codex" else "tokens_before_window"
    return CalibratedPreset(base=preset, client=spec.client, unit=unit, fits=fits, by=by, method=method, report=report)


def loso_fidelity_table(
    sessions: Iterable[Any],
    preset: str = "claude-code",
    *,
    mode: str = "resync",
    context_window: int | None = None,
    feed_usage: bool = True,
    method: str = "consensus",
    by: str = "rule",
    include_inferred: bool = True,
    **params: Any,
) -> Any:
    """``fidelity_table`` where each session group is replayed under a preset calibrated without it.

    ``method`` / ``by`` / ``include_inferred`` go to ``calibrate``, ``params`` to the
    replays (``fidelity_table``). The preset column prefix is ``{preset}+calibrated``
    for every row; the fit each group got is in the column ``fit`` (its ``repr``).
    """
    import pandas as pd

    from .client_settings import loso_settings
    from .fidelity import fidelity_predictions

    histories = [as_history(s) for s in sessions]
    groups = session_groups(histories)
    chosen = loso_settings(histories, groups)
    frames, predictions = [], []
    for group in sorted(set(groups)):
        inside = [h for h, g in zip(histories, groups, strict=True) if g == group]
        outside = [h for h, g in zip(histories, groups, strict=True) if g != group]
        cal = calibrate(outside, preset, method=method, by=by, include_inferred=include_inferred,
                        context_window=context_window)
        # the client setting the other groups show, as fidelity_table's own "loso" settings would
        setting = chosen[groups.index(group)].params()
        table = fidelity_table(inside, presets=[cal], mode=mode, context_window=context_window,
                               feed_usage=feed_usage, **{**setting, **params})
        predictions.append(fidelity_predictions(table))
        table.attrs = {}
        if len(table):
            table["fit"] = repr(cal)
            frames.append(table)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    out.attrs["predictions"] = pd.concat([p for p in predictions if len(p)], ignore_index=True) \
        if any(len(p) for p in predictions) else pd.DataFrame()
    return out



def simulated_recording(
    trigger_tokens: int,
    *,
    requests: int = 120,
    seed: int = 0,
    client: str = "claude-code",
    version: str = "2.0.76",
    model: str | None = None,
    overhead: int = 15_000,
    result_tokens: tuple[int, int] = (1_000, 6_000),
    manual_at: Sequence[int] = (),
    user_every: int = 8,
    context_window: int | None = None,
    session_id: str = "",
    auto_compact: bool = True,
    post_compaction_tokens: int = 0,
) -> RecordedHistory:
    """A recording by a simulated client whose trigger is known: for testing calibration and fidelity.

    The client sends one request per tool result (prompt = ``overhead`` for its
    unseen system prompt and tools + opctx's estimate of the context since its
    last compaction; output 50-400 tokens) and, as Claude Code and Codex do,
    compacts before the next request once the figure its version compares (the last
    response's prompt + output, plus what came after it from Claude Code 2.1.2:
    ``opctx.lab.client_rules``) reaches ``trigger_tokens`` (``trigger="auto"``,
    ``preTokens`` = that figure; never with ``auto_compact=False``), or
    after the requests listed in ``manual_at`` (``trigger="manual"``). After a compaction
    its context is the summary and ``post_compaction_tokens`` (re-attached, not in the file). Tool results are ``result_tokens``
    tokens, drawn with ``random.Random(seed)``; the user asks for the next step
    every ``user_every`` requests. ``context_window``: the window the recording
    reports (a Codex rollout reports 95% of its model's: 258,400 for gpt-5.x, the
    default for ``client="codex"``).

    >>> h = simulated_recording(60_000, requests=40, seed=1)
    >>> [c.trigger for c in h.compactions], h.client_version, h.compactions[0].pre_tokens >= 60_000
    (['auto', 'auto'], '2.0.76', True)
    """
    import random

    from opctx.context.tokens import Estimator

    count = rule_for(client, version)[0].count if client == "claude-code" else "last-response"
    rng = random.Random(seed)
    model = model or ("claude-opus-4-5-20251101" if client == "claude-code" else "gpt-5.2-codex")
    sid = session_id or f"sim-{client}-{seed}"
    estimator = Estimator()
    vocabulary = [f"{('alpha', 'beta', 'gamma', 'delta', 'omega', 'sigma', 'kappa', 'lambda')[i % 8]}"
                  f"{rng.randrange(1000)}" for i in range(2 * result_tokens[1] // 3 + 2)]
    messages: list[dict] = []
    compactions: list[Any] = []
    context_tokens = 0
    clock = 1_700_000_000.0

    def add(msg: dict) -> None:
        nonlocal clock, context_tokens
        clock += 5.0
        msg.update(id=f"{sid}-{len(messages)}", timestamp=clock)
        messages.append(msg)
        context_tokens += estimator.message_tokens(msg, model)

    def compact(trigger: str, total: int) -> None:
        from .history import RecordedCompaction

        k = len(compactions)
        summary = {"id": f"{sid}-summary-{k}", "role": "user", "type": "compactionSummary",
                   "content": f"[Previous conversation summary]\nsummary {k} of the work so far", "timestamp": clock}
        compactions.append(RecordedCompaction(
            stream_index=len(messages), node_id=summary["id"], summary_text=summary["content"], trigger=trigger,
            pre_tokens=total, reason=trigger, pre_tokens_source="client", summary_message=summary,
            source_ids=[f"{sid}-boundary-{k}"],
        ))
        nonlocal context_tokens
        context_tokens = estimator.message_tokens(summary, model) + post_compaction_tokens

    add({"role": "user", "content": "please work through the task list"})
    for r in range(requests):
        if r and user_every and r % user_every == 0:
            add({"role": "user", "content": f"good, now do step {r} of the list"})
        prompt = overhead + context_tokens
        output = rng.randint(50, 400)
        call_id = f"call-{r}"
        add({"role": "assistant", "content": f"step {r}", "model": model,
             "tool_calls": [{"id": call_id, "name": "run", "arguments": {"step": r}}],
             "usage": {"input_tokens": prompt, "output_tokens": output}})
        size = rng.randint(*result_tokens)
        start = rng.randrange(len(vocabulary) // 2)
        text = " ".join(vocabulary[start:start + size // 3])
        add({"role": "tool", "content": text, "tool_call_id": call_id, "name": "run"})
        total = prompt + output + (js_round(len(text) / 4) if count == "last-response+after" else 0)
        if r in manual_at:
            compact("manual", total)
        elif auto_compact and total >= trigger_tokens:
            compact("auto", total)
    meta = ({"claude_code": {"version": version, "sessionId": sid}} if client == "claude-code"
            else {"codex": {"cli_version": version, "id": sid}})
    fmt = "claude_code" if client == "claude-code" else "codex"
    if context_window is None and client == "codex":
        context_window = 258_400
    return RecordedHistory(messages=messages, compactions=compactions, model=model, format=fmt,
                           session_id=sid, meta=meta, context_window=context_window)


class _CallableModule(types.ModuleType):
    """``opctx.lab.calibrate(...)`` works when the attribute is this module (module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> CalibratedPreset:
        return calibrate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
