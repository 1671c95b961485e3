"""OpenHands ``log_completions`` samples, made up for tests (no real run's text).

The shape follows OpenHands' ``LLM`` wrapper (``openhands/llm/llm.py``): one JSON per
call with ``messages``, ``response``, ``args``, ``kwargs``, ``timestamp``, ``cost``, and,
when function calling was emulated, ``fncall_messages`` / ``fncall_response`` beside the
prompt-formatted pair. File names are ``<model, / as __>-<time.time()>.json``.

* ``openhands_completion.json``: ONE call (the last of a run) with emulated function
  calling: ``messages`` is the prompt-formatted text, ``fncall_messages`` the real tool
  traffic; ``<script>`` text in an observation checks escaping downstream.
* ``openhands_completions_run/``: the FOUR calls of one instance, native function
  calling, each prompt the history so far; usage with cached prompt tokens; gaps of 20 s,
  400 s (longer than a 5-minute cache) and 30 s between the calls.

``write_samples(folder)`` writes both; tests/importers/test_openhands_completions.py
checks that the committed files equal what this module writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MODEL = "openai/sample-coder-1"
T0 = 1_767_000_000.0
GAPS = (20.0, 400.0, 30.0)  # seconds between consecutive calls of the run
RUN_FOLDER = "openhands_completions_run"
SINGLE_FILE = "openhands_completion.json"

SYSTEM = "You are a careful coding agent. Use the tools to inspect and edit files."
TASK = "Fix greet() in app.py: it prints <b>name</b> unescaped (<script>alert(1)</script>)."
STEPS = [  # (thought, tool, arguments, observation)
    ("Let me look at the file.", "execute_bash", {"command": "cat app.py"},
     "def greet(name):\n    print(f'<b>{name}</b>')\n"),
    ("Escape the name with html.escape.", "str_replace_editor",
     {"command": "str_replace", "path": "app.py", "old_str": "{name}", "new_str": "{html.escape(name)}"},
     "The file app.py has been edited."),
    ("Run the check.", "execute_bash", {"command": "python -c 'import app; app.greet(\"<script>\")'"},
     "<b>&lt;script&gt;</b>\n"),
]
FINISH = ("The name is escaped now.", "finish", {"message": "greet() escapes its argument."})


def _call(i: int, tool: str, args: dict) -> dict:
    return {"id": f"call_{i:02d}", "type": "function",
            "function": {"name": tool, "arguments": json.dumps(args)}}


def _assistant(i: int, thought: str, tool: str, args: dict) -> dict:
    return {"role": "assistant", "content": thought, "tool_calls": [_call(i, tool, args)]}


def _usage(prompt: int, cached: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _response(i: int, created: float, message: dict, usage: dict) -> dict:
    return {"id": f"chatcmpl-sample-{i}", "created": int(created), "model": MODEL, "object": "chat.completion",
            "choices": [{"finish_reason": "tool_calls", "index": 0, "message": message}], "usage": usage}


def _log(messages: list, response: dict, ts: float, step: int, **extra: Any) -> dict:
    kwargs = {"extra_body": {"metadata": {"instance_id": "sample__greet-1", "step_id": step,
                                          "tags": ["agent:CodeActAgent"]}}}
    return {"messages": messages, "response": response, "args": [], "kwargs": kwargs, "timestamp": ts,
            "cost": 0.0001 * (step + 1), **extra}


def run_calls() -> list[tuple[str, dict]]:
    """The run's calls as (file name, document), in call order."""
    history: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    out = []
    t = T0
    for i, (thought, tool, args, observation) in enumerate([*STEPS, (*FINISH, None)]):
        if i:
            t += GAPS[i - 1]
        reply = _assistant(i, thought, tool, args)
        prompt_tokens = 400 + 150 * i
        cached = 0 if i in (0, 2) else prompt_tokens - 150  # call 2 comes after the 400 s gap
        doc = _log(list(history), _response(i, t - 3, reply, _usage(prompt_tokens, cached, 40)), t, i)
        out.append((f"{MODEL.replace('/', '__')}-{t:.4f}.json", doc))
        history.append(reply)
        if observation is not None:
            history.append({"role": "tool", "tool_call_id": f"call_{i:02d}", "name": tool, "content": observation})
    return out


def single_call() -> dict:
    """One call with emulated function calling: the prompt-formatted pair and the real one."""
    *_, (_, last) = run_calls()
    fncall_messages = last["messages"]
    text_messages = []
    for m in fncall_messages:
        if m["role"] == "tool":
            text_messages.append({"role": "user", "content": f"EXECUTION RESULT of [{m['name']}]:\n{m['content']}"})
        elif m.get("tool_calls"):
            fn = m["tool_calls"][0]["function"]
            text_messages.append({"role": "assistant",
                                  "content": f"{m['content']}\n<function={fn['name']}>\n{fn['arguments']}\n</function>"})
        else:
            text_messages.append({"role": m["role"], "content": m["content"]})
    fn_reply = last["response"]["choices"][0]["message"]
    text_reply = {"role": "assistant", "content": f"{fn_reply['content']}\n<function=finish>\n</function>"}
    text_response = dict(last["response"], choices=[{"finish_reason": "stop", "index": 0, "message": text_reply}])
    return dict(last, messages=text_messages, response=text_response,
                fncall_messages=fncall_messages, fncall_response=last["response"])


def write_samples(folder: str | Path) -> list[Path]:
    """Write both samples into ``folder``; returns the files written."""
    folder = Path(folder)
    run = folder / RUN_FOLDER
    run.mkdir(parents=True, exist_ok=True)
    written = []
    for name, doc in run_calls():
        path = run / name
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    path = folder / SINGLE_FILE
    path.write_text(json.dumps(single_call(), indent=1) + "\n", encoding="utf-8")
    written.append(path)
    return written
