"""Where a sweep's tasks run: this process, an executor the caller gives, or a dask cluster.

``sweep(..., executor=None)`` looks for a cluster, in this order:

1. ``scheduler=`` - the address of a running ``dask scheduler`` (``"tcp://host:8786"``);
2. the ``dask.distributed`` client this process already runs (``Client.current()``: the
   one a notebook made with ``Client(...)``, or a ``LocalCluster``'s) - reused, not closed;
3. the address in ``$OPCTX_DASK_SCHEDULER``.

Found none, the sweep runs serially in this process, as it always has. Found one, it still
runs serially while that is the faster choice: handing tasks to workers costs a fixed
price (connecting, shipping each task, and on fresh workers importing the replay code and
building each history once), which a small sweep never earns back. The rule: tasks run in
this process one after the other while the time the remaining tasks would take here,
estimated as the mean time of the tasks run so far times the number left, stays under
``min_parallel_s`` (``MIN_PARALLEL_SECONDS`` unless given); the first time the estimate
reaches it, every remaining task goes to the cluster. So a sweep that would take under
that long serially never touches the cluster (it does not even connect), and a large one
spends at most about one task here before the workers take over. The estimate is
re-made after every task, so a sweep whose later sessions are longer switches when they
come. Rows are the same either way: every replay is a pure function of its inputs and
the sweep sorts them.

An ``executor`` given explicitly (``concurrent.futures`` pool, dask ``Client`` or its
``get_executor()``) runs every task: the caller chose it. ``executor="serial"`` runs
everything here even when a client is running.

Tasks are handed out through a window of ``IN_FLIGHT_PER_SLOT`` tasks per worker thread
(at least ``MIN_IN_FLIGHT``), topped up as tasks finish, so a sweep of 100K sessions
does not put 100K tasks (and their results) on the scheduler at once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Any

__all__ = [
    "SCHEDULER_ENV",
    "MIN_PARALLEL_SECONDS",
    "IN_FLIGHT_PER_SLOT",
    "MIN_IN_FLIGHT",
    "parallel_pays",
    "finished_tasks",
    "running_client",
]

SCHEDULER_ENV = "OPCTX_DASK_SCHEDULER"

# The fixed price of a cluster, measured with ``benchmarks/sweep_scale.py --overhead`` (a
# 2-worker LocalCluster on a shared 2-core machine, load average 10, medians of 3): 2.6 s on
# fresh workers (connect, import the replay code there, ship the tasks), 0.15 s on warm
# ones. With two workers on free cores the cluster wins once the serial work exceeds twice
# that: 5.2 s fresh, 0.3 s warm. Not knowing which, the threshold is where the worst loss
# is the same either way (T/2 - 0.15 = 2.6 - T/2, T ~ 2.7 s), rounded: at most ~1.5 s lost
# against the better choice, in either case. A larger cluster breaks even sooner.
MIN_PARALLEL_SECONDS = 3.0
IN_FLIGHT_PER_SLOT = 4
MIN_IN_FLIGHT = 64

Task = tuple[int, list]
Rows = list[dict[str, Any]]


def parallel_pays(spent_s: float, done: int, left: int, min_parallel_s: float) -> bool:
    """Whether the ``left`` tasks should go to workers, after ``done`` tasks took ``spent_s`` here.

    >>> parallel_pays(0.2, 1, 10, 3.0)   # ~2 s of work left: stay serial
    False
    >>> parallel_pays(0.2, 1, 100, 3.0)  # ~20 s left: hand it out
    True
    """
    if left <= 0:
        return False
    if done <= 0:
        return min_parallel_s <= 0
    return spent_s / done * left >= min_parallel_s


def running_client() -> Any:
    """The ``dask.distributed`` client this process runs, or ``None``.

    ``distributed`` is only looked at when something already imported it (a client
    needs that), so a serial sweep never pays for importing dask.
    """
    if "distributed" not in sys.modules:
        return None
    from distributed import Client

    try:
        return Client.current()
    except ValueError:
        return None


class _Cluster:
    """The cluster a sweep without an executor may use, connected only when first needed."""

    def __init__(self, scheduler: str | None) -> None:
        self.client: Any = None
        self.address: str | None = None
        self.source = ""
        if scheduler:
            self.address, self.source = str(scheduler), "scheduler="
        else:
            self.client = running_client()
            if self.client is None and os.environ.get(SCHEDULER_ENV):
                self.address, self.source = os.environ[SCHEDULER_ENV], f"${SCHEDULER_ENV}"
        self.owned = False

    def found(self) -> bool:
        return self.client is not None or bool(self.address)

    def connect(self) -> Any:
        if self.client is None:
            from distributed import Client

            try:
                self.client = Client(self.address, set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise ConnectionError(
                    f"sweep: cannot reach the dask scheduler at {self.address} (from {self.source}): {exc}"
                ) from None
            self.owned = True
        return self.client

    def close(self) -> None:
        if self.owned and self.client is not None:
            self.client.close()
            self.client, self.owned = None, False


def _as_executor(executor: Any) -> Any:
    """A ``concurrent.futures``-style executor: a dask ``Client`` becomes its ``get_executor()``."""
    get_executor = getattr(executor, "get_executor", None)
    return get_executor() if callable(get_executor) else executor


def _window(executor: Any) -> int:
    """How many tasks to keep submitted: a few per worker thread, where that is known."""
    slots = getattr(executor, "_max_workers", None)
    client = getattr(executor, "_client", None)
    if client is not None and hasattr(client, "nthreads"):
        try:
            slots = sum(client.nthreads().values())
        except Exception:  # noqa: BLE001 - a window is an optimisation, never a failure
            slots = None
    return max(MIN_IN_FLIGHT, IN_FLIGHT_PER_SLOT * int(slots or 0))


def _dispatch(tasks: Sequence[Task], executor: Any, submit: Callable[..., Any]) -> Iterator[tuple[int, int, Rows]]:
    """``(session index, configurations run, rows)`` of each task as the executor finishes it."""
    window = _window(executor)
    pending: dict[Any, tuple[int, int]] = {}
    queue = iter(tasks)
    try:
        while True:
            for si, chunk in queue:
                pending[submit(si, chunk)] = (si, len(chunk))
                if len(pending) >= window:
                    break
            if not pending:
                return
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            while done:
                future = done.pop()
                # dropped once read: a dask worker keeps a result while a future names it,
                # so holding every future would keep a whole corpus's rows in memory
                si, n = pending.pop(future)
                yield si, n, future.result()
    finally:
        for future in pending:  # a raised error or an interrupt: drop what has not started
            future.cancel()


def finished_tasks(run: Callable[[Task], Rows], submit_args: Callable[[Task], tuple], tasks: list[Task],
                   executor: Any, scheduler: str | None, min_parallel_s: float | None,
                   ) -> Iterator[tuple[int, int, Rows]]:
    """Run ``tasks`` where the module docstring says; yield each one's rows as it finishes.

    ``run(task)`` runs one here; ``submit_args(task)`` is what a worker gets: ``(fn, *args)``.
    """
    if isinstance(executor, str) and executor != "serial":
        raise ValueError(f"executor must be an executor, a dask Client, None or 'serial', got {executor!r}")
    if executor is not None and executor != "serial":
        pool = _as_executor(executor)
        yield from _dispatch(tasks, pool, lambda si, chunk: pool.submit(*submit_args((si, chunk))))
        return
    cluster = _Cluster(scheduler) if executor is None else None
    threshold = MIN_PARALLEL_SECONDS if min_parallel_s is None else float(min_parallel_s)
    spent, done = 0.0, 0
    for si, chunk in tasks:
        if cluster is not None and cluster.found() and parallel_pays(spent, done, len(tasks) - done, threshold):
            break
        started = time.perf_counter()
        rows = run((si, chunk))
        spent += time.perf_counter() - started
        done += 1
        yield si, len(chunk), rows
    if done == len(tasks) or cluster is None:
        return
    try:
        pool = cluster.connect().get_executor()
        yield from _dispatch(tasks[done:], pool, lambda si, chunk: pool.submit(*submit_args((si, chunk))))
    finally:
        cluster.close()
