"""opctx.viz.diff: one compaction, before and after, as rows, HTML and a coloured graph."""

from __future__ import annotations

import json
import re

import pytest

from opctx.dag.nodes import Call, Graph, ModelCall, UserMessage
from opctx.viz.diff import (
    DIFF_COLUMNS,
    branch_diff,
    compare_compaction,
    diff_graph,
    diff_html,
    diff_lines,
    list_compactions,
)
from opctx.viz.html import escape_text
from opctx.viz.synthetic import synthetic_session


def _session():
    return synthetic_session(90, compact_every=30, protect_first_n=2, keep_last=4, seed=3)


def test_rows_follow_the_compaction_layout():
    graph, _ = _session()
    summaries = list_compactions(graph)
    assert len(summaries) >= 2 and list(summaries["index"]) == list(range(len(summaries)))
    first = summaries.iloc[0]
    rows = branch_diff(graph, compaction=0)
    assert list(rows.columns) == DIFF_COLUMNS
    before = rows[rows.side == "before"]
    after = rows[rows.side == "after"]
    assert list(before.status.value_counts()[["protected", "folded", "kept"]]) == [
        first.protected, first.folded, first.kept]
    # after = copies of the protected head, the summary, copies of the kept tail, in order
    assert list(after.status.astype(str)) == (
        ["protected"] * first.protected + ["summary"] + ["kept"] * first.kept)
    assert after[after.status == "summary"].copy_id.item() == first.summary_id
    # every protected/kept original is paired with its copy; folded ones have none
    for _, r in before.iterrows():
        if r.status == "folded":
            assert r.copy_id is None
        else:
            copy = graph[r.copy_id]
            assert copy.metadata["copied_from"] == r.original_id
            assert copy.output == graph[r.original_id].output
    assert before.seq.is_monotonic_increasing


def test_compaction_selectors():
    graph, _ = _session()
    summaries = list_compactions(graph)
    latest = summaries.iloc[-1].summary_id
    assert compare_compaction(graph).summary.id == latest
    assert compare_compaction(graph, compaction=-1).summary.id == latest
    assert compare_compaction(graph, compaction=latest).summary.id == latest
    with pytest.raises(IndexError, match="out of range"):
        compare_compaction(graph, compaction=99)
    with pytest.raises(ValueError, match="not a compaction summary"):
        compare_compaction(graph, compaction=next(iter(graph)).id)
    with pytest.raises(ValueError, match="no compaction"):
        compare_compaction(Graph([UserMessage("hi")]))


def test_recorded_compaction_without_tail_or_ids():
    """A recording (Codex-style) gives only folded_range and keeps no tail."""
    g = Graph()
    for i in range(4):
        g.add(UserMessage(f"old {i}", id=f"o{i}", predecessor=f"o{i-1}" if i else None))
    g.add(Call(role="llm", id="S", name="compaction", output="[Previous conversation summary]\nx",
               metadata={"role": "system", "compaction": {
                   "folded_range": ["o0", "o3"], "kept_ids": [], "protected_ids": [],
                   "recorded": True, "format": "codex"}}))
    g.add(UserMessage("continues", id="n1", predecessor="S"))
    rows = branch_diff(g, compaction="S")
    assert list(rows[rows.side == "before"].original_id) == ["o0", "o1", "o2", "o3"]
    assert list(rows[rows.side == "after"].status.astype(str)) == ["summary"]
    frame = list_compactions(g)
    assert frame.recorded.item() and frame.folded.item() == 4 and frame.format.item() == "codex"
    assert "continues" not in diff_html(rows)  # later conversation is not part of the diff


def test_html_aligns_copies_and_spans_the_folded_run():
    graph, _ = _session()
    d = compare_compaction(graph, compaction=0)
    html = diff_html(d.rows, summary=d.summary, context=None, folded_context=None)
    n_before = int((d.rows.side == "before").sum())
    n_folded = int(((d.rows.side == "before") & (d.rows.status == "folded")).sum())
    assert html.count("<tr>") == n_before  # body rows; the two header rows have a class
    assert f'rowspan="{n_folded}"' in html
    assert diff_html(d.rows, summary=d.summary) == d._repr_html_()


def test_reads_from_a_database(tmp_path):
    from opctx.dag.store import GraphStore

    graph, _ = _session()
    db = tmp_path / "s.db"
    store = GraphStore(db, "sess", title="t")
    try:
        store.append_many([n.copy() for n in graph])
    finally:
        store.close()
    from_db = branch_diff(db, "sess", compaction=0)
    in_memory = branch_diff(graph, compaction=0)
    assert from_db.drop(columns=["tokens"]).equals(in_memory.drop(columns=["tokens"]))
    with pytest.raises(FileNotFoundError):
        branch_diff(tmp_path / "missing.db", "sess")


def test_graph_is_coloured_like_the_table():
    graph, _ = _session()
    d = compare_compaction(graph, compaction=0)
    view = diff_graph(graph, diff=d)
    data = json.loads(re.search(r'type="application/json">(.*?)</script>', view.html, re.S).group(1))
    assert len(data["nodes"]) == len(d.rows)  # one drawn node per row: originals and copies
    borders = {n["color"]["border"] for n in data["nodes"]}
    from opctx.viz.graph import COMPACTION_COLORS

    for status in ("protected", "folded", "summary", "kept"):
        assert COMPACTION_COLORS[status] in borders


def test_model_call_summary_message_roles():
    g = Graph()
    g.add(UserMessage("q", id="a"))
    g.add(ModelCall("m", output="r", predecessor="a", id="b"))
    g.add(Call(role="llm", id="S", output="s", metadata={
        "role": "system", "compaction": {"folded_ids": ["a", "b"]}}))
    rows = branch_diff(g)
    assert list(rows.role) == ["user", "assistant", "system"]


def test_an_opctx_compaction_through_the_engine():
    """The real persister's layout, read back from a DagSessionDB(":memory:")."""
    from opctx.context.turn import trigger_compaction
    from opctx.dag.session_db import DagSessionDB
    from opctx.lab.presets import build_engine
    from opctx.lab.scenarios import generate_session

    scenario = generate_session(11, n_turns=8, max_tools_per_turn=3)
    db = DagSessionDB(":memory:")
    sid = db.create_session(title="scenario", model=scenario.model)
    db.append_messages(sid, scenario.messages)
    engine = build_engine("default", session_db=db, context_window=8192, model=scenario.model)
    result = trigger_compaction(db, sid, engine=engine, model=scenario.model)
    assert result.ok, result.error
    d = compare_compaction(db, sid)
    assert d.summary.id == result.summary_id
    counts = d.rows.groupby(["side", "status"], observed=True).size().to_dict()
    assert counts[("before", "folded")] == result.summarised_count
    assert counts[("before", "kept")] == counts[("after", "kept")] == result.kept_count
    assert counts[("before", "protected")] == counts[("after", "protected")] == result.protected_count
    after = d.rows[d.rows.side == "after"]
    assert list(after.status.astype(str)) == (
        ["protected"] * result.protected_count + ["summary"] + ["kept"] * result.kept_count)
    # the new branch is what the session's head now shows
    assert list(after.copy_id) == [m["id"] for m in db.get_branch(sid)][: len(after)]


# -- long diffs: unchanged runs collapse, the rest pages ---------------------------------------


def _long_diff():
    """~150 rows, as in notebook 04: a short protected head, a long folded run, a long kept tail."""
    graph, _ = synthetic_session(160, compact_every=110, protect_first_n=3, keep_last=37, seed=4)
    return compare_compaction(graph, compaction=0)


def _top_level_rows(html: str) -> int:
    # rows of the outer table only: drop every expandable <details> block first
    return re.sub(r"<details>.*?</details>", "", html, flags=re.S).count("<tr>")


def test_long_unchanged_runs_collapse_into_one_expandable_line():
    d = _long_diff()
    kept = int(((d.rows.side == "before") & (d.rows.status == "kept")).sum())
    assert kept >= 30 and len(d.rows) >= 149
    html = diff_html(d.rows, summary=d.summary)
    assert f"\u2026 {kept - 6} unchanged messages \u2026" in html  # 3 shown at each end
    assert _top_level_rows(html) < 40
    # nothing is lost: every original and every copy is on the page, shown or folded away
    for ident in list(d.rows.original_id.dropna()) + list(d.rows.copy_id.dropna()):
        assert escape_text(ident) in html
    # the hidden lines are complete rows, each an original beside its copy
    lines = diff_lines(d.rows)
    gap = next(line for line in lines if line.kind == "gap-unchanged")
    assert len(gap.hidden) == kept - 6 and all(h.kind == "unchanged" and h.right for h in gap.hidden)


def test_diff_lines_keep_every_message_exactly_once():
    d = _long_diff()
    for context, folded in ((3, 10), (0, 0), (None, None), (1, None)):
        lines = diff_lines(d.rows, context=context, folded_context=folded)
        flat = [h for line in lines for h in (line.hidden or [line])]
        n_before = int((d.rows.side == "before").sum())
        assert len(flat) == n_before
        lefts = [h.left for h in flat]
        assert len(set(lefts)) == n_before


def test_pages_cover_the_lines_and_repeat_the_summary_where_its_run_continues():
    d = _long_diff()
    lines = diff_lines(d.rows, folded_context=None)
    pages = [diff_html(d.rows, summary=d.summary, folded_context=None, page=i, page_size=20)
             for i in range(-(-len(lines) // 20))]
    assert sum(_top_level_rows(p) for p in pages) == len(lines)
    assert all(_top_level_rows(p) <= 20 for p in pages)
    folded_pages = [p for p in pages if 'class="m-folded' in p]
    assert len(folded_pages) >= 2 and all("rowspan=" in p for p in folded_pages)
