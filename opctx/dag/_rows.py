"""How a ``Call`` is stored in a ``nodes`` row, and read back.

``_node_data_json`` packs ``name / input / output / reads / metadata`` into
``data_json`` (standard JSON: ``allow_nan=False``; a value that is not JSON is a
``StoreError`` naming the node and the field; orjson writes it where its text is
the ``json`` module's, see ``_fastjson``). ``_row_to_call`` builds a ``Call``
from a trusted row; ``_StoredCall`` / ``_row_to_lazy_call`` are the same with the
JSON payload decoded on first use (what ``GraphStore.load`` returns), and
``_graph_from_sorted`` builds a ``Graph`` of rows already in seq order without
``Graph.add``'s per-node checks. ``_NODE_COLUMNS`` is the column list every
SELECT of a node uses, in the order these functions expect.
"""

from __future__ import annotations

import json
from typing import Any

from ._errors import StoreError
from ._fastjson import dumps_plain, loads_plain
from ._text import make_node_storable
from .nodes import Call, Graph

_DUMPS_KW = {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False}
# built once: ``json.dumps`` with options builds an encoder per call (every node stored)
_ENCODE = json.JSONEncoder(**_DUMPS_KW).encode


def _node_data_json(node: Call) -> str:
    data: dict[str, Any] = {"name": node.name, "input": node.input, "output": node.output}
    if node.reads:
        data["reads"] = node.reads
    if node.metadata:
        data["metadata"] = node.metadata
    if dumps_plain is not None:  # orjson: the same text, or None where it might differ
        text = dumps_plain(data)
        if text is not None:
            return text  # orjson refuses lone surrogates: nothing to make storable
    try:
        text = _ENCODE(data)
    except (TypeError, ValueError):
        pass
    else:  # lone surrogates ("\ud83d" is valid JSON) cannot be stored: see dag/_text.py
        return _node_data_json(node) if make_node_storable(node, text) else text
    for field in ("input", "output", "metadata", "reads", "name"):
        try:
            json.dumps(getattr(node, field), **_DUMPS_KW)
        except (TypeError, ValueError) as e:
            raise StoreError(
                f"node {node.id!r}: field {field!r} is not JSON-serialisable ({e})"
            ) from None
    raise StoreError(f"node {node.id!r}: not JSON-serialisable")  # pragma: no cover


# No nesting limit of our own when reading a stored payload: whatever orjson refuses
# (its own depth limit included) is decoded by ``json``, as before.
_NO_DEPTH_LIMIT = 1 << 30


def _loads(data_json: str | bytes) -> Any:
    """A stored payload (its text, or the text's UTF-8 bytes) decoded: by orjson where it
    gives ``json.loads``'s exact value (``_fastjson.loads_plain``), else by ``json``.
    Reading a branch back after every compaction made ``json.loads`` most of the read."""
    if loads_plain is not None:
        try:
            return loads_plain(data_json, _NO_DEPTH_LIMIT)
        except ValueError:
            pass
    return json.loads(data_json)


def _row_to_call(row: tuple) -> Call:
    """Build a Call from a trusted row without re-running Call.__init__'s checks."""
    nid, role, pred, caller, created_at, seq, data_json = row
    data = _loads(data_json)
    node = Call.__new__(Call)
    node.id = nid
    node.seq = seq
    node.created_at = created_at
    node.role = role
    node.name = data.get("name", "")
    node.input = data.get("input")
    node.output = data.get("output")
    node._caller = caller
    node._predecessor = pred
    node.reads = data.get("reads") or []
    node.metadata = data.get("metadata") or {}
    return node


# The payload fields of a Call, and the slot descriptors that hold their values.
_PAYLOAD_SLOTS = {name: Call.__dict__[name] for name in ("name", "input", "output", "reads", "metadata")}


class _StoredCall(Call):
    """A ``Call`` read by ``load()`` whose JSON payload is decoded on first use.

    Why: on real transcripts the payload (tool outputs, code) is ~1-2 KB a node,
    and ``json.loads`` of it dominates loading a large session, while a chat turn
    or a compaction touches only the nodes it renders. The edges, ``seq``, ``id``,
    ``role`` and ``created_at`` are plain columns and set eagerly; ``name``,
    ``input``, ``output``, ``reads`` and ``metadata`` decode together on the first
    read or write of any of them. It is a ``Call`` in every respect
    (``isinstance``, ``==``, ``copy``, pickling, ``Graph.update``).
    """

    __slots__ = ("_payload",)

    def _decode(self) -> None:
        payload = self._payload
        if payload is None:
            return
        data = _loads(payload)
        slots = _PAYLOAD_SLOTS
        slots["name"].__set__(self, data.get("name", ""))
        slots["input"].__set__(self, data.get("input"))
        slots["output"].__set__(self, data.get("output"))
        slots["reads"].__set__(self, data.get("reads") or [])
        slots["metadata"].__set__(self, data.get("metadata") or {})
        self._payload = None


def _lazy_payload_field(slot_name: str) -> property:
    slot = _PAYLOAD_SLOTS[slot_name]

    def fget(self: _StoredCall) -> Any:
        if self._payload is not None:
            self._decode()
        return slot.__get__(self, Call)

    def fset(self: _StoredCall, value: Any) -> None:
        if self._payload is not None:
            self._decode()  # decode first so the other fields are not lost
        slot.__set__(self, value)

    return property(fget, fset, doc=f"Call.{slot_name}, decoded on first use")


for _name in _PAYLOAD_SLOTS:
    setattr(_StoredCall, _name, _lazy_payload_field(_name))
del _name


def _row_to_lazy_call(row: tuple) -> Call:
    nid, role, pred, caller, created_at, seq, data_json = row
    node = _StoredCall.__new__(_StoredCall)
    node._payload = data_json
    node.id = nid
    node.seq = seq
    node.created_at = created_at
    node.role = role
    node._caller = caller
    node._predecessor = pred
    return node


def _graph_from_sorted(nodes: list[Call]) -> Graph:
    """A Graph of nodes already in strictly increasing seq order with unique ids.

    Fills the same indexes ``Graph.add`` keeps, without its per-node checks
    (the database's UNIQUE constraints already guarantee them). Tested against
    a graph built with ``Graph.add``.
    """
    graph = Graph()
    children: dict[str | None, list[str]] = {}
    callees: dict[str | None, list[str]] = {}
    for node in nodes:
        children.setdefault(node._predecessor, []).append(node.id)
        callees.setdefault(node._caller, []).append(node.id)
    graph.nodes = {n.id: n for n in nodes}
    graph._by_seq = {n.seq: n for n in nodes}
    graph._seqs = [n.seq for n in nodes]
    graph._children = children
    graph._callees = callees
    graph._next_seq = nodes[-1].seq + 1 if nodes else 0
    return graph


_NODE_COLUMNS = "id, type, predecessor, caller, created_at, seq, data_json"
# The same with the payload as its UTF-8 bytes, for reads that decode every payload at
# once (``GraphStore.get_many``: a branch): no ``str`` of each payload is made only to be
# encoded back to UTF-8 by orjson; ``_loads`` takes either, with the same value.
_NODE_COLUMNS_BYTES = "id, type, predecessor, caller, created_at, seq, CAST(data_json AS BLOB)"
