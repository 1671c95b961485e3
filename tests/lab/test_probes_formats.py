"""Every probe family's extractor on a hand-written history of every format opctx imports.

One story, written in each client's own format and imported by opctx's importers: the
user asks to fix ``calc/ops.py`` for release v1.4.2 and says never to change the tests;
the agent edits the file, writes a plan, runs the tests (which fail with a
ZeroDivisionError), and the user asks for a docstring, which is not answered yet. Each
format then yields, through its own tool names and result shapes, the same probes:

* artifact: ``calc/ops.py`` (modified);
* recall: the identifier ``v1.4.2``; the error line and the failing test command;
* continuation: the open plan item, the unanswered request, the failing test;
* instruction: "Never change the tests in tests/".

A format without the concept says so in ``LACKS`` (aider records no tool results and
no plan; SWE-agent and mini-swe-agent have no plan tool).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opctx.importers import FORMATS, parse_path, write_session
from opctx.importers.export import export_jsonl
from opctx.lab.history import as_history
from opctx.lab.probes import extract_probes, score_probes

ASK = "Please fix divide() in calc/ops.py for release v1.4.2. Never change the tests in tests/."
LATER = "Now add a docstring to divide() that explains the zero case."
TEST_CMD = "python -m pytest tests/test_ops.py -q"
FAIL_OUT = (
    "F.\n    return a / b\nE   ZeroDivisionError: division by zero\n"
    "FAILED tests/test_ops.py::test_divide - ZeroDivisionError: division by zero\n1 failed, 1 passed in 0.05s"
)
PLAN = [("Fix divide() in calc/ops.py", "completed"), ("Run the test suite and check the zero case", "in_progress")]

EXPECTED = {
    ("artifact", "file"): "calc/ops.py",
    ("recall", "user_identifier"): "v1.4.2",
    ("recall", "error"): "ZeroDivisionError: division by zero",
    ("recall", "failing_command"): TEST_CMD,
    ("continuation", "plan_item"): "Run the test suite and check the zero case",
    ("continuation", "open_request"): LATER,
    ("continuation", "failing_test"): "tests/test_ops.py::test_divide",
    ("instruction", "constraint"): "Never change the tests in tests/.",
}
LACKS = {
    "aider": {("recall", "error"), ("recall", "failing_command"), ("continuation", "plan_item"),
              ("continuation", "failing_test")},
    "swe_agent": {("continuation", "plan_item")},
    "mini_swe_agent": {("continuation", "plan_item")},
}


def _ts(i: int) -> str:
    return f"2026-03-01T10:00:{i:02d}.000Z"


# -- one writer per format -------------------------------------------------------------------------


def write_claude_code(path: Path, hook: bool = False) -> Path:
    lines, parent = [], None

    def line(kind: str, message: dict, **extra) -> None:
        nonlocal parent
        uid = f"00000000-0000-4000-8000-{len(lines):012d}"
        lines.append({"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/repo",
                      "sessionId": "11111111-2222-4333-8444-555555555555", "version": "2.0.76", "type": kind,
                      "message": message, "uuid": uid, "timestamp": _ts(len(lines)), **extra})
        parent = uid

    def call(tid: str, name: str, args: dict, result: str, error: bool = False) -> None:
        line("assistant", {"id": f"msg_{tid}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                           "content": [{"type": "tool_use", "id": tid, "name": name, "input": args}],
                           "usage": {"input_tokens": 10, "output_tokens": 5}})
        line("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": result,
                                                   "is_error": error}]})

    line("user", {"role": "user", "content": ASK})
    call("toolu_1", "Edit", {"file_path": "/repo/calc/ops.py", "old_string": "a // b", "new_string": "a / b"}, "ok")
    call("toolu_2", "TodoWrite", {"todos": [{"content": c, "status": s, "activeForm": c} for c, s in PLAN]}, "ok")
    call("toolu_3", "Bash", {"command": TEST_CMD, "description": "run tests"}, "Exit code 1\n" + FAIL_OUT, True)
    line("user", {"role": "user", "content": LATER})
    if hook:
        path.write_text(json.dumps(lines, indent=1), encoding="utf-8")
    else:
        path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def write_codex(path: Path) -> Path:
    items = [{"type": "session_meta", "payload": {"id": "019c0000-aaaa-7bbb-8ccc-000000000001", "cwd": "/repo",
                                                  "cli_version": "0.77.0", "originator": "codex_cli_rs"}},
             {"type": "turn_context", "payload": {"cwd": "/repo", "model": "gpt-5.2-codex"}}]

    def item(payload: dict) -> None:
        items.append({"type": "response_item", "payload": payload})

    item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]})
    item({"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "status": "completed",
          "input": "*** Begin Patch\n*** Update File: calc/ops.py\n@@\n-    return a // b\n+    return a / b\n*** End Patch\n"})
    item({"type": "custom_tool_call_output", "call_id": "c1", "output": "Success. Updated the following files:\nM calc/ops.py"})
    item({"type": "function_call", "call_id": "c2", "name": "update_plan",
          "arguments": json.dumps({"plan": [{"step": c, "status": s} for c, s in PLAN]})})
    item({"type": "function_call_output", "call_id": "c2", "output": "Plan updated"})
    item({"type": "function_call", "call_id": "c3", "name": "shell_command",
          "arguments": json.dumps({"command": TEST_CMD, "workdir": "/repo"})})
    item({"type": "function_call_output", "call_id": "c3", "output": "Exit code: 1\nOutput:\n" + FAIL_OUT})
    item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": LATER}]})
    for i, x in enumerate(items):
        x["timestamp"] = _ts(i)
    path.write_text("\n".join(json.dumps(x) for x in items) + "\n", encoding="utf-8")
    return path


def _openai_call(cid: str, name: str, args: dict) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def write_openai(path: Path) -> Path:
    msgs = [{"role": "user", "content": ASK},
            _openai_call("c1", "edit_file", {"path": "calc/ops.py", "old_string": "a // b", "new_string": "a / b"}),
            {"role": "tool", "tool_call_id": "c1", "content": "edited"},
            _openai_call("c2", "update_plan", {"plan": [{"step": c, "status": s} for c, s in PLAN]}),
            {"role": "tool", "tool_call_id": "c2", "content": "ok"},
            _openai_call("c3", "bash", {"command": TEST_CMD}),
            {"role": "tool", "tool_call_id": "c3", "content": "exit code 1\n" + FAIL_OUT},
            {"role": "user", "content": LATER}]
    path.write_text(json.dumps(msgs), encoding="utf-8")
    return path


def write_anthropic(path: Path) -> Path:
    def call(tid: str, name: str, args: dict, result: str, error: bool = False) -> list[dict]:
        return [{"role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": name, "input": args}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": result,
                                              "is_error": error}]}]

    msgs = [{"role": "user", "content": [{"type": "text", "text": ASK}]},
            *call("t1", "str_replace_based_edit_tool", {"command": "str_replace", "path": "calc/ops.py",
                                                        "old_str": "a // b", "new_str": "a / b"}, "ok"),
            *call("t2", "todo", {"todos": [{"content": c, "status": s} for c, s in PLAN]}, "ok"),
            *call("t3", "bash", {"command": TEST_CMD}, FAIL_OUT, True),
            {"role": "user", "content": [{"type": "text", "text": LATER}]}]
    path.write_text(json.dumps({"model": "claude-sonnet-4-5", "system": "You fix code.", "messages": msgs}), encoding="utf-8")
    return path


def write_hermes(path: Path) -> Path:
    rows = [("user", ASK, None, None, None)]

    def call(cid: str, name: str, args: dict, result: str) -> None:
        rows.append(("assistant", "", [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}], None, None))
        rows.append(("tool", result, None, cid, name))

    call("h1", "patch", {"mode": "replace", "path": "calc/ops.py", "old_string": "a // b", "new_string": "a / b"}, '{"success": true}')
    call("h2", "todo", {"todos": [{"id": str(i), "content": c, "status": s} for i, (c, s) in enumerate(PLAN)]}, '{"ok": true}')
    call("h3", "terminal", {"command": TEST_CMD}, json.dumps({"output": FAIL_OUT, "exit_code": 1, "error": None}))
    rows.append(("user", LATER, None, None, None))
    messages = [{"id": i + 1, "session_id": "20260301_100000_aaaaaa", "role": role, "content": content,
                 "tool_call_id": tcid, "tool_calls": calls, "tool_name": tname, "timestamp": 1772359200.0 + i,
                 "token_count": None} for i, (role, content, calls, tcid, tname) in enumerate(rows)]
    session = {"id": "20260301_100000_aaaaaa", "source": "cli", "model": "anthropic/claude-opus-4.6",
               "system_prompt": "You are Hermes Agent.", "parent_session_id": None, "started_at": 1772359200.0,
               "messages": messages}
    path.write_text(json.dumps(session) + "\n", encoding="utf-8")
    return path


def write_swe_agent(path: Path) -> Path:
    history = [{"role": "system", "content": "SETTING: autonomous programmer", "message_type": "system_prompt"},
               {"role": "user", "content": [{"type": "text", "text": ASK}], "message_type": "observation"}]

    def call(cid: str, name: str, args: dict, result: str) -> None:
        history.append({"role": "assistant", "content": "", "thought": "", "action": name, "message_type": "action",
                        "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        history.append({"role": "tool", "content": result, "message_type": "observation", "tool_call_ids": [cid]})

    call("s1", "str_replace_editor", {"command": "str_replace", "path": "/repo/calc/ops.py", "old_str": "a // b", "new_str": "a / b"}, "edited")
    call("s2", "bash", {"command": TEST_CMD}, "Traceback (most recent call last):\n" + FAIL_OUT)
    history.append({"role": "user", "content": LATER, "message_type": "observation"})
    path.write_text(json.dumps({"environment": "swe_main", "trajectory": [], "history": history,
                                "info": {"model_stats": {"api_calls": 2}}}), encoding="utf-8")
    return path


def write_mini_swe_agent(path: Path) -> Path:
    msgs = [{"role": "system", "content": "You can run ONE bash command per reply."},
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": "THOUGHT: fix it.\n\n```bash\nsed -i 's#a // b#a / b#' calc/ops.py\n```"},
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"},
            {"role": "assistant", "content": f"THOUGHT: run the tests.\n\n```bash\n{TEST_CMD}\n```"},
            {"role": "user", "content": f"<returncode>1</returncode>\n<output>\n{FAIL_OUT}\n</output>"},
            {"role": "user", "content": LATER}]
    path.write_text(json.dumps(msgs), encoding="utf-8")
    return path


def write_openhands(path: Path) -> Path:
    events: list[dict] = [{"id": 0, "timestamp": "2026-03-01T10:00:00", "source": "user", "message": ASK,
                           "action": "message", "args": {"content": ASK, "image_urls": [], "wait_for_response": False}}]

    def call(cid: str, function: str, action: str, args: dict, observation: str, content: str, extras: dict) -> None:
        meta = {"function_name": function, "tool_call_id": cid, "model_response": {
            "id": f"resp-{cid}", "model": "claude-3-5-sonnet", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "",
                         "tool_calls": [{"id": cid, "type": "function",
                                         "function": {"name": function, "arguments": json.dumps(args)}}]}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}}
        n = len(events)
        events.append({"id": n, "timestamp": f"2026-03-01T10:00:{n:02d}", "source": "agent", "message": "",
                       "action": action, "args": args, "tool_call_metadata": meta})
        events.append({"id": n + 1, "timestamp": f"2026-03-01T10:00:{n + 1:02d}", "source": "agent", "message": "",
                       "cause": n, "observation": observation, "content": content, "extras": extras,
                       "tool_call_metadata": meta})

    call("o1", "str_replace_editor", "edit", {"command": "str_replace", "path": "/workspace/calc/ops.py",
                                              "old_str": "a // b", "new_str": "a / b"}, "edit", "edited", {})
    call("o2", "task_tracker", "task_tracking", {"command": "plan", "task_list": [
        {"id": str(i), "title": c, "status": "done" if s == "completed" else s} for i, (c, s) in enumerate(PLAN)]},
        "task_tracking", "Task list updated", {})
    call("o3", "execute_bash", "run", {"command": TEST_CMD}, "run", FAIL_OUT, {"metadata": {"exit_code": 1}})
    events.append({"id": len(events), "timestamp": "2026-03-01T10:00:59", "source": "user", "message": LATER,
                   "action": "message", "args": {"content": LATER, "image_urls": [], "wait_for_response": False}})
    path.write_text(json.dumps(events), encoding="utf-8")
    return path


def write_openhands_completions(path: Path) -> Path:
    """OpenHands' ``log_completions`` file of the last call: its prompt (function-calling form)
    is the story; its reply opens the file again, which answers nothing yet."""
    msgs = [{"role": "system", "content": "You are OpenHands agent."},
            {"role": "user", "content": ASK},
            _openai_call("c1", "str_replace_editor", {"command": "str_replace", "path": "/workspace/calc/ops.py",
                                                      "old_str": "a // b", "new_str": "a / b"}),
            {"role": "tool", "tool_call_id": "c1", "name": "str_replace_editor", "content": "edited"},
            _openai_call("c2", "task_tracker", {"command": "plan", "task_list": [
                {"id": str(i), "title": c, "status": "done" if s == "completed" else s} for i, (c, s) in enumerate(PLAN)]}),
            {"role": "tool", "tool_call_id": "c2", "name": "task_tracker", "content": "Task list updated"},
            _openai_call("c3", "execute_bash", {"command": TEST_CMD}),
            {"role": "tool", "tool_call_id": "c3", "name": "execute_bash",
             "content": FAIL_OUT + "\n[Command finished with exit code 1]"},
            {"role": "user", "content": LATER}]
    reply = _openai_call("c4", "str_replace_editor", {"command": "view", "path": "/workspace/calc/ops.py"})
    doc = {"messages": msgs, "fncall_messages": msgs, "response": {
        "id": "resp-4", "model": "openai/gpt-4o", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": reply}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 30, "total_tokens": 930}},
        "fncall_response": {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": reply}]},
        "args": [], "kwargs": {}, "timestamp": 1772359259.0, "cost": 0.0}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def write_aider(path: Path) -> Path:
    path.write_text(
        "\n# aider chat started at 2026-03-01 10:00:00\n\n> aider --model gpt-4o\n\n"
        f"#### {ASK}  \n\nHere is the fix:\n\ncalc/ops.py\n```python\n<<<<<<< SEARCH\n    return a // b\n"
        "=======\n    return a / b\n>>>>>>> REPLACE\n```\n\n> Tokens: 2.4k sent, 104 received.\n"
        "> Applied edit to calc/ops.py\n\n"
        f"#### {LATER}  \n",
        encoding="utf-8",
    )
    return path


WRITERS = {
    "claude_code": ("11111111-2222-4333-8444-555555555555.jsonl", write_claude_code),
    "claude_code_hook": ("chat.json", lambda p: write_claude_code(p, hook=True)),
    "codex": ("rollout-2026-03-01T10-00-00-019c0000-aaaa-7bbb-8ccc-000000000001.jsonl", write_codex),
    "openai": ("chat.json", write_openai),
    "anthropic": ("messages.json", write_anthropic),
    "hermes": ("sessions.jsonl", write_hermes),
    "swe_agent": ("fix.traj", write_swe_agent),
    "mini_swe_agent": ("fix.traj.json", write_mini_swe_agent),
    "openhands": ("events.json", write_openhands),
    "openhands_completions": ("openai__gpt-4o-1772359259.0.json", write_openhands_completions),
    "aider": (".aider.chat.history.md", write_aider),
}


def imported(fmt: str, tmp_path: Path):
    name, writer = WRITERS[fmt]
    (session,) = parse_path(writer(tmp_path / name), fmt)
    return as_history(session)


def found(history) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for p in extract_probes(history.messages):
        out.setdefault((p.family, p.kind), []).append(p.text)
    return out


def test_every_importer_format_has_a_story():
    assert set(WRITERS) | {"opctx_jsonl"} == set(FORMATS)


@pytest.mark.parametrize("fmt", sorted(WRITERS))
@pytest.mark.parametrize("expected", sorted(EXPECTED), ids=lambda k: "-".join(k))
def test_each_family_is_extracted_from_each_format(fmt, expected, tmp_path):
    history = imported(fmt, tmp_path)
    assert history.format == fmt
    probes = found(history)
    texts = probes.get(expected, [])
    if expected in LACKS.get(fmt, ()):
        assert not texts, f"{fmt} records no {expected}, yet {texts} was found"
        return
    want = EXPECTED[expected]
    assert any(t == want or t.endswith(want) for t in texts), f"{fmt}: {expected} {texts}"


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_keep_all_retains_every_probe_of_every_format(fmt, tmp_path):
    history = imported(fmt, tmp_path)
    probes = extract_probes(history.messages)
    scores = score_probes(probes, history.messages)
    assert probes and all(s.retained for s in scores), [s.probe for s in scores if not s.retained]


def test_opctx_jsonl_round_trip_gives_the_same_probes(tmp_path):
    (session,) = parse_path(write_claude_code(tmp_path / WRITERS["claude_code"][0]), "claude_code")
    db, out = tmp_path / "x.db", tmp_path / "export.jsonl"
    write_session(session, db)
    with open(out, "w", encoding="utf-8") as fh:
        export_jsonl(db, session.session_id, fh)
    (again,) = parse_path(out, "opctx_jsonl")
    assert again and [p.text for p in extract_probes(as_history(again).messages)] == [
        p.text for p in extract_probes(as_history(session).messages)]
