"""LLMSummaries: the cache (a second identical sweep makes no call), bounded concurrency,
retries and timeouts, failures recorded per summary, and the engine's structural fallback."""

from __future__ import annotations

import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest
from _llm_endpoint import fake_endpoint

from opctx.context.tokens import estimate_text_tokens
from opctx.dag.providers import ProviderError, ScriptedProvider
from opctx.lab.replay import replay
from opctx.lab.scenarios import generate_session
from opctx.lab.summaries import CallSettings, LLMSummaries, SummaryCache, default_cache_path
from opctx.lab.sweep import sweep

pytest.importorskip("openai")

FOLDED = [
    {"role": "user", "content": "Fix divide() in calc.py; do not touch the tests."},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "t1", "name": "Read", "arguments": {"file_path": "calc.py"}}]},
    {"role": "tool", "tool_call_id": "t1", "name": "Read", "content": "def divide(a, b): return a // b"},
]
FAST = CallSettings(retries=0, timeout=10.0)


def test_the_second_identical_request_is_answered_by_the_cache(tmp_path):
    path = tmp_path / "summaries.sqlite"
    with fake_endpoint() as ep:
        first = LLMSummaries(ep.url, "fake-model", cache=path, settings=FAST)
        a = first.summarise(FOLDED)
        again = LLMSummaries(ep.url, "fake-model", cache=path, settings=FAST).summarise(FOLDED)
        assert ep.requests == 1
    assert a.ok and not a.cached and again.ok and again.cached
    assert again.text == a.text and again.input_tokens == a.input_tokens > 0 and again.attempts == 0
    assert a.endpoint == ep.url and a.model == "fake-model" and a.prompt == "opctx" and a.latency_s > 0
    # what a request depends on changes the key: another prompt, model or parameter is another entry
    with fake_endpoint() as ep:
        LLMSummaries(ep.url, "fake-model", "openhands", cache=path, settings=FAST).summarise(FOLDED)
        LLMSummaries(ep.url, "other-model", cache=path, settings=FAST).summarise(FOLDED)
        LLMSummaries(ep.url, "fake-model", cache=path, settings=CallSettings(retries=0, max_tokens=99)).summarise(FOLDED)
        assert ep.requests == 3
    assert len(SummaryCache(path)) == 4
    assert {(e["model"], e["prompt"]) for e in SummaryCache(path).entries()} == {
        ("fake-model", "opctx"), ("fake-model", "openhands"), ("other-model", "opctx")}


def test_a_sweep_run_twice_makes_no_endpoint_call_the_second_time(tmp_path):
    specs = [generate_session(21, n_turns=25).messages]
    cache = tmp_path / "summaries.sqlite"
    grid = {"preset": ["default"], "context_window": [40_000], "aging": [False]}

    def run(ep) -> object:
        llm = LLMSummaries(ep.url, "fake-model", "claude-code", cache=cache, settings=FAST)
        return sweep(specs, {**grid, "summaries": [llm]}, progress=False, errors="raise"), llm

    with fake_endpoint("<summary>the user asked to fix the tests</summary>") as ep:
        df1, llm1 = run(ep)
        calls_first = ep.requests
        df2, llm2 = run(ep)
        assert ep.requests == calls_first  # nothing asked the second time
    assert calls_first > 0 and df1["compactions"].iloc[0] == calls_first
    assert llm1.usage()["endpoint_calls"] == calls_first and llm2.usage()["endpoint_calls"] == 0
    assert llm2.usage()["cached"] == calls_first
    assert df1["input_tokens_total"].tolist() == df2["input_tokens_total"].tolist()
    # the summariser is named by its label, and every row counts its calls and tokens: the
    # cached run costs what the first one measured (the strategy's cost, not this run's bill)
    assert df1["summaries"].tolist() == ["llm:claude-code:fake-model"] and "fake-model" in df1["config"].iloc[0]
    prompt_words = sum(len(str(m.get("content") or "").split()) for b in ep.bodies for m in b["messages"])
    for df in (df1, df2):
        assert df["summary_calls"].iloc[0] == calls_first
        assert df["summary_input_tokens"].iloc[0] == prompt_words > 0 and df["summary_output_tokens"].iloc[0] > 0


def test_replay_records_the_summarisers_tokens_on_each_compaction(tmp_path):
    from opctx.lab.costs import price_requests, requests_from_summaries
    from opctx.lab.prices import ModelPrice

    messages = generate_session(21, n_turns=25).messages
    cache = tmp_path / "summaries.sqlite"
    with fake_endpoint("<summary>fix calc.py, keep the tests</summary>") as ep:
        first = replay(messages, "default", context_window=40_000, aging=False,
                       summaries=LLMSummaries(ep.url, "fake-model", "claude-code", cache=cache, settings=FAST))
        bodies = list(ep.bodies)
        again = replay(messages, "default", context_window=40_000, aging=False,
                       summaries=LLMSummaries(ep.url, "fake-model", "claude-code", cache=cache, settings=FAST))
        assert ep.requests == len(bodies)  # the second replay was served by the cache
    assert first.summaries == "llm:claude-code:fake-model" and first.compactions
    for c, body in zip(first.compactions, bodies, strict=True):
        words = sum(len(str(m.get("content") or "").split()) for m in body["messages"])
        assert (c.summary_model, c.summary_calls, c.summary_input_tokens) == ("fake-model", 1, words)
        assert c.summary_output_tokens == 5 and not c.summary_cached and not c.fell_back_to_structural
    assert all(c.summary_cached for c in again.compactions)
    assert [c.summary_input_tokens for c in again.compactions] == [c.summary_input_tokens for c in first.compactions]
    df = first.compactions_df()
    assert df["summary_input_tokens"].sum() == first.metrics()["summary_input_tokens"] > 0
    # priced as the summariser's own requests, apart from the agent's
    requests = requests_from_summaries(first.summary_requests())
    assert [r.kind for r in requests] == ["summary"] * len(first.compactions)
    priced = price_requests(requests, ModelPrice(1.0, 2.0))
    assert priced.total("summary") == pytest.approx(sum(
        c.summary_input_tokens * 1e-6 + c.summary_output_tokens * 2e-6 for c in first.compactions))


def test_a_sweep_to_parquet_in_threads_names_the_summariser_and_counts_its_tokens(tmp_path):
    specs = [generate_session(21, n_turns=12).messages, generate_session(22, n_turns=12).messages]
    grid = {"preset": ["default"], "context_window": [40_000], "aging": [False]}
    with fake_endpoint() as ep, ThreadPoolExecutor(2) as pool:
        llm = LLMSummaries(ep.url, "fake-model", cache=tmp_path / "c.sqlite", settings=FAST)
        out = sweep(specs, {**grid, "summaries": ["structural", llm]}, executor=pool, progress=False,
                    out=tmp_path / "s.parquet", errors="raise")
        asked = ep.requests
    df = pd.read_parquet(out).sort_values(["session_index", "config_index"])
    assert df["summaries"].tolist() == ["structural", "llm:opctx:fake-model"] * 2
    llm_rows, structural = df[df["summaries"] != "structural"], df[df["summaries"] == "structural"]
    assert llm_rows["summary_calls"].sum() == asked > 0 and (llm_rows["summary_input_tokens"] > 0).all()
    assert (structural[["summary_calls", "summary_input_tokens"]] == 0).all().all()


def test_an_interrupted_llm_sweep_resumes_with_the_server_on_another_port(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    from opctx.lab import sweep as sweep_module

    specs = [generate_session(21, n_turns=12).messages, generate_session(22, n_turns=12).messages]
    out, cache, real, calls = tmp_path / "s.parquet", tmp_path / "c.sqlite", sweep_module.run_task, []

    def interrupted(session, configs, timings=False):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(session, configs, timings)

    def grid(ep):
        llm = LLMSummaries(ep.url, "fake-model", cache=cache, settings=FAST)
        return {"preset": ["default"], "context_window": [40_000], "aging": [False], "summaries": [llm]}

    monkeypatch.setattr(sweep_module, "run_task", interrupted)
    with fake_endpoint() as ep, pytest.raises(KeyboardInterrupt):
        sweep(specs, grid(ep), progress=False, configs_per_task=1, out=out, flush_rows=1)
    monkeypatch.setattr(sweep_module, "run_task", real)
    with fake_endpoint() as ep:  # a new server, a new port: the same sweep
        sweep(specs, grid(ep), progress=False, configs_per_task=1, out=out, flush_rows=1)
        assert ep.requests == 1  # only the second session's summary was asked
    assert len(pd.read_parquet(out)) == 2


def test_replay_uses_the_named_prompt_and_the_clients_post_processing():
    seen = []

    def provider(messages, model, system, tools):
        seen.append((system, messages[0]["content"]))
        return "<analysis>a</analysis>\n<summary>keep calc.py</summary>"

    llm = LLMSummaries(provider, "local", "claude-code", cache=False)
    session = generate_session(21, n_turns=25)
    r = replay(session.messages, "default", context_window=40_000, summaries=llm, aging=False)
    assert r.compactions and not any(c.fell_back_to_structural for c in r.compactions)
    assert all("Summary:\nkeep calc.py" in c.summary_text for c in r.compactions)
    system, user = seen[0]
    assert system == "You are a helpful AI assistant tasked with summarizing conversations."
    assert "Your task is to create a detailed summary" in user and "<conversation>" not in user


def test_a_failed_summary_falls_back_to_the_structural_one_and_says_so():
    with fake_endpoint(fail_first=10**6, fail_status=400) as ep:
        llm = LLMSummaries(ep.url, "m", cache=False, settings=FAST)
        r = replay(generate_session(21, n_turns=25).messages, "default", context_window=40_000, summaries=llm, aging=False)
    assert r.compactions and all(c.fell_back_to_structural for c in r.compactions)
    assert all("ProviderHTTPError" in (c.error or "") for c in r.compactions)
    # the failed call is counted, and cost nothing the endpoint reported
    assert all((c.summary_calls, c.summary_input_tokens, c.summary_output_tokens) == (1, 0, 0) for c in r.compactions)
    assert r.compactions_df()["error"].str.contains("ProviderHTTPError").all()
    assert llm.records and not any(rec.ok for rec in llm.records)
    assert all("400" in rec.error for rec in llm.records)
    with pytest.raises(ProviderError):
        llm([{"role": "user", "content": "x"}], "m", "sys", None)


def test_retries_then_success_and_failures_are_not_cached(tmp_path):
    cache = tmp_path / "c.sqlite"
    settings = CallSettings(retries=2, backoff=0.01, timeout=10.0)
    with fake_endpoint(fail_first=2) as ep:
        rec = LLMSummaries(ep.url, "m", cache=cache, settings=settings).summarise(FOLDED)
        assert ep.requests == 3
    assert rec.ok and rec.attempts == 3
    with fake_endpoint(fail_first=5) as ep:
        rec = LLMSummaries(ep.url, "m", "openhands", cache=cache, settings=settings).summarise(FOLDED)
        assert ep.requests == 3 and not rec.ok and rec.attempts == 3 and "500" in rec.error
    assert len(SummaryCache(cache)) == 1  # the failure was not stored: the next run asks again


def test_a_timeout_is_a_recorded_failure():
    with fake_endpoint(delay=2.0) as ep:
        rec = LLMSummaries(ep.url, "m", cache=False, settings=CallSettings(retries=0, timeout=0.3)).summarise(FOLDED)
    assert not rec.ok and rec.error.startswith("ProviderTimeoutError")


def test_summarise_many_keeps_to_its_concurrency_and_asks_each_request_once():
    batches = [FOLDED[:1] + [{"role": "user", "content": f"variant {i}"}] for i in range(6)] + [FOLDED] * 3
    with fake_endpoint(delay=0.2) as ep:
        llm = LLMSummaries(ep.url, "m", cache=False, settings=CallSettings(retries=0, concurrency=2))
        out = llm.summarise_many(batches)
        assert ep.requests == 7 and ep.max_in_flight == 2
    assert [r.ok for r in out] == [True] * 9 and out[-1] is out[-2]


def test_offline_summaries_answer_from_the_cache_only(tmp_path):
    cache = tmp_path / "c.sqlite"
    LLMSummaries(ScriptedProvider(["cached text"]), "m", cache=cache).summarise(FOLDED)
    offline = LLMSummaries.from_cache("m", cache=cache)
    assert offline.summarise(FOLDED).text == "cached text"
    miss = offline.summarise(FOLDED[:1])
    assert not miss.ok and miss.error.startswith("OfflineMiss")
    assert offline.usage()["endpoint_calls"] == 0
    with pytest.raises(ValueError, match="endpoint"):
        LLMSummaries(None, "m")


def test_usage_and_records_for_the_cost_model():
    llm = LLMSummaries(ScriptedProvider(["one", "two"]), "m", cache=False)
    llm.summarise(FOLDED)
    llm.summarise(FOLDED[:1])
    usage = llm.usage()
    assert usage["summaries"] == 2 and usage["failed"] == 0 and usage["input_tokens"] > 0
    df = llm.records_df()
    assert {"model", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "latency_s",
            "ok", "error", "cached", "estimated"} <= set(df.columns)
    assert df["estimated"].all()  # a bare str reply reports no usage: opctx's estimate


def test_a_small_window_leaves_out_the_oldest_messages():
    many = [{"role": "user", "content": f"message {i} " + "word " * 50} for i in range(40)]
    llm = LLMSummaries(ScriptedProvider(["s"]), "m", cache=False, settings=CallSettings(max_input_tokens=800))
    system, user = llm.request(many)
    assert "earlier message(s) left out to fit the summary call" in user
    assert "message 39" in user and "message 0 " not in user


def test_as_the_engines_summariser_a_small_window_cuts_the_oldest_lines():
    seen = []

    def provider(messages, model, system, tools):
        seen.append(messages[0]["content"])
        return "short"

    for prompt in ("opctx", "claude-code"):
        llm = LLMSummaries(provider, "m", prompt, cache=False, settings=CallSettings(max_input_tokens=1200))
        r = replay(generate_session(21, n_turns=25).messages, "default", context_window=40_000, summaries=llm, aging=False)
        assert r.compactions and not any(c.fell_back_to_structural for c in r.compactions)
    assert seen and all("left out to fit the summary call" in text for text in seen)
    assert max(estimate_text_tokens(t) for t in seen) <= 1200


def test_the_cache_is_shared_safely_between_threads(tmp_path):
    cache = SummaryCache(tmp_path / "c.sqlite")
    llm = LLMSummaries(lambda *a: "same", "m", cache=cache)
    threads = [threading.Thread(target=llm.summarise, args=(FOLDED,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 1 and all(r.ok for r in llm.records)


def test_default_cache_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OPCTX_SUMMARY_CACHE", str(tmp_path / "x.sqlite"))
    assert default_cache_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("OPCTX_SUMMARY_CACHE")
    monkeypatch.setenv("OPCTX_CACHE_DIR", str(tmp_path))
    assert default_cache_path() == tmp_path / "summaries.sqlite"


def test_summaries_travel_to_worker_processes(tmp_path):
    with fake_endpoint() as ep:
        llm = LLMSummaries(ep.url, "m", cache=tmp_path / "c.sqlite", settings=FAST)
        llm.summarise(FOLDED)
        copy = pickle.loads(pickle.dumps(llm))
        assert copy.summarise(FOLDED).cached and ep.requests == 1
