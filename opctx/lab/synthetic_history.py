"""A deterministic, realistic-looking coding-agent history for benchmarks (no corpus text).

Shape modelled on the statistics of real sessions: a user request, then loops of an
assistant message with a tool call (read / grep / ls / bash, JSON arguments), the tool
result (source lines, listings, grep hits, logs with hashes and numbers), and now and
then an assistant explanation citing identifiers, paths and ids seen earlier. Message
sizes: user 50-300 chars, assistant 80-800, tool results 200-4,000 (skewed small).
Half of the tool results end with a fresh build path and id that nothing cites later.

``make_history(n, seed)`` returns opctx message dicts (``extra.blocks`` tool traffic,
Anthropic style, half of the sessions OpenAI style via ``style="openai"``), with ids,
timestamps one to twenty seconds apart and ``parent_id`` chaining.

``synthetic_session(n_nodes)`` is the same kind of session as a ``Graph`` of ``Call``
nodes, for drawing and rendering at any size (``opctx.viz`` re-exports it): user turns,
an assistant call with a tool call, its tool result or (every ``frame_every``-th turn)
an agentic-function frame with a nested llm and code call, an answer; ``reads`` as the
runtime sets them for top-level calls, capped at ``reads_window`` nodes (a 5,000-node
session would otherwise carry 12.5 million read edges). Every ``compact_every`` nodes
on the active branch it is compacted by ``opctx.context.persistence.Persister``, so a
synthetic compaction is laid out exactly as opctx's own (docs/ARCHITECTURE.md,
"Compaction layout"). ``payload`` is inserted into every user message, tool argument
and tool result (the escaping tests put ``<script>`` there). Texts come from the
vocabulary above; the content is deterministic for a given ``seed`` (node ids are not).
"""

from __future__ import annotations

import json
import random

from ..context.persistence import Persister
from ..dag.nodes import Call, Graph
from ..dag.session_db import DagSessionDB

__all__ = ["make_history", "synthetic_session"]

_WORDS = (
    "the and to of in for on with as is that this by we it be from at or an are not have "
    "will can should but if when then so all new one more use data file code test value "
    "function return error result config user list item check update read write build run"
).split()
_HUMPS = "Parse Config Session Token Budget Manager Handler Request Response Cache Store Graph Node Message Tool Result Summary Window Usage Engine Reader Writer Index Event Client Server Model Agent Prompt Batch Queue Worker".split()
_DIRS = "src lib app core utils tests api models services handlers internal pkg cmd docs scripts".split()
_EXTS = ".py .ts .go .rs .md .json .yaml .tsx".split()


class _Vocab:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.idents = [
            "".join(rng.sample(_HUMPS, rng.randint(2, 3))) + rng.choice(["", "", "V2", "Error", "Impl"])
            for _ in range(20_000)
        ]
        self.funcs = [
            "_".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 3))) + "_" + rng.choice(_HUMPS).lower()
            for _ in range(15_000)
        ]
        self.paths = [
            "/".join(rng.choice(_DIRS) for _ in range(rng.randint(1, 4)))
            + "/"
            + rng.choice(self.funcs)
            + rng.choice(_EXTS)
            for _ in range(8_000)
        ]
        self.hashes = [f"{rng.getrandbits(160):040x}" for _ in range(300)]
        self.fresh = 0

    def sentence(self, n: int) -> str:
        r = self.rng
        parts = []
        for _ in range(n):
            x = r.random()
            if x < 0.06:
                parts.append(f"`{r.choice(self.funcs)}`")
            elif x < 0.10:
                parts.append(r.choice(self.idents))
            elif x < 0.13:
                parts.append(r.choice(self.paths))
            elif x < 0.14:
                parts.append(r.choice(self.hashes)[: r.choice([7, 12, 40])])
            else:
                parts.append(r.choice(_WORDS))
        return " ".join(parts).capitalize() + "."

    def code(self, lines: int) -> str:
        r = self.rng
        out = []
        for i in range(lines):
            kind = r.random()
            if kind < 0.3:
                out.append(f"def {r.choice(self.funcs)}(self, {r.choice(_WORDS)}_{i}):")
            elif kind < 0.5:
                out.append(f"    result = {r.choice(self.idents)}({r.choice(self.funcs)}, limit={r.randint(1, 99999)})")
            elif kind < 0.6:
                out.append(f"from {r.choice(_DIRS)}.{r.choice(self.funcs)} import {r.choice(self.idents)}")
            elif kind < 0.7:
                out.append(f"    # {self.sentence(r.randint(4, 10))}")
            else:
                out.append(f"    {r.choice(_WORDS)} = {r.choice(_WORDS)}.{r.choice(self.funcs)}()")
        return "\n".join(out)


def _tool_output(v: _Vocab, tool: str) -> str:
    r = v.rng
    size = min(4_000, int(r.lognormvariate(6.5, 0.9)))
    if tool == "read":
        text = v.code(max(3, size // 45))
    elif tool == "ls":
        text = "\n".join(r.choice(v.paths) for _ in range(max(2, size // 30)))
    elif tool == "grep":
        text = "\n".join(
            f"{r.choice(v.paths)}:{r.randint(1, 900)}: {r.choice(v.idents)}.{r.choice(v.funcs)}()"
            for _ in range(max(2, size // 70))
        )
    else:
        text = "\n".join(
            f"[{r.randint(1_700_000_000, 1_800_000_000)}] {r.choice(['INFO', 'WARN', 'DEBUG'])} "
            f"{v.sentence(r.randint(3, 8))} id={r.choice(v.hashes)[:12]}"
            for _ in range(max(2, size // 80))
        )
    text = text[:size] if len(text) > size else text
    if r.random() < 0.5:
        # output that nothing later refers to: a fresh run directory and build id, as real
        # tool output has (about half of real tool results are never cited again)
        v.fresh += 1
        text += f"\nwrote build/run_{v.fresh:06d}/artifact_{r.getrandbits(32):08x}.log build={r.getrandbits(48):012x}"
    return text


def make_history(n: int, seed: int = 0, style: str = "anthropic", start: float = 1_700_000_000.0) -> list[dict]:
    """``n`` messages of a synthetic coding session (see the module docstring)."""
    rng = random.Random(seed)
    v = _Vocab(rng)
    out: list[dict] = []
    t = start
    call = 0

    def push(msg: dict) -> None:
        nonlocal t
        t += rng.uniform(1, 20)
        msg["id"] = f"m{len(out):06d}"
        msg["timestamp"] = t
        msg["parent_id"] = out[-1]["id"] if out else None
        out.append(msg)

    while len(out) < n:
        if not out or rng.random() < 0.08:
            push({"role": "user", "content": v.sentence(rng.randint(8, 50))})
            continue
        tool = rng.choice(["read", "read", "grep", "ls", "bash"])
        call_id = f"toolu_{call:08d}"
        call += 1
        args = {"path": rng.choice(v.paths)} if tool in ("read", "ls") else {"pattern": rng.choice(v.idents)}
        text = v.sentence(rng.randint(5, 40)) if rng.random() < 0.6 else ""
        if style == "openai":
            push({"role": "assistant", "content": text, "tool_calls": [{"id": call_id, "name": tool, "arguments": args}]})
            if len(out) < n:
                push({"role": "tool", "tool_call_id": call_id, "name": tool, "content": _tool_output(v, tool)})
        else:
            push(
                {
                    "role": "assistant",
                    "content": text,
                    "extra": {"blocks": ([{"type": "text", "text": text}] if text else [])
                              + [{"type": "tool_use", "id": call_id, "name": tool, "input": args}]},
                }
            )
            if len(out) < n:
                push(
                    {
                        "role": "user",
                        "content": "",
                        "extra": {"blocks": [{"type": "tool_result", "tool_use_id": call_id, "content": _tool_output(v, tool)}]},
                    }
                )
    return out


class _SessionWriter:
    """The active branch of a synthetic session in an in-memory ``DagSessionDB``: nodes
    are written in batches (one transaction each), compactions by ``Persister``."""

    def __init__(self, rng: random.Random, start: float) -> None:
        self.rng = rng
        self.clock = start
        self.db = DagSessionDB(":memory:")
        self.session_id = self.db.create_session(title="synthetic session")
        self.store = self.db.store(self.session_id)
        self.branch: list[str] = []  # the active branch, root first
        self.pending: list[Call] = []
        self.count = 0

    def add(self, role: str, **fields) -> Call:
        """A node at the end of the active branch (its predecessor is the branch's end)."""
        self.clock += self.rng.uniform(0.5, 4.0)
        node = Call(role=role, created_at=self.clock, predecessor=self.branch[-1] if self.branch else None, **fields)
        self.branch.append(node.id)
        return self.inner(node)

    def inner(self, node: Call) -> Call:
        """A node off the branch (inside an agentic frame)."""
        self.pending.append(node)
        self.count += 1
        return node

    def flush(self) -> None:
        self.store.append_many(self.pending)
        self.pending = []

    def compact(self, protect_first_n: int, keep_last: int, summary: str) -> None:
        """Fold the active branch but its head and a tail of about ``keep_last`` nodes that
        starts at a user message (as ``find_cut_index`` guarantees)."""
        self.flush()
        history = self.db.get_branch(self.session_id)
        cut = len(history) - keep_last
        while cut > protect_first_n and history[cut]["role"] != "user":
            cut -= 1
        if cut <= protect_first_n:
            return  # nothing to fold
        written = Persister(self.db, clock=lambda: self.clock).insert_summary_node(
            self.session_id, summary, cut, history, protect_first_n,
            trigger="budget", pre_tokens=40 * len(history),
            tokens_after=40 * (protect_first_n + len(history) - cut + 1),
        )
        self.count += len(written.branch)
        self.branch = [m["id"] for m in written.branch]

    def graph(self) -> Graph:
        self.flush()
        try:
            return self.store.load(lazy=False)
        finally:
            self.db.close()


def synthetic_session(
    n_nodes: int = 200,
    *,
    seed: int = 0,
    compact_every: int = 0,
    protect_first_n: int = 2,
    keep_last: int = 4,
    frame_every: int = 5,
    payload: str = "",
    reads_window: int = 64,
    start_time: float = 1_700_000_000.0,
) -> tuple[Graph, str]:
    """A ``(graph, head_id)`` of about ``n_nodes`` nodes (never fewer); see the module docstring.

    ``compact_every``: after that many nodes on the active branch, compact it
    (0: never). ``frame_every``: every N-th turn calls an agentic function with
    nested calls instead of a plain tool.
    """
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be positive, got {n_nodes}")
    rng = random.Random(seed)
    v = _Vocab(rng)
    w = _SessionWriter(rng, start_time)
    turn = 0
    while w.count < n_nodes:
        turn += 1
        w.add("user", name="user", output=f"{payload}Turn {turn}: {v.sentence(12)}")
        call_id = f"call_{turn}"
        llm = w.add(
            "llm", name="gpt-4o", output=v.sentence(20), reads=w.branch[-reads_window:],
            metadata={"tool_calls": [{"id": call_id, "name": "search", "arguments": {"q": payload}}],
                      "usage": {"input_tokens": 40 * len(w.branch), "output_tokens": 30}},
        )
        if frame_every and turn % frame_every == 0:
            _frame(w, v, call_id, payload)
        else:
            w.add("code", name="search", caller=llm.id, input={"q": v.sentence(2)},
                  output=payload + _tool_output(v, "grep"), metadata={"tool_call_id": call_id})
        w.add("llm", name="gpt-4o", output=v.sentence(25), reads=w.branch[-reads_window:])
        if compact_every and len(w.branch) >= compact_every and w.count < n_nodes:
            w.compact(protect_first_n, keep_last, v.sentence(40))
    return w.graph(), w.branch[-1]


def _frame(w: _SessionWriter, v: _Vocab, call_id: str, payload: str) -> None:
    """An agentic function answering ``call_id``: its frame on the branch, a nested llm
    call and the code call it makes inside."""
    frame = w.add("code", name="analyse", input={"topic": v.sentence(3)}, output=None,
                  metadata={"status": "running", "tool_call_id": call_id, "doc": "Analyse it."})
    inner = w.inner(Call(role="llm", name="gpt-4o-mini", caller=frame.id, output=v.sentence(15),
                         reads=[frame.id], created_at=w.clock + 0.1))
    w.inner(Call(role="code", name="read_file", caller=inner.id, input={"path": "src/app.py"},
                 output=payload + _tool_output(v, "read"), created_at=w.clock + 0.2))
    frame.output = v.sentence(10)
    frame.metadata["status"] = "ok"


if __name__ == "__main__":
    h = make_history(2_000)
    chars = sum(len(json.dumps(m)) for m in h)
    print(f"{len(h)} messages, {chars / len(h):.0f} JSON chars per message")
