"""OpenHands ``log_completions`` files: one call as the whole trajectory, a folder of one
run's calls rebuilt with per-request times and usage, errors naming file and JSON path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _openhands_completions_sample import (
    GAPS,
    RUN_FOLDER,
    SINGLE_FILE,
    T0,
    run_calls,
    write_samples,
)

from opctx.importers import TranscriptError, detect, import_paths, iter_transcript_files, parse_path
from opctx.importers.openhands_completions import (
    calls_folder,
    is_completion_name,
    looks_like_completion,
)

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def test_the_committed_samples_are_what_the_generator_writes(tmp_path):
    for written in write_samples(tmp_path):
        committed = SAMPLES / written.relative_to(tmp_path)
        assert committed.read_bytes() == written.read_bytes(), f"{committed} is stale: rerun write_samples"


def test_one_call_is_the_whole_trajectory_in_its_function_calling_form():
    (s,) = parse_path(SAMPLES / SINGLE_FILE)
    assert s.format == "openhands_completions" and s.meta["request_times"] == "none"
    assert s.meta["function_calling_form"] == "fncall_messages" and s.meta["instance_id"] == "sample__greet-1"
    roles = [c.role for c in s.calls]
    # system, task, then three (call, result) pairs from fncall_messages, then the reply
    assert roles == ["llm", "user", "llm", "code", "llm", "code", "llm", "code", "llm"]
    codes = [c for c in s.calls if c.role == "code"]
    assert [c.name for c in codes] == ["execute_bash", "str_replace_editor", "execute_bash"]
    assert all(c.caller == s.calls[i - 1].id for i, c in enumerate(s.calls) if c.role == "code")
    assert "<script>" in s.calls[1].output  # text is data, kept as written
    last = s.calls[-1]
    assert last.metadata["tool_calls"][0]["name"] == "finish" and s.head == last.id
    assert last.metadata["usage"] == {"input_tokens": 150, "output_tokens": 40,
                                      "cache_read_tokens": 700, "cache_write_tokens": 0}
    assert last.metadata["completion"]["file"] == SINGLE_FILE and s.model == "openai/sample-coder-1"


def test_a_folder_of_calls_is_one_run_with_a_time_and_usage_per_request():
    (s,) = parse_path(SAMPLES / RUN_FOLDER)
    assert s.meta["calls"] == 4 and s.meta["request_times"] == "recorded"
    llms = [c for c in s.calls if c.role == "llm" and c.metadata.get("role") != "system"]
    assert len(llms) == 4 and not s.warnings
    times = [c.created_at for c in llms]
    assert times == [T0, T0 + GAPS[0], T0 + sum(GAPS[:2]), T0 + sum(GAPS)]
    assert [c.metadata["usage"]["cache_read_tokens"] for c in llms] == [0, 400, 0, 700]
    assert [c.metadata["completion"]["step_id"] for c in llms] == [0, 1, 2, 3]
    # the result a call answered came back before the next request left
    for code in (c for c in s.calls if c.role == "code"):
        nxt = next(c for c in llms if c.created_at > code.created_at)
        assert code.created_at <= nxt.created_at
    # the same run as the last call alone: the same conversation
    (last,) = parse_path(SAMPLES / SINGLE_FILE)
    assert [(c.role, c.output) for c in s.calls] == [(c.role, c.output) for c in last.calls]


def test_a_walked_folder_of_calls_is_imported_once(tmp_path):
    shutil.copytree(SAMPLES / RUN_FOLDER, tmp_path / "run")
    (tmp_path / "notes.md").write_text("not a transcript\n")
    found = [f for f, _ in iter_transcript_files([tmp_path])]
    assert found == [str(tmp_path / "run")]
    report = import_paths([tmp_path], tmp_path / "x.db")
    assert report.ok and report.sessions == 1 and report.written[0]["format"] == "openhands_completions"


def test_a_prompt_that_does_not_continue_starts_a_branch(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    calls = run_calls()
    name, doc = calls[-1]
    # a condenser replaced the middle of the history with a summary
    doc = dict(doc, messages=[doc["messages"][0], {"role": "user", "content": "Summary: file read, edited."},
                              *doc["messages"][-2:]])
    for n, d in [*calls[:-1], (name, doc)]:
        (folder / n).write_text(json.dumps(d))
    (s,) = parse_path(folder)
    assert any("starts a branch" in w for w in s.warnings)
    chain = []
    node = s.head
    by_id = {c.id: c for c in s.calls}
    while node is not None:
        chain.append(by_id[node])
        node = by_id[node].predecessor
    texts = [c.output for c in reversed(chain)]
    assert texts[1] == "Summary: file read, edited." and texts[-1] == "The name is escaped now."
    # nothing dropped: the previous call's reply is a node, off the new branch
    assert sum(1 for c in s.calls if c.output == "Run the check.") >= 1


def test_detection_and_names():
    assert detect(SAMPLES / SINGLE_FILE) == "openhands_completions"
    assert is_completion_name("__mnt__models__GLM-4.6-FP8-1767715223.044803.json")
    assert not is_completion_name("openai_chat.json")
    assert looks_like_completion({"messages": [], "response": {"choices": []}})
    assert not looks_like_completion({"messages": []})
    assert len(calls_folder(SAMPLES / RUN_FOLDER)) == 4 and calls_folder(SAMPLES) == []


@pytest.mark.parametrize("damage,where", [
    (lambda d: d.update(fncall_messages={"role": "user"}), "fncall_messages: expected a list"),
    (lambda d: d["fncall_messages"].__setitem__(2, 7), "fncall_messages[2]"),
    (lambda d: d.update(fncall_response={"choices": "none"}), "fncall_response.choices"),
    (lambda d: d.update(timestamp="soon"), "timestamp: expected a number"),
])
def test_errors_name_the_file_and_the_json_path(tmp_path, damage, where):
    doc = json.loads((SAMPLES / SINGLE_FILE).read_text())
    damage(doc)
    path = tmp_path / "call.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TranscriptError) as err:
        parse_path(path, format="openhands_completions")
    assert str(err.value).startswith(str(path)) and where in str(err.value)
    if "expected a list" not in where:  # skip mode: left out, listed, the rest imported
        (s,) = parse_path(path, format="openhands_completions", on_error="skip")
        assert s.skipped and where in s.skipped[0].reason and s.calls


def test_a_damaged_call_in_a_folder_is_skipped_and_listed(tmp_path):
    shutil.copytree(SAMPLES / RUN_FOLDER, tmp_path / "run")
    second = sorted((tmp_path / "run").iterdir())[1]
    second.write_text(second.read_text()[:200])
    with pytest.raises(TranscriptError) as err:
        parse_path(tmp_path / "run")
    assert str(err.value).startswith(str(second))
    (s,) = parse_path(tmp_path / "run", on_error="skip")
    assert any(i.path == str(second) for i in s.skipped) and s.meta["calls"] == 3


@pytest.mark.corpus
def test_corpus_completion_logs_are_whole_trajectories(corpus_dir):
    files = sorted((corpus_dir / "openhands_llm_completions").glob("*/*.json"))
    assert len(files) == 20
    for f in files:
        (s,) = parse_path(f)
        turns = sum(1 for c in s.calls if c.role == "llm" and c.metadata.get("role") != "system")
        assert 40 <= turns <= 100, (f, turns)
        assert s.meta["function_calling_form"] == "fncall_messages"
        assert not any(c.metadata.get("orphan_result") for c in s.calls)
        assert s.calls[-1].metadata["completion"]["prompt_tokens_unreported"] is True


def test_logs_of_another_model_are_not_mixed_into_the_run(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(SAMPLES / RUN_FOLDER, folder)
    other = folder / "openai__summariser-1767000100.5.json"
    other.write_text((SAMPLES / SINGLE_FILE).read_text())
    # a walk imports every file alone rather than leave one out of a run
    assert sorted(f for f, _ in iter_transcript_files([folder])) == sorted(str(p) for p in folder.iterdir())
    # the folder named directly: the run of the model with the most calls, the rest named
    (s,) = parse_path(folder)
    assert s.meta["calls"] == 4 and any(other.name in w for w in s.warnings)
