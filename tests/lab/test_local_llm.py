"""The embedded real model (the llm-local extra): SmolLM2-135M-Instruct through llama.cpp's
OpenAI-compatible server on 127.0.0.1, the whole path of a real summary, cache included.

Skipped with the reason where the extra is not installed; under CI it must run (a CI
without it fails here instead of skipping).
"""

from __future__ import annotations

import os

import pytest

from opctx.lab.history import RecordedCompaction, RecordedHistory
from opctx.lab.local_llm import MODEL_LABEL, LocalModelServer, local_model_status, local_summaries
from opctx.lab.probes import evaluate
from opctx.lab.replay import replay
from opctx.lab.scenarios import generate_session
from opctx.lab.summaries import CallSettings

# small answers: the model proves the path, its summaries are not a result (keeps the test short)
SETTINGS = CallSettings(max_tokens=32, max_input_tokens=1500, timeout=600.0, retries=0, concurrency=1)

FOLDED = [
    {"id": "u1", "role": "user", "content": "Fix divide() in calc/ops.py: 7 / 2 returns 3. Never change the tests."},
    {"id": "a1", "role": "assistant", "content": "", "tool_calls": [
        {"id": "t1", "name": "Edit", "arguments": {"file_path": "calc/ops.py", "old_string": "a // b", "new_string": "a / b"}}]},
    {"id": "r1", "role": "tool", "tool_call_id": "t1", "name": "Edit", "content": "The file calc/ops.py has been updated."},
    {"id": "a2", "role": "assistant", "content": "divide() now uses true division."},
]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def server():
    ok, reason = local_model_status()
    if not ok:
        if _in_ci():
            pytest.fail(f"CI runs the real model, but {reason}")
        pytest.skip(reason)
    with LocalModelServer(n_ctx=2048) as srv:
        yield srv


@pytest.mark.slow
def test_a_real_model_summarises_through_the_http_path_and_the_cache(server, tmp_path):
    llm = local_summaries(server, "opctx", cache=tmp_path / "summaries.sqlite", settings=SETTINGS)
    record = llm.summarise(FOLDED)
    assert record.ok, record.error
    assert record.text.strip() and record.model == MODEL_LABEL and record.endpoint == server.url
    assert record.input_tokens > 0 and record.output_tokens > 0 and not record.estimated  # the server counted
    assert llm.usage()["endpoint_calls"] == 1
    again = local_summaries(server, "opctx", cache=tmp_path / "summaries.sqlite", settings=SETTINGS)
    second = again.summarise(FOLDED)
    assert second.cached and second.text == record.text and again.usage()["endpoint_calls"] == 0


@pytest.mark.slow
def test_probe_table_with_the_real_models_summaries(server, tmp_path):
    history = RecordedHistory(
        FOLDED + [{"id": "a3", "role": "assistant", "content": "Anything else?"}],
        [RecordedCompaction(stream_index=4, node_id="S", summary_text="Fixed calc/ops.py.")],
        session_id="local", model="claude-sonnet-4-5")
    llm = local_summaries(server, "openhands", cache=tmp_path / "summaries.sqlite", settings=SETTINGS)
    ev = evaluate([history], ["recorded", "keep-all"], summaries=llm)
    rows = ev.table[ev.table.strategy == "llm"]
    assert len(rows) == 4 and not rows["fell_back"].any()
    assert rows["summary"].iloc[0] == f"llm:openhands:{MODEL_LABEL}" and rows["summary_input_tokens"].iloc[0] > 0
    assert ev.keep_all_ok


@pytest.mark.slow
def test_a_replay_compacts_with_the_real_models_summaries(server, tmp_path):
    """The engine's summariser is the real model: its tokens on each compaction, the cache after."""
    messages = generate_session(21, n_turns=12).messages
    cache = tmp_path / "summaries.sqlite"
    # no engine timeout: a loaded machine must not turn the real path into the structural fallback
    kw = {"context_window": 40_000, "aging": False, "summary.timeout": None}
    first = replay(messages, "default", summaries=local_summaries(server, cache=cache, settings=SETTINGS), **kw)
    assert first.summaries == f"llm:opctx:{MODEL_LABEL}" and first.compactions
    for c in first.compactions:
        assert not c.fell_back_to_structural, c.error
        assert c.summary_model == MODEL_LABEL and c.summary_calls == 1 and not c.summary_tokens_estimated
        assert 0 < c.summary_input_tokens <= 2048 and 0 < c.summary_output_tokens <= SETTINGS.max_tokens
    again_llm = local_summaries(server, cache=cache, settings=SETTINGS)
    again = replay(messages, "default", summaries=again_llm, **kw)
    assert again_llm.usage()["endpoint_calls"] == 0 and all(c.summary_cached for c in again.compactions)
    assert [c.summary_text for c in again.compactions] == [c.summary_text for c in first.compactions]


@pytest.mark.slow
def test_the_model_also_runs_in_process(server):
    from opctx.lab.local_llm import in_process_provider

    call = in_process_provider(n_ctx=512, max_tokens=8)
    reply = call([{"role": "user", "content": "Say hello."}], MODEL_LABEL, None, None)
    assert reply.text.strip() and reply.usage.input_tokens > 0 and reply.model == MODEL_LABEL
