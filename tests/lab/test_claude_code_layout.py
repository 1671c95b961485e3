"""The claude-code preset's post-compaction layout (free-mode fidelity).

Claude Code folds the whole conversation, current turn included, into its summary,
and re-attaches recently read files that no transcript holds. The preset models the
first with the cut option ``fold_current_turn`` (only the latest user request stays,
pinned after the summary; the kept tail is empty) and the second with
``post_compaction_tokens``, which replays count as unseen overhead after each of
their own compactions. These tests check the cut's invariants under the option
(tool pairs, the latest request, thinking units), the replay accounting, and, on a
simulated client whose context after a compaction is its summary alone, that a free
replay then predicts every automatic compaction.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.anthropic_messages import to_anthropic_request
from opctx.context.summarize import SummarizerConfig, find_cut_index
from opctx.lab.calibrate import simulated_recording
from opctx.lab.fidelity import fidelity_table
from opctx.lab.presets import PRESETS, build_engine
from opctx.lab.replay import replay


def _user(i: int, text: str = "please continue") -> dict:
    return {"id": f"u{i}", "role": "user", "content": f"{text} {i} " + "x" * 200}


def _call(i: int, call_id: str, thinking: bool = False) -> dict:
    msg = {"id": f"a{i}", "role": "assistant", "content": "",
           "tool_calls": [{"id": call_id, "type": "function",
                           "function": {"name": "Read", "arguments": '{"file_path": "f.py"}'}}]}
    if thinking:
        msg["metadata"] = {"thinking": [{"type": "thinking", "thinking": "plan " * 50, "signature": "sig"}]}
    return msg


def _result(i: int, call_id: str) -> dict:
    return {"id": f"t{i}", "role": "tool", "tool_call_id": call_id, "content": "line\n" * 400}


def _session(thinking: bool = False) -> list[dict]:
    """Two user turns; the second runs a tool loop of three calls (the current turn)."""
    msgs = [_user(0, "build it"), {"id": "a0", "role": "assistant", "content": "done " * 2000}, _user(1)]
    for k in range(3):
        msgs += [_call(10 + k, f"c{k}", thinking=thinking and k == 0), _result(10 + k, f"c{k}")]
    return msgs


FOLD = SummarizerConfig(keep_ratio=0.0, keep_min_tokens=0, keep_max_tokens=0, keep_min_messages=0,
                        protect_first_n=0, protect_last_n=0, fold_current_turn=True)


def _tool_pairs_whole(kept: list[dict]) -> bool:
    calls = {tc["id"] for m in kept for tc in m.get("tool_calls") or []}
    results = {m["tool_call_id"] for m in kept if m.get("role") == "tool"}
    return calls == results


@pytest.mark.parametrize("thinking", [False, True])
def test_fold_current_turn_keeps_only_the_latest_request(thinking: bool) -> None:
    msgs = _session(thinking)
    cut = find_cut_index(msgs, 200_000, FOLD)
    assert cut.ok
    assert cut.index == len(msgs)  # the kept tail is empty: the running loop is folded whole
    assert cut.pinned == (2,)  # the latest user request stays, pinned after the summary
    kept = [msgs[i] for i in cut.pinned] + msgs[cut.index:]
    assert _tool_pairs_whole(kept)
    assert any("fold_current_turn" in s for s in cut.steps)
    # the request the provider then gets: the summary, then the request; no orphan tool
    # block and no running loop that would need its thinking block
    request = to_anthropic_request([{"id": "s", "role": "system", "content": "summary"}, *kept])
    assert [t["role"] for t in request["messages"]] == ["user"]
    assert all(b.get("type") == "text" for t in request["messages"] for b in t["content"])


def test_without_the_option_the_current_turn_is_kept() -> None:
    msgs = _session()
    cfg = SummarizerConfig(keep_ratio=0.0, keep_min_tokens=0, keep_max_tokens=0, keep_min_messages=0,
                           protect_first_n=0, protect_last_n=0)
    cut = find_cut_index(msgs, 200_000, cfg)
    assert cut.ok
    # the ordinary steps snap back to the latest request: the whole current turn is kept
    assert cut.index == 2 and cut.pinned == ()


def test_request_inside_the_head_is_not_pinned() -> None:
    msgs = _session()
    cfg = SummarizerConfig(**{**FOLD.to_dict(), "protect_first_n": 3})
    cut = find_cut_index(msgs, 200_000, cfg)
    assert cut.ok and cut.index == len(msgs) and cut.pinned == ()
    assert cut.protected_head == 3


def test_request_across_a_tool_exchange_falls_back_to_the_ordinary_cut() -> None:
    # a result arrives after the latest request although its call came before it
    msgs = [_user(0), _call(1, "c1"), _user(2), _result(1, "c1"), {"id": "a3", "role": "assistant", "content": "ok"}]
    cut = find_cut_index(msgs, 200_000, FOLD)
    assert any("ordinary cut" in s for s in cut.steps)
    if cut.ok:
        kept = [msgs[i] for i in cut.pinned] + msgs[cut.index:]
        assert _tool_pairs_whole(kept)


def test_only_the_request_after_the_head_declines_to_the_ordinary_steps() -> None:
    cut = find_cut_index([_user(0)], 200_000, FOLD)
    assert not cut.ok


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="fold_current_turn"):
        SummarizerConfig(fold_current_turn=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="post_compaction_tokens"):
        SummarizerConfig(post_compaction_tokens=-1)


def test_the_preset_carries_the_layout_with_sources() -> None:
    spec = PRESETS["claude-code"]
    assert spec.params["fold_current_turn"] is True
    assert spec.params["post_compaction_tokens"] > 0
    assert any("post_compaction_tokens" in k for k in spec.sources)
    assert any("fold_current_turn" in k for k in spec.sources)
    engine = build_engine("claude-code", context_window=200_000, model="claude-sonnet-4-5")
    assert engine.config.fold_current_turn and engine.config.post_compaction_tokens == spec.params[
        "post_compaction_tokens"]
    # every other preset keeps the ordinary layout
    assert not build_engine("default", context_window=200_000).config.fold_current_turn


def _recording():
    # the simulated client's context after a compaction is its summary alone (plus its overhead)
    return simulated_recording(60_000, requests=90, seed=3, version="2.0.76", context_window=200_000)


def test_replay_counts_post_compaction_tokens_after_its_own_compactions_only() -> None:
    history = _recording()
    kw = {"feed_usage": True, "trigger_check": "last-response", "trigger_before_window": 140_000}
    plain = replay(history, "claude-code", post_compaction_tokens=0, **kw)
    extra = replay(history, "claude-code", post_compaction_tokens=5_000, **kw)
    assert plain.compactions and extra.compactions
    first = plain.compactions[0].step
    assert extra.compactions[0].step == first
    before_a, before_b = plain.steps_df["tokens"][:first], extra.steps_df["tokens"][:first]
    assert list(before_a) == list(before_b)  # identical until the replay's own compaction
    assert extra.compactions[0].tokens_after - plain.compactions[0].tokens_after == 5_000
    # the summary (a system message in opctx's requests), then the pinned request: no tool loop
    assert [m.get("role") for m in plain.context(first)] == ["system", "user"]


def test_free_replay_follows_a_client_that_keeps_only_its_summary() -> None:
    history = _recording()

    def deltas(follow_recording: bool = False, **kw) -> list[int]:
        # the layout on its own: the replay goes on alone after compacting with the client
        table = fidelity_table([history], presets=("claude-code",), mode="free", post_compaction_tokens=0,
                               trigger_before_window=140_000, aging=False, follow_recording=follow_recording, **kw)
        auto = table[table["trigger"].astype(str) == "auto"]
        return [int(d) for d in auto["claude-code_delta_requests"]]

    folded, kept = deltas(), deltas(fold_current_turn=False)
    assert len(folded) == len(kept) >= 4
    # the first four within one request; later ones drift early only because the replay's
    # chained structural summaries grow (1.8K to 10.7K characters) where the simulated
    # client's stay at 60 characters
    assert all(abs(d) <= 1 for d in folded[:4])
    # keeping the current turn verbatim made every later prediction several requests early
    assert all(d <= -5 for d in kept[1:])
    # rejoining the recording where it compacts with the client (the free mode's default), every
    # compaction is on the very request whatever the layout
    assert deltas(True) == deltas(True, fold_current_turn=False) == [0] * len(folded)


def test_corpus_first_request_after_a_compaction_is_near_the_real_one(corpus_dir) -> None:
    from opctx.importers import parse_path
    from opctx.lab.history import as_history, provider_prompt_tokens

    path = next(corpus_dir.glob("claude_code_jsonl/*0f199565*/*.jsonl"), None)
    if path is None:
        pytest.skip("session 0f199565 is not in this corpus")
    history = as_history(parse_path(path)[0])
    first = history.compactions[0]
    real = next(provider_prompt_tokens(m) for m in history.messages[first.stream_index:]
                if m.get("role") == "assistant" and provider_prompt_tokens(m))
    result = replay(history, "claude-code", feed_usage=True, keep_contexts=True, aging=False)
    comp = result.compactions[0]
    # the summary and the pinned request only: no verbatim tool loop after it
    assert [m.get("role") for m in result.context(comp.step)] == ["system", "user"]
    # measured: 38,453 against the provider's 39,242 (the old layout sent 72,771)
    assert abs(comp.tokens_after - real) < 0.1 * real


def _benchmark():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity.py"
    spec = importlib.util.spec_from_file_location("fidelity_benchmark_post", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fidelity_benchmark_post"] = module
    spec.loader.exec_module(module)
    return module


def test_post_table_parts_add_up_and_loso_leaves_the_session_out() -> None:
    fb = _benchmark()
    histories = [simulated_recording(60_000, requests=60, seed=s, session_id=f"sim-{s}", overhead=15_000 + 1_000 * s,
                                     context_window=200_000) for s in (1, 2, 3)]
    rows = fb.post_compaction(histories, (("default", {"trigger_before_window": 140_000}),))
    assert rows and all(r["session"].startswith("sim-") for r in rows)
    for r in rows:
        # the simulated client re-attaches nothing: its first request after a compaction is
        # its overhead + its summary, so the rest is (about) zero
        assert r["real_post"] == r["real_overhead"] + r["real_summary"] + r["real_between"] + r["real_reattached"]
        assert abs(r["real_reattached"]) < 200
        if r.get("default_post") is not None:
            assert r["default_post"] == (r["default_summary"] + r["default_request"] + r["default_kept"]
                                         + r["default_overhead"])
            assert r["default_kept"] == 0  # the current turn is folded
    # leave-one-session-out: each fit is the median of the *other* sessions' values
    parts = [[r["real_reattached"] for r in fb.recorded_post_parts(h)] for h in histories]
    fits = fb.reattached_loso(histories)
    import statistics

    for i, fit in enumerate(fits):
        others = [v for j, values in enumerate(parts) if j != i for v in values]
        assert fit == int(statistics.median(others))


@st.composite
def _histories(draw) -> list[dict]:
    """User turns, each a run of tool groups (some opening with thinking) and a final answer."""
    msgs: list[dict] = []
    n = 0
    for turn in range(draw(st.integers(1, 4))):
        msgs.append(_user(n, f"turn {turn}"))
        n += 1
        for g in range(draw(st.integers(0, 4))):
            call_id = f"c{n}"
            msgs.append(_call(n, call_id, thinking=draw(st.booleans()) and g == 0))
            msgs.append(_result(n, call_id))
            n += 1
        if draw(st.booleans()):
            msgs.append({"id": f"a{n}", "role": "assistant", "content": "answer " * draw(st.integers(1, 300))})
            n += 1
    return msgs


@settings(max_examples=150, deadline=None)
@given(_histories(), st.integers(0, 4))
def test_fold_current_turn_invariants(msgs: list[dict], protect_first_n: int) -> None:
    cfg = SummarizerConfig(**{**FOLD.to_dict(), "protect_first_n": protect_first_n})
    cut = find_cut_index(msgs, 200_000, cfg)
    if not cut.ok:
        return
    head = msgs[: cut.protected_head]
    kept = head + [msgs[i] for i in cut.pinned] + msgs[cut.index:]
    assert _tool_pairs_whole(kept)  # no call without its result, no result without its call
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    # the latest request is on the new branch: in the head, pinned, or in the tail
    assert last_user < cut.protected_head or last_user in cut.pinned or last_user >= cut.index
    # the provider request built from the new branch opens with a user turn
    request = to_anthropic_request([{"id": "s", "role": "system", "content": "summary"}, *kept])
    assert request["messages"][0]["role"] == "user"
