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

__all__ = ["MUTATIONS", "Case", "Outcome", "FuzzFailure", "cases", "mutate", "check", "sample_files"]

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


def sample_files(folder: str | os.PathLike) -> list[Path]:
    """The transcript files of a samples folder (side files of a session left out).

    A folder of one run's logged calls (OpenHands completion logs) is walked as one unit;
    here its files are listed one by one: each call alone is a trajectory to damage.
    """
    from .api import iter_transcript_files

    out: list[Path] = []
    for f, _ in iter_transcript_files([folder]):
        p = Path(f)
        out.extend(sorted(x for x in p.iterdir() if x.is_file()) if p.is_dir() else [p])
    return out


# -- the contract -----------------------------------------------------------------------------


def check(case: Case, folder: str | os.PathLike) -> Outcome:
    """Write ``case`` into ``folder`` and parse it both ways; ``FuzzFailure`` on a broken contract."""
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
