"""TurnAger (spec §3.1-3.2): three gates, size threshold, protect_first_n, idempotence, no mutation."""

from __future__ import annotations

import copy
import sys
import threading

import pytest
from _compaction_fixtures import HistoryBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.aging import TurnAger, placeholder_text
from opctx.context.tokens import Estimator
from opctx.context.types import ReferenceMap
from opctx.dag.messages import blocks, is_tool_result, message_to_call
from opctx.lab.synthetic_history import make_history

BIG = "row of plain output without identifiers\n" * 400  # ~4,000 tokens by heuristic
SMALL = "tiny output"
T0 = 1_000_000.0


def _ager(**kw):
    kw.setdefault("clock", lambda: T0 + 10_000)
    return TurnAger(estimator=Estimator("heuristic"), **kw)


def _history(result=BIG, style="anthropic", turns_after=5, ts_step=100.0):
    """user, user, assistant(tool call), tool result, then `turns_after` assistant turns."""
    h = [
        {"id": "u0", "role": "user", "content": "task", "timestamp": T0},
        {"id": "u1", "role": "user", "content": "more detail", "timestamp": T0 + 1},
    ]
    if style == "anthropic":
        h.append({"id": "a2", "role": "assistant", "content": "", "timestamp": T0 + 2,
                  "extra": {"blocks": [{"type": "tool_use", "id": "t1", "name": "run", "input": {}}]}})
        h.append({"id": "r3", "role": "user", "content": "", "timestamp": T0 + 3,
                  "extra": {"blocks": [{"type": "tool_result", "tool_use_id": "t1", "content": result}]}})
    else:
        h.append({"id": "a2", "role": "assistant", "content": "", "timestamp": T0 + 2,
                  "tool_calls": [{"id": "t1", "name": "run", "arguments": {}}]})
        h.append({"id": "r3", "role": "tool", "tool_call_id": "t1", "name": "run", "content": result, "timestamp": T0 + 3})
    for k in range(turns_after):
        h.append({"id": f"a{4 + k}", "role": "assistant", "content": f"step {k}", "timestamp": T0 + 4 + k * ts_step})
    return h


def _result_content(msg):
    if msg.get("role") == "tool":
        return msg["content"]
    return msg["extra"]["blocks"][0]["content"]


@pytest.mark.parametrize("style", ["anthropic", "openai"])
def test_old_large_uncited_result_is_cleared(style):
    history = _history(style=style)
    aged, report = _ager().age(history, ReferenceMap())
    content = _result_content(aged[3])
    assert content.startswith("[Old tool result content cleared (was ") and content.endswith(" tokens)]")
    assert report.redacted == 1 and report.redacted_ids == ["t1"]
    n = int(content.split("was ")[1].split(" ")[0])
    assert n >= 800
    assert report.tokens_freed == n - Estimator("heuristic").text_tokens(placeholder_text(n))
    flagged = aged[3] if style == "openai" else aged[3]["extra"]["blocks"][0]
    assert flagged["_redacted"] is True
    assert is_tool_result(aged[3])


def test_input_is_never_mutated_and_untouched_messages_are_shared():
    history = _history()
    snapshot = copy.deepcopy(history)
    aged, _ = _ager().age(history, ReferenceMap())
    assert history == snapshot
    assert aged is not history
    assert all(aged[i] is history[i] for i in range(len(history)) if i != 3)


def test_turn_gate():
    aged, report = _ager(keep_recent_turns=4).age(_history(turns_after=3), ReferenceMap())
    assert report.redacted == 0 and _result_content(aged[3]) == BIG
    assert _ager(keep_recent_turns=4).age(_history(turns_after=4), ReferenceMap())[1].redacted == 1


def test_wall_clock_gate_uses_injected_clock():
    history = _history()
    recent = _ager(clock=lambda: T0 + 30)  # result is 27 s old
    assert recent.age(history, ReferenceMap())[1].redacted == 0
    assert _ager(clock=lambda: T0 + 63).age(history, ReferenceMap())[1].redacted == 1
    # an explicit `now` (replay) overrides the clock
    assert recent.age(history, ReferenceMap(), now=T0 + 63)[1].redacted == 1


def test_missing_timestamp_passes_the_clock_gate():
    history = _history()
    history[3] = {k: v for k, v in history[3].items() if k != "timestamp"}
    assert _ager(clock=lambda: T0).age(history, ReferenceMap())[1].redacted == 1


def test_citation_gate_by_tool_use_id_and_message_id():
    history = _history()
    report = _ager().age(history, ReferenceMap(cited_tool_use_ids={"t1"}))[1]
    assert report.redacted == 0 and report.references_protected == 1
    report = _ager().age(history, ReferenceMap(cited_message_ids={"r3"}))[1]
    assert report.redacted == 0 and report.references_protected == 1


def test_builds_its_own_references_when_none_given():
    history = _history(result=BIG + "written to build/out/artifact_v2.bin\n")
    history.append({"id": "a99", "role": "assistant", "content": "the file build/out/artifact_v2.bin is ready", "timestamp": T0 + 999})
    aged, report = _ager().age(history)
    assert report.redacted == 0 and report.references_protected == 1
    assert _result_content(aged[3]).startswith("row of plain output")


def test_size_threshold():
    assert _ager().age(_history(result=SMALL), ReferenceMap())[1].redacted == 0
    assert _ager(min_tokens=1).age(_history(result=SMALL), ReferenceMap())[1].redacted == 1


def test_protect_first_n():
    history = _history()
    assert _ager(protect_first_n=4).age(history, ReferenceMap())[1].redacted == 0
    assert _ager(protect_first_n=3).age(history, ReferenceMap())[1].redacted == 1


def test_idempotent():
    ager = _ager()
    once, first = ager.age(_history(), ReferenceMap())
    twice, second = ager.age(once, ReferenceMap())
    assert first.redacted == 1 and second.redacted == 0
    assert twice == once


def test_list_content_blocks_are_aged_too():
    history = _history()
    history[3] = {"id": "r3", "role": "user", "timestamp": T0 + 3,
                  "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": BIG}]}]}
    aged, report = _ager().age(history, ReferenceMap())
    assert report.redacted == 1 and aged[3]["content"][0]["_redacted"]
    assert history[3]["content"][0]["content"][0]["text"] == BIG


def test_calls_are_aged_as_copies():
    msgs = _history(style="openai")
    calls = [message_to_call(dict(m, parent_id=None)) for m in msgs]
    aged, report = _ager().age(calls, ReferenceMap())
    assert report.redacted == 1
    assert aged[3] is not calls[3] and calls[3].output == BIG
    assert aged[3].output.startswith("[Old tool result content cleared") and aged[3].metadata["_redacted"]
    assert aged[3].id == calls[3].id


def test_bad_arguments():
    with pytest.raises(ValueError, match="keep_recent_turns"):
        TurnAger(keep_recent_turns=-1)
    with pytest.raises(TypeError, match="list of messages"):
        _ager().age({"role": "user"})
    with pytest.raises(TypeError, match="message 3"):
        _ager().age(_history()[:3] + [42] + _history()[4:], ReferenceMap())


def test_counts_must_be_integers():
    for name in ("protect_first_n", "keep_recent_turns"):
        with pytest.raises(ValueError, match=f"{name} must be an integer"):
            TurnAger(**{name: 2.0})
    assert TurnAger(keep_recent_seconds=1.5, min_tokens=800.0).min_tokens == 800.0


def test_integer_message_ids_keep_the_citation_gate():
    # the reference tracker keys messages by str(id); an int id must be protected the same way
    history = _history(style="openai")
    for m in history:
        m["id"] = int(m["id"][1:]) + 100 * ord(m["id"][0])
        m.pop("tool_call_id", None)
    refs = ReferenceMap(cited_message_ids={str(history[3]["id"])})
    report = _ager().age(history, refs)[1]
    assert report.redacted == 0 and report.references_protected == 1


def test_unhashable_ids_from_a_malformed_transcript_do_not_crash():
    history = _history()
    history[3]["extra"]["blocks"][0]["tool_use_id"] = ["t1"]
    history[3]["id"] = ["r3"]
    aged, report = _ager().age(history, ReferenceMap(cited_tool_use_ids={"t1"}))
    assert report.redacted == 1 and _result_content(aged[3]).startswith("[Old tool result content cleared")


def test_a_copy_has_the_settings_and_estimator_but_remembers_nothing():
    ager = _ager(keep_recent_turns=2, min_tokens=100)
    ager.age(_history(), ReferenceMap())
    for clone in (ager.copy(), copy.deepcopy(ager)):
        assert (clone.keep_recent_turns, clone.min_tokens, clone.estimator) == (2, 100, ager.estimator)
        assert clone._states == [] and clone._token_cache == {} and clone._lock is not ager._lock
        assert clone.age(_history(), ReferenceMap()) == _ager(keep_recent_turns=2, min_tokens=100).age(
            _history(), ReferenceMap())
    assert len(ager._states) == 1


def test_one_ager_shared_by_concurrent_sessions_answers_as_if_alone():
    # DefaultContextEngine keeps one ager for all its sessions and locks per session only
    def session(sid: str) -> list[dict]:
        h = _history(result=BIG + sid, turns_after=0)
        for m in h:
            m["id"] = sid + m["id"]
        for i in range(40):
            h.append({"id": f"{sid}a{i}", "role": "assistant", "content": "", "timestamp": T0 + 10 + i,
                      "extra": {"blocks": [{"type": "tool_use", "id": f"{sid}t{i}", "name": "run", "input": {}}]}})
            h.append({"id": f"{sid}r{i}", "role": "user", "content": "", "timestamp": T0 + 10 + i,
                      "extra": {"blocks": [{"type": "tool_result", "tool_use_id": f"{sid}t{i}", "content": BIG}]}})
        return h

    histories = {sid: session(sid) for sid in "ABCDEF"}
    expected = {
        (sid, k): _ager().age(h[:k], ReferenceMap())[1] for sid, h in histories.items() for k in range(4, len(h) + 1, 3)
    }
    shared = _ager()
    got: dict = {}
    errors: list = []

    def worker(sid: str) -> None:
        try:
            for k in range(4, len(histories[sid]) + 1, 3):
                got[sid, k] = shared.age(histories[sid][:k], ReferenceMap())[1]
        except Exception as exc:  # pragma: no cover - the failure being tested for
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=worker, args=(sid,)) for sid in histories]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert got == expected


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=80),
    seed=st.integers(min_value=0, max_value=5),
    turns=st.integers(min_value=0, max_value=6),
    first=st.integers(min_value=0, max_value=5),
    seconds=st.sampled_from([0, 60, 3_600]),
)
def test_aging_properties(n, seed, turns, first, seconds):
    history = make_history(n, seed=seed)
    snapshot = copy.deepcopy(history)
    now = history[-1]["timestamp"] if history else 0
    ager = TurnAger(keep_recent_turns=turns, keep_recent_seconds=seconds, protect_first_n=first, clock=lambda: now)
    aged, report = ager.age(history)
    assert history == snapshot  # never mutates
    assert len(aged) == len(history)
    assert [m["id"] for m in aged] == [m["id"] for m in history]
    assert report.redacted == len(report.redacted_ids)
    changed = [i for i in range(len(history)) if aged[i] is not history[i]]
    assert len(changed) <= report.redacted
    for i in changed:
        assert i >= first
        assert now - history[i]["timestamp"] >= seconds
        assert sum(m["role"] == "assistant" for m in history[i + 1:]) >= turns
    # idempotent
    again, second = ager.age(aged)
    assert second.redacted == 0 and again == aged


def test_a_long_history_ages_the_same_warm_and_cold():
    # the speed of the warm path is measured by benchmarks/aging.py
    history = make_history(2_000, seed=1)
    now = history[-1]["timestamp"]
    ager = TurnAger(clock=lambda: now)
    first, first_report = ager.age(history)
    again, again_report = ager.age(history)
    cold, cold_report = TurnAger(clock=lambda: now).age(history)
    assert again == first == cold
    assert again_report.redacted == first_report.redacted == cold_report.redacted


# ------------------------------------------------------------------ incremental path
#
# The ager remembers what it decided for a history and, when the next history only
# grew, works on the new messages and on the results that crossed a gate. These tests
# drive one long-lived ager through random sequences of appends, rewinds, compactions,
# re-reads, clock moves and citation changes and compare every answer with a fresh
# ager's on the same input: value, identity of unchanged elements and report.


class _DiffBlindMap(ReferenceMap):
    """A map the ager cannot diff (``is_cited`` overridden): it must ask about every result."""

    def is_cited(self, msg_id=None, tool_use_id=None):
        return super().is_cited(msg_id, tool_use_id)


def _message(draw_kind, n, rng_text, ts, tool_id, with_id):
    """One message of the random histories below: user, assistant (with a call), tool result in one of three shapes."""
    mid = f"m{n}" if with_id else None
    if draw_kind == "user":
        m = {"role": "user", "content": f"question {n}"}
    elif draw_kind == "assistant":
        m = {"role": "assistant", "content": f"answer {n}", "tool_calls": [{"id": tool_id, "name": "run", "arguments": {}}]}
    elif draw_kind == "system":
        m = {"role": "system", "content": "note"}
    elif draw_kind == "tool":
        m = {"role": "tool", "tool_call_id": tool_id, "name": "run", "content": rng_text}
    elif draw_kind == "blocks":
        m = {"role": "user", "content": "", "extra": {"blocks": [
            {"type": "text", "text": "results"},
            {"type": "tool_result", "tool_use_id": tool_id, "content": rng_text},
            {"type": "tool_result", "tool_use_id": tool_id + "b", "content": rng_text[: len(rng_text) // 2]},
        ]}}
    elif draw_kind == "list":
        m = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id,
                                          "content": [{"type": "text", "text": rng_text}]}]}
    else:  # already cleared: aging skips it
        m = {"role": "tool", "tool_call_id": tool_id, "content": "[cleared]", "_redacted": True}
    if mid:
        m["id"] = mid
    if ts is not None:
        m["timestamp"] = ts
    return m


_KINDS = ["user", "assistant", "assistant", "system", "tool", "tool", "blocks", "list", "redacted"]

_message_specs = st.tuples(
    st.sampled_from(_KINDS),
    st.integers(min_value=1, max_value=120),  # result size in words
    st.one_of(st.none(), st.floats(min_value=0, max_value=30)),  # seconds after the previous message, or no timestamp
    st.integers(min_value=0, max_value=5),  # tool id pool: ids repeat on purpose
    st.booleans(),  # has an id
)

# weighted towards growth and citations: the incremental path is what is under test
_OPERATION_KINDS = ["append"] * 5 + ["cite"] * 3 + [
    "rewind", "compact", "reread", "feed_back", "clock", "uncite", "new_map", "switch", "edit",
]


def _same_length_edit(value):
    # "line" -> four CJK characters: the same length, several times the tokens
    if isinstance(value, str):
        return value.replace("line", "中文内容")
    if isinstance(value, list):
        return [_same_length_edit(v) for v in value]
    if isinstance(value, dict):
        return {k: v if k in ("id", "role", "tool_use_id", "tool_call_id", "type") else _same_length_edit(v)
                for k, v in value.items()}
    return value


@st.composite
def _operation(draw):
    kind = draw(st.sampled_from(_OPERATION_KINDS))
    if kind == "append":
        return kind, draw(st.lists(_message_specs, min_size=1, max_size=8))
    if kind == "cite":
        return kind, draw(st.tuples(st.booleans(), st.integers(min_value=0, max_value=12)))
    if kind == "edit":
        return kind, draw(st.integers(min_value=0, max_value=40))
    if kind in ("rewind", "compact", "uncite"):
        return kind, draw(st.integers(min_value=1 if kind == "rewind" else 0, max_value=40 if kind == "uncite" else 5))
    if kind == "clock":
        return kind, draw(st.floats(min_value=-20, max_value=60))
    if kind == "new_map":
        return kind, draw(st.booleans())
    return kind, None


_operations = st.lists(_operation(), min_size=10, max_size=50)


@settings(max_examples=200, deadline=None)
@given(
    ops=_operations,
    turns=st.integers(min_value=0, max_value=4),
    seconds=st.sampled_from([0, 5, 60]),
    first=st.integers(min_value=0, max_value=3),
    own_tracker=st.booleans(),
)
def test_incremental_ager_matches_a_fresh_one(ops, turns, seconds, first, own_tracker):
    estimator = Estimator("heuristic")
    params = dict(keep_recent_turns=turns, keep_recent_seconds=seconds, min_tokens=30, protect_first_n=first)
    clock = {"drift": 10.0}  # the clock runs this far ahead of the newest timestamp
    counter = {"n": 0, "ts": 0.0}

    def now():
        return counter["ts"] + clock["drift"]

    ager = TurnAger(clock=now, estimator=estimator, **params)
    histories = {0: [], 1: []}
    current = 0
    last_out: list = []
    refs = ReferenceMap()

    def new_message(spec):
        kind, words, step, pool, with_id = spec
        counter["n"] += 1
        if step is not None:
            counter["ts"] += step
        text = " ".join(f"line{counter['n']}_{w}" for w in range(words))
        return _message(kind, counter["n"], text, counter["ts"] if step is not None else None, f"t{pool}", with_id)

    for op, arg in ops:
        history = histories[current]
        if op == "append":
            history = history + [new_message(spec) for spec in arg]
        elif op == "rewind":
            history = history[: max(0, len(history) - arg)]
        elif op == "compact":  # copies with new ids around a summary, like the compaction layout
            head = [dict(m, id=f"k{i}_{counter['n']}") for i, m in enumerate(history[:first])]
            summary = {"id": f"s{counter['n']}", "role": "system", "content": "[Previous conversation summary]\nx"}
            tail = [dict(m, id=f"k{i}_{counter['n']}") for i, m in enumerate(history[len(history) - arg:] if arg else [])]
            counter["n"] += 1
            history = head + [summary] + tail
        elif op == "edit" and history:  # a node updated under its id (GraphStore.update), same lengths
            i = arg % len(history)
            history = history[:i] + [_same_length_edit(history[i])] + history[i + 1 :]
        elif op == "reread":  # the branch read again from the store: equal dicts, new objects
            history = copy.deepcopy(history)
        elif op == "feed_back":  # the aged output given back (idempotence path)
            history = list(last_out) if len(last_out) == len(history) else history
        elif op == "clock":  # forward mostly, sometimes back
            clock["drift"] += arg
        elif op == "cite" and history:  # a later message quotes this one (in place, like the tracker)
            by_tool, k = arg
            target = history[k % len(history)]  # older messages: the ones past the gates
            tool_ids = [target.get("tool_call_id")] + [b.get("tool_use_id") for b in blocks(target) if isinstance(b, dict)]
            if by_tool:
                refs.cited_tool_use_ids.update(i for i in tool_ids if i)
            elif target.get("id"):
                refs.cited_message_ids.add(target["id"])
        elif op == "uncite":  # a map may also forget (another tracker, a hand-made map)
            cited = sorted(refs.cited_message_ids) + sorted(refs.cited_tool_use_ids)
            if cited:
                refs.cited_message_ids.discard(cited[arg % len(cited)])
                refs.cited_tool_use_ids.discard(cited[arg % len(cited)])
        elif op == "new_map":  # a new map object (maybe one the ager cannot diff) with the same citations
            cls = _DiffBlindMap if arg else ReferenceMap
            refs = cls(cited_tool_use_ids=set(refs.cited_tool_use_ids), cited_message_ids=set(refs.cited_message_ids))
        elif op == "switch":  # another session on the same ager
            current = 1 - current
            history = histories[current]
        histories[current] = history
        if not history:
            continue
        given_refs = None if own_tracker else refs
        snapshot = copy.deepcopy(history)
        out, report = ager.age(history, given_refs)
        fresh = TurnAger(clock=now, estimator=estimator, **params)
        expected, expected_report = fresh.age(history, given_refs)
        assert history == snapshot  # never mutates its input
        assert out == expected
        assert [a is m for a, m in zip(out, history, strict=True)] == [e is m for e, m in zip(expected, history, strict=True)]
        assert report == expected_report
        last_out = out


def test_incremental_ager_only_reads_the_new_messages():
    """After the first call, a grown history costs the appended messages (plus gate crossings)."""
    history = make_history(400, seed=3)
    now = history[-1]["timestamp"]
    ager = TurnAger(clock=lambda: now, estimator=Estimator("heuristic"))
    ager.age(history[:300])
    scanned = []
    original = ager._add_slots
    ager._add_slots = lambda st, i, msg: (scanned.append(i), original(st, i, msg))
    out, report = ager.age(history[:304])
    assert scanned == [300, 301, 302, 303]
    expected, expected_report = TurnAger(clock=lambda: now, estimator=Estimator("heuristic")).age(history[:304])
    assert out == expected and report == expected_report
    scanned.clear()
    ager.age(history[:250])  # a rewind: not a prefix-extension, one full pass
    assert scanned == list(range(2, 250))


def test_incremental_ager_reuses_aged_copies_while_the_input_is_the_same():
    history = _history() + [{"id": f"z{k}", "role": "assistant", "content": "more", "timestamp": T0 + 900 + k} for k in range(3)]
    ager = _ager()
    first, _ = ager.age(history[:-2], ReferenceMap())
    second, report = ager.age(history, ReferenceMap())
    assert report.redacted == 1 and second[3] is first[3]  # the engine's caches hit by identity
    reread = copy.deepcopy(history)
    third, _ = ager.age(reread, ReferenceMap())
    assert third == second and third[3] is not second[3]  # rebuilt from the new objects
    assert all(third[i] is reread[i] for i in range(len(reread)) if i != 3)


def test_incremental_ager_sees_the_clock_going_back():
    history = _history()
    ager = _ager()
    assert ager.age(history, ReferenceMap(), now=T0 + 100)[1].redacted == 1
    aged, report = ager.age(history, ReferenceMap(), now=T0 + 30)  # 27 s old again: kept
    assert report.redacted == 0 and aged[3] is history[3]


def test_incremental_turn_gate_at_exactly_keep_recent_turns():
    """A result before every assistant message, with as many assistant messages as the gate asks for."""
    history = _history()[:2] + [_history()[3]] + [
        {"id": f"a{k}", "role": "assistant", "content": "ok", "timestamp": T0 + 10 + k} for k in range(4)
    ]
    history[2] = dict(history[2], extra={"blocks": [{"type": "tool_result", "tool_use_id": "t1", "content": BIG}]})
    ager = _ager(keep_recent_turns=4)
    assert ager.age(history[:-1], ReferenceMap())[1].redacted == 0  # three turns after it
    assert ager.age(history, ReferenceMap())[1].redacted == 1  # four: exactly the gate


def test_changing_a_gate_on_the_instance_is_seen():
    history = _history()
    ager = _ager()
    assert ager.age(history, ReferenceMap())[1].redacted == 1
    ager.min_tokens = 10**9
    assert ager.age(history, ReferenceMap())[1].redacted == 0


# -- thinking units ---------------------------------------------------------------------

_unit_step = st.fixed_dictionaries({
    "thinking": st.booleans(), "calls": st.integers(1, 2), "big": st.booleans(), "anthropic": st.booleans(),
})


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(_unit_step, min_size=1, max_size=6), min_size=1, max_size=5),
       st.integers(0, 4), st.integers(0, 3))
def test_thinking_units_survive_aging(runs, keep_turns, first):
    """An assistant message with thinking, its calls and their results stay one whole unit:
    aging replaces result contents only, never a thinking block, a call or a message."""
    from opctx.context.anthropic_messages import to_anthropic_request

    h = HistoryBuilder(start=T0, tick=60)
    for r, steps in enumerate(runs):
        h.user(f"request {r}")
        for step in steps:
            h.group(*["run"] * step["calls"], thinking=step["thinking"], anthropic=step["anthropic"],
                    output=BIG if step["big"] else SMALL)
    history = h.messages
    before = copy.deepcopy(history)
    aged, report = _ager(keep_recent_turns=keep_turns, protect_first_n=first, keep_recent_seconds=0).age(history)
    assert history == before
    assert len(aged) == len(history)
    for old, new in zip(history, aged, strict=True):
        if old["role"] == "assistant":
            assert new is old  # thinking blocks, text and calls untouched
        else:
            assert [b.get("tool_use_id") for b in blocks(new)] == [b.get("tool_use_id") for b in blocks(old)]
            assert new.get("tool_call_id") == old.get("tool_call_id")
    # the aged history still makes a request whose running loop keeps its thinking
    request = to_anthropic_request(aged, model="claude-sonnet-4-5")
    sent = [b["signature"] for m in request["messages"] for b in m["content"] if b["type"] == "thinking"]
    # the running turn starts after the last request that does not share a turn with tool
    # results (a request right after results joins their user turn: the loop goes on)
    starts = [i for i, m in enumerate(history) if m["role"] == "user" and not is_tool_result(m)
              and (i == 0 or history[i - 1]["role"] == "assistant")]
    running = [t["signature"] for m in history[starts[-1] if starts else 0:] for t in m.get("thinking") or ()]
    assert sent == running


def test_user_observations_age_like_tool_results_demonstrations_never():
    big = "output line\n" * 800
    history = [{"role": "system", "content": "sys", "id": "s"}, {"role": "user", "content": "task", "id": "t"},
               {"role": "user", "content": big, "is_observation": True, "is_demo": True, "id": "demo"},
               {"role": "assistant", "content": "ls", "id": "a0"},
               {"role": "user", "content": big, "is_observation": True, "id": "o0"},
               {"role": "user", "content": big, "id": "plain"}]
    history += [{"role": "assistant", "content": f"step {i}", "id": f"a{i + 1}"} for i in range(5)]
    aged, report = TurnAger(estimator=Estimator("heuristic"), keep_recent_seconds=0).age(history, None)
    assert report.redacted_ids == ["o0"]
    assert aged[4]["content"].startswith("[") and aged[4]["_redacted"] and aged[2] is history[2] and aged[5] is history[5]
