"""Sweeps: one row per (session, configuration), identical whatever the executor."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from _sweep_frames import none_for_missing_errors, sorted_like

from opctx.lab.history import SessionSpec
from opctx.lab.scenarios import build_scenario_sessions, generate_session
from opctx.lab.sweep import expand_grid, sweep

GRID = {"preset": ["none", "default", "observation-masking"], "context_window": [30_000]}


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "sweep.db"
    ids = build_scenario_sessions(path, n=2, n_turns=10)
    return [SessionSpec(str(path), sid) for sid in ids]


def test_expand_grid():
    configs = expand_grid({"preset": ["a", "b"], "x": [1, 2, 3]})
    assert len(configs) == 6 and configs[0] == {"preset": "a", "x": 1} and configs[-1] == {"preset": "b", "x": 3}
    assert expand_grid([{"preset": "none"}]) == [{"preset": "none"}]
    with pytest.raises(TypeError):
        expand_grid({"preset": "none"})


@pytest.fixture(scope="module")
def serial(specs):
    return sweep(specs, GRID, progress=False, configs_per_task=2)


def test_serial_sweep_rows_and_columns(serial):
    df = serial
    assert len(df) == 2 * 3
    assert list(df["session_index"]) == [0] * 3 + [1] * 3
    assert list(df["config_index"]) == list(range(3)) * 2
    assert df["error"].isna().all(), df["error"].dropna().tolist()
    none_rows = df[df["preset"] == "none"]
    assert (none_rows["tokens_saved"] == 0).all() and (none_rows["compactions"] == 0).all()
    small_default = df[(df["preset"] == "default") & (df["param_context_window"] == 30_000)]
    assert (small_default["tokens_saved"] > 0).all()  # aging and/or compaction
    assert (df["broken_pairs_introduced"] == 0).all()


def test_dask_local_cluster_gives_the_identical_frame(specs, serial):
    distributed = pytest.importorskip("distributed")
    # worker processes, as a user who outgrows one machine would run them
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            parallel = sweep(specs, GRID, executor=client.get_executor(), progress=False, configs_per_task=2)
    pd.testing.assert_frame_equal(serial, parallel)


def test_thread_pool_and_message_lists(specs):
    sessions = [generate_session(3, n_turns=4).messages, generate_session(4, n_turns=3).messages]
    grid = [{"preset": "none"}, {"preset": "hermes", "label": "hermes-like"}]
    serial = sweep(sessions, grid, progress=False)
    with ThreadPoolExecutor(2) as pool:
        threaded = sweep(sessions, grid, executor=pool, progress=False, configs_per_task=1)
    pd.testing.assert_frame_equal(serial, threaded)
    assert list(serial["config"].astype(str)) == ["none", "hermes-like"] * 2
    assert serial.loc[0, "session"] == "messages-0"


def test_errors_are_recorded_or_raised(specs):
    grid = [{"preset": "none"}, {"preset": "no-such-preset"}]
    df = sweep(specs[:1], grid, progress=False)
    assert df.loc[0, "error"] is None or pd.isna(df.loc[0, "error"])
    assert "unknown preset" in df.loc[1, "error"]
    with pytest.raises(RuntimeError, match="no-such-preset"):
        sweep(specs[:1], grid, progress=False, errors="raise")
    with pytest.raises(ValueError, match="no configurations"):
        sweep(specs, [], progress=False)


def test_process_pool_matches_serial_when_summaries_chain(caplog):
    # long enough for chained structural summaries that name earlier copies by id: the
    # figures depend on those ids, which the replay mints deterministically in every process
    import logging
    from concurrent.futures import ProcessPoolExecutor

    sessions = [generate_session(7, n_turns=50).messages]
    grid = [{"preset": "default", "context_window": 32_000}, {"preset": "hermes", "context_window": 32_000}]
    with caplog.at_level(logging.WARNING, logger="opctx"):
        serial = sweep(sessions, grid, progress=False)
    records = list(caplog.records)
    with ProcessPoolExecutor(2) as pool:
        parallel = sweep(sessions, grid, executor=pool, progress=False, configs_per_task=1)
    pd.testing.assert_frame_equal(serial, parallel)
    assert serial["compactions"].min() > 0
    # the engine's anti-thrash notes: counted per row, one warning for the whole sweep
    hermes = serial[serial["preset"] == "hermes"].iloc[0]
    assert hermes["auto_compaction_disabled"] > 0 and hermes["compactions_failed"] > 0
    sweep_warnings = [r for r in records if r.name == "opctx.lab.sweep"]
    assert len(sweep_warnings) == 1 and "hermes(context_window=32000) (1)" in sweep_warnings[0].getMessage()
    assert not [r for r in records if r.name in ("opctx.context.engine", "opctx.lab.replay")]


# -- rows streamed to Parquet ------------------------------------------------------------------


@pytest.mark.parametrize("executor_kind", ["serial", "threads", "processes"])
def test_rows_streamed_to_parquet_equal_the_frame(specs, serial, tmp_path, executor_kind):
    pytest.importorskip("pyarrow")
    from concurrent.futures import ProcessPoolExecutor

    out = tmp_path / "rows.parquet"
    if executor_kind == "serial":
        path = sweep(specs, GRID, progress=False, configs_per_task=2, out=out, flush_rows=2)
    else:
        pool_type = ThreadPoolExecutor if executor_kind == "threads" else ProcessPoolExecutor
        with pool_type(2) as pool:
            path = sweep(specs, GRID, executor=pool, progress=False, configs_per_task=1, out=out, flush_rows=4)
    assert path == out
    back = pd.read_parquet(out)
    assert len(back) == len(serial) and set(back.columns) == set(serial.columns)
    pd.testing.assert_frame_equal(sorted_like(back, serial), none_for_missing_errors(serial),
                                  check_dtype=False, check_categorical=False)


def test_streamed_rows_with_failures_first(specs, tmp_path):
    pytest.importorskip("pyarrow")
    grid = [{"preset": "no-such-preset"}, {"preset": "none", "context_window": 30_000}]
    frame = sweep(specs, grid, progress=False, configs_per_task=1)
    out = sweep(specs, grid, progress=False, configs_per_task=1, out=tmp_path / "r.parquet", flush_rows=1)
    back = pd.read_parquet(out)
    # the failing first task did not decide the schema: the metrics are all there
    assert {"tokens_saved", "compactions", "error"} <= set(back.columns)
    pd.testing.assert_frame_equal(sorted_like(back, frame), none_for_missing_errors(frame),
                                  check_dtype=False, check_categorical=False)
    with pytest.raises(RuntimeError, match="no-such-preset"):
        sweep(specs, grid, progress=False, out=tmp_path / "raise.parquet", errors="raise")
    # every replay failed: a valid file of the identifying columns and the errors
    only_bad = sweep(specs, grid[:1], progress=False, out=tmp_path / "bad.parquet")
    bad = pd.read_parquet(only_bad)
    assert len(bad) == 2 and bad["error"].str.contains("unknown preset").all()


def test_scenario_specs_are_generated_on_the_worker():
    from concurrent.futures import ProcessPoolExecutor

    from opctx.lab.scenarios import ScenarioSpec

    grid = [{"preset": "none"}, {"preset": "observation-masking"}]
    by_messages = sweep([generate_session(5, n_turns=4).messages], grid, progress=False)
    with ProcessPoolExecutor(1) as pool:
        by_spec = sweep([ScenarioSpec(5, n_turns=4)], grid, executor=pool, progress=False)
    assert list(by_spec["session"].astype(str)) == ["scenario-0005"] * 2
    metrics = [c for c in by_messages.columns if c != "session"]
    pd.testing.assert_frame_equal(by_spec[metrics], by_messages[metrics])


def test_finished_futures_are_released_as_rows_are_read():
    # a dask worker keeps a task's result while any future names it: the sweep must not
    # hold every future until the end of a 10,000-session run
    import gc
    import weakref
    from concurrent.futures import Future

    from opctx.lab import _sweep_engine
    from opctx.lab.sweep import run_task

    refs: list[weakref.ref] = []

    class Immediate:
        """An executor whose futures are finished when submitted."""

        def submit(self, fn, *args):
            future = Future()
            future.set_result(fn(*args))
            refs.append(weakref.ref(future))
            return future

    sessions = [generate_session(seed, n_turns=1).messages for seed in range(6)]
    tasks = [(si, [(0, {"preset": "none"})]) for si in range(len(sessions))]
    rows = _sweep_engine.finished_tasks(lambda task: run_task(sessions[task[0]], task[1]),
                                        lambda task: (run_task, sessions[task[0]], task[1]),
                                        tasks, Immediate(), None, None)
    for done, _ in enumerate(rows, start=1):
        gc.collect()
        alive = sum(ref() is not None for ref in refs)
        assert alive <= len(tasks) - done + 1, (done, alive)


def test_grid_by_dotted_policy_names_and_the_policy_column(specs, tmp_path):
    import json

    from opctx.context.policy import CompactionPolicy
    from opctx.lab.presets import PRESETS

    grid = {"preset": ["default"], "context_window": [30_000], "cut.keep_ratio": [0.05, 0.2]}
    df = sweep(specs[:1], grid, progress=False)
    assert df["error"].isna().all(), df["error"].dropna().tolist()
    assert list(df["cut.keep_ratio"]) == [0.05, 0.2]
    policies = [CompactionPolicy.from_dict(json.loads(p)) for p in df["policy"]]
    assert [p.cut.keep_ratio for p in policies] == [0.05, 0.2]
    assert policies[0].diff(policies[1]) == [("cut.keep_ratio", 0.05, 0.2)]
    assert policies[0].budget.context_window == 30_000
    # the older flat name is the same field, row for row
    flat = sweep(specs[:1], {"preset": ["default"], "context_window": [30_000], "keep_ratio": [0.05, 0.2]},
                 progress=False)
    assert list(flat["policy"]) == list(df["policy"])
    assert flat["tokens_saved"].tolist() == df["tokens_saved"].tolist()
    # a policy as the preset, and the rows streamed to Parquet carry the policy too
    custom = PRESETS["hermes"].policy.replace(**{"cut.protect_last_n": 4})
    out = sweep(specs[:1], [{"preset": custom, "context_window": 30_000}], progress=False,
                out=tmp_path / "rows.parquet")
    back = pd.read_parquet(out)
    assert back["preset"].iloc[0].startswith("policy-")
    assert CompactionPolicy.from_dict(json.loads(back["policy"].iloc[0])).cut.protect_last_n == 4


# -- sweep(out=...) interrupted: nothing that looks complete, and a resume loses nothing --------

ROOT = Path(__file__).resolve().parents[2]

KILLED_SWEEP = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from opctx.lab import sweep as sweep_module
from opctx.lab.history import SessionSpec

real = sweep_module.run_task
calls = []

def slow(*args, **kwargs):  # two tasks run, then the third waits to be interrupted
    calls.append(1)
    if len(calls) == 3:
        print("two done", flush=True)
        time.sleep(600)
    return real(*args, **kwargs)

sweep_module.run_task = slow
db, out, ids = sys.argv[2], sys.argv[3], sys.argv[4:]
grid = {"preset": ["none", "default", "observation-masking"], "context_window": [30_000]}
sweep_module.sweep([SessionSpec(db, sid) for sid in ids], grid, progress=False, configs_per_task=1,
                   out=out, flush_rows=1)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_a_killed_sweep_resumes_from_its_last_complete_batch(specs, serial, tmp_path, how, monkeypatch):
    """SIGKILL (no footer could be written) or SIGINT in the middle of ``sweep(out=...)``:
    ``out`` does not exist (it was an unreadable file, or a valid one holding a fraction
    of the rows with nothing saying so); the same call again runs only what is missing
    and gives every row exactly once."""
    pytest.importorskip("pyarrow")
    import signal
    import subprocess
    import sys

    from opctx.lab import sweep as sweep_module

    out = tmp_path / "rows.parquet"
    parts = tmp_path / "rows.parquet.parts"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SWEEP, str(ROOT), specs[0].db_path, str(out),
                             *(s.session_id for s in specs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "two done", proc.stderr.read()
        proc.send_signal(getattr(signal, how))
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not out.exists()
    done_before = len(pd.concat([pd.read_parquet(p) for p in parts.glob("part-*.parquet")]))
    assert done_before == 2
    ran: list[int] = []
    real = sweep_module.run_task

    def counting(session, configs, timings=False):
        ran.extend(ci for ci, _ in configs)
        return real(session, configs, timings)

    monkeypatch.setattr(sweep_module, "run_task", counting)
    path = sweep(specs, GRID, progress=False, configs_per_task=1, out=out, flush_rows=1)
    assert path == out and not parts.exists()
    assert len(ran) == len(serial) - done_before  # only what was missing ran
    back = pd.read_parquet(out)
    assert not back.duplicated(["session_index", "config_index"]).any()
    pd.testing.assert_frame_equal(sorted_like(back, serial), none_for_missing_errors(serial),
                                  check_dtype=False, check_categorical=False)


def test_an_interrupted_sweep_keeps_its_finished_rows_and_resumes(specs, serial, tmp_path, monkeypatch):
    """The same in one process: Ctrl-C at the third task, then the same call again."""
    pytest.importorskip("pyarrow")
    from opctx.lab import sweep as sweep_module

    out = tmp_path / "rows.parquet"
    real, calls = sweep_module.run_task, []

    def interrupted(session, configs, timings=False):
        calls.append(len(configs))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(session, configs, timings)

    monkeypatch.setattr(sweep_module, "run_task", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sweep(specs, GRID, progress=False, configs_per_task=1, out=out, flush_rows=100)
    assert not out.exists()
    kept = pd.concat([pd.read_parquet(p) for p in (tmp_path / "rows.parquet.parts").glob("part-*.parquet")])
    assert len(kept) == 2  # the rows held in memory were saved on the way out
    calls.clear()
    monkeypatch.setattr(sweep_module, "run_task", lambda *a: (calls.append(1), real(*a))[1])
    sweep(specs, GRID, progress=False, configs_per_task=1, out=out, flush_rows=100)
    assert len(calls) == len(serial) - 2
    back = pd.read_parquet(out)
    pd.testing.assert_frame_equal(sorted_like(back, serial), none_for_missing_errors(serial),
                                  check_dtype=False, check_categorical=False)


def test_parts_of_another_sweep_or_a_directory_as_out_are_refused(specs, tmp_path):
    pytest.importorskip("pyarrow")
    from opctx.lab._outputs import OutputError

    out = tmp_path / "rows.parquet"
    (tmp_path / "rows.parquet.parts").mkdir()
    (tmp_path / "rows.parquet.parts" / "manifest.json").write_text('{"sweep": "another one"}')
    with pytest.raises(OutputError, match="parts of a different sweep"):
        sweep(specs[:1], GRID, progress=False, out=out)
    (tmp_path / "dir.parquet").mkdir()
    with pytest.raises(OutputError, match="is a directory"):
        sweep(specs[:1], GRID, progress=False, out=tmp_path / "dir.parquet")


def test_sweep_warns_once_for_all_unpriced_sessions():
    import warnings

    from opctx.lab.costs import UnpricedModelWarning

    a = generate_session(21, n_turns=4).messages
    b = generate_session(22, n_turns=4).messages
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = sweep([a, b], {"preset": ["none", "default"], "model": ["no-such-model-x"]}, progress=False)
    unpriced = [w for w in caught if issubclass(w.category, UnpricedModelWarning)]
    assert len(unpriced) == 1
    assert "messages-0" in str(unpriced[0].message) and "messages-1" in str(unpriced[0].message)
    assert df["cost"].isna().all() and df["price_source"].str.contains("no price").all()


def test_with_a_cluster_found_one_task_runs_here_then_the_rest_go_out_or_all_stay(specs, serial, monkeypatch):
    """The serial-first rule (``opctx.lab._sweep_engine``) with a stand-in for a running client."""
    from opctx.lab import _sweep_engine

    class Client:
        def __init__(self):
            self.pool = ThreadPoolExecutor(2)
            self.submitted = 0

        def get_executor(self):
            client = self

            class Counting:
                def submit(self, fn, *args):
                    client.submitted += 1
                    return client.pool.submit(fn, *args)

            return Counting()

    client = Client()
    monkeypatch.setattr(_sweep_engine, "running_client", lambda: client)
    try:
        # any estimate is above a nanosecond: after the first task, every other one goes out
        df = sweep(specs, GRID, progress=False, configs_per_task=1, min_parallel_s=1e-9)
        pd.testing.assert_frame_equal(serial, df)
        assert client.submitted == len(serial) - 1
        client.submitted = 0
        # no estimate reaches an hour: everything stays here, the client is never asked
        pd.testing.assert_frame_equal(serial, sweep(specs, GRID, progress=False, configs_per_task=1,
                                                    min_parallel_s=3600))
        assert client.submitted == 0
        # "serial" ignores the client whatever the work
        sweep(specs, GRID, executor="serial", progress=False, configs_per_task=1, min_parallel_s=0)
        assert client.submitted == 0
        with pytest.raises(ValueError, match="executor must be"):
            sweep(specs, GRID, executor="dask", progress=False)
    finally:
        client.pool.shutdown()


# -- the columns: one table, the one of docs/lab.md --------------------------------------------


def test_a_sweeps_columns_are_the_documented_table_in_its_order():
    from opctx.lab.prices import COST_NOTE
    from opctx.lab.scenarios import ScenarioSpec
    from opctx.lab.sweep import SWEEP_COLUMNS, columns_table

    grid = {"preset": ["default"], "context_window": [16_000], "cut.keep_ratio": [0.2]}
    frame = sweep([ScenarioSpec(5, n_turns=4)], grid, progress=False, timings=True)
    documented = [c for c in SWEEP_COLUMNS if c not in ("param_model", "<grid key>")]
    documented.insert(documented.index("steps"), "cut.keep_ratio")
    assert list(frame.columns) == documented
    # every cost column says its unit: USD at list prices per million tokens, map and date
    costs = [name for name in SWEEP_COLUMNS if "cost" in name]
    assert costs and all(COST_NOTE in SWEEP_COLUMNS[name] for name in costs)
    assert "per million tokens" in COST_NOTE and "copied 20" in COST_NOTE
    docs = (Path(__file__).resolve().parents[2] / "docs" / "lab.md").read_text(encoding="utf-8")
    assert columns_table() in docs, "docs/lab.md's table of a sweep's columns is out of date"
    assert docs.count(COST_NOTE) >= 2  # the table and the Costs section
