"""Fidelity of the client presets: how many recorded automatic compactions a replay predicts.

Reads every transcript under ``--corpus`` (any folder of transcripts, with or without
``manifest.json``; files that never mention a compaction are not imported: a byte
search for ``compact`` first), keeps the Claude Code and Codex sessions that recorded a
compaction, and prints per client and client version the share of *automatic*
compactions that a replay predicts within one request of the real one
(``opctx.lab.fidelity``), in both modes:

``resync``
    each compaction predicted from the context the agent had after the previous one;
``free``
    one replay of the whole session from its start (a client preset on its own client's
    recording rejoins the recording where its compaction falls on the client's own
    compaction request: ``replay(..., follow_recording=True)``).

Every Claude Code and Codex recording under ``--corpus`` is read, also those that never
compacted: a stretch that ran past a preset's trigger without compacting is a false
positive of that preset. Per client and client version, and in both modes, the report
gives the recorded automatic compactions predicted within one request (a version with no
sourced rule counts as a miss) beside the predicted compactions the client never made
(false positives): recall and precision (``opctx.lab.fidelity.fidelity_summary``), and
the rule each version ran with and where it was read.

Variants (rows):

``default``
    the client presets as shipped: the recording's version (``client_rules``), the
    client's own figure, its auto-compaction setting taken from the *other* sessions of
    its rule (``settings="loso"``: a setting read off the scored session would be a fit
    on it);
``settings read off each recording``
    the same with each session's own setting (in sample);
``client defaults``
    auto-compaction on everywhere (the client's default setting);
``default, request check``
    ``trigger_check="request"`` (the engine's own check of the request about to be
    sent): a replay in both modes;
``microcompaction off``
    the claude-code preset without the client's clearing of old tool results;
``calibrated (LOSO)``
    ``opctx.lab.calibrate.loso_fidelity_table``: each session group under a preset whose
    trigger was fitted on the other sessions only.

``--variants NAME,...`` runs some of them (free mode replays every session: slow).

``--post`` prints only the post-compaction table (``post_compaction``): per recorded
automatic Claude Code compaction, the first request after it, real and replayed, with
their parts.

Automatic = recorded ``trigger == "auto"``, or no recorded trigger and compacted in the
middle of a tool loop (``trigger_inferred``: Codex rollouts do not say why). Each
client's recordings are scored with its own preset. The calibration section gives
the fit per client version group and its leave-one-session-out error (predicted
trigger minus the recorded ``preTokens``/provider total of each row). The check
section compares ``preTokens`` with the last response's prompt + output and with the
tool results appended after it: the evidence for the "last-response" check.

``--baseline-rev REV`` runs this same script against another git revision of opctx
(``git worktree add --detach`` into a temporary folder, run there with ``PYTHONPATH``
pointing at it, removed afterwards) and prints both side by side; variants the other
revision cannot run are ``n/a``. ``--json`` prints one JSON object.

Run:  .venv/bin/python benchmarks/fidelity.py [--corpus DIR] [--json] [--baseline-rev REV] [--rows] [--post]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# the package measured: this checkout, or another revision's (--baseline-rev runs this file there)
ROOT = Path(os.environ.get("OPCTX_FIDELITY_ROOT") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))

CLIENT_PRESET = {"claude-code": "claude-code", "codex": "codex"}
VARIANTS = ("default", "settings read off each recording", "client defaults", "default, request check",
            "microcompaction off", "calibrated (LOSO)")
# the --post table's free replays: the preset as shipped, and its trigger alone
POST_VARIANTS = (("default", {}), ("aging off", {"aging": False}))


def load_histories(corpus: Path) -> tuple[list, list[str]]:
    """Every client recording under ``corpus`` (each branch of a resumed session), and the
    files that could not be read."""
    from opctx.importers import iter_transcript_files, parse_path
    from opctx.lab.history import recorded_branches

    histories, problems = [], []
    for path, _ in iter_transcript_files([corpus]):
        try:
            imported = parse_path(path, on_error="skip")
        except Exception as exc:  # a benchmark reports unreadable files, it does not stop on them
            problems.append(f"{path}: {type(exc).__name__}: {exc}")
            continue
        for one in imported:
            if getattr(one, "meta", {}).get("parent") is not None:
                continue  # a subagent's own file: its parent's session holds what the client compacted
            for history in recorded_branches(one):
                if history.client in CLIENT_PRESET and history.n_requests:
                    histories.append(history)
    return histories, problems


def _automatic(table):
    if table is None or len(table) == 0:
        return table
    column = "trigger_inferred" if "trigger_inferred" in table.columns else "trigger"
    return table[table[column].astype(str) == "auto"]


def _score(table, label: str) -> list[dict]:
    """Per (client, version) and in all: recall beside precision (``fidelity_summary``), with the rule."""
    from opctx.lab.fidelity import fidelity_summary

    if table is None or len(table) == 0 or f"{label}_delta_requests" not in table.columns:
        return []
    summary = fidelity_summary(table)
    summary = summary[summary["preset"] == label]
    rules = {}
    if f"{label}_rule" in table.columns:
        for version, rule, source in zip(table["client_version"].astype(str), table[f"{label}_rule"],
                                         table[f"{label}_rule_source"], strict=True):
            rules.setdefault(version, (rule, source))
    out = []
    for row in summary.itertuples():
        rule = rules.get(str(row.client_version), (None, None))
        out.append({"client": row.client, "version": str(row.client_version), "automatic": int(row.automatic),
                    "replayable": int(row.replayable), "within_one": int(row.within_one_request),
                    "share": None if row.automatic == 0 else row.recall, "false_positives": int(row.false_positives),
                    "precision": None if row.precision != row.precision else round(float(row.precision), 3),
                    "rule": rule[0], "rule_source": rule[1]})
    return out


def measure(histories: list, variants: Sequence[str] = VARIANTS) -> dict:
    """Every variant in both modes, the calibration report and the check evidence."""
    from opctx.lab import fidelity

    results: list[dict] = []
    per_row: list[dict] = []
    errors: dict[str, str] = {}
    for mode in ("resync", "free"):
        for variant in variants:
            started = time.perf_counter()
            try:
                rows, detail = _variant(histories, mode, variant, fidelity)
            except Exception as exc:  # an older revision without the variant: reported, not fatal
                errors[f"{mode}/{variant}"] = f"{type(exc).__name__}: {exc}"
                continue
            for row in rows:
                results.append({"mode": mode, "variant": variant, **row,
                                "seconds": round(time.perf_counter() - started, 1)})
            per_row += [{"mode": mode, "variant": variant, **d} for d in detail]
    return {"results": results, "rows": per_row, "errors": errors, "calibration": calibration(histories),
            "check": check_evidence(histories)}


def _variant(histories: list, mode: str, variant: str, fidelity) -> tuple[list[dict], list[dict]]:
    rows: list[dict] = []
    detail: list[dict] = []
    for client, preset in CLIENT_PRESET.items():
        mine = [h for h in histories if h.client == client]
        if not mine:
            continue
        if variant == "calibrated (LOSO)":
            from opctx.lab.calibrate import loso_fidelity_table

            table = loso_fidelity_table(mine, preset, mode=mode)
            label = f"{preset}+calibrated"
        else:
            kw = ({"trigger_check": "request"} if variant == "default, request check"
                  else {"settings": "recording"} if variant == "settings read off each recording"
                  else {"settings": "default"} if variant == "client defaults"
                  else {"microcompact": False} if variant == "microcompaction off" and client == "claude-code"
                  else {})
            table = fidelity.fidelity_table(mine, presets=(preset,), mode=mode, **kw)
            label = preset
        rows += _score(table, label)
        detail += _detail(table, label)
    return rows, detail


def _detail(table, label: str) -> list[dict]:
    """One dict per automatic recorded compaction: where it was and where the preset's trigger fired."""
    auto = _automatic(table)
    if auto is None or len(auto) == 0:
        return []

    import pandas as pd

    def value(row, column):
        v = row.get(column)
        return None if v is None or pd.isna(v) else int(v)

    out = []
    for _, row in auto.iterrows():
        out.append({"session": str(row["session"])[:11] + ("#b" if "#branch" in str(row["session"]) else ""),
                    "compaction": int(row["compaction"]),
                    "client_version": str(row.get("client_version")), "recorded_request": value(row, "recorded_request"),
                    "recorded_last_total": value(row, "recorded_last_total"),
                    "recorded_check_tokens": value(row, "recorded_check_tokens"),
                    "believed_tokens": value(row, f"{label}_believed_tokens"),
                    "delta_requests": value(row, f"{label}_delta_requests"),
                    "rule_known": bool(row.get(f"{label}_rule_known", True)),
                    "context_flag": bool(row.get("context_flag", False))})
    return out


def calibration(histories: list) -> list[dict]:
    """Per client and fit group: the fit on every session and its leave-one-session-out error."""
    try:
        from opctx.lab.calibrate import calibrate
    except ImportError as exc:
        return [{"error": str(exc)}]
    out = []
    for client, preset in CLIENT_PRESET.items():
        mine = [h for h in histories if h.client == client]
        if not mine:
            continue
        cal = calibrate(mine, preset)
        report = cal.report
        stretches = report[report["kind"] != "compaction"]
        report = report[report["kind"] == "compaction"]
        for group, rows in report.groupby("group"):
            errors = [abs(int(e)) for e in rows["error_tokens"]]
            mine_stretches = stretches[stretches["group"] == group]
            out.append({
                "client": client, "group": group, "unit": cal.unit, "rows": len(rows),
                "versions": sorted(set(rows["version"].astype(str))),
                "fit_all_sessions": round(float(cal.fits[group]), 4),
                "loso_median_abs_error_tokens": statistics.median(errors),
                "loso_max_abs_error_tokens": max(errors),
                "loso_within_interval": int(rows["within_interval"].sum()),
                "discounted": [f"{s} #{k}" for s, k, d in zip(rows["session"], rows["compaction"], rows["discounted"],
                                                            strict=True) if d],
                "stretches_without_compaction": len(mine_stretches),
                "stretches_off": int(mine_stretches["reason"].astype(str).str.startswith("not used").sum()),
                "stretches_against_fit": int((mine_stretches["discounted"].astype(bool)
                                              & ~mine_stretches["reason"].astype(str).str.startswith("not used")).sum()),
            })
    return out


def check_evidence(histories: list) -> list[dict]:
    """Per recorded automatic compaction: preTokens, the last response's total, what came after it."""
    from opctx.context.tokens import Estimator
    from opctx.lab.fidelity import recorded_compaction_points

    estimator = Estimator()
    out = []
    for h in histories:
        for point in recorded_compaction_points(h):
            if point.get("trigger") != "auto" or point.get("recorded_pre_tokens") is None:
                continue
            idx = point["recorded_index"]
            last = max((i for i in range(idx) if h.messages[i].get("role") == "assistant"), default=None)
            appended = sum(estimator.message_tokens(m, h.model or None) for m in h.messages[last + 1: idx]
                           if not m.get("display_only")) if last is not None else 0
            out.append({"session": (h.session_id or "")[:16], "client_version": point.get("client_version"),
                        "pre_tokens": point["recorded_pre_tokens"], "last_total": point.get("recorded_last_total"),
                        "appended_after_last_response": appended})
    return out


def post_compaction(histories: list, variants: Sequence[tuple[str, dict]] = (("default", {}),)) -> list[dict]:
    """Per recorded automatic Claude Code compaction: the first request after it, real vs replayed.

    Real (the recording): ``real_post`` = the provider's prompt count of the first request
    after the summary; its parts: ``real_summary`` (opctx's estimate of the summary message
    the agent saw), ``real_overhead`` (the unseen part of the session's *first* request:
    provider count minus the estimate of what the file holds before it, i.e. system prompt
    and tool schemas), ``real_between`` (messages the file holds between the summary and
    that request) and ``real_reattached`` = the rest: what Claude Code adds after a
    compaction and does not write to the transcript (re-read files, todo list, plan),
    plus the estimate's error on the summary. ``real_cache_read`` is that request's cached
    prefix (the system prompt and tools the previous requests had cached).

    Replay (``free`` mode, one replay per session and variant, ``feed_usage=True``): the
    replay's own compaction matched to the recorded one as ``fidelity_table`` matches it
    (its first compaction after the previous recorded point), and the request it then
    sent: ``post`` (what the engine counted: the carried overhead and the preset's
    ``post_compaction_tokens`` included), ``summary``,
    ``request`` (the kept user requests: the latest one, pinned or heading the tail),
    ``kept`` (the rest of what was kept verbatim) and ``overhead`` = post minus the
    estimate of the messages. ``delta`` is the
    replay's post minus the real one.
    """
    from opctx.dag.messages import is_tool_result
    from opctx.lab.replay import replay

    out: list[dict] = []
    for h in histories:
        if h.client != "claude-code":
            continue
        real = recorded_post_parts(h)
        if not real:
            continue
        est = _estimate_for(h)
        replays = {name: replay(h, "claude-code", feed_usage=True, keep_contexts=True,
                                client_version=h.client_version, **kw) for name, kw in variants}
        used: dict[str, set[int]] = {name: set() for name in replays}
        for row in real:
            previous = row.pop("_previous")
            for name, result in replays.items():
                match = next((j for j, c in enumerate(result.compactions) if j not in used[name]
                              and c.stream_index > previous and c.ok), None)
                if match is None:
                    row[f"{name}_post"] = None
                    continue
                used[name].add(match)
                c = result.compactions[match]
                context = result.context(c.step)
                summary_tokens = sum(est(m) for m in context if m.get("id") == c.summary_id)
                # the kept user requests (pinned or heading the tail) apart from the rest of the tail
                others = sum(est(m) for m in context if m.get("id") != c.summary_id and m.get("role") == "user"
                             and not is_tool_result(m))
                kept = sum(est(m) for m in context) - summary_tokens - others
                row.update({f"{name}_at": int(result.steps_df.iloc[c.step]["stream_index"]),
                            f"{name}_post": int(c.tokens_after), f"{name}_summary": summary_tokens,
                            f"{name}_request": others, f"{name}_kept": kept,
                            f"{name}_overhead": int(c.tokens_after) - summary_tokens - kept - others})
                if row["real_post"] is not None:
                    row[f"{name}_delta"] = int(c.tokens_after) - row["real_post"]
            out.append(row)
    return out


def _estimate_for(h: Any) -> Any:
    from opctx.context.tokens import Estimator

    estimator, model = Estimator(), h.model or None

    def est(m: dict) -> int:
        return 0 if m.get("display_only") else estimator.message_tokens(m, model)
    return est


def recorded_post_parts(h: Any) -> list[dict]:
    """The real side of ``post_compaction`` for one Claude Code recording (its docstring)."""
    from opctx.lab.history import provider_prompt_tokens

    est = _estimate_for(h)
    requests = [i for i, m in enumerate(h.messages) if m.get("role") == "assistant"
                and provider_prompt_tokens(m) is not None]
    first = requests[0] if requests else None
    base_overhead = (provider_prompt_tokens(h.messages[first]) - sum(est(m) for m in h.messages[:first])
                     if first is not None else None)
    out: list[dict] = []
    previous = -1
    for k, comp in enumerate(h.compactions):
        start = comp.stream_index
        if comp.trigger != "auto" or start <= 0:
            previous = start
            continue
        nxt = next((i for i in requests if i >= start), None)
        summary = comp.summary_message or {"role": "user", "content": comp.summary_text}
        row: dict[str, Any] = {
            "session": (h.session_id or "")[:11], "compaction": k, "client_version": h.version_at(start),
            "real_post": provider_prompt_tokens(h.messages[nxt]) if nxt is not None else None,
            "real_cache_read": int((h.messages[nxt].get("usage") or {}).get("cache_read_tokens") or 0)
            if nxt is not None else None,
            "real_summary": est(summary), "real_overhead": base_overhead,
            "real_between": sum(est(m) for m in h.messages[start:nxt]) if nxt is not None else None,
            "_previous": previous,
        }
        if None not in (row["real_post"], base_overhead):
            row["real_reattached"] = row["real_post"] - base_overhead - row["real_summary"] - row["real_between"]
        out.append(row)
        previous = start
    return out


def reattached_loso(histories: list) -> list[int | None]:
    """Per history: ``post_compaction_tokens`` fitted without its session group.

    The fit is the median of ``real_reattached`` (``recorded_post_parts``) over the
    recorded automatic Claude Code compactions of the *other* groups
    (``opctx.lab.calibrate.session_groups``); ``None`` when they have none.
    """
    from opctx.lab.calibrate import session_groups

    groups = session_groups(histories)
    measured = [[r["real_reattached"] for r in recorded_post_parts(h) if r.get("real_reattached") is not None]
                if h.client == "claude-code" else [] for h in histories]
    fits: list[int | None] = []
    for g in groups:
        others = [v for h_group, values in zip(groups, measured, strict=True) if h_group != g for v in values]
        fits.append(int(statistics.median(others)) if others else None)
    return fits


def print_post(rows: list[dict], variants: Sequence[str]) -> None:
    """The ``--post`` table (see ``post_compaction``)."""
    def f(v: Any) -> str:
        return "-" if v is None else f"{v:,}"

    print("\nafter each automatic compaction: the first request, real (provider count and its parts) vs the "
          "free replay's (engine count and its parts):")
    head = "| session | version | real post | summary | overhead | between | re-attached (rest) | cache read |"
    for name in variants:
        head += f" {name}: post | summary | request | kept | overhead | delta |"
    print(head)
    print("|---" * (8 + 6 * len(variants)) + "|")
    for r in rows:
        line = (f"| {r['session']} #{r['compaction']} | {r['client_version']} | {f(r['real_post'])} | "
                f"{f(r['real_summary'])} | {f(r['real_overhead'])} | {f(r['real_between'])} | "
                f"{f(r.get('real_reattached'))} | {f(r['real_cache_read'])} |")
        for name in variants:
            line += " " + " | ".join(f(r.get(f"{name}_{part}")) for part in
                                     ("post", "summary", "request", "kept", "overhead", "delta")) + " |"
        print(line)


def revision() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_baseline(rev: str, corpus: Path) -> dict:
    """This script's ``--json`` on another revision (a temporary git worktree)."""
    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="opctx-fidelity-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", str(tree), rev], check=True,
                       capture_output=True)
        try:
            env = {**os.environ, "PYTHONPATH": str(tree), "OPCTX_FIDELITY_ROOT": str(tree)}
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--json", "--corpus", str(corpus)],
                                  env=env, capture_output=True, text=True, cwd=str(tree))
            if done.returncode != 0:
                return {"revision": rev, "failed": done.stderr.strip().splitlines()[-5:]}
            return json.loads(done.stdout)
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(tree)], capture_output=True)


def _fmt_share(row: dict | None) -> str:
    if row is None:
        return "n/a"
    recall = f"{row['within_one']}/{row['automatic']}"
    fp = row.get("false_positives")
    return recall if fp is None else f"{recall}, FP {fp}"


def print_report(report: dict, baseline: dict | None, show_rows: bool = False) -> None:
    print(f"opctx {report['revision']}: {report['sessions']} client sessions with compactions under {report['corpus']}")
    keys = sorted({(r["client"], r["version"], r["mode"], r["variant"]) for r in report["results"]}
                  | ({(r["client"], r["version"], r["mode"], r["variant"]) for r in baseline.get("results", [])}
                     if baseline else set()),
                  key=lambda k: (k[0], k[1] == "all", k[1], ("resync", "free").index(k[2]),
                                 VARIANTS.index(k[3]) if k[3] in VARIANTS else len(VARIANTS)))
    index = {(r["client"], r["version"], r["mode"], r["variant"]): r for r in report["results"]}
    base_index = {(r["client"], r["version"], r["mode"], r["variant"]): r
                  for r in (baseline or {}).get("results", [])}
    head = (f"{'client':<12} {'version':<9} {'mode':<7} {'variant':<33} {'automatic':>9}  "
            "within one request (recall), false positives")
    if baseline:
        head += f"   baseline {baseline.get('revision', '?')}"
    print("\n" + head)
    for key in keys:
        row = index.get(key)
        line = (f"{key[0]:<12} {key[1]:<9} {key[2]:<7} {key[3]:<33} {(row or base_index[key])['automatic']:>9}  "
                f"{_fmt_share(row):<18}")
        if baseline:
            line += f"   {_fmt_share(base_index.get(key))}"
        print(line)
    for name, rep in (("this revision", report), ("baseline", baseline or {})):
        for what, err in rep.get("errors", {}).items():
            print(f"  {name}: {what} not run: {err}")
    print("\nrules (default variant):")
    for r in dict((r["version"], r) for r in report["results"]
                  if r["variant"] == "default" and r.get("rule") and r["version"] != "all").values():
        print(f"  {r['client']:<12} {r['version']:<9} {r['rule']}\n      source: {r['rule_source']}")
    if report.get("rows") and show_rows:
        print("\nper automatic compaction (delta = replay minus recording, in requests; believed = the replay's "
              "check figure at the recorded point, last total = the provider's):")
        keys = list(dict.fromkeys((r["mode"], r["variant"]) for r in report["rows"]))
        by = {}
        for r in report["rows"]:
            by.setdefault((r["session"], r["compaction"]), {})[(r["mode"], r["variant"])] = r
        print("| session | version | request | last total | " + " | ".join(f"{m} {v}" for m, v in keys) + " |")
        print("|---" * (4 + len(keys)) + "|")
        for (session, k), cells in by.items():
            first = next(iter(cells.values()))
            shown = []
            for key in keys:
                c = cells.get(key)
                delta = "-" if c is None or c["delta_requests"] is None else f"{c['delta_requests']:+d}"
                delta += "" if c is None or c.get("rule_known", True) else " (unsourced)"
                believed = "" if c is None or c["believed_tokens"] is None else f" ({c['believed_tokens']:,})"
                shown.append(delta + believed)
            last = first["recorded_last_total"]
            print(f"| {session} #{k} | {first['client_version']} | {first['recorded_request']} | "
                  f"{last if last is None else format(last, ',')} | " + " | ".join(shown) + " |")
    print("\ncalibration (fit on every session; error of the fit without each row's session):")
    for c in report["calibration"]:
        if "error" in c:
            print("  ", c["error"])
            continue
        print(f"  {c['client']:<12} {c['group']:<28} rows {c['rows']}  fit {c['fit_all_sessions']:,} ({c['unit']})  "
              f"LOSO |error| median {c['loso_median_abs_error_tokens']:,} max {c['loso_max_abs_error_tokens']:,} tokens, "
              f"{c['loso_within_interval']}/{c['rows']} at the same check; discounted: {', '.join(c['discounted']) or '-'}; "
              f"stretches without a compaction {c.get('stretches_without_compaction', 0)} "
              f"({c.get('stretches_off', 0)} with auto-compaction off, not used; "
              f"{c.get('stretches_against_fit', 0)} above the fit)")
    print("\ncheck: preTokens vs the last response's prompt + output, and what came after that response:")
    for c in report["check"]:
        gap = None if c["last_total"] is None else c["pre_tokens"] - c["last_total"]
        print(f"  {c['session']:<17} {c['client_version'] or '?':<8} preTokens {c['pre_tokens']:>8,}  "
              f"preTokens - last total {gap if gap is not None else 'n/a':>6}  appended after it ~{c['appended_after_last_response']:,}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "corpus")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--baseline-rev", help="also run on this git revision and print both")
    ap.add_argument("--rows", action="store_true", help="also print one line per automatic compaction")
    ap.add_argument("--variants", help=f"comma-separated variants to run (default: all of {', '.join(VARIANTS)})")
    ap.add_argument("--post", action="store_true",
                    help="only the post-compaction table: the first request after each automatic compaction, "
                         "real vs free replay, with their parts")
    args = ap.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"no corpus folder at {args.corpus}", file=sys.stderr)
        return 2
    histories, problems = load_histories(args.corpus)
    if args.post:
        rows = post_compaction(histories, POST_VARIANTS)
        if args.json:
            print(json.dumps({"revision": revision(), "post": rows}, default=str))
        else:
            print_post(rows, [name for name, _ in POST_VARIANTS])
        return 0
    variants = VARIANTS
    if args.variants:
        variants = tuple(v.strip() for v in args.variants.split(","))
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            print(f"unknown variant(s) {unknown}; variants: {', '.join(VARIANTS)}", file=sys.stderr)
            return 2
    report = {"revision": revision(), "corpus": str(args.corpus), "sessions": len(histories),
              "unreadable": len(problems), **measure(histories, variants)}
    baseline = run_baseline(args.baseline_rev, args.corpus) if args.baseline_rev else None
    if args.json:
        print(json.dumps({**report, "baseline": baseline} if baseline else report, default=str))
    else:
        print_report(report, baseline, show_rows=args.rows)
    return 0


if __name__ == "__main__":
    # warnings stay visible: a client version without a sourced rule is said once (and its rows count as misses)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())
