"""Sweeps: replay many sessions under many configurations, one DataFrame row per pair.

``sweep(sessions, grid, executor=None, progress=True) -> DataFrame``

* ``sessions``: picklable session specs - ``SessionSpec(db_path, session_id)``,
  ``(db_path, session_id)`` tuples, message lists, ``RecordedHistory``
  objects, or any recipe with a ``load()`` returning a history (and a ``label``),
  such as ``opctx.lab.scenarios.ScenarioSpec``. Specs are what travels to workers: a worker opens the database
  read-only itself, so nothing large is pickled and nothing is shared.
* ``grid``: a list of configuration dicts, or a dict of lists whose cartesian
  product is taken (keys in the given order, values in the given order). A
  configuration names a ``preset`` (default ``"default"``: a preset name, a
  ``PresetSpec`` or a ``CompactionPolicy``) and may set ``context_window``,
  ``model``, ``summaries`` and any field of the policy by its dotted name
  (``{"cut.keep_ratio": [0.05, 0.1, 0.2]}``; the older flat names, ``keep_ratio``,
  ``trigger_pct`` ..., work too: ``opctx.lab.presets``, "Parameters"); an optional
  ``label`` names it in the output (default: ``preset`` plus the other keys, sorted).
  ``summaries`` takes what ``replay`` does: ``"structural"``, ``"recorded"`` or a
  summariser such as ``LLMSummaries(endpoint, model, prompt=...)``, shown in the output
  by its ``label``; with its cache, a second identical sweep makes no endpoint call, and
  every row counts the summariser's calls and tokens (``summary_calls``,
  ``summary_input_tokens``, ``summary_output_tokens``).
  ``prices`` (a ``PriceTable``, ``ModelPrice`` or ``PRICE_MODELS`` name) and ``cache`` (a
  ``CachePolicy``) choose how the row's cost is priced (``metrics``); a model without a
  price gives NaN costs and ONE warning for the whole sweep, naming the sessions.
* ``executor``: ``None`` uses a dask cluster when there is one - the ``scheduler``
  address, the ``dask.distributed`` client this process runs, or the address in
  ``$OPCTX_DASK_SCHEDULER`` - and otherwise runs serially in this process; even with a
  cluster it stays serial while the work left would take under ``min_parallel_s`` here
  (``opctx.lab._sweep_engine``: the rule and its measured default). ``"serial"`` always
  runs here. Any ``concurrent.futures.Executor`` (``ThreadPoolExecutor``,
  ``ProcessPoolExecutor``) or a dask ``Client`` (or its ``get_executor()``) runs every
  task. Work is cut into tasks of one session x up to ``configs_per_task``
  configurations, so a worker loads each history once per task; tasks are handed out a
  window at a time as earlier ones finish.

Determinism: the rows are sorted by (session order, configuration order) after
collection, whatever order the executor finished them in, and every replay is a
pure function of its inputs (the recording's clock, structural summaries,
seeded scenarios), so the frame is identical for every executor. Wall-clock
timings are left out unless ``timings=True`` (they are the one thing that
differs from run to run).

Errors: with ``errors="record"`` (default) a failing replay yields a row whose
``error`` column says ``Type: message`` and whose metrics are missing, and the
sweep carries on; ``errors="raise"`` re-raises the first failure.

Columns: one table, ``SWEEP_COLUMNS`` (in order; ``columns_table()`` is its Markdown,
the table of docs/lab.md): ``session`` (label), ``session_index``, ``config_index``,
``config`` (label), ``preset``, every configuration key that appears in the grid (the
requested ``context_window`` / ``model`` as ``param_context_window`` /
``param_model``, since ``context_window`` and ``model`` report what the replay
actually used), the metrics of ``opctx.lab.metrics.summarize`` (``METRIC_COLUMNS``;
among them ``replay_mode``: whether the replay counted on the provider's usage, the default
where the recording has it, or on estimates; ``feasible`` / ``feasibility_problems``:
whether the configuration can work on that session, ``opctx.lab.feasibility``),
``messages``, ``policy`` (the exact policy the replay ran with, resolved for its window
and model, as JSON: ``CompactionPolicy.from_dict(json.loads(row.policy))`` gives it
back, so every figure can be traced to its configuration), ``error``.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from typing import Any

from ._sweep_engine import MIN_PARALLEL_SECONDS, SCHEDULER_ENV, finished_tasks
from .feasibility import FEASIBILITY_COLUMNS
from .history import RecordedHistory, SessionSpec
from .metrics import METRIC_COLUMNS

logger = logging.getLogger(__name__)

__all__ = ["sweep", "expand_grid", "session_label", "run_task", "SCHEDULER_ENV", "MIN_PARALLEL_SECONDS",
           "SWEEP_COLUMNS", "columns_table"]

_REPLAY_KEYS = {"preset", "context_window", "model", "summaries", "label", "prices", "cache"}

# Every column of a sweep's frame, in order, and what it holds. "<grid key>" stands for the
# configuration keys of the grid (one column each); "elapsed_s" is there with timings=True.
SWEEP_COLUMNS: dict[str, str] = {
    "session": "the session's label (its id, or a recipe's label)",
    "session_index": "the session's position in the sessions given",
    "config_index": "the configuration's position in the grid",
    "config": "the configuration's label (its label key, else the preset and the other keys)",
    "preset": "the preset (or policy) replayed",
    "param_context_window": "the window the configuration asked for (None: the recording's or the model's)",
    "param_model": "the model the configuration asked for",
    "<grid key>": "every other key of the grid, as given (a policy field by its dotted name ...)",
    **METRIC_COLUMNS,
    **FEASIBILITY_COLUMNS,
    "context_window": "the window the replay used, tokens",
    "model": "the model the replay counted tokens and priced for",
    "messages": "messages in the recorded history",
    "policy": "the exact policy replayed, resolved for its window and model, as JSON",
    "error": "Type: message of a failed replay (its metrics are then missing), else None",
    "elapsed_s": "wall-clock seconds of the replay (timings=True only: it differs from run to run)",
}


def columns_table() -> str:
    """``SWEEP_COLUMNS`` as a Markdown table (docs/lab.md holds it verbatim).

    >>> columns_table().splitlines()[0]
    '| column | what it holds |'
    """
    rows = ["| column | what it holds |", "| --- | --- |"]
    rows += [f"| `{name}` | {text} |" for name, text in SWEEP_COLUMNS.items()]
    return "\n".join(rows)


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


def _preset_label(preset: Any) -> str:
    """A preset's name in the output: the name, a spec's name, or a policy's short digest."""
    if isinstance(preset, str):
        return preset
    name = getattr(preset, "name", None)
    if isinstance(name, str):
        return name
    to_json = getattr(preset, "to_json", None)
    if callable(to_json):
        import hashlib

        return "policy-" + hashlib.sha256(to_json().encode()).hexdigest()[:8]
    return str(preset)


def _grid_value(value: Any) -> Any:
    """A grid value as the output shows it: an object with a ``label`` (a summariser:
    ``LLMSummaries`` is ``llm:<prompt>:<model>``) by its label, anything else as it is."""
    label = getattr(value, "label", None)
    return label if isinstance(label, str) and not isinstance(value, str) else value


def _identity_value(value: Any) -> Any:
    """A grid value as a resumed sweep recognises it: a summariser by its label and call
    settings, not by its endpoint's address (a local model server gets a new port each start,
    and the summary cache does not key on the address either)."""
    label = _grid_value(value)
    if label is value:
        return value
    return {"label": label, "settings": repr(getattr(value, "settings", None))}


def _config_label(config: Mapping[str, Any]) -> str:
    if config.get("label"):
        return str(config["label"])
    preset = _preset_label(config.get("preset", "default"))
    rest = [f"{k}={_grid_value(config[k])!r}" for k in sorted(config) if k not in ("preset", "label")]
    return preset + (f"({', '.join(rest)})" if rest else "")


def session_label(session: Any, index: int) -> str:
    """A readable, stable name for a session spec."""
    if isinstance(session, SessionSpec):
        return session.label
    if isinstance(session, tuple) and len(session) == 2:
        return SessionSpec(str(session[0]), str(session[1])).label
    if isinstance(session, RecordedHistory):
        return session.session_id or f"history-{index}"
    if isinstance(getattr(session, "label", None), str):
        return session.label
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
        load = getattr(session, "load", None)
        return load() if callable(load) and not isinstance(session, list) else as_history(session)
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
            # one warning for the whole sweep about unpriced models (_warn_unpriced_rows)
            row.update(result.metrics(config.get("prices"), cache=config.get("cache"), warn=False))
            row["context_window"] = result.context_window
            row["model"] = result.model
            row["messages"] = len(history.messages)
            row["policy"] = result.policy_json
            row["error"] = None
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
        if timings:
            row["elapsed_s"] = time.perf_counter() - started
        rows.append(row)
    return rows


def _warn_unpriced_rows(rows: Iterable[Mapping[str, Any]]) -> None:
    """One ``UnpricedModelWarning`` naming the models and sessions whose cost is NaN."""
    from .costs import CostResult, warn_unpriced

    unpriced: dict[str, list[str]] = {}
    for row in rows:
        source = str(row.get("price_source") or "")
        if "no price for model" in source:
            sessions = unpriced.setdefault(str(row.get("model")), [])
            if row.get("session") not in sessions:
                sessions.append(str(row.get("session")))
    if unpriced:
        warn_unpriced([CostResult([], "", unpriced)])


def _log_guard_summary(disabled: Mapping[str, int], total: int) -> None:
    """One warning for every replay of the sweep whose engine disabled auto-compaction.

    ``disabled``: per configuration label, the replays where it happened.
    """
    hits = sum(disabled.values())
    if not hits:
        return
    configs = sorted(disabled.items(), key=lambda kv: -kv[1])
    listed = ", ".join(f"{name} ({n})" for name, n in configs[:5])
    more = f" and {len(configs) - 5} more" if len(configs) > 5 else ""
    logger.warning(
        "sweep: in %d of %d replays auto-compaction was disabled after compactions that did not "
        "shrink the request enough - the strategy keeps too much verbatim to get below its trigger on "
        "these sessions. Configurations (replays): %s%s. Per row: columns compactions_failed and "
        "auto_compaction_disabled; a larger context_window or smaller protect_last_n / keep_* helps.",
        hits, total, listed, more,
    )


class _Records:
    """Turns task rows into output records (the frame's columns) and keeps the tallies."""

    def __init__(self, configs: list[dict[str, Any]], labels: list[str]) -> None:
        self.configs = configs
        self.labels = labels
        self.config_labels = [_config_label(c) for c in configs]
        self.grid_keys: list[str] = []
        for config in configs:
            for key in config:
                if key not in self.grid_keys and key != "label":
                    self.grid_keys.append(key)
        self.disabled: dict[str, int] = {}
        self.total = 0

    def param_columns(self) -> dict[str, list[Any]]:
        """Each grid column with the values the configurations give it."""
        return {
            (f"param_{key}" if key in ("context_window", "model") else key): [_grid_value(c.get(key)) for c in self.configs]
            for key in self.grid_keys if key != "preset"
        }

    def record(self, si: int, row: dict[str, Any]) -> dict[str, Any]:
        config = self.configs[row["config_index"]]
        out = {
            "session": self.labels[si],
            "session_index": si,
            "config_index": row["config_index"],
            "config": self.config_labels[row["config_index"]],
            "preset": _preset_label(config.get("preset", "default")),
        }
        for key in self.grid_keys:
            if key != "preset":
                out[f"param_{key}" if key in ("context_window", "model") else key] = _grid_value(config.get(key))
        out.update({k: v for k, v in row.items() if k != "config_index"})
        self.total += 1
        if (out.get("auto_compaction_disabled") or 0) > 0:
            self.disabled[out["config"]] = self.disabled.get(out["config"], 0) + 1
        return out

    def failure(self, si: int, row: dict[str, Any]) -> RuntimeError:
        return RuntimeError(
            f"replay of {self.labels[si]} under {self.config_labels[row['config_index']]} failed: {row['error']}"
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
    out: str | os.PathLike | None = None,
    flush_rows: int = 2000,
    scheduler: str | None = None,
    min_parallel_s: float | None = None,
) -> Any:
    """Replay every session under every configuration (see the module docstring).

    With ``out`` (a ``.parquet`` path) the rows go to disk as tasks finish, a batch
    (``flush_rows``) at a time, never all held in memory, and ``out`` appears, whole,
    when every row is written; the path is returned. Its rows are in finishing order
    (sort by ``session_index, config_index`` to get the frame's order), with the same
    values as the frame ``sweep`` returns without ``out``. Interrupted (Ctrl-C, an
    error, ``errors="raise"`` meeting a failure, SIGKILL), it leaves ``out`` alone and
    its finished batches in ``<out>.parts/``: the same call again resumes from them,
    running only the rest (``opctx.lab._sweep_parts``). The rows are written by this
    process whatever runs the tasks, so ``out`` works the same through a cluster.

    ``scheduler`` (``"tcp://host:8786"``) and ``min_parallel_s`` choose where the tasks
    run when ``executor`` is ``None`` (module docstring).
    """
    if errors not in ("record", "raise"):
        raise ValueError(f"errors must be 'record' or 'raise', got {errors!r}")
    if configs_per_task < 1:
        raise ValueError(f"configs_per_task must be >= 1, got {configs_per_task}")
    sessions = list(sessions)
    configs = expand_grid(grid)
    if not configs:
        raise ValueError("the grid has no configurations")
    records = _Records(configs, [session_label(s, i) for i, s in enumerate(sessions)])
    tasks: list[tuple[int, list[tuple[int, dict[str, Any]]]]] = []
    for si in range(len(sessions)):
        indexed = list(enumerate(configs))
        for start in range(0, len(indexed), configs_per_task):
            tasks.append((si, indexed[start:start + configs_per_task]))

    sink = _output(out, sessions, records, timings, flush_rows, configs) if out is not None else None
    if sink is not None:
        tasks = sink.remaining(tasks)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(sessions) * len(configs), initial=len(sink.done) if sink else 0,
                   desc="sweep", unit="replay")
    collected: list[tuple[int, dict[str, Any]]] = []
    unpriced_rows: list[dict[str, Any]] = []  # written to ``out``: kept only to warn once at the end
    try:
        # closed on the way out too: unstarted tasks are cancelled and a client the
        # sweep connected is closed at once, not whenever the generator is collected
        finished = closing(finished_tasks(
            lambda task: run_task(sessions[task[0]], task[1], timings),
            lambda task: (run_task, sessions[task[0]], task[1], timings),
            tasks, executor, scheduler, min_parallel_s,
        ))
        with finished as results:
            for si, n, rows in results:
                for row in rows:
                    if sink is None:
                        collected.append((si, row))
                        continue
                    if errors == "raise" and row.get("error"):
                        raise records.failure(si, row)
                    record = records.record(si, row)
                    if "no price for model" in str(record.get("price_source") or ""):
                        unpriced_rows.append({k: record.get(k) for k in ("model", "session", "price_source")})
                    sink.add(record)
                if bar is not None:
                    bar.update(n)
    except BaseException:
        if sink is not None:
            sink.keep()  # the finished rows stay, for the next call to resume from
        raise
    finally:
        if bar is not None:
            bar.close()
    if sink is not None:
        path = sink.finish()
        _warn_unpriced_rows(unpriced_rows)
        _log_guard_summary(records.disabled, records.total)
        return path
    return _frame(collected, records, errors)


def _output(out: str | os.PathLike, sessions: list[Any], records: _Records, timings: bool,
            flush_rows: int, configs: list[dict[str, Any]]) -> Any:
    """The resumable writer of ``sweep(out=...)``, for this sweep's sessions and grid
    (a message list is named by a digest of its content: its label is only its position)."""
    import hashlib
    import json

    from ._sweep_parts import SweepParts

    names = [
        f"{label}#{hashlib.sha256(json.dumps(s, default=repr).encode()).hexdigest()[:16]}"
        if isinstance(s, list) else label for s, label in zip(sessions, records.labels, strict=True)
    ]
    identity = {"sessions": names, "configs": [{k: _identity_value(v) for k, v in c.items()} for c in configs],
                "timings": timings}
    return SweepParts(out, records, timings, flush_rows, identity)


def _frame(collected: list[tuple[int, dict[str, Any]]], records: _Records, errors: str) -> Any:
    import pandas as pd

    if errors == "raise":
        failed = [(si, r) for si, r in collected if r.get("error")]
        if failed:
            raise records.failure(*min(failed, key=lambda x: (x[0], x[1]["config_index"])))
    collected.sort(key=lambda x: (x[0], x[1]["config_index"]))
    out = [records.record(si, row) for si, row in collected]
    _warn_unpriced_rows(out)
    df = pd.DataFrame.from_records(out)
    if "error" not in df.columns:
        df["error"] = None
    if "feasible" in df.columns and df["feasible"].isna().any():
        # a failed row has no verdict: None, as a Parquet file of the rows gives it back
        df["feasible"] = df["feasible"].astype(object).where(df["feasible"].notna(), None)
    _log_guard_summary(records.disabled, records.total)
    for col in ("session", "config", "preset"):
        if col in df.columns:
            df[col] = df[col].astype("category")
    return df.reset_index(drop=True)
