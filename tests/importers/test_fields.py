"""The compiled field check (``FieldTable.check_record``'s fast path) agrees with
``FieldTable.problems``, the walk that names every wrong field: on every record of every
sample, and on every record the type-confusion fuzzer makes (each declared field given
each JSON type it does not accept)."""

from __future__ import annotations

from pathlib import Path

from opctx.importers.detect import detect
from opctx.importers.fields import Field, FieldTable
from opctx.importers.fuzz import _documents, _records, field_cases, sample_files, tables

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _agree(table: FieldTable, record: dict) -> bool:
    """The compiled verdict; asserted equal to the full walk's."""
    slow = any(p.field.on_wrong != "read" for p in table.problems(record))
    fast = table._checker(record).finds_wrong(record)
    assert fast == slow, (table, record)
    return fast


def test_compiled_check_agrees_on_every_fuzzed_record():
    samples = sample_files(SAMPLES)
    wrong = right = 0
    for sample in samples:
        fmt = detect(sample)
        for _, doc in _documents(sample.read_bytes()):
            for table in (t for t in tables() if fmt in t.formats):
                for _, record in _records(doc, table):
                    right += not _agree(table, record)
    for case in field_cases(samples, per_field=2, seed=3):
        for _, doc in _documents(case.data):
            for _, record in _records(doc, case.table):
                wrong += _agree(case.table, record)
    assert right > 100 and wrong > 100  # both verdicts were exercised


def test_compiled_check_types():
    table = FieldTable("demo", "entry", [
        Field("type", ("string",)),
        Field("n", ("integer",), when={"type": ("a",)}),
        Field("x", ("number",), "read"),
        Field("items[kind=t].name", ("string",), "text"),
        Field("items[].id", ("string", "number")),
    ])
    assert not _agree(table, {"type": "a", "n": 3, "x": "no", "items": [{"kind": "t", "name": "ok", "id": 2.5}]})
    assert _agree(table, {"type": "a", "n": True})  # a boolean is no whole number
    assert _agree(table, {"type": "a", "n": 1.5})
    assert not _agree(table, {"type": "b", "n": 1.5})  # the field applies to type "a" only
    assert _agree(table, {"items": [{"kind": "t", "name": ["x"]}]})
    assert not _agree(table, {"items": [{"kind": "u", "name": ["x"]}, None, 3]})
    assert _agree(table, {"items": [{"id": {}}]})
    assert not _agree(table, {"type": None, "items": {"kind": "t", "name": 1}})  # not a list: not read
