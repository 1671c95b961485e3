"""Sweeps: replay many sessions under many configurations, one DataFrame row per pair.

``sweep(sessions, grid, executor=None, progress=True) -> DataFrame``

* ``sessions``: picklable session specs - ``SessionSpec(db_path, session_id)``,
  ``(db_path, session_id)`` tuples, message lists, or ``RecordedHistory``
  objects. Specs are what travels to workers: a worker opens the database
  read-only itself, so nothing large is pickled and nothing is shared.
* ``grid``: a list of configuration dicts, or a dict of lists whose cartesian
  product is taken (keys in the given order, values in the given order). A
  configuration names a ``preset`` (default ``"default"``) and may set
  ``context_window``, ``model``, ``summaries`` and any preset parameter; an
  optional ``label`` names it in the output (default: ``preset`` plus the other
  keys, sorted).
* ``executor``: ``None`` runs serially in this process; otherwise any
  ``concurrent.futures.Executor`` (``ThreadPoolExecutor``,
  ``ProcessPoolExecutor``, a dask ``Client(...).get_executor()``). Work is cut
  into tasks of one session x up to ``configs_per_task`` configurations, so a
  worker loads each history once per task.

Determinism: the rows are sorted by (session order, configuration order) after
collection, whatever order the executor finished them in, and every replay is a
pure function of its inputs (the recording's clock, structural summaries,
seeded scenarios), so the frame is identical for every executor. Wall-clock
timings are left out unless ``timings=True`` (they are the one thing that
differs from run to run).

Errors: with ``errors="record"`` (default) a failing replay yields a row whose
``error`` column says ``Type: message`` and whose metrics are missing, and the
sweep carries on; ``errors="raise"`` re-raises the first failure.

Columns: ``session`` (label), ``session_index``, ``config_index``, ``config``
(label), ``preset``, every configuration key that appears in the grid (the
requested ``context_window`` / ``model`` as ``param_context_window`` /
``param_model``, since ``context_window`` and ``model`` report what the replay
actually used), the metrics of ``opctx.lab.metrics.summarize``, ``messages``,
``error``.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .history import RecordedHistory, SessionSpec

logger = logging.getLogger(__name__)

__all__ = ["sweep", "expand_grid", "session_label", "run_task"]

_REPLAY_KEYS = {"preset", "context_window", "model", "summaries", "label"}


def expand_grid(grid: Mapping[str, Sequence[Any]] | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A list of configuration dicts from a list (as is) or a dict of lists (product)."""
    if isinstance(grid, Mapping):
        keys = list(grid)
        for key in keys:
            values = grid[key]
            if isinstance(values, str | bytes) or not isinstance(values, Sequence):
                raise TypeError(f"grid[{key!r}] must be a list of values, got {type(values).__name__}")
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]
    configs = [dict(c) for c in grid]
    for i, config in enumerate(configs):
        if not isinstance(config, dict):
            raise TypeError(f"grid entry {i} is a {type(config).__name__}, expected a dict")
    return configs


def _config_label(config: Mapping[str, Any]) -> str:
    if config.get("label"):
        return str(config["label"])
    preset = str(config.get("preset", "default"))
    rest = [f"{k}={config[k]!r}" for k in sorted(config) if k not in ("preset", "label")]
    return preset + (f"({', '.join(rest)})" if rest else "")


def session_label(session: Any, index: int) -> str:
    """A readable, stable name for a session spec."""
    if isinstance(session, SessionSpec):
        return session.label
    if isinstance(session, tuple) and len(session) == 2:
        return SessionSpec(str(session[0]), str(session[1])).label
    if isinstance(session, RecordedHistory):
        return session.session_id or f"history-{index}"
    return f"messages-{index}"


_HISTORY_CACHE: OrderedDict[tuple, RecordedHistory] = OrderedDict()
_HISTORY_CACHE_SIZE = 4
_HISTORY_CACHE_LOCK = threading.Lock()


def _file_state(path: str) -> tuple:
    """What says a database file changed: size and mtime of it and of its WAL."""
    out: list[Any] = []
    for p in (path, path + "-wal"):
        try:
            st = os.stat(p)
            out += [st.st_size, st.st_mtime_ns]
        except OSError:
            out += [None, None]
    return tuple(out)


def _load_history(session: Any) -> RecordedHistory:
    """``as_history(session)``, with a small per-process cache for database sessions.

    A sweep cuts one session's configurations into several tasks; without the
    cache every task would load the history again and recompute what replays
    of it share (texts, identifiers, token estimates: ``RecordedHistory.derived``).
    The key includes the database file's (and its WAL's) size and mtime, so a
    database written to between sweeps is read afresh.
    """
    from .history import as_history

    if isinstance(session, tuple) and len(session) == 2 and isinstance(session[1], str):
        session = SessionSpec(str(session[0]), session[1])
    if not isinstance(session, SessionSpec):
        return as_history(session)
    path = os.path.abspath(session.db_path)
    key = (path, session.session_id, _file_state(path))
    with _HISTORY_CACHE_LOCK:
        history = _HISTORY_CACHE.get(key)
        if history is not None:
            _HISTORY_CACHE.move_to_end(key)
            return history
    history = as_history(session)
    with _HISTORY_CACHE_LOCK:
        _HISTORY_CACHE[key] = history
        while len(_HISTORY_CACHE) > _HISTORY_CACHE_SIZE:
            _HISTORY_CACHE.popitem(last=False)
    return history


def run_task(session: Any, configs: Sequence[tuple[int, dict[str, Any]]], timings: bool = False) -> list[dict[str, Any]]:
    """Replay one session under several configurations; one row dict per configuration.

    Module-level (picklable) so that process and dask executors can run it.
    """
    from .replay import quiet_replays, replay

    rows: list[dict[str, Any]] = []
    try:
        history = _load_history(session)
        load_error = None
    except Exception as exc:  # recorded per row below
        history, load_error = None, f"{type(exc).__name__}: {exc}"
    for config_index, config in configs:
        row: dict[str, Any] = {"config_index": config_index}
        if history is None:
            row["error"] = load_error
            rows.append(row)
            continue
        params = {k: v for k, v in config.items() if k not in _REPLAY_KEYS}
        started = time.perf_counter()
        try:
            with quiet_replays():  # the sweep logs one summary for all its replays
                result = replay(
                    history,
                    config.get("preset", "default"),
                    context_window=config.get("context_window"),
                    model=config.get("model"),
                    summaries=config.get("summaries", "structural"),
                    keep_contexts=True,
                    **params,
                )
            row.update(result.metrics())
            row["context_window"] = result.context_window
            row["model"] = result.model
            row["messages"] = len(history.messages)
            row["error"] = None
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
        if timings:
            row["elapsed_s"] = time.perf_counter() - started
        rows.append(row)
    return rows


def _log_guard_summary(df: Any) -> None:
    """One warning for every replay of the sweep whose engine disabled auto-compaction."""
    if "auto_compaction_disabled" not in df.columns:
        return
    hit = df[df["auto_compaction_disabled"].fillna(0) > 0]
    if hit.empty:
        return
    configs = hit.groupby("config", sort=False, observed=True).size()
    listed = ", ".join(f"{name} ({n})" for name, n in configs.head(5).items())
    more = f" and {len(configs) - 5} more" if len(configs) > 5 else ""
    logger.warning(
        "sweep: in %d of %d replays auto-compaction was disabled after compactions that did not "
        "shrink the request enough - the strategy keeps too much verbatim to get below its trigger on "
        "these sessions. Configurations (replays): %s%s. Per row: columns compactions_failed and "
        "auto_compaction_disabled; a larger context_window or smaller protect_last_n / keep_* helps.",
        len(hit), len(df), listed, more,
    )


def sweep(
    sessions: Sequence[Any],
    grid: Mapping[str, Sequence[Any]] | Iterable[Mapping[str, Any]],
    executor: Any = None,
    progress: bool = True,
    *,
    configs_per_task: int = 10,
    timings: bool = False,
    errors: str = "record",
) -> Any:
    """Replay every session under every configuration (see the module docstring)."""
    import pandas as pd

    if errors not in ("record", "raise"):
        raise ValueError(f"errors must be 'record' or 'raise', got {errors!r}")
    if configs_per_task < 1:
        raise ValueError(f"configs_per_task must be >= 1, got {configs_per_task}")
    sessions = list(sessions)
    configs = expand_grid(grid)
    if not configs:
        raise ValueError("the grid has no configurations")
    labels = [session_label(s, i) for i, s in enumerate(sessions)]
    tasks: list[tuple[int, list[tuple[int, dict[str, Any]]]]] = []
    for si in range(len(sessions)):
        indexed = list(enumerate(configs))
        for start in range(0, len(indexed), configs_per_task):
            tasks.append((si, indexed[start:start + configs_per_task]))

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(sessions) * len(configs), desc="sweep", unit="replay")
    collected: list[tuple[int, dict[str, Any]]] = []
    try:
        if executor is None:
            for si, chunk in tasks:
                for row in run_task(sessions[si], chunk, timings):
                    collected.append((si, row))
                if bar is not None:
                    bar.update(len(chunk))
        else:
            from concurrent.futures import as_completed

            futures = {executor.submit(run_task, sessions[si], chunk, timings): (si, len(chunk)) for si, chunk in tasks}
            for future in as_completed(futures):
                si, n = futures[future]
                for row in future.result():
                    collected.append((si, row))
                if bar is not None:
                    bar.update(n)
    finally:
        if bar is not None:
            bar.close()

    if errors == "raise":
        failed = [(si, r) for si, r in collected if r.get("error")]
        if failed:
            si, r = min(failed, key=lambda x: (x[0], x[1]["config_index"]))
            raise RuntimeError(
                f"replay of {labels[si]} under {_config_label(configs[r['config_index']])} failed: {r['error']}"
            )
    collected.sort(key=lambda x: (x[0], x[1]["config_index"]))
    grid_keys: list[str] = []
    for config in configs:
        for key in config:
            if key not in grid_keys and key != "label":
                grid_keys.append(key)
    records = []
    for si, row in collected:
        config = configs[row["config_index"]]
        record = {
            "session": labels[si],
            "session_index": si,
            "config_index": row["config_index"],
            "config": _config_label(config),
            "preset": config.get("preset", "default"),
        }
        for key in grid_keys:
            if key != "preset":
                record[f"param_{key}" if key in ("context_window", "model") else key] = config.get(key)
        record.update({k: v for k, v in row.items() if k != "config_index"})
        records.append(record)
    df = pd.DataFrame.from_records(records)
    if "error" not in df.columns:
        df["error"] = None
    _log_guard_summary(df)
    for col in ("session", "config", "preset"):
        if col in df.columns:
            df[col] = df[col].astype("category")
    return df.reset_index(drop=True)
