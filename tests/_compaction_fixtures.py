"""History builders shared by the compaction tests (not a test module).

Token counts in these tests come from :func:`char_tokens` (one token per four
characters plus a small overhead) so that the arithmetic of the cut is easy to
follow and independent of tiktoken.
"""

from __future__ import annotations

import itertools

from opctx.dag.messages import is_tool_result, tool_result_ids, tool_use_ids

_ids = itertools.count()


_WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor ".split()


def filler(chars: int, seed: str = "") -> str:
    """About ``chars`` characters of plain words (no long runs of one character: those are
    pathological for BPE tokenizers and for substring indexes alike)."""
    sentence = " ".join(_WORDS) + " "
    repeats = max(0, chars - len(seed)) // len(sentence) + 1
    return (seed + sentence * repeats)[:chars]


def char_tokens(msg: dict) -> int:
    from opctx.dag.messages import message_text

    return len(message_text(msg)) // 4 + 4


def uid(prefix: str = "m") -> str:
    return f"{prefix}{next(_ids)}"


def user(text: str) -> dict:
    return {"id": uid("u"), "role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"id": uid("a"), "role": "assistant", "content": text}


def call(*names: str, text: str = "") -> dict:
    """An assistant message making one tool call per name (parallel when several)."""
    return {
        "id": uid("a"),
        "role": "assistant",
        "content": text,
        "tool_calls": [{"id": uid("call_"), "name": n, "arguments": {"path": f"/src/{n}.py"}} for n in names],
    }


def results(call_msg: dict, size: int = 40, *, error: bool = False) -> list[dict]:
    """One ``role="tool"`` message per call of ``call_msg``; ``size`` tokens each (char_tokens)."""
    out = []
    for tc in call_msg["tool_calls"]:
        out.append(
            {
                "id": uid("t"),
                "role": "tool",
                "name": tc["name"],
                "tool_call_id": tc["id"],
                "content": filler(size * 4, "Error: " if error else ""),
                "is_error": error,
            }
        )
    return out


def anthropic_call(name: str) -> dict:
    return {
        "id": uid("a"),
        "role": "assistant",
        "content": "",
        "extra": {"blocks": [{"type": "tool_use", "id": uid("toolu_"), "name": name, "input": {"q": 1}}]},
    }


def anthropic_result(call_msg: dict, size: int = 40) -> dict:
    block = call_msg["extra"]["blocks"][0]
    return {
        "id": uid("u"),
        "role": "user",
        "content": "",
        "extra": {"blocks": [{"type": "tool_result", "tool_use_id": block["id"], "content": filler(size * 4)}]},
    }


def chat_turns(count: int, size: int = 200) -> list[dict]:
    """``count`` plain user/assistant pairs of about ``size`` tokens each message."""
    out = []
    for i in range(count):
        out.append(user(filler(size * 4, f"question {i} ")))
        out.append(assistant(filler(size * 4, f"answer {i} ")))
    return out


def tool_turn(tool_size: int = 400, parallel: int = 1) -> list[dict]:
    names = [f"tool{k}" for k in range(parallel)]
    c = call(*names)
    return [user("please inspect the code"), c, *results(c, tool_size), assistant("done inspecting")]


def assert_pairs_intact(branch: list[dict]) -> None:
    """No orphaned tool call or result; every call's results follow it on the branch."""
    calls_seen: set[str] = set()
    all_results: set[str] = set()
    for m in branch:
        all_results.update(tool_result_ids(m))
    for m in branch:
        for rid in tool_result_ids(m):
            assert rid in calls_seen, f"orphaned tool result {rid} in {m['id']}"
        for cid in tool_use_ids(m):
            assert cid in all_results, f"tool call {cid} in {m['id']} lost its result"
            calls_seen.add(cid)


def latest_user_index(history: list[dict]) -> int | None:
    idx = [i for i, m in enumerate(history) if m["role"] == "user" and not is_tool_result(m)]
    return idx[-1] if idx else None
