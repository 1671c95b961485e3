"""Hostile input: deep nesting, wrong types, empty exports, huge first
lines, lone surrogates and non-finite numbers fail with file:line or import; never a traceback."""

from __future__ import annotations

import json
import math
import sqlite3
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.dag._text import REPLACED_SURROGATES_KEY, replace_lone_surrogates, scrub
from opctx.dag.session_db import DagSessionDB
from opctx.importers import TranscriptError, import_paths, parse_path
from opctx.importers.base import MAX_NESTING, decode_json, parse_timestamp

sys.path.insert(0, str(Path(__file__).parents[1]))


def cc(n: int, kind: str, parent: int | None, content, sid: str = "hostile-1", **kw) -> dict:
    d = {"type": kind, "uuid": f"u{n}", "parentUuid": None if parent is None else f"u{parent}",
         "sessionId": sid, "timestamp": f"2026-01-01T00:00:{n:02d}Z"}
    role = "user" if kind == "user" else "assistant"
    d["message"] = {"role": role, "content": content}
    if role == "assistant":
        d["message"].update(id=f"m{n}", model="claude-x")
    d.update(kw)
    return d


def jsonl(path: Path, records: list, raw_lines: tuple[str, ...] = ()) -> Path:
    lines = [json.dumps(r) for r in records] + list(raw_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def two_turns(sid: str) -> list[dict]:
    return [cc(1, "user", None, "hello", sid), cc(2, "assistant", 1, [{"type": "text", "text": "hi"}], sid)]


# -- 15.4: crashes that aborted a whole --on-error skip import ----------------------------------


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 5_000, 100_000])
def test_deep_nesting_fails_with_file_and_line(tmp_path, depth):
    doc = tmp_path / "deep.json"
    doc.write_text("[" * depth + "]" * depth, encoding="utf-8")
    with pytest.raises(TranscriptError) as err:
        parse_path(doc)
    assert err.value.line == 1 and "nesting deeper than" in err.value.reason
    # one deep line of a JSONL transcript: that line is skipped, the rest imports
    deep = '{"type":"user","uuid":"u9","message":{"role":"user","content":' + "[" * depth + "]" * depth + "}}"
    lines = jsonl(tmp_path / "deep.jsonl", two_turns("deep"), raw_lines=(deep,))
    with pytest.raises(TranscriptError) as err:
        parse_path(lines)
    assert err.value.line == 3 and "nesting deeper than" in err.value.reason
    (s,) = parse_path(lines, on_error="skip")
    assert [c.role for c in s.calls] == ["user", "llm"] and s.skipped[0].line == 3


def test_nesting_just_below_the_limit_imports_and_is_stored(tmp_path, db_path):
    value: object = "bottom"
    for _ in range(MAX_NESTING - 10):
        value = [value]
    p = jsonl(tmp_path / "nested.jsonl", [cc(1, "user", None, "hi", "nest"),
                                          cc(2, "assistant", 1, [{"type": "tool_use", "id": "t", "name": "x",
                                                                  "input": {"v": value}}], "nest")])
    report = import_paths([p], db_path)
    assert report.ok and report.sessions == 1


def test_a_list_where_type_should_be_a_string(tmp_path):
    good = two_turns("typed")
    bad = dict(good[1], uuid="u3", parentUuid="u2", type=["assistant"])
    p = jsonl(tmp_path / "typelist.jsonl", [dict(good[0], type=["user"])] + good + [bad])
    with pytest.raises(TranscriptError) as err:
        parse_path(p)
    assert err.value.line == 1 and str(err.value).startswith(f"{p}:1: ")
    (s,) = parse_path(p, on_error="skip")
    assert [c.role for c in s.calls] == ["user", "llm"]
    assert [i.line for i in s.skipped] == [1, 4]
    # the same in an OpenAI message list and a Codex rollout
    msgs = tmp_path / "typed.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "q"},
                                {"role": "assistant", "content": [{"type": ["tool_use"], "id": ["t"]}]},
                                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": ["t"],
                                                              "content": "r"}]}]), encoding="utf-8")
    (s,) = parse_path(msgs, on_error="skip")
    assert [c.role for c in s.calls][:2] == ["user", "llm"]


def test_opctx_export_with_no_valid_node(tmp_path):
    p = tmp_path / "export.jsonl"
    p.write_text(json.dumps({"opctx_export": 1, "session_id": "s"}) + "\n"
                 + json.dumps({"id": 7, "seq": 0, "role": "user", "caller": None, "predecessor": None,
                               "reads": [], "metadata": {}}) + "\n", encoding="utf-8")
    with pytest.raises(TranscriptError) as err:
        parse_path(p)
    assert err.value.line == 2 and err.value.reason == "field id: expected a string, got number"
    with pytest.raises(TranscriptError) as err:
        parse_path(p, on_error="skip")  # the bad line skipped: nothing left to import
    assert err.value.reason == "no valid node in the opctx export" and str(err.value).startswith(str(p))


def test_first_line_over_one_mebibyte(tmp_path):
    big = "x" * ((1 << 20) + 100)
    p = jsonl(tmp_path / "big.jsonl", [cc(1, "user", None, big, "big"),
                                       cc(2, "assistant", 1, [{"type": "text", "text": "ok"}], "big")])
    (s,) = parse_path(p)
    assert s.format == "claude_code" and s.calls[0].output == big and s.calls[1].output == "ok"
    # and a first line damaged beyond repair does not make the rest of a JSONL file unreadable
    lines = p.read_text(encoding="utf-8").split("\n")
    p.write_text("\n".join(['{"type": "user", broken'] + lines[1:]), encoding="utf-8")
    with pytest.raises(TranscriptError) as err:
        parse_path(p)
    assert err.value.line == 1
    (s,) = parse_path(p, on_error="skip")
    assert s.calls[-1].output == "ok" and s.skipped[0].line == 1


def test_skip_goes_on_to_the_next_file(tmp_path, db_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a-deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    jsonl(folder / "b-typelist.jsonl", [dict(two_turns("t")[0], type=["user"])])
    (folder / "c-export.jsonl").write_text(json.dumps({"opctx_export": 1}) + "\n" + json.dumps(
        {"id": 1, "seq": 0, "role": "user", "caller": None, "predecessor": None, "reads": [],
         "metadata": {}}) + "\n", encoding="utf-8")
    jsonl(folder / "d-good.jsonl", two_turns("good"))
    report = import_paths([folder], db_path, on_error="skip")
    assert [w["session_id"] for w in report.written] == ["cc-good"]
    problems = [p for p, _ in report.failed] + [p for p, _ in report.ignored]
    assert sorted(Path(p).name for p in problems) == ["a-deep.json", "b-typelist.jsonl", "c-export.jsonl"]
    assert all(msg.startswith(str(folder)) for _, msg in report.failed)


# -- 15.5: lone surrogates -----------------------------------------------------------------------


def test_lone_surrogates_are_replaced_and_counted(tmp_path, db_path):
    records = [cc(1, "user", None, "bad \ud83d here and \udc00 there", "surr"),
               cc(2, "assistant", 1, [{"type": "tool_use", "id": "t\ud800", "name": "Bash",
                                       "input": {"cmd\udfff": "echo \ud83d\ude00"}}], "surr")]
    p = jsonl(tmp_path / "surr.jsonl", records)  # json.dumps writes "\ud83d" escapes: valid JSON
    assert "\\ud83d" in p.read_text(encoding="utf-8")
    report = import_paths([p], db_path)
    assert report.ok, report.failed
    conn = sqlite3.connect(db_path)
    rows = [json.loads(r[0]) for r in conn.execute("SELECT data_json FROM nodes ORDER BY seq")]
    title = conn.execute("SELECT title FROM sessions").fetchone()[0]
    assert rows[0]["output"] == "bad \ufffd here and \ufffd there"
    assert rows[0]["metadata"][REPLACED_SURROGATES_KEY] == 2
    assert rows[1]["metadata"]["tool_calls"][0]["id"] == "t\ufffd"
    assert rows[1]["metadata"]["tool_calls"][0]["arguments"] == {"cmd\ufffd": "echo 😀"}
    assert rows[1]["metadata"][REPLACED_SURROGATES_KEY] == 2
    assert title == "bad \ufffd here and \ufffd there"
    assert any("lone surrogate" in w for w in report.warnings)
    # searchable like any text
    assert conn.execute("SELECT count(*) FROM nodes_fts WHERE nodes_fts MATCH 'there'").fetchone()[0] == 1


def test_append_message_with_a_lone_surrogate():
    db = DagSessionDB(":memory:")
    sid = db.create_session(title="t")
    stored = db.append_message(sid, {"role": "user", "content": "cut emoji \ud83d"})
    again = db.get_message(sid, stored["id"])
    assert again["content"] == "cut emoji \ufffd"
    assert stored["content"] == again["content"]


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=30))
def test_replaced_text_always_encodes(text):
    fixed, n = replace_lone_surrogates(text)
    fixed.encode("utf-8")
    assert n == sum(1 for c in text if 0xD800 <= ord(c) <= 0xDFFF) - 2 * (
        len(text) - len(fixed))  # a joined pair shortens the text by one and counts zero
    assert scrub({text: [text]})[1] == 2 * n


# -- 15.6: non-finite numbers -----------------------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", '"NaN"', "1" + "0" * 400])
def test_non_finite_timestamps_keep_the_session(tmp_path, db_path, literal):
    first = json.dumps(cc(1, "user", None, "hello", "nan")).replace('"2026-01-01T00:00:01Z"', literal)
    p = jsonl(tmp_path / "nan.jsonl", [cc(2, "assistant", 1, [{"type": "text", "text": "hi"}], "nan")],
              raw_lines=(first,))
    p.write_text("\n".join(reversed(p.read_text().strip().split("\n"))) + "\n")
    report = import_paths([p], db_path)
    assert report.ok and report.sessions == 1, report.failed
    rows = [r[0] for r in sqlite3.connect(db_path).execute("SELECT data_json FROM nodes ORDER BY seq")]
    for text in rows:  # standard JSON: a strict parser reads every row
        json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} stored"))
    user = json.loads(rows[0])
    assert str(user["metadata"]["bad_timestamp"]).strip('"') in (literal.strip('"'),) or \
        user["metadata"]["bad_timestamp"] == int(literal)
    assert any("is not a time" in w for w in report.warnings)


def test_non_finite_numbers_anywhere_are_kept_as_their_text(tmp_path, db_path):
    p = tmp_path / "calls.json"
    p.write_text('[{"role": "user", "content": "q", "score": NaN},'
                 ' {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",'
                 ' "function": {"name": "f", "arguments": "{\\"x\\": Infinity}"}}],'
                 ' "usage": {"prompt_tokens": 1e999, "completion_tokens": 3}}]', encoding="utf-8")
    report = import_paths([p], db_path)
    assert report.ok, report.failed
    (s,) = parse_path(p)
    assert s.calls[0].metadata["source_fields"] == {"score": "NaN"}
    assert s.calls[1].metadata["tool_calls"][0]["arguments"] == {"x": "Infinity"}


@settings(max_examples=200)
@given(st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                max_size=3),
                    max_leaves=20))
def test_decoded_values_are_standard_json(value):
    text = json.dumps(value)  # Python writes NaN / Infinity for non-finite floats
    decoded = decode_json(text)
    json.dumps(decoded, allow_nan=False)


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-10 ** 400,
                                                                              max_value=10 ** 400),
                 st.text(max_size=30), st.sampled_from(["NaN", "Infinity", "-inf", "9999-12-31T23:59:59-05:00",
                                                        "0001-01-01T00:00:00+01:00", "1e999"])))
def test_parse_timestamp_is_finite_or_the_default(value):
    t = parse_timestamp(value, default=-1.0)
    assert t == -1.0 or (isinstance(t, float) and math.isfinite(t))


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@settings(max_examples=300)
@given(st.recursive(st.none() | st.integers() | st.text(alphabet='[]{}"\\ab', max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.text(alphabet='[]{}"\\ab', max_size=3), inner, max_size=3),
                    max_leaves=25))
def test_nesting_check_ignores_brackets_inside_strings(value):
    from opctx.importers import base

    text = json.dumps(value)
    limit = 3
    original = base.MAX_NESTING
    base.MAX_NESTING = limit
    try:
        assert (base._too_deep(text) is not None) == (_depth(value) > limit)
    finally:
        base.MAX_NESTING = original
