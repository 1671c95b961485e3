"""A seeded mutation fuzzer for the importers: hostile variants of real-shaped transcripts.

``cases(samples, count, seed)`` turns sample recordings into ``count`` damaged copies,
the same ones for the same seed on every machine (each case draws from its own
``random.Random(f"{seed}:{index}")``; no global state, no time). ``check(case, folder)``
writes one, parses it strictly and leniently and says what happened, raising
``FuzzFailure`` when the importer broke its contract:

* every case imports, or fails with a ``TranscriptError`` that names the file (and the
  line where there is one) and says why; nothing else is ever raised;
* with ``on_error="skip"`` every skipped item names the file, and what is parsed is
  storable: standard JSON (no NaN or Infinity), edges that point inside the session.

The suite (tests/importers/test_fuzz.py) runs a few thousand cases over every file in
``data/samples`` and imports them folder by folder with ``--on-error skip`` semantics;
``benchmarks/fuzz_importers.py`` prints the case count and time. The mutated bytes are
plain data, so other fuzz targets (the C core, the store) can use ``cases`` as well.

Mutations (``MUTATIONS``), applied to the whole file or to one JSON Lines record:

``byte_flip``      a few bytes XOR-ed with random values
``truncate``       the file cut at a random offset
``type_swap``      a value replaced by one of another JSON type (a list where ``"type"``
                   should be a string, an object for a number, ...)
``deep_nesting``   a value wrapped in 50 to 100,000 levels of arrays or objects
``huge_field``     a string replaced by one of more than 1 MiB
``empty_field``    a value emptied (``""``, ``[]``, ``{}``, ``null``) or its key removed
``invalid_utf8``   bytes that are not UTF-8 (a stray continuation byte, an encoded surrogate)
``lone_surrogate`` a string given a ``"\\ud83d"`` escape without its pair (valid JSON)
``non_finite``     a number (timestamps first) replaced by ``NaN``, ``Infinity`` or ``1e999``
``line_edit``      a record duplicated (same uuid twice), dropped or moved

Type confusion (``field_cases``, ``check_field``): every field every importer declares
(``opctx.importers.fuzz.tables()``: one table per record kind, in the importer's
module) is given a value of each JSON type it does not accept, where it occurs in the
samples of its format. The contract is the importers' promise for a wrong-typed field:

* ``on_error="stop"`` raises ``TranscriptError`` naming the file, the line (JSON
  Lines) and the field (``field message.model: expected a string, got list``);
* ``on_error="skip"`` imports the rest of the session: the field's record is left out,
  or its value kept as text, with an ``Issue`` naming file, line and field; what is
  parsed is written to a database without an error (the store takes it);
* a field the importer reads from any value (``"read"``) changes nothing of that
  contract: no exception but ``TranscriptError``, everything parsed storable;
* a file whose format the mutation changed (detection sees another format) is held to
  the contract of ``check``.

>>> from pathlib import Path
>>> one = next(cases([Path("x.jsonl")], 1, seed=7, read=lambda p: b'{"a": 1}\\n'))
>>> one.name, one.mutation, one.data == next(cases([Path("x.jsonl")], 1, seed=7,
...                                               read=lambda p: b'{"a": 1}\\n')).data
('x.jsonl', 'byte_flip', True)
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import TranscriptError
from .fields import FieldTable

__all__ = ["MUTATIONS", "Case", "Outcome", "FuzzFailure", "cases", "mutate", "check", "sample_files",
           "FieldCase", "field_cases", "check_field", "tables"]

_HUGE = (1 << 20) + 4096  # just over the 1 MiB that format detection reads at once
_DEPTHS = (50, 300, 5_000, 100_000)
_BAD_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82", b"\x80\x80")
_NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e999", "-1e999")


@dataclass(frozen=True)
class Case:
    """One damaged recording: the sample it came from, how it was damaged, its bytes."""

    name: str
    mutation: str
    index: int
    data: bytes


@dataclass
class Outcome:
    """What the importer did with a case: ``"imported"`` or ``"failed"`` (and why)."""

    status: str
    sessions: int = 0
    skipped: int = 0
    message: str = ""


class FuzzFailure(AssertionError):
    """The importer broke its contract on a case (the message says which and how)."""


# -- JSON trees ------------------------------------------------------------------------------


def _paths(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path (tuple of keys / indexes) inside a JSON value, the root first."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _get(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def _set(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    _get(value, path[:-1])[path[-1]] = new
    return value


def _pick(rng: random.Random, value: Any, want: Callable[[Any], bool] | None = None,
          prefer: Callable[[tuple], bool] | None = None) -> tuple | None:
    paths = [p for p in _paths(value) if want is None or want(_get(value, p))]
    if prefer is not None:
        preferred = [p for p in paths if prefer(p)]
        if preferred and rng.random() < 0.7:
            paths = preferred
    return rng.choice(paths) if paths else None


_SENTINEL = "\x00opctx-fuzz-literal\x00"


def _dumps(value: Any, literals: dict[str, str]) -> str:
    """JSON text; ``literals`` maps placeholder strings to raw text put in their place."""
    text = json.dumps(value, ensure_ascii=True)
    for placeholder, raw in literals.items():
        text = text.replace(json.dumps(placeholder), raw)
    return text


# -- the mutations -----------------------------------------------------------------------------


def _byte_flip(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return b"\xff"
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(out))
        out[i] ^= rng.randint(1, 255)
    return bytes(out)


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))] if data else data


def _invalid_utf8(data: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + rng.choice(_BAD_UTF8) + data[i:]


def _other_type(rng: random.Random, old: Any) -> Any:
    choices: list[Any] = [["user"], {"type": "text"}, 12345, -1, 0.5, "text", None, True,
                          [], {}, [[{"x": [1]}]], 2 ** 70]
    return rng.choice([c for c in choices if type(c) is not type(old)])


def _type_swap(value: Any, rng: random.Random, literals: dict[str, str]) -> Any:
    path = _pick(rng, value, prefer=lambda p: bool(p) and p[-1] in (
        "type", "role", "content", "message", "uuid", "id", "tool_use_id", "parentUuid",
        "payload", "history", "tool_calls", "arguments", "input", "usage", "sessionId"))
    return _set(value, path, _other_type(rng, _get(value, path)))


def _deep_nesting(value: Any, rng: random.Random, literals: dict[str, str]) -> Any:
    depth = rng.choice(_DEPTHS)
    placeholder = f"{_SENTINEL}{len(literals)}"
    if rng.random() < 0.5:
        literals[placeholder] = "[" * depth + "1" + "]" * depth
    else:
        literals[placeholder] = '{"a":' * depth + "1" + "}" * depth
    path = _pick(rng, value)
    return _set(value, path, placeholder)


def _huge_field(value: Any, rng: random.Random, literals: dict[str, str]) -> Any:
    path = _pick(rng, value, want=lambda v: isinstance(v, str))
    if path is None:
        path = _pick(rng, value)
    filler = rng.choice(["x", "汉", "<script>", "\x1b[31m"])
    return _set(value, path, (filler * (_HUGE // len(filler.encode()) + 1)))


def _empty_field(value: Any, rng: random.Random, literals: dict[str, str]) -> Any:
    path = _pick(rng, value)
    if path and rng.random() < 0.4:
        parent = _get(value, path[:-1])
        del parent[path[-1]]
        return value
    return _set(value, path, rng.choice(["", [], {}, None]))


def _lone_surrogate(value: Any, rng: random.Random, literals: dict[str, str]) -> Any:
    path = _pick(rng, value, want=lambda v: isinstance(v, str))
    if path is None:
        return value
    old = _get(value, path)
    i = rng.randrange(len(old) + 1)
    return _set(value, path, old[:i] + rng.choice(["\ud83d", "\udc00", "\udfff\ud800"]) + old[i:])


def _non_finite(value: Any, rng: random.Random, literals: dict[str, str]) -> Any:
    path = _pick(rng, value, want=lambda v: not isinstance(v, (dict, list)),
                 prefer=lambda p: bool(p) and str(p[-1]).lower() in (
                     "timestamp", "created_at", "started_at", "input_tokens", "output_tokens"))
    placeholder = f"{_SENTINEL}{len(literals)}"
    literals[placeholder] = rng.choice(_NON_FINITE)
    return _set(value, path, placeholder)


_TREE_MUTATIONS = {
    "type_swap": _type_swap,
    "deep_nesting": _deep_nesting,
    "huge_field": _huge_field,
    "empty_field": _empty_field,
    "lone_surrogate": _lone_surrogate,
    "non_finite": _non_finite,
}


def _line_edit(data: bytes, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    if len(lines) < 3:
        return data + data
    i = rng.randrange(len(lines) - 1)
    op = rng.choice(["duplicate", "drop", "move"])
    if op == "duplicate":
        lines.insert(rng.randrange(i, len(lines)), lines[i])
    elif op == "drop":
        del lines[i]
    else:
        line = lines.pop(i)
        lines.insert(rng.randrange(len(lines)), line)
    return b"\n".join(lines)


def _mutate_tree(data: bytes, rng: random.Random, fn: Callable) -> bytes:
    """Apply a tree mutation to the whole JSON document, or to one JSON Lines record."""
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    literals: dict[str, str] = {}
    if doc is not None:
        return _dumps(fn(doc, rng, literals), literals).encode()
    lines = data.split(b"\n")
    records = [i for i, line in enumerate(lines) if line.strip().startswith(b"{")]
    if not records:  # not JSON at all (Aider Markdown): damage the text instead
        return _invalid_utf8(data, rng) if fn is _lone_surrogate else _byte_flip(data, rng)
    i = rng.choice(records)
    try:
        record = json.loads(lines[i])
    except ValueError:
        return _byte_flip(data, rng)
    lines[i] = _dumps(fn(record, rng, literals), literals).encode()
    return b"\n".join(lines)


MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "byte_flip": _byte_flip,
    "truncate": _truncate,
    **{name: functools.partial(_mutate_tree, fn=fn) for name, fn in _TREE_MUTATIONS.items()},
    "invalid_utf8": _invalid_utf8,
    "line_edit": _line_edit,
}


# the mutations whose parse ``check`` also stores when given a connection: those that can
# change a value's type or text; a 1 MiB string or a deep value only costs the index time
STORED_MUTATIONS = frozenset(MUTATIONS) - {"huge_field", "deep_nesting"}


def mutate(data: bytes, mutation: str, rng: random.Random) -> bytes:
    """``data`` damaged by one named mutation (see ``MUTATIONS``)."""
    return MUTATIONS[mutation](data, rng)


def cases(samples: Iterable[Path], count: int, *, seed: int = 0,
          read: Callable[[Path], bytes] = Path.read_bytes) -> Iterator[Case]:
    """``count`` cases cycling over samples x mutations; case ``i`` depends only on ``seed, i``."""
    samples = list(samples)
    originals = {p: read(p) for p in samples}
    kinds = list(MUTATIONS)
    for i in range(count):
        sample = samples[i % len(samples)]
        kind = kinds[(i // len(samples)) % len(kinds)]
        rng = random.Random(f"{seed}:{i}")
        yield Case(sample.name, kind, i, mutate(originals[sample], kind, rng))


def sample_files(folder: str | os.PathLike, *, export_to: str | os.PathLike | None = None) -> list[Path]:
    """The transcript files of a samples folder (side files of a session left out).

    A folder of one run's logged calls (OpenHands completion logs) is walked as one unit;
    here its files are listed one by one: each call alone is a trajectory to damage.
    ``export_to``: a folder where an opctx JSONL export of the first sample session is
    written and added to the list, so opctx's own format is fuzzed too (the samples
    folder holds recordings of clients, not opctx's output)."""
    from .api import iter_transcript_files

    files: list[Path] = []
    for f, _ in iter_transcript_files([folder]):
        p = Path(f)
        files.extend(sorted(x for x in p.iterdir() if x.is_file()) if p.is_dir() else [p])
    if export_to is not None:
        files.append(_opctx_export(files, Path(export_to)))
    return files


def _opctx_export(files: list[Path], folder: Path) -> Path:
    import io

    from opctx.dag.store import connect

    from .api import import_paths
    from .export import export_jsonl

    conn = connect(":memory:")
    try:
        report = import_paths(sorted(files), conn, on_error="stop")
        buffer = io.StringIO()
        export_jsonl(conn, report.written[0]["session_id"], buffer)
    finally:
        conn.close()
    path = folder / "opctx_export.jsonl"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


# -- the contract -----------------------------------------------------------------------------


def check(case: Case, folder: str | os.PathLike, conn: Any = None) -> Outcome:
    """Write ``case`` into ``folder`` and parse it both ways; ``FuzzFailure`` on a broken
    contract. With ``conn`` (an opctx connection) what ``on_error="skip"`` parsed is also
    written to it (``STORED_MUTATIONS``): the store must take it."""
    from .api import parse_path

    path = Path(folder) / f"{case.index:05d}-{case.mutation}-{case.name}"
    path.write_bytes(case.data)
    outcome = Outcome("failed")
    for mode in ("stop", "skip"):
        try:
            sessions = parse_path(path, on_error=mode)
        except TranscriptError as exc:
            _check_error(case, path, exc)
            outcome = Outcome("failed", message=str(exc))
            continue
        except Exception as exc:  # the contract: nothing but TranscriptError
            raise FuzzFailure(f"case {case.index} ({case.mutation} of {case.name}), "
                              f"on_error={mode}: {type(exc).__name__}: {exc}") from exc
        for s in sessions:
            _check_session(case, path, s)
        if conn is not None and mode == "skip" and case.mutation in STORED_MUTATIONS:
            _store(sessions, f"case {case.index} ({case.mutation} of {case.name})", conn)
        outcome = Outcome("imported", sessions=len(sessions),
                          skipped=sum(len(s.skipped) for s in sessions))
    return outcome


def _check_error(case: Case, path: Path, exc: TranscriptError) -> None:
    if exc.path != str(path) or not str(exc).startswith(str(path)) or not exc.reason.strip():
        raise FuzzFailure(f"case {case.index} ({case.mutation} of {case.name}): error does not "
                          f"name the file or say why: {exc!s:.300}")
    if exc.line is not None and not (isinstance(exc.line, int) and exc.line >= 1):
        raise FuzzFailure(f"case {case.index}: bad line number {exc.line!r}")


def _check_session(case: Case, path: Path, s: Any) -> None:
    where = f"case {case.index} ({case.mutation} of {case.name}), session {s.session_id}"
    ids = {c.id for c in s.calls}
    for c in s.calls:
        for edge in (c.predecessor, c.caller):
            if edge is not None and edge not in ids:
                raise FuzzFailure(f"{where}: node {c.id} points at {edge!r}, not in the session")
        if not math.isfinite(c.created_at):
            raise FuzzFailure(f"{where}: node {c.id} created_at {c.created_at}")
    if s.head is not None and s.head not in ids:
        raise FuzzFailure(f"{where}: HEAD {s.head!r} is not a node")
    try:
        json.dumps([c.to_dict() for c in s.calls], allow_nan=False)
        json.dumps(s.meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise FuzzFailure(f"{where}: not standard JSON ({exc})") from None
    for issue in s.skipped:
        if issue.path != str(path) or not issue.reason:
            raise FuzzFailure(f"{where}: a skipped item that names no file: {issue}")


# -- type confusion over the declared fields ------------------------------------------------------


@dataclass(frozen=True)
class FieldCase:
    """A sample with one declared field given a value of a type it does not accept."""

    name: str
    format: str
    table: Any  # the FieldTable
    field: Any  # the Field
    where: str  # the field's path inside its record, as the importer names it
    line: int | None  # the JSON Lines line of the record (None: a whole JSON document)
    top: bool  # the record is the whole line or document (no other record in it)
    value: Any
    index: int
    data: bytes


def _records(doc: Any, table: Any) -> Iterator[tuple[tuple, Any]]:
    """``(path in doc, record)`` of every record of ``table`` inside a JSON value."""
    for path in _paths(doc):
        value = _get(doc, path)
        if isinstance(value, dict) and table.is_record(value, not path) and table.within(doc, path):
            yield path, value


def _documents(data: bytes) -> list[tuple[int | None, Any]]:
    """``(line, value)``: the whole document (line None), or every JSON Lines record."""
    try:
        return [(None, json.loads(data))]
    except ValueError:
        pass
    out = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if raw.strip():
            try:
                out.append((n, json.loads(raw)))
            except ValueError:
                continue
    return out


def tables() -> list[FieldTable]:
    """Every table the importer modules declare (a new importer module goes in this list).

    It lives with the fuzzer, its reader, rather than in ``fields``: the importers import
    ``fields``, so ``fields`` importing them back would be a circle."""
    from . import aider, claude_code, codex, message_lists, openhands, openhands_completions

    return [value for module in (claude_code, codex, message_lists, openhands, openhands_completions, aider)
            for value in vars(module).values() if isinstance(value, FieldTable)]


def field_cases(samples: Iterable[Path], *, per_field: int = 2, seed: int = 0,
                read: Callable[[Path], bytes] = Path.read_bytes) -> Iterator[FieldCase]:
    """For every sample and every table of its format: up to ``per_field`` places of each
    declared field (picked by ``seed``), each given every value of a type it does not
    accept. The same cases for the same seed on every machine."""
    from .detect import detect
    from .fields import wrong_values

    index = 0
    all_tables = tables()
    for sample in samples:
        fmt = detect(sample)
        data = read(sample)
        docs = _documents(data)
        for table in (t for t in all_tables if fmt in t.formats):
            for f in table.fields:
                places = [(line, rpath, where) for line, doc in docs for rpath, record in _records(doc, table)
                          if f.applies_to(record) for where in f.places(record)]
                rng = random.Random(f"{seed}:{sample.name}:{f.path}:{sorted(f.when.items())}")
                for line, rpath, where in sorted(rng.sample(places, min(per_field, len(places))), key=repr):
                    for value in wrong_values(f):
                        mutated = _with_value(data, docs, line, rpath, f, where, value)
                        yield FieldCase(sample.name, fmt, table, f, where, line, not rpath, value, index, mutated)
                        index += 1


def _with_value(data: bytes, docs: list, line: int | None, rpath: tuple, f: Any, where: str,
                value: Any) -> bytes:
    """``data`` with the field at ``where`` (in the record at ``rpath`` of ``line``) set to ``value``."""
    from .fields import set_at

    doc = json.loads(json.dumps(next(d for n, d in docs if n == line)))
    set_at(_get(doc, rpath), where, value)
    text = json.dumps(doc, ensure_ascii=False).encode()
    if line is None:
        return text
    lines = data.split(b"\n")
    lines[line - 1] = text
    return b"\n".join(lines)


def check_field(case: FieldCase, folder: str | os.PathLike, conn: Any = None) -> Outcome:
    """Write ``case`` into ``folder``, parse it both ways and store what was parsed (into
    ``conn``, an opctx connection, else a fresh in-memory database); ``FuzzFailure`` when
    the importer broke the contract of a wrong-typed field (module docstring)."""
    from .api import parse_path
    from .detect import sniff

    path = Path(folder) / f"{case.index:05d}-field-{case.name}"
    path.write_bytes(case.data)
    where = f"field case {case.index} ({case.format} {case.table.record} field {case.where} = {case.value!r})"
    try:
        fmt = sniff(path)[0]
    except TranscriptError:
        fmt = None
    if fmt != case.format:  # the mutation changed what the file is: the plain contract
        outcome = check(Case(path.name, "type_confusion", case.index, case.data), folder)
        outcome.status = "redetected"
        return outcome
    reported = case.field.on_wrong in ("skip", "text")
    said = f"field {case.where}: expected {case.field.expected}"
    try:
        parse_path(path, on_error="stop")
        if reported:
            raise FuzzFailure(f"{where}: on_error=stop read the wrong-typed field without an error")
    except TranscriptError as exc:
        _check_error(Case(path.name, "type_confusion", case.index, case.data), path, exc)
        if reported and (said not in exc.reason or (case.line is not None and exc.line != case.line)):
            raise FuzzFailure(f"{where}: on_error=stop said {exc!s:.300}") from None
    except Exception as exc:
        raise FuzzFailure(f"{where}, on_error=stop: {type(exc).__name__}: {exc}") from exc
    try:
        sessions = parse_path(path, on_error="skip")
    except TranscriptError as exc:
        if reported and case.field.on_wrong == "skip" and case.top:
            return Outcome("failed", message=str(exc))  # the record was all there was
        raise FuzzFailure(f"{where}, on_error=skip: nothing imported: {exc!s:.300}") from None
    except Exception as exc:
        raise FuzzFailure(f"{where}, on_error=skip: {type(exc).__name__}: {exc}") from exc
    issues = [i for s in sessions for i in s.skipped]
    for i in issues:
        if "does not read" in i.reason:
            raise FuzzFailure(f"{where}: a field the table does not describe broke a record: {i}")
    if reported and not any(said in i.reason and i.path == str(path) and i.line == case.line for i in issues):
        raise FuzzFailure(f"{where}: no issue names the file, line and field: {[str(i) for i in issues][:3]}")
    for s in sessions:
        _check_session(Case(path.name, "type_confusion", case.index, case.data), path, s)
    _store(sessions, where, conn)
    return Outcome("imported", sessions=len(sessions), skipped=len(issues))


def _store(sessions: list, where: str, conn: Any) -> None:
    """Every parsed session written to a database: the store must take what was parsed."""
    from opctx.dag.store import connect

    from .writer import write_session

    own = conn is None
    conn = connect(":memory:") if own else conn
    try:
        for s in sessions:
            try:
                write_session(s, conn, replace=True)
            except Exception as exc:
                raise FuzzFailure(f"{where}: session {s.session_id} cannot be stored: "
                                  f"{type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            conn.close()
