"""Claude Code ``microcompact_boundary`` lines import as recorded aging events."""

from __future__ import annotations

import json
from collections import defaultdict

from _microcompact_sample import BOUNDARY_UUID, sample_lines, tool_id, write_sample

from opctx.importers.claude_code import parse_claude_code_jsonl


def test_boundary_is_a_display_only_aging_event(tmp_path):
    session = parse_claude_code_jsonl(str(write_sample(tmp_path)))[0]
    events = [c for c in session.calls if "microcompaction" in c.metadata]
    assert len(events) == 1
    node = events[0]
    assert node.metadata["display_only"] is True
    assert node.metadata["subtype"] == "microcompact_boundary"
    assert node.output == "Context microcompacted"
    mc = node.metadata["microcompaction"]
    assert mc["trigger"] == "auto"
    assert mc["uuid"] == BOUNDARY_UUID
    assert mc["tool_call_ids"] == [tool_id(0), tool_id(2), tool_id(3)]
    assert mc["pre_tokens"] == 6 * 40_000 // 4 and mc["tokens_saved"] == 3 * 40_000 // 4
    assert mc["cleared_attachment_uuids"] == []
    # the raw metadata is not kept a second time among the line's other fields
    assert "microcompactMetadata" not in node.metadata.get("source_fields", {})
    # never part of what a request reads
    assert all(node.id not in (c.reads or []) for c in session.calls if c.role == "llm")


def test_cleared_results_point_at_their_boundary(tmp_path):
    session = parse_claude_code_jsonl(str(write_sample(tmp_path)))[0]
    by_tool = {c.metadata.get("tool_call_id"): c for c in session.calls if c.role == "code"}
    cleared = {t for t, c in by_tool.items() if "cleared_by" in c.metadata}
    assert cleared == {tool_id(0), tool_id(2), tool_id(3)}
    assert {by_tool[t].metadata["cleared_by"] for t in cleared} == {BOUNDARY_UUID}
    # the result text itself is untouched (the file holds no placeholder)
    assert by_tool[tool_id(0)].output.startswith("<script>alert(0)")
    assert "cleared_by" not in by_tool[tool_id(1)].metadata  # the Task result


def test_unknown_ids_and_bad_values_are_reported_not_trusted(tmp_path):
    lines = sample_lines()
    boundary = next(line for line in lines if line.get("subtype") == "microcompact_boundary")
    boundary["microcompactMetadata"] = {"trigger": 7, "preTokens": "many", "tokensSaved": True,
                                        "compactedToolIds": [tool_id(0), "toolu_elsewhere", {"x": 1}]}
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    session = parse_claude_code_jsonl(str(path))[0]
    mc = next(c.metadata["microcompaction"] for c in session.calls if "microcompaction" in c.metadata)
    assert mc["trigger"] is None and mc["pre_tokens"] is None and mc["tokens_saved"] is None
    assert mc["tool_call_ids"] == [tool_id(0), "toolu_elsewhere"]
    assert mc["missing_tool_call_ids"] == ["toolu_elsewhere"]
    assert any("microcompact_boundary" in w for w in session.warnings)


def test_corpus_boundaries(corpus_dir):
    """14 distinct boundaries in 11 sessions; two files share one boundary uuid."""
    files = sorted(p for p in (corpus_dir / "claude_code_jsonl").glob("*/*.jsonl")
                   if b"microcompact_boundary" in p.read_bytes())
    files_of_uuid: dict[str, set[str]] = defaultdict(set)
    for path in files:
        session = parse_claude_code_jsonl(str(path), with_subagents=False)[0]
        codes = {c.metadata.get("tool_call_id"): c for c in session.calls if c.role == "code"}
        for node in session.calls:
            mc = node.metadata.get("microcompaction")
            if mc is None:
                continue
            assert node.metadata["display_only"] and mc["trigger"] == "auto"
            assert mc["tool_call_ids"] and not mc.get("missing_tool_call_ids")
            assert mc["tokens_saved"] >= 20_000 and mc["pre_tokens"] > mc["tokens_saved"]
            # every id it names is a result of this session, marked as cleared (by it or earlier)
            assert all("cleared_by" in codes[t].metadata for t in mc["tool_call_ids"])
            files_of_uuid[mc["uuid"]].add(path.name)
    assert len(files_of_uuid) == 14
    shared = [names for names in files_of_uuid.values() if len(names) > 1]
    assert len(shared) == 1 and len(shared[0]) == 2
    # sessions, with the two files sharing a boundary counted as one group
    groups: list[set[str]] = []
    for names in files_of_uuid.values():
        hit = [g for g in groups if g & names]
        merged = set(names).union(*hit)
        groups = [g for g in groups if not (g & names)] + [merged]
    assert len(groups) == 11


def test_the_sample_in_data_is_this_module_s_output():
    """data/samples holds the same made-up session (the sample database and notebook 07 show it);
    it is regenerated with ``write_sample(Path("data/samples"))`` when the generator changes."""
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "data" / "samples" / f"{sample_lines()[0]['sessionId']}.jsonl"
    expected = "".join(json.dumps(line) + "\n" for line in sample_lines())
    assert sample.read_text(encoding="utf-8") == expected
