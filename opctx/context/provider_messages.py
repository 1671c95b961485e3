"""Provider messages: a session's history as the messages a provider is sent.

The history is a list of message dicts as opctx stores them (``opctx.dag.messages``:
``role``, ``content`` as text or content blocks, ``tool_calls`` or ``tool_use`` blocks,
``tool`` messages or ``tool_result`` blocks, ``extra``). A provider wants the OpenAI
chat shape instead:

* ``{"role": "system" | "user", "content": text}``;
* ``{"role": "assistant", "content": text or None, "tool_calls": [{"id", "type":
  "function", "function": {"name", "arguments": a JSON string}}]}``;
* ``{"role": "tool", "tool_call_id": id, "content": text}``, one per result (an error
  result starts with ``[error]``).

The Anthropic Messages shape is built from the same assembly
(``opctx.context.anthropic_messages``: ``to_anthropic_request``), so both request shapes
follow the rules below.

``_convert`` turns one stored message into zero or more of these (a message with
neither text nor calls, such as a placeholder, is never sent as an empty message);
``_convert_entry`` adds what pairing needs: the call ids it opens, the result ids it
answers and the tool name of its results (an ``_Entry``).

Lines the model never saw. A message flagged ``display_only`` (Claude Code's ``system``
lines: hook output, command output, turn durations; aider's console lines) is what the
client *showed*, not what it sent. It stays in the store, the frames and the graph, and
is never part of a request: ``_convert`` turns it into nothing (:func:`is_display_only`).

Tool pairing. Both OpenAI and Anthropic reject a call without its result, a result
without its call, and a result that does not come right after its call: an assistant
message with tool calls must be followed immediately by the results of those calls,
before any other message. A result pairs with the most recent earlier call of its id
that is still unanswered. ``_IncrementalRepair`` fixes a history that does not pair up:

* a call left without a result (an interrupted tool run, a history cut by hand) is
  removed from its assistant message, which gets a short note naming it instead
  (``_keep_answered_calls``);
* a result without a call becomes a user message naming the tool and the call id
  (``_result_as_user_message``);
* a result separated from its call (a user message typed while the tools ran, a system
  line, a newer call written before an older result) moves up to the end of its call's
  results; the messages it passed keep their order after it. Nothing is dropped.

When everything pairs and is adjacent (the normal case, and always after an opctx
compaction) the converted messages are sent as they are.

Why incremental. ``prepare`` runs before every LLM call on a history that mostly only
grew, so the engine keeps one ``_ProviderCache`` per session: conversions per message
(keyed like ``MessageFacts``: id, role, content length and ``_redacted_marker``, the
number of tool results aging cleared in ``extra.blocks``, which the content length
does not see; a hit counts only when the cached message equals the one asked about),
and the assembled provider messages and pairing state of the last history. An
append-only history costs only its new messages; a message aging replaced is patched
in place; a rewind or a change in pairing rebuilds from the per-message cache. A
history that needs repair keeps its repaired list too (``_IncrementalRepair``) and
extends it, instead of repairing the whole history on every call.

>>> history = [
...     {"role": "user", "content": "list the files"},
...     {"role": "assistant", "content": "", "tool_calls": [
...         {"id": "c1", "name": "ls", "arguments": {"path": "."}}]},
... ]
>>> for m in to_provider_messages(history):
...     print(m)
{'role': 'user', 'content': 'list the files'}
{'role': 'assistant', 'content': '[called ls({"path": "."}); result not in context]'}
"""

from __future__ import annotations

import json
import operator
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any

from opctx.dag.messages import as_text, blocks, is_tool_result

from .persistence import same_but_identity

__all__ = ["to_provider_messages", "is_display_only", "thinking_blocks"]

# the request shapes the assembly serves: "anthropic" keeps what the Anthropic builder
# needs beside the OpenAI fields (thinking blocks, tool inputs as objects, error flags)
_APIS = ("openai", "anthropic")


def is_display_only(msg: dict) -> bool:
    """A line the client showed but never sent to the model (``display_only``).

    >>> is_display_only({"role": "system", "content": "Hook ran", "display_only": True})
    True
    """
    return bool(msg.get("display_only")) if isinstance(msg, dict) else False


def thinking_blocks(msg: dict) -> list[dict]:
    """The thinking blocks of an assistant message that can be sent back to Anthropic.

    Read from ``thinking`` (where the importers keep the blocks of a recorded reply) and
    from the content blocks. Only a ``thinking`` block with its ``signature`` and a
    ``redacted_thinking`` block with its ``data`` can be sent: the API checks the
    signature, so a block without one (another provider's reasoning, a damaged
    recording) is never sent. The blocks are returned as stored, never modified.

    >>> thinking_blocks({"role": "assistant", "thinking": [
    ...     {"type": "thinking", "thinking": "plan", "signature": "EqQB"},
    ...     {"type": "thinking", "thinking": "no signature"}]})
    [{'type': 'thinking', 'thinking': 'plan', 'signature': 'EqQB'}]
    """
    if not isinstance(msg, dict) or msg.get("role") != "assistant":
        return []
    found = msg.get("thinking")
    candidates = list(found) if isinstance(found, list) else []
    candidates += [b for b in blocks(msg) if b.get("type") in ("thinking", "redacted_thinking")]
    out: list[dict] = []
    for block in candidates:
        if not isinstance(block, dict) or any(block is b for b in out):
            continue
        kind = block.get("type")
        if kind == "thinking" and isinstance(block.get("signature"), str) and block["signature"]:
            out.append(block)
        elif kind == "redacted_thinking" and isinstance(block.get("data"), str) and block["data"]:
            out.append(block)
    return out


def _json_args(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args if args is not None else {}, ensure_ascii=False, default=str)


def _input_object(args: Any) -> dict:
    """Tool arguments as the JSON object an Anthropic ``tool_use`` block needs."""
    if isinstance(args, dict):
        return args
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {} if args in (None, "") else {"_value": args}


def _text_of(msg: dict) -> str:
    content = msg.get("content")
    if isinstance(content, str) and content:
        return content
    parts = [str(b.get("text")) for b in blocks(msg) if b.get("type") == "text" and b.get("text")]
    if parts:
        return "\n".join(parts)
    return (
        as_text(content) if content not in (None, "", []) and not isinstance(content, list) else ""
    )


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(as_text(x.get("text")) for x in content if isinstance(x, dict))
    return as_text(content)


def _tool_message(call_id: Any, text: str, error: bool, api: str) -> dict:
    if error and not text.lower().startswith("[error]"):
        text = "[error] " + text
    out = {"role": "tool", "tool_call_id": call_id or "", "content": text}
    if api == "anthropic" and error:
        out["is_error"] = True
    return out


def _convert(msg: dict, api: str = "openai") -> list[dict]:
    """One message dict as OpenAI chat messages (before pairing repair).

    With ``api="anthropic"`` an assistant message also carries its sendable
    ``thinking`` blocks (and is kept when they are all it has), each tool call its
    ``input`` object, and an error result ``is_error``; these dicts never reach an
    OpenAI request.
    """
    if is_display_only(msg):
        return []
    role = msg.get("role")
    if role == "system":
        text = _text_of(msg)
        return [{"role": "system", "content": text}] if text else []
    results = [b for b in blocks(msg) if b.get("type") == "tool_result"]
    if role == "tool" or is_tool_result(msg) or (role == "user" and results):
        out = []
        if role == "tool":
            out.append(
                _tool_message(msg.get("tool_call_id"), as_text(msg.get("content")), bool(msg.get("is_error")), api)
            )
        for b in results:
            out.append(
                _tool_message(b.get("tool_use_id"), _result_text(b.get("content")), bool(b.get("is_error")), api)
            )
        text = _text_of(msg) if role == "user" else ""
        if text:  # text written beside the results (Anthropic allows it after them)
            out.append({"role": "user", "content": text})
        return out
    if role == "user":
        text = _text_of(msg)
        return [{"role": "user", "content": text}] if text else []
    # assistant
    calls = []
    for tc in msg.get("tool_calls") or ():
        if isinstance(tc, dict) and tc.get("id"):
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
            args = tc.get("arguments", fn.get("arguments"))
            call = {
                "id": tc["id"],
                "type": "function",
                "function": {"name": tc.get("name") or fn.get("name") or "", "arguments": _json_args(args)},
            }
            if api == "anthropic":
                call["input"] = _input_object(args)
            calls.append(call)
    for b in blocks(msg):
        if b.get("type") == "tool_use" and b.get("id"):
            call = {
                "id": b["id"],
                "type": "function",
                "function": {"name": b.get("name") or "", "arguments": _json_args(b.get("input"))},
            }
            if api == "anthropic":
                call["input"] = _input_object(b.get("input"))
            calls.append(call)
    text = _text_of(msg)
    thinking = thinking_blocks(msg) if api == "anthropic" else []
    if not text and not calls and not thinking:
        return []  # a placeholder is never rendered as an empty message
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    if thinking:
        out["thinking"] = thinking
    return [out]


class _ProviderCache:
    """Per-message conversions, keyed like ``MessageFacts`` (id, role, content length;
    a hit counts only when the cached message equals the one asked about), and the
    assembled provider messages of the last history.

    Besides the per-message cache it keeps, for the last history it assembled, the
    conversions in order, their flattened provider messages (with where each
    message's part starts) and the running tool-pairing state (calls still waiting
    for a result, whether a result came without its call, whether a message came
    between a call and its results). The next history is compared with the last by
    identity at C speed (then by equality, so that a branch re-read from the store as
    new dicts counts as unchanged); on an append-only history only the new messages
    are converted, flattened and paired, and a message replaced by a new object
    (aging cleared one more tool result) is patched in place. A shorter history
    (rewind) or a replacement that changes the message count or the tool pairing
    rebuilds the assembly from the per-message cache. When the pairing needs repair
    (a call never answered, as in an interrupted tool run, a result without its call,
    or a result separated from its call) the repaired list is kept too and extended
    with what was appended (``_IncrementalRepair``), so such a session does not pay a
    whole-history repair on every call.

    ``api="anthropic"`` converts for the Anthropic builder (``_convert``); one cache
    serves one request shape.
    """

    def __init__(self, max_entries: int = 100_000, api: str = "openai"):
        if api not in _APIS:
            raise ValueError(f"api must be one of {', '.join(_APIS)}, got {api!r}")
        self.api = api
        # key -> (the message converted, its conversion)
        self._cache: dict[tuple, tuple[dict, _Entry]] = {}
        self.max_entries = max_entries
        # message id -> (message, conversion) of the branch a compaction replaced: its
        # copies (copied_from) take them (after_compaction)
        self._originals: dict[Any, tuple[dict, _Entry]] = {}
        self._reset_assembly()

    def after_compaction(self) -> _ProviderCache:
        """A cache for the branch a compaction wrote: empty, but a copy of a message of the
        last history assembled here (equal to it but for its identity, ``same_but_identity``)
        takes that message's conversion, the very provider messages, so their estimates
        carry over too (``_engine_state.fit_for_session``); every compaction copies the
        kept tail, and converting and estimating it again was most of the next prepare."""
        fresh = _ProviderCache(self.max_entries, self.api)
        originals = fresh._originals
        for msg, entry in zip(self._last_msgs, self._last_conv, strict=True):
            mid = msg.get("id")
            if isinstance(mid, str):
                originals[mid] = (msg, entry)
        return fresh

    def _reset_assembly(self) -> None:
        self._last_msgs: list[dict] = []
        self._last_conv: list[_Entry] = []
        self._flat: list[dict] = []  # the provider messages of _last_conv, in order
        self._starts: list[int] = []  # where each entry's messages begin in _flat
        self._pending: dict[str, int] = {}  # call id -> calls of that id still unanswered
        self._open = 0  # call ids with a pending count above zero
        self._orphan = False  # a result came before (without) its call
        self._separated = False  # a message came between a call and one of its results
        self._repaired: _IncrementalRepair | None = None  # built on the first unpaired history

    def provider_messages(self, history: Sequence[dict]) -> list[dict]:
        """``to_provider_messages(history)``, at the cost of what changed since the last call."""
        self._assemble(history)
        if not self._orphan and not self._open and not self._separated:
            return list(self._flat)
        # a session that keeps an unanswered call (an interrupted tool run) would pay
        # a whole-history repair on every call; the repair is kept and extended instead
        if self._repaired is None:
            self._repaired = _IncrementalRepair()
        self._repaired.extend(self._flat, self._name_at)
        return self._repaired.result()

    def _name_at(self, pos: int) -> str:
        """The tool name of the entry holding flat position ``pos``."""
        return self._last_conv[bisect_right(self._starts, pos) - 1][3]

    def _assemble(self, history: Sequence[dict]) -> None:
        last = self._last_msgs
        k = len(last)
        if k > len(history):
            self._reset_assembly()  # a rewind: the pairing state cannot be undone
            k = 0
        elif k and not all(map(operator.is_, history, last)):
            # equal copies (the branch re-read from the store) keep their conversions;
            # both passes run at C speed, only the messages that really differ are visited
            differs = list(map(operator.ne, history, last))
            changed = list(compress(range(k), differs))
            if changed and not self._patch(history, changed):
                self._reset_assembly()
                k = 0
        get = self.get
        new = [get(m) for m in history[k:]]
        conv, flat, starts = self._last_conv, self._flat, self._starts
        for entry in new:
            starts.append(len(flat))
            flat.extend(entry[0])
            if entry[1] or entry[2] or (self._open and entry[0]):
                self._pair(entry)
        conv.extend(new)
        self._last_msgs = list(history)

    def _patch(self, history: Sequence[dict], changed: list[int]) -> bool:
        """Replace the entries of the messages at ``changed``; False when a rebuild is needed."""
        if len(changed) * 4 > len(self._last_conv):
            return False  # mostly new: a rebuild is as cheap and simpler
        conv, flat, starts = self._last_conv, self._flat, self._starts
        for i in changed:
            old, entry = conv[i], self.get(history[i])
            if entry[1] != old[1] or entry[2] != old[2] or len(entry[0]) != len(old[0]):
                return False  # pairing or positions differ
            conv[i] = entry
            flat[starts[i] : starts[i] + len(entry[0])] = entry[0]
            if self._repaired is not None:
                for pos in range(starts[i], starts[i] + len(entry[0])):
                    self._repaired.rerender(flat, pos, self._name_at)
        return True

    def _pair(self, entry: _Entry) -> None:
        """Pairing state after one more message: its results answer earlier calls, then
        anything else it sends separates the calls still waiting, then its calls open."""
        pending = self._pending
        for rid in entry[2]:
            count = pending.get(rid, 0)
            if count:
                pending[rid] = count - 1
                if count == 1:
                    self._open -= 1
            else:
                self._orphan = True
        if self._open and len(entry[0]) > len(entry[2]):
            self._separated = True
        for cid in entry[1]:
            count = pending.get(cid, 0)
            pending[cid] = count + 1
            if count == 0:
                self._open += 1

    def get(self, msg: dict) -> _Entry:
        mid = msg.get("id")
        if not mid:
            return _convert_entry(msg, self.api)
        content = msg.get("content")
        key = (
            mid,
            msg.get("role"),
            len(content) if isinstance(content, str | list) else -1,
            _redacted_marker(msg),
        )
        try:
            hit = self._cache.get(key)
        except TypeError:  # an unhashable id from a malformed transcript: not cached
            return _convert_entry(msg, self.api)
        if hit is not None and (hit[0] is msg or hit[0] == msg):
            return hit[1]
        if len(self._cache) >= self.max_entries:
            self._cache.clear()
        origin = msg.get("copied_from") if self._originals else None
        original = self._originals.get(origin) if isinstance(origin, str) else None
        if original is not None and same_but_identity(msg, original[0]):
            entry = original[1]  # the conversion reads no identity key
        else:
            entry = _convert_entry(msg, self.api)
        self._cache[key] = (msg, entry)
        return entry


def _redacted_marker(msg: dict) -> int:
    # aging edits tool_result blocks in extra, which the content length does not see
    extra = msg.get("extra")
    if not isinstance(extra, dict):
        return 0
    return sum(1 for b in extra.get("blocks") or () if isinstance(b, dict) and b.get("_redacted"))


# (provider messages, call ids, result ids, tool name of the results)
_Entry = tuple[list[dict], tuple[str, ...], tuple[str, ...], str]


def _convert_entry(msg: dict, api: str = "openai") -> _Entry:
    messages = _convert(msg, api)
    calls: tuple[str, ...] = ()
    results: tuple[str, ...] = ()
    for m in messages:
        if m["role"] == "assistant" and "tool_calls" in m:
            calls += tuple(tc["id"] for tc in m["tool_calls"])
        elif m["role"] == "tool":
            results += (m["tool_call_id"],)
    return messages, calls, results, str(msg.get("name") or "") if results else ""


def to_provider_messages(
    history: Sequence[dict], cache: _ProviderCache | None = None
) -> list[dict]:
    """OpenAI chat messages for ``history``: display-only lines left out, tool pairing repaired.

    A result pairs with the most recent earlier call of its id that is still
    unanswered, and is sent right after its call (with the other results of that
    call); messages written in between follow the results. A call left without a
    result is removed from its assistant message (which gets a short note naming it
    instead); a result without a call becomes a user message naming the tool and the
    call id. When every call and result pair up and are adjacent (the normal case,
    and always after an opctx compaction) the messages are returned as converted,
    without a second pass.

    >>> history = [
    ...     {"role": "user", "content": "list the files"},
    ...     {"role": "assistant", "content": "", "tool_calls": [
    ...         {"id": "c1", "name": "ls", "arguments": {"path": "."}}]},
    ...     {"role": "system", "content": "PostToolUse hook ran", "display_only": True},
    ...     {"role": "user", "content": "and hurry"},
    ...     {"role": "tool", "tool_call_id": "c1", "name": "ls", "content": "a.py"},
    ... ]
    >>> for m in to_provider_messages(history):
    ...     print(m)
    {'role': 'user', 'content': 'list the files'}
    {'role': 'assistant', 'content': None, 'tool_calls': [{'id': 'c1', 'type': 'function', 'function': {'name': 'ls', 'arguments': '{"path": "."}'}}]}
    {'role': 'tool', 'tool_call_id': 'c1', 'content': 'a.py'}
    {'role': 'user', 'content': 'and hurry'}
    """
    if cache is not None:
        return cache.provider_messages(history)
    return _assemble_once([_convert_entry(m) for m in history])


def _assemble_once(entries: Sequence[_Entry]) -> list[dict]:
    """The provider messages of ``entries``, repaired only when they need it."""
    pending: dict[str, int] = {}
    open_calls = 0
    broken = False
    for msgs, calls, results, _name in entries:
        for rid in results:
            if pending.get(rid):
                pending[rid] -= 1
                open_calls -= pending[rid] == 0
            else:
                broken = True
        if open_calls and len(msgs) > len(results):
            broken = True
        for cid in calls:
            pending[cid] = pending.get(cid, 0) + 1
            open_calls += pending[cid] == 1
    flat = [m for e in entries for m in e[0]]
    if not broken and not open_calls:
        return flat
    names = [e[3] for e in entries for _ in e[0]]
    repair = _IncrementalRepair()
    repair.extend(flat, names.__getitem__)
    return repair.result()


def _keep_answered_calls(m: dict, i: int, answered: set[tuple[int, str]]) -> dict:
    """Assistant message ``m`` (at flat position ``i``) without its unanswered calls, each named in a note."""
    kept = [tc for tc in m["tool_calls"] if (i, tc["id"]) in answered]
    if len(kept) == len(m["tool_calls"]):
        return m
    fixed = {k: v for k, v in m.items() if k != "tool_calls"}
    if kept:
        fixed["tool_calls"] = kept
    dropped = [tc for tc in m["tool_calls"] if (i, tc["id"]) not in answered]
    note = "; ".join(f"called {tc['function']['name']}({tc['function']['arguments']})" for tc in dropped)
    fixed["content"] = ((m.get("content") or "") + f"\n[{note}; result not in context]").strip()
    return fixed


def _result_as_user_message(m: dict, name: str) -> dict:
    label = f"tool {name}" if name else "tool"
    return {"role": "user", "content": f"[result of {label} (call {m['tool_call_id']})]\n{m['content']}"}


class _IncrementalRepair:
    """The repair of a growing flat list of provider messages, at the cost of what was appended.

    ``out`` renders the flat messages one to one: an assistant message without its
    unanswered calls, an orphan result as a user message, anything else as it is.
    Appending can only change the rendering of the new messages and of the earlier
    assistant messages whose calls the new results answer (a result pairs with the
    most recent earlier call of its id still unanswered, so whether a result is an
    orphan is settled when it arrives). A message patched in place (same pairing) is
    re-rendered where it is.

    Adjacency: the results right after a call message (up to the first message that is
    not one of them) are its *block*; a later result of that call is *moved* to the end
    of its block. :meth:`result` applies the moves with list slices, so a history with
    a few separated results costs a copy of the list, not a pass in Python.
    """

    __slots__ = ("out", "open_calls", "answered", "matched", "group", "block_end", "moved")

    def __init__(self) -> None:
        self.out: list[dict] = []
        self.open_calls: dict[str, list[int]] = {}
        self.answered: set[tuple[int, str]] = set()
        self.matched: set[int] = set()
        self.group: int | None = None  # the call message whose block is still open
        self.block_end: dict[int, int] = {}  # call message -> where its block ended
        self.moved: dict[int, list[int]] = {}  # call message -> its separated results, in order

    def _close_group(self, i: int) -> None:
        if self.group is not None:
            self.block_end[self.group] = i
            self.group = None

    def extend(self, flat: list[dict], name_at: Callable[[int], str]) -> None:
        out, open_calls, answered = self.out, self.open_calls, self.answered
        touched: list[int] = []
        for i in range(len(out), len(flat)):
            m = flat[i]
            role = m["role"]
            if role == "assistant" and "tool_calls" in m:
                self._close_group(i)
                for tc in m["tool_calls"]:
                    open_calls.setdefault(tc["id"], []).append(i)
                touched.append(i)
                out.append(m)
                self.group = i
            elif role == "tool":
                stack = open_calls.get(m["tool_call_id"])
                if stack:
                    j = stack.pop()
                    answered.add((j, m["tool_call_id"]))
                    self.matched.add(i)
                    touched.append(j)
                    out.append(m)
                    if j != self.group:
                        self.moved.setdefault(j, []).append(i)
                else:
                    self._close_group(i)
                    out.append(_result_as_user_message(m, name_at(i)))
            else:
                self._close_group(i)
                out.append(m)
        for j in touched:
            out[j] = _keep_answered_calls(flat[j], j, answered)

    def result(self) -> list[dict]:
        """The repaired messages in the order they are sent (separated results moved up)."""
        out = self.out
        if not self.moved:
            return list(out)
        inserts = {self.block_end[j]: rs for j, rs in self.moved.items()}
        removed = {r for rs in self.moved.values() for r in rs}
        final: list[dict] = []
        cursor = 0
        for pos in sorted(inserts.keys() | removed):
            final.extend(out[cursor:pos])
            if pos in inserts:
                final.extend(out[r] for r in inserts[pos])
            cursor = pos + 1 if pos in removed else pos
        final.extend(out[cursor:])
        return final

    def rerender(self, flat: list[dict], i: int, name_at: Callable[[int], str]) -> None:
        if i >= len(self.out):
            return
        m = flat[i]
        if m["role"] == "assistant" and "tool_calls" in m:
            self.out[i] = _keep_answered_calls(m, i, self.answered)
        elif m["role"] == "tool" and i not in self.matched:
            self.out[i] = _result_as_user_message(m, name_at(i))
        else:
            self.out[i] = m
