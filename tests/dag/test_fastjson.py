"""orjson in the store and the importers: the json module's results, byte for byte."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opctx.dag import _fastjson
from opctx.dag._errors import StoreError
from opctx.dag._rows import _ENCODE, _node_data_json
from opctx.dag.nodes import Call

pytestmark = pytest.mark.skipif(_fastjson.orjson is None, reason="orjson is not installed")

dumps_plain = _fastjson.dumps_plain


def loads_plain(data):
    return _fastjson.loads_plain(data, 1000)


def typed(value):
    """``value`` with the type of every scalar in it (1, 1.0 and True compare equal)."""
    if isinstance(value, dict):
        return ("dict", [(k, typed(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


_STORED = {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False}


def stdlib_dumps(value):
    try:
        return _ENCODE(value)
    except (TypeError, ValueError, RecursionError):
        return None


# every kind of scalar, the awkward ones often: tiny, huge and non-finite floats,
# integers past 64 bits, lone surrogates, control characters
_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(), st.floats(min_value=-1e-3, max_value=1e-3),
    st.sampled_from([1e16, 1e-5, 1e-7, 1e-10, 1e22, -0.0, 5e-324, 1.7976931348623157e308]),
    st.text(), st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0xE000)),
)
_keys = st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.none(), st.floats())
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.tuples(inner, inner),
                            st.dictionaries(_keys, inner, max_size=5)),
    max_leaves=30,
)
# what a decoded recording holds: the values orjson must take (not hand back)
_plain_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
    # (orjson decodes floats of 2**63 and more, and json writes them alike: the decoding
    # refuses them only because an integer orjson cannot hold becomes one)
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f == 0 or 1e-4 <= abs(f) < 2.0**63),
    st.text(alphabet=st.characters(exclude_categories=["Cs"])),
)
_plain = st.recursive(
    _plain_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.dictionaries(st.text(alphabet=st.characters(exclude_categories=["Cs"]),
                                                    max_size=8), inner, max_size=5)),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_dumps_is_the_json_modules_text_or_declines(value):
    text = dumps_plain(value)
    if text is not None:
        assert text == stdlib_dumps(value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_plain)
def test_dumps_takes_every_plain_value(value):
    assert dumps_plain(value) == _ENCODE(value)


@pytest.mark.parametrize("value", [1e16, -1e22, 2.0**63, 1.7976931348623157e308, 1e-4, -0.0, 123.456])
def test_dumps_takes_floats_it_writes_alike(value):
    assert dumps_plain({"f": [value]}) == _ENCODE({"f": [value]})


@pytest.mark.parametrize("value", [
    1e-5, 6.26703014325946e-05, 1e-7, 2.3e-9, float("nan"), float("inf"), -float("inf"),
    2**64, -(2**63) - 1, {1: "a"}, {None: 1}, "\ud83d", ["ok", {"k": "\udc00"}],
    enum.Enum("E", "A").A, uuid.UUID(int=1), datetime.datetime(2020, 1, 1), datetime.date(2020, 1, 1),
    dataclasses.make_dataclass("D", [("x", int)])(1), type("S", (str,), {})("s"),
    type("I", (int,), {})(1), type("L", (list,), {})([1]), type("M", (dict,), {})(a=1),
    {"set": {1}}, b"bytes", object(),
])
def test_dumps_declines_what_orjson_writes_otherwise(value):
    assert dumps_plain(value) is None


def test_dumps_declines_deep_and_circular_values():
    deep: list = []
    for _ in range(300):
        deep = [deep]
    assert dumps_plain(deep) is None
    assert _node_data_json(Call(id="n", input=deep)) == _ENCODE({"name": "", "input": deep, "output": None})
    loop: list = []
    loop.append(loop)
    assert dumps_plain(loop) is None
    with pytest.raises(StoreError, match="'input' is not JSON-serialisable"):
        _node_data_json(Call(id="n", input=loop))


@pytest.mark.parametrize("bad", [float("nan"), enum.Enum("E", "A").A, uuid.UUID(int=1)])
def test_a_node_orjson_would_store_is_still_refused(bad):
    with pytest.raises(StoreError, match="'metadata' is not JSON-serialisable"):
        _node_data_json(Call(id="n", metadata={"x": bad}))


def test_a_node_with_a_lone_surrogate_is_still_made_storable():
    node = Call(id="n", output="a\ud83db")
    text = _node_data_json(node)
    assert "\ud83d" not in text and node.metadata["replaced_surrogates"] == 1


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_a_stored_node_is_the_json_modules_text_stored_as_text(value):
    # the row holds exactly the text json writes, as TEXT (never a BLOB), and reads back
    # the same value
    from opctx.dag.store import GraphStore

    store = GraphStore(":memory:", session_id="s")
    node = Call(id="n", output=value, metadata={"k": "é ü 中 🙂"})
    try:
        expected = _node_data_json(Call(id="n", output=value, metadata={"k": "é ü 中 🙂"}))
    except StoreError:
        return
    store.append(node)
    kind, text = store._conn.execute("SELECT typeof(data_json), data_json FROM nodes").fetchone()
    assert kind == "text" and text == expected
    assert typed(store.get("n").output) == typed(json.loads(expected)["output"])


# -- decoding -------------------------------------------------------------------------------

def stdlib_loads(data):
    try:
        return typed(json.loads(data))
    except (ValueError, RecursionError):
        return None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values, st.booleans())
def test_loads_is_the_json_modules_value_or_refuses(value, ascii_only):
    try:
        text = json.dumps(value, ensure_ascii=ascii_only)
    except (ValueError, RecursionError):  # a circular or too deep value: nothing to read
        return
    _read_as_the_json_module_or_refused(text)


def _read_as_the_json_module_or_refused(text: str) -> None:
    # as text and as the bytes a file holds: loads_plain either refuses (the json module's
    # path then reads it) or gives exactly the json module's value
    for data in (text, text.encode("utf-8", "surrogatepass")):
        try:
            got = loads_plain(data)
        except ValueError:
            continue
        assert typed(got) == stdlib_loads(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet='[]{}",:0123456789.eE+-truefalsnNIfiy \t\r\n\\u/\x00\x1f\ud83d\xe9', max_size=40))
def test_loads_never_accepts_what_json_refuses_or_reads_it_otherwise(text):
    _read_as_the_json_module_or_refused(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_plain)
def test_loads_takes_every_plain_value(value):
    text = json.dumps(value, ensure_ascii=False)
    assert typed(loads_plain(text.encode())) == typed(json.loads(text))


@pytest.mark.parametrize("data", [
    b"18446744073709551616", b"-9223372036854775809", b'{"a": [123456789012345678901234567890]}',
    b"NaN", b'{"x": -Infinity}', b"1e999", b'"\\ud83d"', b'"\xed\xa0\x80"', b'"\xff"', b"\xef\xbb\xbf{}",
])
def test_loads_refuses_what_json_reads_otherwise(data):
    with pytest.raises(ValueError):
        loads_plain(data)


@pytest.mark.parametrize("depth", [1, 2, 5, 40])
def test_loads_refuses_nesting_deeper_than_asked(depth):
    for opening, closing in (b"[", b"]"), (b'{"k":', b"}"):
        for extra in (0, 1):
            data = b"[1.5, " + opening * (depth - 1 + extra) + b"0" + closing * (depth - 1 + extra) + b"]"
            if extra:
                with pytest.raises(ValueError, match="nesting"):
                    _fastjson.loads_plain(data, depth)
            else:
                assert _fastjson.loads_plain(data, depth) == json.loads(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_values)
def test_a_stored_payload_reads_back_as_the_json_module_reads_it(value):
    # _rows._loads: orjson where it is exact, json otherwise; from the text or its bytes
    from opctx.dag._rows import _loads

    text = stdlib_dumps(value)
    if text is None or text != text.encode("utf-8", "replace").decode("utf-8"):
        return  # not storable (a lone surrogate is made storable before it is written)
    expected = typed(json.loads(text))
    assert typed(_loads(text)) == expected
    assert typed(_loads(text.encode("utf-8"))) == expected


def test_a_branch_reads_every_payload_as_a_single_node_read_does():
    # get_branch decodes the payloads' bytes (get_many), get_message their text
    from opctx.dag.session_db import DagSessionDB

    db = DagSessionDB(":memory:")
    sid = db.create_session()
    odd = {"big": 2**70, "neg": -(2**64), "f": [1e-7, 1e22, -0.0, 2.5], "s": "é\u2028中\x00"}
    for i, extra in enumerate([odd, {"nested": [[[{"a": None, "b": True}]]]}, {}]):
        db.append_message(sid, {"role": "user", "content": f"m{i}", "extra": extra})
    branch = db.get_branch(sid)
    assert [typed(m) for m in branch] == [typed(db.get_message(sid, m["id"])) for m in branch]
    assert typed(branch[0]["extra"]) == typed(odd)


def test_a_database_made_in_utf16_stores_the_same_text(tmp_path):
    # a file created in UTF-16 before opctx opened it keeps that encoding: its payloads
    # hold the same text (bytes bound as TEXT would be read in UTF-16 there)
    import sqlite3

    from opctx.dag.store import GraphStore

    path = tmp_path / "utf16.db"
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA encoding = 'UTF-16le'")
    raw.execute("CREATE TABLE made_before(x)")
    raw.close()
    store = GraphStore(str(path), session_id="s")
    node = Call(id="n", output="a🙂", metadata={"k": "中文🙂"})
    store.append(node)
    assert store._conn.execute("PRAGMA encoding").fetchone()[0] == "UTF-16le"
    assert store._conn.execute("SELECT data_json FROM nodes").fetchone()[0] == _node_data_json(node)
    assert store.get("n").output == "a🙂"
