"""UsageTracker (spec §2.4): provider usage cache, persistence, hybrid estimate."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.tokens import MESSAGE_OVERHEAD_TOKENS, Estimator
from opctx.context.usage import USAGE_META_KEY, UsageTracker, normalise_usage
from opctx.dag.providers import Usage


class FakeStore:
    """Minimal get/set_extra_meta store, counting writes."""

    def __init__(self, meta: dict | None = None):
        self.meta: dict[str, dict] = meta or {}
        self.writes = 0

    def get_extra_meta(self, session_id):
        return dict(self.meta.get(session_id, {}))

    def set_extra_meta(self, session_id, meta):
        self.writes += 1
        self.meta[session_id] = dict(meta)


class FailingStore(FakeStore):
    def set_extra_meta(self, session_id, meta):
        raise OSError("disk full")


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def _history(n: int) -> list[dict]:
    return [
        {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 30}
        for i in range(n)
    ]


# ---------------------------------------------------------------- usage shapes


def test_usage_shapes_normalise_to_whole_prompt():
    assert normalise_usage(Usage(1000, 50, 800, 100)).prompt_tokens == 1000
    assert normalise_usage({"input_tokens": 1000, "output_tokens": 5}).prompt_tokens == 1000
    openai = normalise_usage({"prompt_tokens": 900, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 512}})
    assert (openai.prompt_tokens, openai.completion_tokens, openai.cache_read_tokens) == (900, 7, 512)
    anthropic = normalise_usage(
        {"input_tokens": 3, "cache_read_input_tokens": 20_000, "cache_creation_input_tokens": 500, "output_tokens": 40}
    )
    assert (anthropic.prompt_tokens, anthropic.cache_read_tokens, anthropic.cache_write_tokens) == (20_503, 20_000, 500)
    with pytest.raises(TypeError, match="usage"):
        normalise_usage(42)


# ---------------------------------------------------------------- record / state


def test_record_updates_state_and_totals():
    clock = Clock()
    t = UsageTracker(clock=clock)
    t.record("s", Usage(1000, 100, 0, 0), history_len=3)
    clock.t = 2000.0
    state = t.record("s", {"input_tokens": 1500, "output_tokens": 50, "cache_read_tokens": 1000}, history_len=5)
    assert state.last_prompt_tokens == 1500
    assert state.last_cache_read_tokens == 1000
    assert state.cumulative_prompt_tokens == 2500
    assert state.cumulative_completion_tokens == 150
    assert state.turn_count == 2
    assert state.source == "provider"
    assert state.last_history_len == 5
    assert state.updated_at == 2000.0


def test_record_without_usage_counts_turn_only():
    t = UsageTracker(clock=Clock())
    t.record("s", Usage(1000, 10), history_len=2)
    state = t.record("s", None, history_len=4)
    assert state.turn_count == 2 and state.last_prompt_tokens == 1000 and state.last_history_len == 2


def test_record_rejects_bad_history_len():
    with pytest.raises(ValueError, match="history_len"):
        UsageTracker().record("s", Usage(1), history_len=-1)


def test_returned_state_is_a_copy():
    t = UsageTracker()
    s = t.record("s", Usage(10), history_len=1)
    s.last_prompt_tokens = 999_999
    assert t.get("s").last_prompt_tokens == 10


def test_compaction_drops_back_to_estimate():
    t = UsageTracker()
    t.record("s", Usage(5000), history_len=10)
    state = t.record_compaction("s")
    assert state.compaction_count == 1 and state.source == "estimate"
    h = t.hybrid_estimate("s", _history(4))
    assert h.source == "estimate"


def test_bad_store_type_is_rejected():
    with pytest.raises(TypeError, match="get_extra_meta"):
        UsageTracker(object())


# ---------------------------------------------------------------- persistence


def test_flush_on_session_end_and_warm_up_marks_cached():
    store = FakeStore({"s": {"title_hint": "keep me"}})
    t = UsageTracker(store, clock=Clock())
    t.on_session_start("s")
    t.record("s", Usage(4000, 200), history_len=6)
    assert store.writes == 0  # in-memory until the session ends
    t.on_session_end("s")
    assert store.writes == 1
    assert store.meta["s"]["title_hint"] == "keep me"
    assert store.meta["s"][USAGE_META_KEY]["last_prompt_tokens"] == 4000

    fresh = UsageTracker(store)
    warm = fresh.on_session_start("s")
    assert warm.last_prompt_tokens == 4000 and warm.turn_count == 1
    # a figure from another process is not trusted until confirmed
    assert warm.source == "cached"
    assert fresh.hybrid_estimate("s", _history(8)).source == "estimate"


def test_update_extra_meta_is_preferred():
    class Manager(FakeStore):
        def __init__(self):
            super().__init__()
            self.updates = []

        def update_extra_meta(self, session_id, **kv):
            self.updates.append((session_id, kv))

    m = Manager()
    t = UsageTracker(m, autosave=True)
    t.record("s", Usage(10), history_len=1)
    assert m.updates and USAGE_META_KEY in m.updates[0][1] and m.writes == 0


def test_failing_store_is_logged_not_raised(caplog):
    t = UsageTracker(FailingStore())
    t.record("s", Usage(10), history_len=1)
    assert t.on_session_end("s").last_prompt_tokens == 10
    assert "could not persist" in caplog.text
    # kept in memory because the write failed
    assert t.get("s").last_prompt_tokens == 10


def test_malformed_persisted_usage_is_ignored():
    store = FakeStore({"s": {USAGE_META_KEY: "not a dict"}})
    assert UsageTracker(store).get("s").last_prompt_tokens == 0


def test_a_malformed_field_gets_its_default_and_the_rest_is_kept():
    persisted = {"turn_count": None, "compaction_count": "3", "cumulative_prompt_tokens": 1200,
                 "last_history_len": 4.0, "source": "bogus", "updated_at": float("nan"), "unknown": 1}
    t = UsageTracker(FakeStore({"s": {USAGE_META_KEY: persisted}}))
    state = t.get("s")
    assert (state.turn_count, state.compaction_count, state.cumulative_prompt_tokens) == (0, 0, 1200)
    assert state.last_history_len == 4 and state.source == "estimate" and state.updated_at == 0.0
    # and recording on top of it works
    assert t.record("s", {"input_tokens": 10, "output_tokens": 1}, 2).turn_count == 1
    assert t.record_compaction("s").compaction_count == 1


class _SlowStore(FakeStore):
    """A store whose first write blocks until released, to land calls in the middle of it."""

    def __init__(self):
        super().__init__()
        self.writing, self.release = threading.Event(), threading.Event()

    def set_extra_meta(self, session_id, meta):
        if not self.writing.is_set():
            self.writing.set()
            assert self.release.wait(10)
        super().set_extra_meta(session_id, meta)


def _second_turn_recorded_while_the_first_is_written(store: _SlowStore) -> tuple[UsageTracker, threading.Thread]:
    t = UsageTracker(store)
    t.record("s", {"input_tokens": 1000, "output_tokens": 10}, 2)
    flushing = threading.Thread(target=t.flush, args=("s",))
    flushing.start()
    assert store.writing.wait(10)
    t.record("s", {"input_tokens": 2000, "output_tokens": 20}, 4)
    return t, flushing


def test_a_record_during_a_flush_is_written_later_not_lost():
    store = _SlowStore()
    t, flushing = _second_turn_recorded_while_the_first_is_written(store)
    store.release.set()
    flushing.join()
    t.on_session_end("s")
    assert store.meta["s"][USAGE_META_KEY]["turn_count"] == 2
    assert store.meta["s"][USAGE_META_KEY]["last_prompt_tokens"] == 2000


def test_overlapping_flushes_never_write_an_older_state_last():
    store = _SlowStore()
    t, first = _second_turn_recorded_while_the_first_is_written(store)
    second = threading.Thread(target=t.flush, args=("s",))
    second.start()
    second.join(0.3)  # it must not get to write turn 2 before the first flush wrote turn 1
    store.release.set()
    first.join()
    second.join()
    assert store.meta["s"][USAGE_META_KEY]["last_prompt_tokens"] == 2000


def test_works_with_real_session_db():
    session_db = pytest.importorskip("opctx.dag.session_db")
    db = session_db.DagSessionDB(":memory:")
    sid = db.create_session(title="usage test")
    sid = sid if isinstance(sid, str) else sid["id"]
    t = UsageTracker(db)
    t.record(sid, Usage(1234, 10), history_len=2)
    t.on_session_end(sid)
    assert db.get_extra_meta(sid)[USAGE_META_KEY]["last_prompt_tokens"] == 1234


# ---------------------------------------------------------------- hybrid


def test_hybrid_adds_only_appended_and_never_recounts_system_and_tools():
    est = Estimator("heuristic")
    t = UsageTracker(estimator=est)
    history = _history(10)
    system = "You are a helpful agent. " * 40
    tools = [{"type": "function", "function": {"name": "read", "description": "read a file " * 10}}]
    t.record("s", Usage(50_000), history_len=6)
    h = t.hybrid_estimate("s", history, system, tools)
    appended = est.history_tokens(history[6:])
    assert h.source == "provider"
    assert h.total == 50_000 + appended
    assert h.appended_messages == 4 and h.appended_tokens == appended
    # the split adds up to the total: system and tools are inside the provider figure
    assert h.system + h.tools + h.history == h.total
    assert h.system == est.message_tokens({"role": "system", "content": system})


def test_display_only_lines_add_nothing_to_either_estimate():
    """A line the client only displayed is never sent, so it costs no prompt tokens."""
    est = Estimator("heuristic")
    t = UsageTracker(estimator=est)
    history = _history(6)
    shown = {"id": "d1", "role": "system", "content": "PostToolUse hook ran " * 200, "display_only": True}
    with_shown = history[:4] + [shown] + history[4:]
    assert t.hybrid_estimate("s", with_shown).total == t.hybrid_estimate("s", history).total
    t.record("s", Usage(50_000), history_len=3)
    assert t.hybrid_estimate("s", with_shown).appended_tokens == est.history_tokens(history[3:])


def test_hybrid_falls_back_when_history_shrank_or_branch_changed():
    t = UsageTracker()
    history = _history(10)
    t.record("s", Usage(50_000), history_len=8, anchor_id="m7")
    assert t.hybrid_estimate("s", history).source == "provider"
    assert t.hybrid_estimate("s", history[:5]).source == "estimate"  # rewound
    forked = history[:7] + [{"id": "other", "role": "assistant", "content": "x"}] + history[8:]
    assert t.hybrid_estimate("s", forked).source == "estimate"


def test_full_estimate_without_provider_data():
    est = Estimator("heuristic")
    t = UsageTracker(estimator=est)
    history = _history(5)
    h = t.hybrid_estimate("s", history, "sys", None)
    assert h.source == "estimate"
    assert h.total == est.history_tokens(history) + est.message_tokens({"role": "system", "content": "sys"})


@settings(max_examples=60, deadline=None)
@given(
    prompt=st.integers(min_value=1, max_value=1_000_000),
    n=st.integers(min_value=1, max_value=20),
    covered=st.integers(min_value=0, max_value=25),
)
def test_hybrid_is_provider_plus_suffix_or_full(prompt, n, covered):
    est = Estimator("heuristic")
    t = UsageTracker(estimator=est)
    history = _history(n)
    t.record("s", Usage(prompt), history_len=covered)
    h = t.hybrid_estimate("s", history, "system prompt")
    if 0 < covered <= n:
        assert h.source == "provider" and h.total == prompt + est.history_tokens(history[covered:])
    else:
        assert h.source == "estimate" and h.total == est.history_tokens(history) + h.system
    assert h.system + h.tools + h.history == h.total
    assert min(h.system, h.tools, h.history) >= 0


def test_concurrent_records_are_all_counted():
    t = UsageTracker()

    def worker():
        for _ in range(200):
            t.record("s", Usage(10, 1), history_len=1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    state = t.get("s")
    assert state.turn_count == 1600
    assert state.cumulative_prompt_tokens == 16_000


def test_the_reply_to_the_counted_request_is_counted_at_its_reported_output():
    est = Estimator("heuristic")
    t = UsageTracker(estimator=est)
    history = _history(6)
    reply = {"id": "r", "role": "assistant", "content": "short visible answer"}
    question = {"id": "q", "role": "user", "content": "and then?"}
    grown = history + [reply, question]
    # the reply carried 900 tokens of reasoning the transcript does not show
    t.record("s", Usage(10_000, 900), history_len=6)
    h = t.hybrid_estimate("s", grown)
    assert h.total == 10_000 + 900 + MESSAGE_OVERHEAD_TOKENS + est.message_tokens(question)
    # a partial figure (a streamed reply logged as 1 token) is not trusted
    t.record("s", Usage(10_000, 1), history_len=6)
    long_reply = {**reply, "content": "a considerably longer visible answer " * 20}
    assert t.hybrid_estimate("s", history + [long_reply]).total == 10_000 + est.history_tokens([long_reply])
    # the first appended message is not an assistant reply: nothing to correct
    t.record("s", Usage(10_000, 900), history_len=6)
    assert t.hybrid_estimate("s", history + [question]).total == 10_000 + est.history_tokens([question])
