"""Recorded aging in the diff view: cleared results marked, the event's table escaped."""

from __future__ import annotations

import pytest
from _microcompact_sample import BOUNDARY_UUID, tool_id, write_sample

from opctx.importers.claude_code import parse_claude_code_jsonl
from opctx.viz.diff import (
    AGING_COLUMNS,
    aging_html,
    branch_diff,
    compare_aging,
    diff_html,
    list_aging_events,
)
from opctx.viz.synthetic import synthetic_session


def _calls(tmp_path):
    return parse_claude_code_jsonl(str(write_sample(tmp_path)))[0].calls


def test_list_and_compare(tmp_path):
    calls = _calls(tmp_path)
    events = list_aging_events(calls)
    assert len(events) == 1 and events.iloc[0]["uuid"] == BOUNDARY_UUID and events.iloc[0]["cleared"] == 3
    diff = compare_aging(calls)
    assert list(diff.rows.columns) == AGING_COLUMNS
    by_tool = diff.rows.set_index("tool_call_id")
    assert set(by_tool.index[by_tool["status"] == "cleared"]) == {tool_id(0), tool_id(2), tool_id(3)}
    assert by_tool.loc[tool_id(1), "status"] == "kept"  # the Task result
    assert by_tool.loc[tool_id(1), "name"] == "Task"
    # selectors: index, node id, uuid
    assert compare_aging(calls, event=0).event.id == diff.event.id
    assert compare_aging(calls, event=BOUNDARY_UUID).event.id == diff.event.id
    with pytest.raises(IndexError):
        compare_aging(calls, event=3)
    with pytest.raises(KeyError):
        compare_aging(calls, event="nope")


def test_aging_html_marks_and_escapes(tmp_path):
    diff = compare_aging(_calls(tmp_path))
    page = aging_html(diff)
    assert page.count('<tr class="cleared">') == 3
    assert page.count('<tr class="kept">') == len(diff.rows) - 3
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "saved 30000" in page
    assert diff._repr_html_() == page


def test_no_event_is_a_clear_error():
    graph, _ = synthetic_session(20, compact_every=10, seed=1)
    with pytest.raises(ValueError, match="no recorded microcompaction"):
        compare_aging(graph)


def test_compaction_diff_marks_cleared_results():
    graph, _ = synthetic_session(60, compact_every=30, protect_first_n=2, keep_last=4, seed=3)
    rows = branch_diff(graph, compaction=0)
    target = rows[(rows.side == "before") & (rows.status == "folded")].iloc[0]
    assert rows["cleared_by"].isna().all()
    graph[target.original_id].metadata["cleared_by"] = "<b>boundary</b>"
    marked = branch_diff(graph, compaction=0)
    hit = marked[(marked.side == "before") & (marked.original_id == target.original_id)]
    assert hit["cleared_by"].item() == "<b>boundary</b>"
    page = diff_html(marked, folded_context=None)
    assert 'title="cleared by &lt;b&gt;boundary&lt;/b&gt;">cleared</span>' in page
    assert "<b>boundary</b>" not in page
    assert "&lt;b&gt;boundary&lt;/b&gt;" in page
