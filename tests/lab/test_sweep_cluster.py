"""Sweeps through a real dask cluster: a ``dask scheduler`` and two ``dask worker`` processes.

The cluster is what a researcher with machines of their own starts (the CLI of the
installed dask, on 127.0.0.1, ports chosen by the system), and the sweep reaches it the
three ways ``opctx.lab._sweep_engine`` documents: ``scheduler=``, the client this
process runs, ``$OPCTX_DASK_SCHEDULER``. Every frame must equal the serial one, and the
tasks must have run on the workers (the scheduler's task stream names them).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from _sweep_frames import none_for_missing_errors, sorted_like

from opctx.lab._sweep_engine import SCHEDULER_ENV
from opctx.lab.history import SessionSpec
from opctx.lab.scenarios import ScenarioSpec, build_scenario_sessions
from opctx.lab.sweep import sweep

distributed = pytest.importorskip("distributed")

GRID = {"preset": ["none", "default", "observation-masking"], "context_window": [30_000]}
ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180  # two worker processes importing dask on a busy machine


def _start(args: list[str], folder: Path, name: str) -> subprocess.Popen:
    """One process of the dask CLI, in its own session (so it and its children stop together)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop(SCHEDULER_ENV, None)
    log = open(folder / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    try:
        return subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=folder, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()


def _stop(processes: list[subprocess.Popen]) -> None:
    """Stop the processes this module started (their process groups), whatever state they are in."""
    for proc in processes:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 15
    for proc in processes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _scheduler_address(folder: Path, scheduler: subprocess.Popen) -> str:
    path = folder / "scheduler.json"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if scheduler.poll() is not None:
            raise RuntimeError(f"dask scheduler exited: {(folder / 'scheduler.log').read_text()[-2000:]}")
        try:
            return json.loads(path.read_text())["address"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.2)
    raise RuntimeError("dask scheduler did not write its address in time")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The address of a scheduler with two single-threaded workers, all on 127.0.0.1."""
    folder = tmp_path_factory.mktemp("dask")
    # should this process die without its clean-up (SIGKILL), the scheduler stops after a
    # quarter of an hour without tasks and the workers a minute after it
    processes = [_start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--idle-timeout", "900s",
                         "--scheduler-file", str(folder / "scheduler.json")], folder, "scheduler")]
    try:
        address = _scheduler_address(folder, processes[0])
        for i in range(2):
            processes.append(_start(["worker", address, "--host", "127.0.0.1", "--nthreads", "1",
                                     "--nworkers", "1", "--no-nanny", "--no-dashboard", "--memory-limit", "0", "--death-timeout", "60s",
                                     "--local-directory", str(folder / f"worker-{i}")], folder, f"worker-{i}"))
        with distributed.Client(address, set_as_default=False, timeout=START_TIMEOUT_S) as observer:
            observer.wait_for_workers(2, timeout=START_TIMEOUT_S)
            observer.get_task_stream()  # the scheduler records tasks from now on
            yield address, observer
    finally:
        _stop(processes)


def _ran_on_workers(observer, since: float) -> int:
    """Sweep tasks the cluster's workers ran since ``since`` (time.time())."""
    return sum(1 for t in observer.get_task_stream(start=since) if str(t["key"]).startswith("run_task"))


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep") / "sweep.db"
    ids = build_scenario_sessions(path, n=2, n_turns=10)
    return [SessionSpec(str(path), sid) for sid in ids] + [ScenarioSpec(7, n_turns=6)]


@pytest.fixture(scope="module")
def serial(specs):
    return sweep(specs, GRID, executor="serial", progress=False, configs_per_task=1)


def test_a_sweep_by_scheduler_address_runs_on_the_workers_and_gives_the_serial_frame(cluster, specs, serial):
    address, observer = cluster
    since = time.time()
    df = sweep(specs, GRID, scheduler=address, min_parallel_s=0, progress=False, configs_per_task=1)
    pd.testing.assert_frame_equal(serial, df)
    assert _ran_on_workers(observer, since) == len(serial)  # every task went out (none is probed here)


def test_the_running_client_is_reused_and_left_open(cluster, specs, serial):
    address, observer = cluster
    with distributed.Client(address) as client:  # the default client, as in a notebook
        since = time.time()
        df = sweep(specs, GRID, min_parallel_s=0, progress=False, configs_per_task=1)
        assert client.status == "running"
    pd.testing.assert_frame_equal(serial, df)
    assert _ran_on_workers(observer, since) == len(serial)


def test_a_client_given_as_the_executor_runs_every_task(cluster, specs, serial):
    address, observer = cluster
    since = time.time()
    df = sweep(specs, GRID, executor=observer, progress=False, configs_per_task=2)
    pd.testing.assert_frame_equal(serial, df)
    assert _ran_on_workers(observer, since) == len(specs) * 2  # tasks of up to two configurations
    assert observer.status == "running"


def test_rows_stream_to_parquet_through_the_cluster_named_by_the_environment(cluster, specs, serial, tmp_path,
                                                                                monkeypatch):
    address, observer = cluster
    monkeypatch.setenv(SCHEDULER_ENV, address)
    out = tmp_path / "rows.parquet"
    since = time.time()
    path = sweep(specs, GRID, min_parallel_s=0, progress=False, configs_per_task=1, out=out, flush_rows=2)
    assert Path(path) == out and not (tmp_path / "rows.parquet.parts").exists()
    assert _ran_on_workers(observer, since) == len(serial)
    pd.testing.assert_frame_equal(sorted_like(pd.read_parquet(out), serial), none_for_missing_errors(serial),
                                  check_dtype=False, check_categorical=False)


def test_small_work_stays_in_this_process_with_a_cluster_at_hand(cluster, specs, serial):
    address, observer = cluster
    since = time.time()
    df = sweep(specs, GRID, scheduler=address, min_parallel_s=3600, progress=False, configs_per_task=1)
    pd.testing.assert_frame_equal(serial, df)
    assert _ran_on_workers(observer, since) == 0


def test_an_unreachable_scheduler_is_never_contacted_for_small_work_and_named_when_needed(specs, serial,
                                                                                        monkeypatch):
    import dask

    monkeypatch.setenv(SCHEDULER_ENV, "tcp://127.0.0.1:9")  # nothing listens there
    df = sweep(specs, GRID, progress=False, configs_per_task=1)  # far under the default threshold
    pd.testing.assert_frame_equal(serial, df)
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:9 \(from \$OPCTX_DASK_SCHEDULER\)"):
            sweep(specs, GRID, min_parallel_s=0, progress=False, configs_per_task=1)
