"""Metrics over plain message lists: identifiers, tool pairs, prefix cache, reference loss."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.dag.messages import is_tool_result, message_text
from opctx.lab.metrics import (
    broken_pairs_per_step,
    common_prefix_length,
    identifiers,
    reference_losses,
    reference_losses_from,
    tool_pair_breaks,
    turn_metrics,
)
from opctx.lab.replay import replay
from opctx.lab.scenarios import generate_session


def test_identifiers_kinds():
    text = (
        "See src/app/config.py and `load_config` - request 9f2c4e7a1b3d failed with "
        "LedgerDriftError; job reconcile_batch_7f3a ran 1234567 rows. The Python code."
    )
    found = identifiers(text)
    for expected in ["src/app/config.py", "load_config", "9f2c4e7a1b3d", "LedgerDriftError",
                     "reconcile_batch_7f3a", "1234567"]:
        assert expected in found
    # plain capitalised words and short tokens are not identifiers
    assert "Python" not in found and "The" not in found and "See" not in found


def test_identifiers_ignore_urls_and_trailing_punctuation():
    found = identifiers("Open https://example.com/a/b.html, then edit lib/utils/io_helpers.py.")
    assert "lib/utils/io_helpers.py" in found
    assert not any("example.com" in f for f in found)


def _call(cid):
    return {"id": f"a_{cid}", "role": "assistant", "content": "", "tool_calls": [{"id": cid, "name": "f", "arguments": {}}]}


def _result(cid):
    return {"id": f"t_{cid}", "role": "tool", "content": "ok", "tool_call_id": cid}


def _anthropic_result(cid):
    return {"id": f"w_{cid}", "role": "user", "content": "", "extra": {"blocks": [{"type": "tool_result", "tool_use_id": cid, "content": "ok"}]}}


def test_tool_pair_breaks():
    user = {"id": "u", "role": "user", "content": "go"}
    assert tool_pair_breaks([user, _call("x"), _result("x")]) == []
    assert tool_pair_breaks([user, _call("x"), _anthropic_result("x")]) == []
    # the last message may still wait for its results
    assert tool_pair_breaks([user, _call("x")]) == []
    assert [b["kind"] for b in tool_pair_breaks([user, _result("x")])] == ["orphan_result"]
    assert [b["kind"] for b in tool_pair_breaks([_call("x"), user])] == ["missing_result"]


def _display(i):
    return {"id": f"s{i}", "role": "system", "content": "hook output", "display_only": True}


def test_tool_pair_breaks_counts_separation_not_only_missing_partners():
    user = {"id": "u", "role": "user", "content": "go"}
    # a user line between the call and its result: both partners exist, the pair is still broken
    breaks = tool_pair_breaks([_call("x"), user, _result("x")])
    assert breaks == [{"kind": "separated_result", "tool_call_id": "x", "index": 2}]
    # an older call's result after a newer call
    breaks = tool_pair_breaks([_call("x"), _call("y"), _result("y"), _result("x")])
    assert [b["kind"] for b in breaks] == ["separated_result"] and breaks[0]["tool_call_id"] == "x"
    # the results of one parallel call stay together
    parallel = {"id": "a", "role": "assistant", "content": "",
                "tool_calls": [{"id": "p", "name": "f", "arguments": {}}, {"id": "q", "name": "f", "arguments": {}}]}
    assert tool_pair_breaks([parallel, _result("p"), _result("q")]) == []
    # display-only lines are never sent: they separate nothing
    assert tool_pair_breaks([_call("x"), _display(1), _result("x"), _display(2)]) == []
    assert broken_pairs_per_step([[_call("x"), user, _result("x")], [_call("x"), _display(1), _result("x")]]) == [1, 0]


_events = st.lists(
    st.tuples(st.sampled_from(["call", "result", "user", "display"]), st.integers(0, 4)), max_size=25
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_events, min_size=1, max_size=6), st.booleans())
def test_incremental_pair_count_matches_direct_count(seqs, grow):
    builders = {"call": _call, "result": _result, "user": lambda i: {"id": f"u{i}", "role": "user", "content": "x"},
                "display": _display}
    requests = []
    prefix: list[dict] = []
    for events in seqs:
        msgs = [builders[k](f"c{i}") for k, i in events]
        # unique ids per message object, as a replay has
        msgs = [dict(m, id=f"{m['id']}_{len(prefix) + j}") for j, m in enumerate(msgs)]
        prefix = prefix + msgs if grow else msgs
        requests.append(list(prefix))
    assert broken_pairs_per_step(requests) == [len(tool_pair_breaks(r)) for r in requests]


def test_common_prefix_length():
    a = [{"id": "1", "role": "user", "content": "a"}, {"id": "2", "role": "assistant", "content": "b"}]
    b = [a[0], dict(a[1]), {"id": "3", "role": "user", "content": "c"}]
    assert common_prefix_length(a, b) == 2
    c = [a[0], dict(a[1], content="[masked]")]
    assert common_prefix_length(a, c) == 1
    assert common_prefix_length([], a) == 0


def _stream():
    return [
        {"id": "m0", "role": "user", "content": "fix the bug"},
        {"id": "m1", "role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "read", "arguments": {}}]},
        {"id": "m2", "role": "tool", "content": "error in src/pkg_a1b2c3/mod.py", "tool_call_id": "c1"},
        {"id": "m3", "role": "assistant", "content": "done"},
        {"id": "m4", "role": "user", "content": "what about src/pkg_a1b2c3/mod.py?"},
        {"id": "m5", "role": "assistant", "content": "looking"},
    ]


def test_reference_loss_none_masked_folded_and_kept_by_summary():
    stream = _stream()
    origin = {m["id"]: i for i, m in enumerate(stream)}.get

    def run(request_at_5):
        return reference_losses_from(stream, [(1, stream[:1]), (3, stream[:3]), (5, request_at_5)],
                                     lambda m: origin(m["id"]))

    # unchanged history: nothing lost
    assert run(stream[:5]) == []
    # masked source: lost, reason masked
    masked = [stream[0], stream[1], dict(stream[2], content="[masked]"), stream[3], stream[4]]
    losses = run(masked)
    assert [(x["identifier"], x["use_index"], x["reason"]) for x in losses] == [("src/pkg_a1b2c3/mod.py", 4, "masked")]
    # folded into a summary that does not mention it: lost, reason folded
    summary = {"id": "S", "role": "system", "content": "[Previous conversation summary]\nfixed a bug"}
    losses = run([summary, stream[4]])
    assert [(x["identifier"], x["reason"]) for x in losses] == [("src/pkg_a1b2c3/mod.py", "folded")]
    # a summary that keeps the identifier keeps the reference
    keeper = dict(summary, content="[Previous conversation summary]\nerror was in src/pkg_a1b2c3/mod.py")
    assert run([keeper, stream[4]]) == []


# -- over replays ------------------------------------------------------------------------


def _expected_masking_losses(scenario, m):
    """From the scenario's metadata alone: a first use loses its identifier when its only
    source, a tool result, is older than the last `m` tool results at the time of use."""
    expected = set()
    for p in scenario.planted:
        first = p.uses[0]
        if p.source_tool_ordinal < first["tool_results_before"] - m:
            expected.add((p.identifier, first["index"]))
    return expected


@pytest.mark.parametrize("seed", [11, 12])
def test_masking_m10_loses_exactly_the_planted_references_it_should(seed):
    scenario = generate_session(seed, n_turns=40)
    result = replay(scenario.messages, "observation-masking")
    losses = reference_losses(result)
    expected = _expected_masking_losses(scenario, 10)
    assert expected, "the scenario must plant references beyond the masking window"
    assert set(zip(losses["identifier"], losses["use_index"], strict=True)) == expected
    assert set(losses["reason"]) == {"masked"}
    # a wider window keeps more
    wide = reference_losses(replay(scenario.messages, "observation-masking", keep_last=40))
    assert set(zip(wide["identifier"], wide["use_index"], strict=True)) == _expected_masking_losses(scenario, 40)
    assert len(wide) < len(losses)


def test_none_loses_nothing_and_costs_its_own_baseline():
    scenario = generate_session(12, n_turns=15)
    result = replay(scenario.messages, "none")
    assert len(reference_losses(result)) == 0
    m = result.metrics()
    assert m["reference_losses"] == 0 and m["tokens_saved"] == 0
    assert m["cost"] == pytest.approx(m["cost_none"])
    assert m["prefix_invalidated_tokens"] == 0
    turns = turn_metrics(result)
    assert turns["input_tokens"].sum() == result.steps_df["tokens"].sum()


def test_folding_losses_are_real_absences():
    scenario = generate_session(13, n_turns=30)
    result = replay(scenario.messages, "default", context_window=30_000)
    losses = reference_losses(result)
    assert len(losses) > 0 and set(losses["reason"]) <= {"folded", "masked"}
    for row in losses.itertuples():
        ctx = result.context(row.step)
        visible = [m for m in ctx if (result.origin_of(m) is None or result.origin_of(m) < row.use_index)]
        assert not any(row.identifier in message_text(m) for m in visible)
    m = result.metrics()
    assert m["cost"] < m["cost_none"] and m["prefix_invalidations"] >= m["compactions"]


def test_estimator_error_against_recorded_usage():
    scenario = generate_session(14, n_turns=6)
    msgs = [dict(m) for m in scenario.messages]
    base = replay(msgs, "none")
    # pretend the provider counted 10% more than the estimate at every request
    for row in base.steps_df.itertuples():
        msgs[row.stream_index]["usage"] = {"input_tokens": int(row.tokens * 1.1), "output_tokens": 7,
                                           "cache_read_tokens": 0, "cache_write_tokens": 0}
    result = replay(msgs, "none", feed_usage=False)
    m = result.metrics()
    assert m["estimator_steps"] == len(result.steps_df)
    assert m["estimator_mean_rel_error"] == pytest.approx(-1 / 11, abs=0.01)
    assert (result.steps_df["output_tokens"] == 7).all()
    # fed back (the default with usage), the requests are the provider's counts: no estimator to score
    fed = replay(msgs, "none")
    assert fed.mode == "provider usage" and fed.metrics()["estimator_steps"] == 0
    assert math.isnan(fed.metrics()["estimator_mean_rel_error"])


def _losses_rebuilding_every_request(result):
    """Reference losses with the request view rebuilt from scratch for every use: the
    definition in the module docstring, written the slow, obvious way."""
    stream, texts = result.stream, result.stream_texts
    points = list(result.steps_df["stream_index"])
    first_seen: dict[str, list[int]] = {}
    out = []
    for j, msg in enumerate(stream):
        idents = identifiers(texts[j])
        if msg.get("role") in ("user", "assistant") and not is_tool_result(msg):
            k = next((k for k, p in enumerate(points) if p >= j), None)
            if k is not None:
                request = result.context(k)
                for ident in idents:
                    sources = first_seen.get(ident)
                    if not sources:
                        continue
                    present = [m for m in request if result.origin_of(m) in sources]
                    synthetic = [m for m in request if result.origin_of(m) is None]
                    if any(ident in message_text(m) for m in present + synthetic):
                        continue
                    out.append((ident, j, k, "masked" if present else "folded"))
        for ident in idents:
            first_seen.setdefault(ident, []).append(j)
    return out


@pytest.mark.parametrize(("preset", "window"), [("observation-masking", None), ("default", 24_000), ("claude-code", 40_000)])
def test_incremental_request_views_give_the_direct_losses(preset, window):
    scenario = generate_session(11, n_turns=30)
    result = replay(scenario.messages, preset, context_window=window)
    got = reference_losses(result)
    expected = _losses_rebuilding_every_request(result)
    assert expected, "the replay must lose something for this comparison to mean anything"
    assert list(zip(got["identifier"], got["use_index"], got["step"], got["reason"].astype(str), strict=True)) == expected


def test_every_metric_column_is_described_and_costs_say_their_unit():
    from opctx.lab.feasibility import FEASIBILITY_COLUMNS
    from opctx.lab.metrics import METRIC_COLUMNS
    from opctx.lab.prices import COST_NOTE
    from opctx.lab.replay import replay
    from opctx.lab.scenarios import generate_session

    row = replay(generate_session(5, n_turns=3).messages, "default").metrics()
    assert set(row) == set(METRIC_COLUMNS) | set(FEASIBILITY_COLUMNS)
    assert all(COST_NOTE in text for name, text in METRIC_COLUMNS.items() if "cost" in name)
