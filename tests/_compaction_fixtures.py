"""History builders and oracles shared by the compaction, cut, aging and request tests
(not a test module).

Token counts in these tests come from :func:`char_tokens` (one token per four
characters plus a small overhead) so that the arithmetic of the cut is easy to
follow and independent of tiktoken.

Messages: :func:`user`, :func:`assistant`, :func:`call` (an assistant message making
tool calls) and :func:`results`, their Anthropic shapes :func:`anthropic_call` /
:func:`anthropic_result`, :func:`chat_turns`, :func:`tool_turn`, :func:`filler` text and
:func:`uid` ids.

Histories with thinking units, tool loops and display-only lines: the cut, aging and
repair tests all need the same shapes: a request, an assistant message that thinks and
calls tools, the loop of calls and results that follows it, Claude Code hook lines
(display-only, never sent) between a call and its results, and answers.
:class:`HistoryBuilder` writes them one operation at a time and returns the position of
what it wrote, so a test names the message it then checks instead of counting by hand::

    h = HistoryBuilder()
    task = h.user("port the module")
    first = h.loop(40, size=1_500, think="first")[0]   # one thinking turn, 40 tool rounds
    history = h.messages

(``size`` is tokens per tool result under :func:`char_tokens`.)

Oracles of the rules under test (written from the Anthropic Messages rules, not from
``opctx``'s own tables, so that a test compares two readings): :func:`unit_spans` (where
each thinking unit starts and ends), :func:`unit_inside` (the unit a boundary splits),
:func:`first_group_end`, :func:`compacted_branch` (the branch a cut leaves, as persistence
lays it out), :func:`assert_units_whole` (no kept loop lost the message with its
thinking), :func:`assert_pairs_intact` (no orphaned call or result on a branch) and
:func:`assert_anthropic_request_accepted`, the one check of a request against the
Messages API (it returns the running loop's first assistant turn).
:func:`thinking_histories` is a hypothesis strategy over such histories.
"""


from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

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


# -- histories with thinking units and tool loops ----------------------------------------


def thinking_block(signature: str, text: str = "weighing the options") -> dict:
    """A signed ``thinking`` block, as Claude Code records it in ``metadata.thinking``."""
    return {"type": "thinking", "thinking": text, "signature": signature}


def with_thinking(msg: dict, text: str = "weighing the options") -> dict:
    """``msg`` with one thinking block signed ``sig-<id>`` (a new dict)."""
    return dict(msg, thinking=[thinking_block(f"sig-{msg['id']}", text)])


class HistoryBuilder:
    """Appends messages to :attr:`messages`; every operation returns the position it wrote.

    With ``start`` every message gets a ``timestamp``: ``start``, then ``tick`` seconds
    later per message (aging tests read them).
    """

    def __init__(self, start: float | None = None, tick: float = 60.0) -> None:
        self.messages: list[dict] = []
        self._clock, self._tick = start, tick

    def __len__(self) -> int:
        return len(self.messages)

    def _add(self, msg: dict) -> int:
        if self._clock is not None:
            msg["timestamp"] = self._clock
            self._clock += self._tick
        self.messages.append(msg)
        return len(self.messages) - 1

    def user(self, text: str = "please go on") -> int:
        """A user request."""
        return self._add(user(text))

    def answer(self, text: str = "done", *, thinking: bool = False) -> int:
        """An assistant answer (text, no calls), with a thinking block if asked."""
        msg = assistant(text)
        return self._add(with_thinking(msg) if thinking else msg)

    def display(self, text: str = "PostToolUse hook ran") -> int:
        """A display-only line (a Claude Code hook line: shown, never sent)."""
        return self._add({"id": uid("s"), "role": "system", "content": text, "display_only": True})

    def chat(self, count: int, size: int = 200) -> list[int]:
        """``count`` user/assistant pairs of about ``size`` tokens per message (``chat_turns``);
        the user positions."""
        return [at for at in map(self._add, chat_turns(count, size)) if self.messages[at]["role"] == "user"]

    def group(
        self,
        *names: str,
        size: int = 40,
        thinking: bool = False,
        text: str = "",
        display: bool = False,
        anthropic: bool = False,
        error: bool = False,
        output: str | None = None,
    ) -> int:
        """One tool group: an assistant message calling ``names`` (parallel when several,
        ``("run",)`` by default), a display-only line between the call and its results if
        asked, then the results (``output`` as each result's text, else ``size`` tokens of
        filler). Returns the position of the call message."""
        names = names or ("run",)
        if anthropic:
            msg = anthropic_call(names[0])
            msg["extra"]["blocks"] += [
                {"type": "tool_use", "id": uid("toolu_"), "name": n, "input": {"q": 1}} for n in names[1:]
            ]
            msg["content"] = text
        else:
            msg = call(*names, text=text)
        if thinking:
            msg = with_thinking(msg)
        at = self._add(msg)
        if display:
            self.display()
        text = filler(size * 4) if output is None else output
        if anthropic:
            answer = anthropic_result(msg, size)
            answer["extra"]["blocks"] = [
                {"type": "tool_result", "tool_use_id": b["id"], "content": text, "is_error": error}
                for b in msg["extra"]["blocks"]
            ]
            self._add(answer)
        else:
            for r in results(msg, size, error=error):
                self._add(r if output is None else dict(r, content=output))
        return at

    def loop(
        self,
        rounds: int,
        *,
        size: int = 40,
        think: str | int = "first",
        parallel: int = 1,
        display: bool = False,
        text: str = "",
        names: tuple[str, ...] | None = None,
    ) -> list[int]:
        """A tool loop of ``rounds`` groups; the positions of their call messages.

        ``think``: which rounds carry a thinking block: ``"first"`` (a loop that thought
        once), ``"every"``, ``"never"``, or ``k`` (every k-th round, the first included).
        ``names``: the tools each round calls (default ``parallel`` tools ``tool0..``).
        """
        out = []
        for r in range(rounds):
            if think == "first":
                thinks = r == 0
            elif think in ("every", "never"):
                thinks = think == "every"
            else:
                thinks = r % int(think) == 0
            called = names or tuple(f"tool{k}" for k in range(parallel))
            out.append(self.group(*called, size=size, thinking=thinks, display=display, text=text))
        return out


def tool_loop(rounds: int, size: int = 40, *, names: tuple[str, ...] = ("run",), text: str = "",
              think: str | int = "never", display: bool = False) -> list[dict]:
    """The messages of :meth:`HistoryBuilder.loop` alone, to append to a hand-built history."""
    h = HistoryBuilder()
    h.loop(rounds, size=size, think=think, display=display, text=text, names=names)
    return h.messages


# -- oracles -------------------------------------------------------------------------------


def _has_thinking(m: dict) -> bool:
    if m.get("role") != "assistant":
        return False
    if m.get("thinking"):
        return True
    listed = [*(m.get("content") if isinstance(m.get("content"), list) else ()),
              *((m.get("extra") or {}).get("blocks") or ())]
    return any(isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking") for b in listed)


def _continues_a_loop(m: dict) -> bool:
    """Whether ``m`` may sit inside a running tool loop without ending it."""
    if m.get("display_only"):
        return True
    if m.get("role") == "tool" or (m.get("role") == "user" and is_tool_result(m)):
        return True
    if m.get("role") == "assistant":
        return bool(tool_use_ids(m)) or not (m.get("content") or (m.get("extra") or {}).get("blocks"))
    return False


def unit_spans(history: list[dict]) -> list[tuple[int, int]]:
    """``(start, end)`` of every thinking unit: an assistant message with thinking, then
    the messages that continue its loop (results, calls without thinking, display-only
    lines), up to the first other message. ``history[start:end]`` is the unit."""
    spans = []
    i, n = 0, len(history)
    while i < n:
        if _has_thinking(history[i]):
            j = i + 1
            while j < n and _continues_a_loop(history[j]) and not _has_thinking(history[j]):
                j += 1
            spans.append((i, j))
            i = j
        else:
            i += 1
    return spans


def unit_inside(history: list[dict], boundary: int) -> tuple[int, int] | None:
    """The unit that ``boundary`` splits (``start < boundary < end``), or ``None``."""
    return next(((s, e) for s, e in unit_spans(history) if s < boundary < e), None)


def first_group_end(history: list[dict], start: int) -> int:
    """The boundary after the first tool group of the unit at ``start``: the message
    there and every result of its calls (with whatever lies between)."""
    wanted = set(tool_use_ids(history[start]))
    end = start + 1
    for i in range(start + 1, len(history)):
        if wanted & set(tool_result_ids(history[i])):
            wanted -= set(tool_result_ids(history[i]))
            end = i + 1
        if not wanted:
            break
    return end


def assert_units_whole(history: list[dict], kept: set[int]) -> None:
    """Every kept message that continues a thinking unit keeps the unit's start (the
    message with the thinking block): no kept loop lost its thinking."""
    for start, end in unit_spans(history):
        for i in range(start + 1, end):
            if i in kept and not history[i].get("display_only"):
                assert start in kept, f"message {i} continues the unit at {start}, which is not kept"


def compacted_branch(history: list[dict], cut: Any, summary: str = "summary of the folded part") -> list[dict]:
    """The branch a compaction at ``cut`` (a ``CutPoint``) leaves, laid out as persistence
    writes it: head, the summary (a system message), the pinned messages, the tail."""
    summary_msg = {"id": uid("sum"), "role": "system", "content": f"[Previous conversation summary]\n{summary}"}
    pinned = [history[i] for i in sorted(cut.pinned)]
    return [*history[: cut.protected_head], summary_msg, *pinned, *history[cut.index :]]


def assert_anthropic_request_accepted(request: dict) -> list[dict]:
    """Check ``request`` (``{"system", "messages"}``) against the Messages API rules; returns
    the content of the running loop's first assistant turn (``[]`` when no loop is running),
    for the caller to check the thinking block it must start with.

    The system prompt is a string; roles alternate from a user turn; no turn is empty and no
    text block blank; an assistant turn holds only thinking, text and ``tool_use`` blocks, a
    user turn only text and ``tool_result`` blocks, results first; every ``tool_use`` is
    answered in the next turn and every ``tool_result`` answers the turn before. Which
    thinking a loop needs depends on the history (its units: :func:`assert_units_whole`).
    """
    messages = request["messages"]
    assert isinstance(request["system"], str)
    if not messages:
        return []
    assert messages[0]["role"] == "user", "the request must start with a user turn"
    for a, b in zip(messages, messages[1:], strict=False):
        assert a["role"] != b["role"], "roles must alternate"
    for i, m in enumerate(messages):
        assert m["content"], f"empty turn {i}"
        for block in m["content"]:
            if block["type"] == "text":
                assert block["text"].strip(), f"blank text block in turn {i}"
            assert block["type"] in (("thinking", "redacted_thinking", "text", "tool_use") if m["role"] == "assistant"
                                     else ("text", "tool_result")), f"turn {i} ({m['role']}) holds a {block['type']} block"
        types = [b["type"] for b in m["content"]]
        if m["role"] == "assistant":
            uses = sorted(b["id"] for b in m["content"] if b["type"] == "tool_use")
            assert i + 1 < len(messages) or not uses, "a tool_use must be answered"
            if uses:
                answered = sorted(b["tool_use_id"] for b in messages[i + 1]["content"] if b["type"] == "tool_result")
                assert answered == uses, f"turn {i} calls {uses}, turn {i + 1} answers {answered}"
        else:
            assert types == sorted(types, key=lambda t: t != "tool_result"), "tool_result blocks come first"
            answered = [b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"]
            asked = sorted(b["id"] for b in messages[i - 1]["content"] if b["type"] == "tool_use") if i else []
            assert sorted(answered) == asked, f"turn {i} answers {answered}, turn {i - 1} asked {asked}"
    last = messages[-1]
    if last["role"] != "user" or not any(b["type"] == "tool_result" for b in last["content"]):
        return []
    start = max((i for i, m in enumerate(messages)
                 if m["role"] == "user" and not any(b["type"] == "tool_result" for b in m["content"])), default=-1)
    loop = [m for m in messages[start + 1 :] if m["role"] == "assistant"]
    return loop[0]["content"] if loop else []


# -- random histories ----------------------------------------------------------------------

_step = st.fixed_dictionaries({
    "calls": st.integers(0, 2),
    "thinking": st.booleans(),
    "size": st.sampled_from([50, 400, 2_500]),
    "display": st.booleans(),
    "anthropic": st.booleans(),
})
_request = st.fixed_dictionaries({
    "steps": st.lists(_step, max_size=8),
    "answer": st.booleans(),
    "long_loop": st.sampled_from([0, 0, 0, 30]),  # sometimes a loop that thought once, far over budget
})


@st.composite
def thinking_histories(draw: Any, max_requests: int = 6) -> list[dict]:
    """Random histories of requests, tool loops with and without thinking (OpenAI and
    Anthropic shapes), display-only lines between calls and results, answers, and now
    and then one thinking turn followed by a long tool loop."""
    h = HistoryBuilder()
    for r, spec in enumerate(draw(st.lists(_request, min_size=1, max_size=max_requests))):
        h.user(f"request {r}")
        for step in spec["steps"]:
            if step["calls"]:
                names = ("run",) * step["calls"]
                h.group(*names, size=step["size"], thinking=step["thinking"], display=step["display"],
                        anthropic=step["anthropic"])
            else:
                h.answer("thinking it over", thinking=step["thinking"])
        if spec["long_loop"]:
            h.loop(spec["long_loop"], size=600, think="first", display=True)
        if spec["answer"]:
            h.answer("done", thinking=bool(r % 2))
    return h.messages
