"""The fields each importer reads, with their types: one table per record kind, in its module.

A recording comes from outside: any field may hold a value of another type than the
client writes (a list where a model name belongs, a number for a tool name). Each
importer module declares the fields it reads in a ``FieldTable`` (``claude_code.FIELDS``,
``codex.FIELDS``, ``message_lists.MESSAGE_FIELDS``, ...; ``opctx.importers.fuzz.tables()`` lists them all). The
same table does two jobs:

* the importer checks every record against it before reading the record
  (``FieldTable.check_record``), so a wrong-typed field is one clear line,
  ``path:line: field message.model: expected a string, got list``, never an internal
  Python message, and never the loss of more than that record;
* the fuzzer (``opctx.importers.fuzz``) gives every declared field of every importer
  values of each other type and checks that the importer keeps its word.

A ``Field`` names a path inside the record: keys joined by dots, ``[]`` for every item
of a list, ``[type=tool_use]`` (``|`` between alternatives) for the items whose
``type`` is one of those. ``types`` are JSON type names: ``string``, ``number`` (an
integer or a fraction), ``integer``, ``boolean``, ``object``, ``list``. A missing key and
``null`` are always accepted: every importer reads them as "absent". ``when`` limits the
field to records of some kinds (``{"type": ("assistant",)}``). What a wrong type does
(``on_wrong``):

``"skip"``  the record cannot be read as its kind (``message`` is not an object, a
            ``content`` that is neither text nor a list): it is left out, with an
            ``Issue`` naming file, line and field (``on_error="skip"``), or
            ``TranscriptError`` (``on_error="stop"``). The rest of the session imports.
``"text"``  the value is kept as its JSON text (a model name, a tool name, an id, a
            text block: nothing is lost, ``["x"]`` becomes ``'["x"]'``), and the change
            is an ``Issue`` (``"kept as text"``), or ``TranscriptError`` under ``"stop"``.
``"read"``  the importer reads any value of the field without harm (a token count that
            is no number counts 0 and the raw value is kept; a time that is no time
            keeps the previous record's time, with a warning): declared for the fuzzer,
            never reported here.

>>> table = FieldTable("demo", "entry", [Field("message", ("object",)),
...                                      Field("message.model", ("string",), on_wrong="text")])
>>> record = {"message": {"model": ["a", "b"]}}
>>> [str(p) for p in table.problems(record)]
['field message.model: expected a string, got list']
>>> issues = []
>>> table.check_record(record, path="t.jsonl", line=3, on_error="skip", issues=issues), record
(True, {'message': {'model': '["a", "b"]'}})
>>> str(issues[0])
't.jsonl:3: field message.model: expected a string, got list (kept as text)'
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .base import Issue, TranscriptError

__all__ = ["Field", "FieldTable", "FieldProblem", "TYPE_NAMES", "json_type", "wrong_values", "set_at"]

# what each declared type accepts, and how a message names it
TYPE_NAMES = {
    "string": "a string", "number": "a number", "integer": "a whole number", "boolean": "true or false",
    "object": "an object", "list": "a list",
}
_ACTIONS = {"skip": "record skipped", "text": "kept as text", "read": "read as is"}


def json_type(value: Any) -> str:
    """The JSON type of a decoded value, as a message names it (``got list``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _accepts(types: Sequence[str], value: Any) -> bool:
    if value is None:
        return True
    kind = json_type(value)
    if kind == "number":
        return "number" in types or ("integer" in types and isinstance(value, int))
    return kind in types


@dataclass(frozen=True)
class Field:
    """One field a record kind is read with (module docstring)."""

    path: str
    types: tuple[str, ...]
    on_wrong: str = "skip"
    when: Mapping[str, tuple] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.types) - set(TYPE_NAMES)
        if unknown or self.on_wrong not in _ACTIONS:
            raise ValueError(f"field {self.path}: unknown types {sorted(unknown)} or action {self.on_wrong!r}")
        object.__setattr__(self, "steps", _parse(self.path))

    @property
    def expected(self) -> str:
        return " or ".join(TYPE_NAMES[t] for t in self.types)

    def applies_to(self, record: Mapping[str, Any]) -> bool:
        return all(_plain(record.get(key)) in values for key, values in self.when.items())

    def occurrences(self, record: Any) -> Iterator[tuple[str, Any, Any, Any]]:
        """``(concrete path, value, holder, key)`` of every place the field is in ``record``."""
        yield from _resolve(record, self.steps, "")  # type: ignore[attr-defined]

    def places(self, record: Any) -> list[str]:
        """The concrete paths where the field is in ``record`` or could be: a key path
        that stops at a missing key counts too (the fuzzer sets fields the samples leave
        out, creating the objects on the way with ``set_at``)."""
        out: list[str] = []
        _places(record, self.steps, "", out)  # type: ignore[attr-defined]
        return out


def _places(value: Any, steps: list[tuple], where: str, out: list[str]) -> None:
    step, rest = steps[0], steps[1:]
    if step[0] == "key":
        if not isinstance(value, dict):
            return
        here = f"{where}.{step[1]}" if where else step[1]
        if step[1] in value:
            if rest:
                _places(value[step[1]], rest, here, out)
            else:
                out.append(here)
        elif all(s[0] == "key" for s in rest):
            out.append(here + "".join(f".{s[1]}" for s in rest))
        return
    if not isinstance(value, list):
        return
    _, key, allowed = step
    for i, item in enumerate(value):
        if key is None or (isinstance(item, dict) and _plain(item.get(key)) in allowed):
            if rest:
                _places(item, rest, f"{where}[{i}]", out)
            else:
                out.append(f"{where}[{i}]")


_CONCRETE = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def set_at(record: Any, where: str, value: Any) -> None:
    """Put ``value`` at the concrete path ``where`` (``message.content[2].name``) of
    ``record``, creating the missing objects on the way."""
    steps: list[Any] = [m.group(1) if m.group(1) else int(m.group(2)) for m in _CONCRETE.finditer(where)]
    target = record
    for step in steps[:-1]:
        if isinstance(step, str) and step not in target:
            target[step] = {}
        target = target[step]
    target[steps[-1]] = value


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) or value is None else None


_STEP = re.compile(r"([^.\[\]]+)|\[(?:([^=\]]+)=([^\]]+))?\]")


def _parse(path: str) -> list[tuple]:
    """``message.content[type=tool_use].name`` -> [("key", "message"), ("key", "content"),
    ("each", "type", ("tool_use",)), ("key", "name")]."""
    steps: list[tuple] = []
    for m in _STEP.finditer(path):
        if m.group(1):
            steps.append(("key", m.group(1)))
        else:
            steps.append(("each", m.group(2), tuple(m.group(3).split("|")) if m.group(3) else None))
    return steps


def _resolve(value: Any, steps: list[tuple], where: str) -> Iterator[tuple[str, Any, Any, Any]]:
    step, rest = steps[0], steps[1:]
    if step[0] == "key":
        if not isinstance(value, dict) or step[1] not in value:
            return
        here = f"{where}.{step[1]}" if where else step[1]
        if not rest:
            yield here, value[step[1]], value, step[1]
        else:
            yield from _resolve(value[step[1]], rest, here)
        return
    if not isinstance(value, list):
        return
    _, key, allowed = step
    for i, item in enumerate(value):
        if key is not None and not (isinstance(item, dict) and _plain(item.get(key)) in allowed):
            continue
        if not rest:
            yield f"{where}[{i}]", item, value, i
        else:
            yield from _resolve(item, rest, f"{where}[{i}]")


@dataclass
class FieldProblem:
    """A field of a record whose value is not of a declared type."""

    path: str
    field: Field
    value: Any

    def __str__(self) -> str:
        return f"field {self.path}: expected {self.field.expected}, got {json_type(self.value)}"


class FieldTable:
    """The fields one kind of record is read with, and the check that uses them.

    ``formats``: the importer formats whose records these are (the fuzzer picks the
    sample files by it). ``is_record(value, top)``: whether a JSON value is such a
    record (``top``: it is a whole JSON Lines line or document), so the fuzzer can find
    the records inside a file. ``within(document, path)``: whether the importer reads the
    record at that path of a whole document (where a format carries two copies of its
    messages and reads one of them); by default every record found is read.
    """

    def __init__(self, formats: str | Sequence[str], record: str, fields: Sequence[Field], *,
                 is_record: Callable[[Any, bool], bool] | None = None,
                 within: Callable[[Any, tuple], bool] | None = None) -> None:
        self.formats = (formats,) if isinstance(formats, str) else tuple(formats)
        self.record = record
        self.fields = tuple(fields)
        self.is_record = is_record or (lambda value, top: top and isinstance(value, dict))
        self.within = within or (lambda document, path: True)
        self._when_keys = tuple(sorted({k for f in self.fields for k in f.when}))
        self._compiled: dict[tuple, _Trie] = {}

    def __repr__(self) -> str:
        return f"FieldTable({'/'.join(self.formats)} {self.record}, {len(self.fields)} fields)"

    def _checker(self, record: dict) -> _Trie:
        """The compiled check of the non-``read`` fields that apply to ``record``.

        Why: ``check_record`` runs on every line of a transcript, and walking each
        declared field on its own (a generator per path, ``when`` re-tested per field)
        was half the time of importing a large file. Which fields apply depends only on
        the record's ``when`` keys (its ``type``), so the fields are compiled once per
        such combination into one tree that walks each shared prefix once. A hostile
        file with many distinct ``type`` values gets uncached trees past ``_MAX_CACHED``.
        """
        keys = self._when_keys
        if len(keys) == 1:  # every table but one limits its fields by one key (``type``)
            value = record.get(keys[0])
            key: tuple = (value if type(value) is str else _plain(value),)
        else:
            key = tuple(_plain(record.get(k)) for k in keys)
        trie = self._compiled.get(key)
        if trie is None:
            trie = _Trie.build([f for f in self.fields if f.on_wrong != "read" and f.applies_to(record)])
            if len(self._compiled) < _MAX_CACHED:
                self._compiled[key] = trie
        return trie

    def problems(self, record: Any) -> list[FieldProblem]:
        """Every field of ``record`` whose value is not of its declared type (``read``
        fields included: the caller decides what to do)."""
        if not isinstance(record, dict):
            return []
        out = []
        for f in self.fields:
            if not f.applies_to(record):
                continue
            for where, value, _holder, _key in f.occurrences(record):
                if not _accepts(f.types, value):
                    out.append(FieldProblem(where, f, value))
        return out

    def check_record(self, record: Any, *, path: str, line: int | None, on_error: str,
                     issues: list[Issue] | None, label: str = "") -> bool:
        """Check ``record`` before it is read: ``True`` to read it (values of ``text``
        fields replaced by their JSON text, in place), ``False`` to leave it out (an
        ``Issue`` says why). ``on_error="stop"``: ``TranscriptError`` at the first problem.
        ``label`` goes before the field in the message (``message 3: field ...``)."""
        if not isinstance(record, dict) or not self._checker(record).finds_wrong(record):
            return True  # the common case: no field to report, nothing to change
        found = [p for p in self.problems(record) if p.field.on_wrong != "read"]
        if not found:  # pragma: no cover (the compiled check and ``problems`` agree)
            return True
        prefix = f"{label}: " if label else ""
        if on_error != "skip":
            raise TranscriptError(path, line, prefix + str(found[0]))
        readable = all(p.field.on_wrong == "text" for p in found)
        for p in found:
            action = "kept as text" if readable else _ACTIONS["skip"].replace("record", self.record)
            if issues is not None:
                issues.append(Issue(path, line, prefix + str(p), action))
        if readable:
            for p in found:
                _keep_as_text(record, p)
        return readable


_MAX_CACHED = 64  # compiled checks kept per table (one per distinct record kind)

# the exact types each declared type accepts at a glance (anything else: ``_accepts``)
_EXACT = {"string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,),
          "object": (dict,), "list": (list,)}


class _Trie:
    """Fields compiled into one tree of their path steps (``FieldTable._checker``).

    ``finds_wrong(record)`` answers only "is some value of a wrong type?", with no
    paths built; the caller then asks ``FieldTable.problems`` for the full report, so
    messages and repairs come from one place. A key whose field ends there (a leaf,
    most of them) is checked in place, without a call of its own.
    """

    __slots__ = ("checks", "keys", "eaches", "leaves", "inner")

    def __init__(self) -> None:
        self.checks: list[tuple[frozenset, tuple[str, ...]]] = []  # (exact types, types)
        self.keys: dict[str, _Trie] = {}
        self.eaches: dict[tuple, _Trie] = {}
        self.leaves: tuple = ()  # (key, its checks): keys whose fields end there
        self.inner: tuple = ()  # (key, subtree): keys with fields below them

    @classmethod
    def build(cls, fields: Sequence[Field]) -> _Trie:
        root = cls()
        for f in fields:
            node = root
            for step in f.steps:  # type: ignore[attr-defined]
                table = node.keys if step[0] == "key" else node.eaches
                index = step[1] if step[0] == "key" else step[1:]
                node = table.setdefault(index, cls())
            exact = frozenset(t for name in f.types for t in _EXACT[name]) | {type(None)}
            node.checks.append((exact, f.types))
        root._split()
        return root

    def _split(self) -> None:
        self.leaves = tuple((k, tuple(c.checks)) for k, c in self.keys.items() if not (c.keys or c.eaches))
        self.inner = tuple((k, c) for k, c in self.keys.items() if c.keys or c.eaches)
        for child in (*self.keys.values(), *self.eaches.values()):
            child._split()

    def finds_wrong(self, value: Any) -> bool:
        for exact, types in self.checks:
            if type(value) not in exact and not _accepts(types, value):
                return True
        if isinstance(value, dict):
            get = value.get
            for name, checks in self.leaves:
                v = get(name)  # absent and null are both accepted
                if v is not None:
                    for exact, types in checks:
                        if type(v) not in exact and not _accepts(types, v):
                            return True
            for name, child in self.inner:
                if name in value and child.finds_wrong(value[name]):
                    return True
        elif self.eaches and isinstance(value, list):
            for (key, allowed), child in self.eaches.items():
                for item in value:
                    if (key is None or (isinstance(item, dict) and _plain(item.get(key)) in allowed)) \
                            and child.finds_wrong(item):
                        return True
        return False


def _keep_as_text(record: dict, problem: FieldProblem) -> None:
    for where, value, holder, key in problem.field.occurrences(record):
        if where == problem.path:
            holder[key] = json.dumps(value, ensure_ascii=False)
            return


# one value of each type: what the fuzzer puts where another type belongs
_SAMPLES: dict[str, Any] = {
    "string": "opctx fuzz", "number": 2.5, "integer": 7, "boolean": True,
    "object": {"opctx": "fuzz"}, "list": ["opctx", "fuzz"],
}


def wrong_values(f: Field) -> list[Any]:
    """A value of every JSON type the field does not accept (``null`` is always accepted)."""
    return [v for kind, v in _SAMPLES.items() if not _accepts(f.types, v)]
