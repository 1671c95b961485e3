"""Round trips: import -> export (OpenAI / opctx JSONL) -> import again -> same conversation."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.dag.session import DagSessionManager
from opctx.importers import detect, import_paths, parse_path
from opctx.importers.export import (
    active_branch,
    calls_to_openai,
    export_jsonl,
    openai_problems,
    session_to_openai,
)

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
SAMPLE_FILES = sorted(p for p in SAMPLES.iterdir() if p.is_file() and p.name != "README.md")


def _round_trip(path: Path, tmp_path: Path, db_path: Path) -> None:
    report = import_paths([path], db_path)
    assert report.ok, report.failed
    for w in report.written:
        sid = w["session_id"]
        first = session_to_openai(str(db_path), sid)
        assert first, sid
        out = tmp_path / f"{sid}.openai.json"
        out.write_text(json.dumps(first, ensure_ascii=False), encoding="utf-8")
        assert detect(out) in ("openai", "anthropic", "mini_swe_agent")
        (again,) = parse_path(out, format="openai")
        second = calls_to_openai(active_branch(again.calls, again.head))
        assert second == first, sid


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_openai_round_trip_of_every_sample(path, tmp_path, db_path):
    _round_trip(path, tmp_path, db_path)


def test_export_is_the_conversation_the_model_saw(db_path):
    import_paths([SAMPLES / "7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f.jsonl"], db_path)
    msgs = session_to_openai(str(db_path), "cc-7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f")
    # active branch = summary, then the turns after the compaction; display-only lines out
    assert msgs[0]["role"] == "system"
    assert msgs[0]["content"].startswith("[Previous conversation summary]\n")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    assert msgs[2]["tool_calls"][0]["function"]["name"] == "Task"
    assert json.loads(msgs[2]["tool_calls"][0]["function"]["arguments"])["subagent_type"] == "Explore"
    assert msgs[3]["tool_call_id"] == msgs[2]["tool_calls"][0]["id"]
    assert openai_problems(msgs) == []


def test_jsonl_export_is_lossless(tmp_path, db_path):
    sample = SAMPLES / "7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f.jsonl"
    import_paths([sample], db_path)
    sid = "cc-7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f"
    buf = io.StringIO()
    n = export_jsonl(str(db_path), sid, buf)
    out = tmp_path / "export.jsonl"
    out.write_text(buf.getvalue(), encoding="utf-8")
    assert detect(out) == "opctx_jsonl"
    report = import_paths([out], db_path)
    assert report.ok and report.sessions == 1
    new_sid = report.written[0]["session_id"]
    with DagSessionManager(db_path) as mgr:
        a = mgr.load(sid)
        b = mgr.load(new_sid)
        ga, gb = list(a.graph), list(b.graph)
        assert len(ga) == len(gb) == n
        idmap = {x.metadata["original_id"]: x.id for x in gb}
        for x, y in zip(ga, gb, strict=True):
            assert (x.role, x.name, x.input, x.output, x.created_at) == (y.role, y.name, y.input, y.output, y.created_at)
            assert idmap.get(x.predecessor) == y.predecessor
            assert idmap.get(x.caller) == y.caller
            assert [idmap[r] for r in x.reads] == y.reads
            meta = dict(y.metadata)
            meta.pop("original_id")
            if "compaction" in meta:
                comp = x.metadata["compaction"]
                assert meta["compaction"]["folded_ids"] == [idmap[i] for i in comp["folded_ids"]]
                meta["compaction"] = comp
            assert meta == x.metadata
        assert idmap[a.store.head()] == b.store.head()
        assert mgr.get_extra_meta(new_sid)["_last_summary_text"].startswith("This session")
    # and the OpenAI view of both is identical
    assert session_to_openai(str(db_path), sid) == session_to_openai(str(db_path), new_sid)


@pytest.mark.corpus
def test_openai_round_trip_of_real_transcripts(corpus_dir, tmp_path, db_path):
    for rel in (
        "claude_code_jsonl/aistrad_work__d79bb188-056b-46ff-aa1c-b0527758342a/d79bb188-056b-46ff-aa1c-b0527758342a.jsonl",
        "codex_rollout_jsonl/hawkli-1994_dazi-skill__rollout-2026-04-28T18-05-46-019dd38d-4dfb-77b0-af6a-af358709d507.jsonl",
        "hermes_session_export/NousResearch_hermes-agent__exprted.jsonl",
        "openhands/All-Hands-AI_OpenHands__tests__runtime__trajs__basic_gui_mode.json",
        "swe_agent_traj/SWE-agent_SWE-agent__demonstrations__function_calling_simple.traj",
    ):
        _round_trip(corpus_dir / rel, tmp_path, db_path)


# -- property: any well-formed OpenAI conversation survives import -> export ------------------

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_args = st.dictionaries(st.text(alphabet="abcdefgh", min_size=1, max_size=5),
                        st.one_of(st.integers(-5, 5), _text, st.booleans()), max_size=3)


@st.composite
def conversations(draw):
    msgs: list[dict] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(_text)})
    n_calls = 0
    for _ in range(draw(st.integers(1, 6))):
        msgs.append({"role": "user", "content": draw(_text)})
        for _ in range(draw(st.integers(0, 2))):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                n_calls += 1
                calls.append({"id": f"call_{n_calls}", "type": "function",
                              "function": {"name": draw(st.sampled_from(["ls", "read", "grep"])),
                                           "arguments": json.dumps(draw(_args), ensure_ascii=False)}})
            msgs.append({"role": "assistant", "content": draw(st.one_of(st.none(), _text)) or None,
                         "tool_calls": calls})
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                             "content": draw(_text)})
        msgs.append({"role": "assistant", "content": draw(_text) or None})
    return msgs


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_any_openai_conversation_round_trips(msgs):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "conv.json"
        p.write_text(json.dumps(msgs, ensure_ascii=False), encoding="utf-8")
        (s,) = parse_path(p, format="openai")
    out = calls_to_openai(active_branch(s.calls, s.head))
    for m in msgs:
        if m["role"] == "assistant" and "tool_calls" in m:
            for tc in m["tool_calls"]:
                tc["function"]["arguments"] = json.dumps(json.loads(tc["function"]["arguments"]),
                                                         ensure_ascii=False)
    assert out == msgs
    assert openai_problems(out) == []
