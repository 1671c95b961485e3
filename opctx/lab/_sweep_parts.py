"""``sweep(out=...)``: rows on disk batch by batch, one Parquet file in the end, resumable.

A sweep of a corpus runs for hours; a Ctrl-C, a killed kernel or a crashed machine must
cost at most the batch in progress, and must never leave a file that looks like a
result and is not (a Parquet file cut by SIGKILL has no footer and cannot be opened; one
closed on SIGINT is valid and holds a fraction of the rows, with nothing saying so).

Layout, for ``out = runs/sweep.parquet``:

``runs/sweep.parquet.parts/``
    ``manifest.json`` (what this sweep is: its sessions and configurations, so that a
    different sweep never resumes from these parts) and ``part-000001.parquet``, ... :
    each a batch of finished rows, written under a temporary name and renamed when
    complete (``_outputs``), so every part there is whole.
``runs/sweep.parquet``
    appears only when every (session, configuration) row is in a part: the parts are
    merged into a temporary file, which is renamed to ``out``; the parts folder is then
    removed. Until then ``out`` does not exist (or is the complete result of an earlier
    run, left untouched).

Resuming: ``sweep`` called again with the same sessions, grid and ``out`` reads which
(session, configuration) pairs the parts hold and runs only the others: no row is run
twice, none is lost. A parts folder of a *different* sweep is an error naming it (delete
it, or choose another ``out``), never silently reused or overwritten. Two processes must
not sweep into the same ``out`` at once.

The schema is fixed before the first part is written: the identifying columns, the
grid's columns (typed from every configuration's values), then the columns of the first
replay that succeeded (rows are held until one has, so a failing first task does not
decide it), ``error`` and ``elapsed_s``; a resumed sweep takes it from its parts. A part
is written every ``flush_rows`` rows and at least every ``FLUSH_SECONDS`` while rows are
waiting, so a long sweep never holds much unsaved work.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ._outputs import (
    OutputError,
    check_target,
    discard,
    output_error,
    publish,
    remove_leftovers,
    temp_name,
)

__all__ = ["SweepParts", "FLUSH_SECONDS"]

FLUSH_SECONDS = 60.0
_MANIFEST = "manifest.json"


class SweepParts:
    """The parts folder of one ``sweep(out=...)`` (module docstring)."""

    def __init__(self, out: str | os.PathLike, records: Any, timings: bool, flush_rows: int,
                 identity: dict[str, Any]) -> None:
        self.out = Path(out)
        self.folder = self.out.with_name(self.out.name + ".parts")
        self.records = records
        self.timings = timings
        self.flush_rows = flush_rows
        self.pending: list[dict[str, Any]] = []
        self.pending_since = 0.0
        self.schema: Any = None
        self.rows = 0
        self.done: set[tuple[int, int]] = set()
        self._next = 1
        check_target(self.out)
        self._open_folder(identity)

    # -- the folder ---------------------------------------------------------------------------
    def _open_folder(self, identity: dict[str, Any]) -> None:
        key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=repr).encode()).hexdigest()
        manifest = self.folder / _MANIFEST
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if manifest.is_file():
                found = json.loads(manifest.read_text(encoding="utf-8")).get("sweep")
                if found != key:
                    raise OutputError(
                        f"cannot write {self.out}: {self.folder} holds the parts of a different sweep "
                        "(other sessions or configurations); delete it, or choose another out")
            else:
                tmp = temp_name(manifest)
                tmp.write_text(json.dumps({"sweep": key, "identity": identity}, default=repr, indent=1),
                               encoding="utf-8")
                publish([(tmp, manifest)])
        except OutputError:
            raise
        except OSError as exc:
            raise output_error(self.folder, exc) from None
        self._read_parts()

    def _parts(self) -> list[Path]:
        return sorted(self.folder.glob("part-*.parquet"))

    def _read_parts(self) -> None:
        """What earlier runs finished: their (session, configuration) pairs and schema."""
        import pyarrow.parquet as pq

        for leftover in self.folder.glob(".*.tmp"):  # a part being written when the process died
            discard([leftover])
        for part in self._parts():
            try:
                ids = pq.read_table(part, columns=["session_index", "config_index"]).to_pydict()
                schema = pq.read_schema(part)
            except Exception as exc:  # noqa: BLE001 - renamed parts are whole; say which one is not
                raise OutputError(f"cannot resume {self.out}: {part} cannot be read ({exc})") from None
            self.done.update(zip(ids["session_index"], ids["config_index"], strict=True))
            self.rows += len(ids["session_index"])
            if self.schema is None or len(schema) > len(self.schema):
                self.schema = schema
            self._next = max(self._next, int(part.stem.split("-")[1]) + 1)

    def remaining(self, tasks: list[tuple[int, list[tuple[int, dict]]]]) -> list[tuple[int, list]]:
        """``tasks`` without the configurations whose rows earlier runs finished."""
        out = []
        for si, chunk in tasks:
            left = [(ci, config) for ci, config in chunk if (si, ci) not in self.done]
            if left:
                out.append((si, left))
        return out

    # -- rows ---------------------------------------------------------------------------------
    def add(self, record: dict[str, Any]) -> None:
        if not self.pending:
            self.pending_since = time.monotonic()
        self.pending.append(record)
        if self.schema is None and not record.get("error"):
            self.schema = self._schema(record)
        if self.schema is not None and (len(self.pending) >= self.flush_rows
                                        or time.monotonic() - self.pending_since >= FLUSH_SECONDS):
            self.flush()

    def _schema(self, example: dict[str, Any]) -> Any:
        import pyarrow as pa

        fields = [pa.field("session", pa.string()), pa.field("session_index", pa.int64()),
                  pa.field("config_index", pa.int64()), pa.field("config", pa.string()),
                  pa.field("preset", pa.string())]
        for name, values in self.records.param_columns().items():
            kind = pa.array(values).type
            fields.append(pa.field(name, pa.string() if pa.types.is_null(kind) else kind))
        known = {f.name for f in fields} | {"error", "elapsed_s"}
        for name, value in example.items():
            if name not in known:
                kind = pa.array([value]).type
                fields.append(pa.field(name, pa.float64() if pa.types.is_null(kind) else kind))
        fields.append(pa.field("error", pa.string()))
        if self.timings:
            fields.append(pa.field("elapsed_s", pa.float64()))
        return pa.schema(fields)

    def flush(self) -> None:
        """Write the rows held as one part (complete, then renamed into the folder)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.pending:
            return
        if self.schema is None:  # no replay succeeded yet: identifying columns and ``error``
            self.schema = self._schema({})
        names = set(self.schema.names)
        for record in self.pending:
            unknown = set(record) - names
            if unknown:
                raise ValueError(f"sweep row has columns the Parquet schema lacks: {sorted(unknown)}")
        part = self.folder / f"part-{self._next:06d}.parquet"
        tmp = temp_name(part)
        try:
            pq.write_table(pa.Table.from_pylist(self.pending, schema=self.schema), str(tmp))
            publish([(tmp, part)])
        except OSError as exc:
            discard([tmp])
            raise output_error(part, exc) from None
        self._next += 1
        self.done.update((r["session_index"], r["config_index"]) for r in self.pending)
        self.rows += len(self.pending)
        self.pending = []

    def keep(self) -> None:
        """After an error or an interrupt: save the rows held, keep the folder for a resume."""
        self.flush()

    def finish(self) -> Path:
        """Merge the parts into ``out`` (temporary name, then renamed) and remove them."""
        import pyarrow.parquet as pq

        self.flush()
        parts = self._parts()
        schema = self.schema if self.schema is not None else self._schema({})
        remove_leftovers(self.out)
        tmp = temp_name(self.out)
        try:
            with pq.ParquetWriter(str(tmp), schema) as writer:  # no parts: a valid file of no rows
                for part in parts:
                    writer.write_table(_conform(pq.read_table(part), schema))
            publish([(tmp, self.out)])
        except OSError as exc:
            discard([tmp])
            raise output_error(self.out, exc) from None
        except BaseException:
            discard([tmp])
            raise
        shutil.rmtree(self.folder, ignore_errors=True)
        return self.out


def _conform(table: Any, schema: Any) -> Any:
    """``table`` with ``schema``'s columns in its order (missing ones null): a part written
    before any replay succeeded has only the identifying columns and ``error``."""
    import pyarrow as pa

    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names
               else pa.nulls(len(table), f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)
