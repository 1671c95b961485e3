"""The node model: one node type, ``Call``, and the in-memory ``Graph``.

Everything that happens in an agent's life is a ``Call``: a user message
(``role="user"``), an LLM call (``role="llm"``) or a function / tool call
(``role="code"``). Three kinds of edge connect them (spec §0.1; docs/design.md):

``caller``
    who started me (nesting: an ``@agentic_function`` frame, or the LLM call
    that asked for a tool). ``called_by`` is a read/write alias.
``predecessor``
    who I follow in the conversation. A node with several children is a fork;
    branches exist because ``predecessor`` is *not* time order.
``reads``
    which nodes an LLM call had in its prompt (fan-in).

Time order is the integer ``seq`` alone, assigned on ``Graph.add`` (and by the
store inside its write transaction). It is not an edge.

Choices where the specification is open, recorded here and tested:

* "No edge" is ``None`` for both ``caller`` and ``predecessor``. The
  specification's top-level ``called_by=""`` is accepted and normalised to
  ``None`` so that one test (``node.caller is None``) means one thing.
* ``Graph.update`` is the only mutation. Known fields are replaced, ``metadata``
  is merged key by key, and any other keyword (``status=...``) lands in
  ``metadata``. ``id``, ``seq`` and ``role`` can never change.
* ``compute_reads`` implements the table of §0.7; see its docstring.
* ``branch_terminals`` / ``branch_internal`` follow the ``caller`` edges: the
  branches of a spawn are the paths of its caller subtree, a terminal is a
  node of that subtree that called nothing.

Example
-------
>>> g = Graph()
>>> u = g.add(UserMessage("hello"))
>>> m = g.add(ModelCall(model="gpt-4o", reads=[u.id], output="hi!", predecessor=u.id))
>>> [n.seq for n in g]
[0, 1]
>>> last_user_message(g).content
'hello'
>>> compute_reads(g) == [u.id, m.id]
True
"""

from __future__ import annotations

import bisect
import copy
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "ROLES",
    "EXPOSE_MODES",
    "Call",
    "Graph",
    "UserMessage",
    "ModelCall",
    "FunctionCall",
    "new_id",
    "minted_id",
    "MINTED_ID",
    "last_user_message",
    "linear_back_to",
    "branch_terminals",
    "branch_internal",
    "fold_history",
    "compute_reads",
    "RENDER_RANGE_KEYS",
    "check_render_range",
]

ROLES = ("user", "llm", "code")
EXPOSE_MODES = ("io", "full", "hidden")

# Fields that Graph.update may replace outright. id/seq/role are identity.
_UPDATABLE = frozenset({"created_at", "name", "input", "output", "caller", "predecessor", "reads"})

Clock = Callable[[], float]


def new_id(prefix: str = "n") -> str:
    """A fresh node id: ``prefix`` + 16 hex digits of a uuid4.

    Spelled out (the first 16 hex digits of a uuid4 are 12 random ones, the version
    digit ``4``, 3 random ones) because ``uuid.UUID``'s checks cost more than the
    random bytes, and an import makes one id per node.
    """
    return minted_id(prefix, os.urandom(8).hex())


def minted_id(prefix: str, hex16: str) -> str:
    """The id ``new_id`` makes from 16 hex digits (the 13th becomes the version digit
    ``4``): the one home of its shape, which ``MINTED_ID`` recognises."""
    return f"{prefix}_{hex16[:12]}4{hex16[13:16]}"


# an id of ``new_id``'s making (group 1: its prefix)
MINTED_ID = re.compile(r"([a-z]+)_[0-9a-f]{12}4[0-9a-f]{3}")


def _norm_edge(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"edge ids must be str or None, got {type(value).__name__}")
    return value


class Call:
    """One node of the DAG. See the module docstring for the three edge kinds.

    ``called_by`` is accepted as a keyword and as an attribute, as an alias of
    ``caller``. An unknown ``role`` is refused at construction.
    """

    __slots__ = (
        "id",
        "seq",
        "created_at",
        "role",
        "name",
        "input",
        "output",
        "_caller",
        "_predecessor",
        "reads",
        "metadata",
    )

    def __init__(
        self,
        id: str | None = None,
        seq: int = -1,
        created_at: float | None = None,
        role: str = "user",
        name: str = "",
        input: Any = None,
        output: Any = None,
        caller: str | None = None,
        predecessor: str | None = None,
        reads: Iterable[str] | None = None,
        metadata: dict | None = None,
        *,
        called_by: str | None = None,
    ) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}: a Call's role is one of {', '.join(ROLES)}")
        if caller is not None and called_by is not None and caller != called_by:
            raise ValueError("caller and called_by are aliases; pass one of them")
        self.id = id or new_id(role[0])
        if not isinstance(self.id, str):
            raise TypeError(f"Call.id must be a str, got {type(self.id).__name__}")
        self.seq = int(seq)
        self.created_at = time.time() if created_at is None else float(created_at)
        self.role = role
        self.name = name or ""
        self.input = input
        self.output = output
        self._caller = _norm_edge(caller if caller is not None else called_by)
        self._predecessor = _norm_edge(predecessor)
        self.reads = list(reads) if reads else []
        self.metadata = dict(metadata) if metadata else {}

    # -- edges -------------------------------------------------------------
    @property
    def caller(self) -> str | None:
        return self._caller

    @caller.setter
    def caller(self, value: str | None) -> None:
        self._caller = _norm_edge(value)

    called_by = caller

    @property
    def predecessor(self) -> str | None:
        return self._predecessor

    @predecessor.setter
    def predecessor(self, value: str | None) -> None:
        self._predecessor = _norm_edge(value)

    # -- role checks (isinstance on the factories is gone, see §0.1) --------
    def is_user(self) -> bool:
        return self.role == "user"

    def is_llm(self) -> bool:
        return self.role == "llm"

    def is_code(self) -> bool:
        return self.role == "code"

    # -- legacy aliases ------------------------------------------------------
    @property
    def content(self) -> Any:
        return self.output

    @content.setter
    def content(self, value: Any) -> None:
        self.output = value

    @property
    def result(self) -> Any:
        return self.output

    @result.setter
    def result(self, value: Any) -> None:
        self.output = value

    @property
    def model(self) -> str:
        return self.name

    @model.setter
    def model(self, value: str) -> None:
        self.name = value

    @property
    def function_name(self) -> str:
        return self.name

    @function_name.setter
    def function_name(self, value: str) -> None:
        self.name = value

    @property
    def arguments(self) -> Any:
        return self.input

    @arguments.setter
    def arguments(self, value: Any) -> None:
        self.input = value

    @property
    def system_prompt(self) -> str | None:
        return self.input.get("system") if isinstance(self.input, dict) else None

    @system_prompt.setter
    def system_prompt(self, value: str | None) -> None:
        if not isinstance(self.input, dict):
            self.input = {} if self.input is None else {"value": self.input}
        self.input["system"] = value

    @property
    def status(self) -> str | None:
        """``metadata["status"]`` (``"running"``, ``"ok"``, ``"error"``) if any."""
        return self.metadata.get("status")

    # -- value semantics -----------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "seq": self.seq,
            "created_at": self.created_at,
            "role": self.role,
            "name": self.name,
            "input": self.input,
            "output": self.output,
            "caller": self._caller,
            "predecessor": self._predecessor,
            "reads": list(self.reads),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Call:
        d = dict(d)
        if "called_by" in d and "caller" not in d:
            d["caller"] = d.pop("called_by")
        d.pop("called_by", None)
        return cls(**d)

    def copy(self, **changes: Any) -> Call:
        """A deep copy with ``changes`` applied (``id=`` to give it a new identity)."""
        d = copy.deepcopy(self.to_dict())
        if "called_by" in changes:
            # The alias must win over the copied "caller", not be dropped by from_dict.
            changes = dict(changes)
            changes["caller"] = changes.pop("called_by")
        d.update(changes)
        return Call.from_dict(d)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Call):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        out = self.output if not isinstance(self.output, str) else self.output[:40]
        return (
            f"Call(id={self.id!r}, seq={self.seq}, role={self.role!r}, name={self.name!r}, "
            f"output={out!r}, caller={self._caller!r}, predecessor={self._predecessor!r})"
        )


# -- backward-compatible factories (spec §0.1, §7) ---------------------------


def UserMessage(content: Any = "", **kw: Any) -> Call:  # noqa: N802 - legacy name
    """``Call(role="user", output=content)``."""
    kw.setdefault("name", "user")
    return Call(role="user", output=content, **kw)


def ModelCall(  # noqa: N802 - legacy name
    model: str = "",
    reads: Iterable[str] | None = None,
    output: Any = None,
    system_prompt: str | None = None,
    **kw: Any,
) -> Call:
    """``Call(role="llm", name=model, reads=reads, output=output, input={"system": ...})``."""
    inp = kw.pop("input", None)
    if inp is None:
        inp = {"system": system_prompt}
    elif system_prompt is not None:
        inp = {**inp, "system": system_prompt}
    return Call(role="llm", name=model, reads=reads, output=output, input=inp, **kw)


def FunctionCall(  # noqa: N802 - legacy name
    function_name: str = "",
    arguments: Any = None,
    result: Any = None,
    called_by: str | None = None,
    **kw: Any,
) -> Call:
    """``Call(role="code", name=function_name, input=arguments, output=result, caller=called_by)``."""
    if called_by is not None:
        kw["caller"] = called_by
    return Call(role="code", name=function_name, input=arguments, output=result, **kw)


# -- the container -----------------------------------------------------------


class Graph:
    """An in-memory DAG: ``nodes`` by id, kept in ``seq`` order.

    ``add`` assigns ``seq`` (or accepts one already assigned by a store) and
    refuses duplicate ids and duplicate seqs. Indexes of children by
    ``predecessor`` and callees by ``caller`` are kept incrementally, so the
    helpers below never scan the whole graph to find a neighbour.
    """

    def __init__(self, nodes: Iterable[Call] = ()) -> None:
        self.nodes: dict[str, Call] = {}
        self._next_seq = 0
        self._seqs: list[int] = []  # sorted
        self._by_seq: dict[int, Call] = {}
        self._children: dict[str | None, list[str]] = {}
        self._callees: dict[str | None, list[str]] = {}
        for n in nodes:
            self.add(n)

    # -- mutation --------------------------------------------------------------
    def add(self, node: Call) -> Call:
        if not isinstance(node, Call):
            raise TypeError(f"Graph.add takes a Call, got {type(node).__name__}")
        if node.id in self.nodes:
            raise ValueError(f"duplicate node id {node.id!r}: nodes are append-only")
        if node.seq < 0:
            node.seq = self._next_seq
        elif node.seq in self._by_seq:
            raise ValueError(f"duplicate seq {node.seq} (node {node.id!r})")
        self._next_seq = max(self._next_seq, node.seq + 1)
        self.nodes[node.id] = node
        self._by_seq[node.seq] = node
        if not self._seqs or node.seq > self._seqs[-1]:
            self._seqs.append(node.seq)
        else:
            bisect.insort(self._seqs, node.seq)
        self._children.setdefault(node.predecessor, []).append(node.id)
        self._callees.setdefault(node.caller, []).append(node.id)
        return node

    def update(self, node_id: str, **fields: Any) -> Call:
        """Change a node in place: the one exception to append-only (§0.1).

        Used by ``@agentic_function`` to fill its running placeholder.
        """
        node = self[node_id]
        for key in ("id", "seq", "role"):
            if key in fields:
                raise ValueError(f"Graph.update cannot change {key!r}")
        if "called_by" in fields:
            fields["caller"] = fields.pop("called_by")
        meta = fields.pop("metadata", None)
        old_pred, old_caller = node.predecessor, node.caller
        for key, value in fields.items():
            if key in _UPDATABLE:
                setattr(node, key, value)
            else:
                node.metadata[key] = value
        if meta:
            node.metadata.update(meta)
        if node.predecessor != old_pred:
            self._children[old_pred].remove(node.id)
            self._children.setdefault(node.predecessor, []).append(node.id)
        if node.caller != old_caller:
            self._callees[old_caller].remove(node.id)
            self._callees.setdefault(node.caller, []).append(node.id)
        return node

    # -- lookup ----------------------------------------------------------------
    def __getitem__(self, node_id: str) -> Call:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise KeyError(f"no node {node_id!r} in this graph") from None

    def get(self, node_id: str | None, default: Call | None = None) -> Call | None:
        return self.nodes.get(node_id, default) if node_id is not None else default

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.nodes

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Call]:
        """Nodes in ``seq`` order."""
        by_seq = self._by_seq
        return (by_seq[s] for s in self._seqs)

    def by_seq(self, seq: int) -> Call | None:
        return self._by_seq.get(seq)

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def last(self) -> Call | None:
        return self._by_seq[self._seqs[-1]] if self._seqs else None

    def children(self, node_id: str | None) -> list[Call]:
        """Nodes whose ``predecessor`` is ``node_id``, in seq order (``None``: roots)."""
        return sorted((self.nodes[i] for i in self._children.get(node_id, ())), key=_seq)

    def callees(self, node_id: str | None) -> list[Call]:
        """Nodes whose ``caller`` is ``node_id``, in seq order (``None``: top level)."""
        return sorted((self.nodes[i] for i in self._callees.get(node_id, ())), key=_seq)

    def roots(self) -> list[Call]:
        return self.children(None)

    def chain(self, head_id: str) -> list[Call]:
        """The conversation chain ending at ``head_id``: walk ``predecessor`` to the root.

        Returned root first. A cycle (only possible through corrupt data) raises.
        """
        out: list[Call] = []
        seen: set[str] = set()
        node = self.get(head_id)
        if node is None:
            raise KeyError(f"no node {head_id!r} in this graph")
        while node is not None:
            if node.id in seen:
                raise ValueError(f"predecessor cycle through {node.id!r}")
            seen.add(node.id)
            out.append(node)
            node = self.get(node.predecessor)
        out.reverse()
        return out

    def subtree(self, node_id: str) -> list[Call]:
        """All nodes reachable from ``node_id`` through ``caller`` edges (not itself), seq order."""
        out: list[Call] = []
        stack = list(self._callees.get(node_id, ()))
        while stack:
            nid = stack.pop()
            out.append(self.nodes[nid])
            stack.extend(self._callees.get(nid, ()))
        out.sort(key=_seq)
        return out

    def __repr__(self) -> str:
        return f"Graph({len(self)} nodes, next_seq={self._next_seq})"


def _seq(node: Call) -> int:
    return node.seq


# -- algorithms (spec §0.1) ---------------------------------------------------


def last_user_message(graph: Graph) -> Call | None:
    """The user-role node with the highest seq, or ``None``."""
    for seq in reversed(graph._seqs):
        node = graph._by_seq[seq]
        if node.role == "user":
            return node
    return None


def linear_back_to(graph: Graph, target: Call | str) -> list[Call]:
    """Every node with ``seq >= target.seq``, in seq order."""
    t = graph[target] if isinstance(target, str) else target
    i = bisect.bisect_left(graph._seqs, t.seq)
    return [graph._by_seq[s] for s in graph._seqs[i:]]


def branch_terminals(spawn_id: str, graph: Graph) -> list[Call]:
    """The ends of every branch spawned by ``spawn_id``, following ``caller`` edges.

    A terminal is a node of the spawn's caller subtree that called nothing itself.
    Returned in seq order; a spawn that called nothing has no terminals.
    """
    return [n for n in graph.subtree(spawn_id) if not graph._callees.get(n.id)]


def branch_internal(spawn_id: str, terminal_id: str, graph: Graph) -> list[Call]:
    """The nodes of one branch: from just below ``spawn_id`` down to ``terminal_id``.

    Walks ``caller`` up from the terminal; raises ``ValueError`` when the terminal
    is not below the spawn.
    """
    out: list[Call] = []
    node = graph[terminal_id]
    while node.id != spawn_id:
        out.append(node)
        if node.caller is None:
            raise ValueError(f"{terminal_id!r} is not in the caller subtree of {spawn_id!r}")
        node = graph[node.caller]
    out.reverse()
    return out


def _is_system(node: Call) -> bool:
    """An llm node that is really a system message (a compaction summary, §0.4 mapping)."""
    return node.role == "llm" and node.metadata.get("role") == "system"


def _final_llm(turn: list[Call]) -> Call | None:
    for node in reversed(turn):
        if node.role == "llm" and node.caller is None and not _is_system(node):
            return node
    return None


def fold_history(current_id: str, graph: Graph) -> list[Call]:
    """Fold the conversation up to ``current_id`` by turn (§0.6).

    Every earlier turn keeps only its ``(user, final llm)`` pair; the current turn
    (from its user message to ``current_id``) is kept whole. The conversation is
    the ``predecessor`` chain ending at ``current_id``; for a graph built without
    predecessor links, the top-level nodes (no ``caller``) up to its seq.

    System nodes (an llm node with ``metadata.role == "system"``: a compaction
    summary, an imported system message) of earlier turns are kept too, in chain
    order, and never count as a turn's final llm. Why: a summary stands for the
    whole folded past; when a recorded compaction continues with copied
    assistant messages before the next user message, one of those becomes the
    turn's final llm, and the summary must not be dropped for it.
    """
    current = graph[current_id]
    has_chains = len(graph._children.get(None, ())) < len(graph.nodes)
    if has_chains:
        convo = graph.chain(current_id)
    else:
        convo = [n for n in graph if n.caller is None and n.seq <= current.seq]
    turns: list[list[Call]] = []
    for node in convo:
        if node.role == "user" or not turns:
            turns.append([node])
        else:
            turns[-1].append(node)
    out: list[Call] = []
    for turn in turns[:-1]:
        final = _final_llm(turn)
        for i, node in enumerate(turn):
            if (i == 0 and node.role == "user") or node is final or _is_system(node):
                out.append(node)
    if turns:
        out.extend(turns[-1])
    return out


def _expose(node: Call) -> str:
    return node.metadata.get("expose", "io") if node.role == "code" else "full"


def _visible_filter(graph: Graph, nodes: list[Call]) -> list[Call]:
    """Apply every code node's ``expose`` (§0.7) to ``nodes``.

    * ``io`` (the default for code nodes): the llm calls it made itself
      (``caller == this``) are hidden; the node shows as ``name(args) -> result``.
    * ``full``: everything it did stays visible.
    * ``hidden``: the node and its whole caller subtree are hidden.
    """
    hidden: set[str] = set()
    for node in nodes:
        if node.role != "code":
            continue
        mode = _expose(node)
        if mode == "io":
            hidden.update(c for c in graph._callees.get(node.id, ()) if graph.nodes[c].role == "llm")
        elif mode == "hidden":
            hidden.add(node.id)
            hidden.update(n.id for n in graph.subtree(node.id))
    return [n for n in nodes if n.id not in hidden]


def compute_reads(
    graph: Graph,
    head_seq: int | None = None,
    frame_entry_seq: int | None = None,
    render_range: dict | None = None,
) -> list[str]:
    """Which nodes the next LLM call reads, per the table of §0.7.

    ============================  ==================================================
    top level (no frame)          every node with ``seq <= head_seq``, seq order
    inside an agentic function    the nodes before the frame, the frame node itself
                                  and the frame's own new nodes (its caller subtree)
    ``expose="io"`` code node     its own llm calls (``caller == it``) removed
    ``expose="full"``             everything kept
    ``expose="hidden"``           the node and its whole subtree removed
    ``render_range["callers"]``   at most N pre-frame nodes (the latest N; all of
                                  them when fewer exist); ``None`` or ``-1`` = no
                                  limit (the default), ``0`` = full isolation
    ``render_range["subcalls"]``  at most N in-frame nodes (the latest N; all of
                                  them when fewer exist); ``None`` or ``-1`` = no
                                  limit (the default), ``0`` = only the frame node
    ============================  ==================================================

    ``render_range`` is checked by :func:`check_render_range` (``ValueError`` for an
    unknown key, a number below -1 or anything but a whole number or ``None``).

    The frame node is always kept: it carries the function's docstring and
    arguments, so the function's LLM calls see what they are for. A running
    node may be read; ``render_dag_messages`` renders it as its header only,
    never as an empty message. ``head_seq`` defaults to the newest node.
    """
    if not graph._seqs:
        return []
    if head_seq is None:
        head_seq = graph._seqs[-1]
    upto = graph._seqs[: bisect.bisect_right(graph._seqs, head_seq)]
    nodes = [graph._by_seq[s] for s in upto]

    if frame_entry_seq is None:
        return [n.id for n in _visible_filter(graph, nodes)]

    frame = graph.by_seq(frame_entry_seq)
    if frame is None:
        raise KeyError(f"no node at frame_entry_seq={frame_entry_seq}")
    rr = check_render_range(render_range)
    callers_limit = rr.get("callers")
    subcalls_limit = rr.get("subcalls")

    inside = {n.id for n in graph.subtree(frame.id)}
    pre = [n for n in nodes if n.seq < frame_entry_seq]
    own = [n for n in nodes if n.seq > frame_entry_seq and n.id in inside]
    pre = _visible_filter(graph, pre)
    own = _visible_filter(graph, own)
    if callers_limit is not None:
        pre = _latest(pre, callers_limit)
    if subcalls_limit is not None:
        own = _latest(own, subcalls_limit)
    return [n.id for n in pre] + [frame.id] + [n.id for n in own]


RENDER_RANGE_KEYS = ("callers", "subcalls")


def check_render_range(render_range: Any) -> dict[str, int | None]:
    """``render_range`` as ``compute_reads`` uses it, or one ``ValueError`` saying what is wrong.

    The one check of ``render_range``, for ``compute_reads`` and ``@agentic_function``
    alike: a mapping (or ``None``, no limits) whose keys are ``callers`` and/or
    ``subcalls`` and whose values are whole numbers >= 0 (at most that many nodes),
    ``-1`` or ``None`` (no limit: normalised to ``None``). ``True``/``False`` and
    ``2.5`` are refused rather than read as 1, 0 or 2.

    >>> check_render_range({"callers": 0, "subcalls": -1})
    {'callers': 0, 'subcalls': None}
    >>> check_render_range({"calers": 3})
    Traceback (most recent call last):
    ...
    ValueError: render_range: unknown key 'calers'; the keys are 'callers' and 'subcalls'
    """
    if render_range is None:
        return {}
    if not isinstance(render_range, Mapping):
        raise ValueError(f"render_range must be a dict of 'callers' / 'subcalls' limits, "
                         f"got {type(render_range).__name__}")
    out: dict[str, int | None] = {}
    for key, value in render_range.items():
        if key not in RENDER_RANGE_KEYS:
            raise ValueError(f"render_range: unknown key {key!r}; the keys are 'callers' and 'subcalls'")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < -1):
            raise ValueError(f"render_range[{key!r}] = {value!r}: expected a whole number >= 0 "
                             "(at most that many nodes), or -1 / None for no limit")
        out[key] = None if value is None or value == -1 else value
    return out


def _latest(nodes: list[Call], limit: int) -> list[Call]:
    """The latest ``limit`` of ``nodes``: all of them when there are fewer, none for 0."""
    return nodes[max(0, len(nodes) - limit) :] if limit > 0 else []
