"""SessionBuilder: what each llm node read (``reads``) on branching, compacted histories."""

from __future__ import annotations

import random

import pytest

from opctx.importers.base import SessionBuilder, TranscriptError


def _reference_prompt(b: SessionBuilder, node_id: str | None) -> list[str]:
    """The prompt by definition: the whole chain from the root, minus display-only nodes."""
    out = []
    while node_id is not None:
        node = b.by_id[node_id]
        if node.metadata.get("display_only") is not True:
            out.append(node_id)
        node_id = node.predecessor
    return out[::-1]


@pytest.mark.parametrize("seed", range(5))
def test_reads_are_the_chain_whatever_order_the_branches_grow_in(seed):
    # prompt_of remembers the last prompt it computed and walks back only to it; forks,
    # jumps to older nodes, display-only nodes and compactions must not change the result
    rng = random.Random(seed)
    b = SessionBuilder("test", "mem.jsonl")
    for step in range(300):
        ids = [c.id for c in b.calls]
        pred = rng.choice(ids) if ids and rng.random() < 0.2 else b.head
        role = rng.choice(["user", "llm", "llm", "code"])
        display = role == "llm" and rng.random() < 0.1
        call = b.add(role, output=f"step {step}", predecessor=pred, in_prompt=not display,
                     metadata={"display_only": True} if display else None, move_head=True)
        if role == "llm":
            assert call.reads == _reference_prompt(b, pred), step
        if step % 97 == 96:
            summary = b.record_compaction(f"summary {step}", kept_ids=ids[-2:])
            assert summary.id in b.by_id
    for call in b.calls:
        if call.role == "llm" and call.metadata.get("copied_from"):
            assert call.reads == _reference_prompt(b, call.predecessor)


def test_a_predecessor_cycle_is_an_error_naming_the_file():
    b = SessionBuilder("test", "loop.jsonl")
    first = b.add("user", output="a")
    second = b.add("user", output="b", predecessor=first.id)
    first.predecessor = second.id  # only a corrupt recording can do this
    with pytest.raises(TranscriptError, match="loop.jsonl: predecessor cycle"):
        b.prompt_of(second.id)


# Lines orjson refuses or reads otherwise than json (NaN, beyond a float or 64 bits, lone
# surrogates, invalid UTF-8, too deep, truncated), between lines it takes.
_AWKWARD_LINES = [
    b'{"a": 1, "t": "caf\xc3\xa9 \\u00e9", "f": 1.5e-07, "n": null}\n',
    b'{"nan": NaN, "inf": -Infinity, "big": 1e999}\n',
    b'{"int": 123456789012345678901234567890, "neg": -9223372036854775809}\n',
    b'{"lone": "\\ud83d"}\n',
    b'{"bad utf-8": "\xff"}\n',
    b"\n",
    b"[1, 2]\n",
    b"18446744073709551616\n",
    b'{"deep": ' + b"[" * 300 + b"]" * 300 + b"}\n",
    b'{"dup": 1, "dup": 2}\n',
    b'{"ok": true}\r\n',
    b'{"trunc',
]


def _read_all(path, on_error):
    from opctx.importers.base import iter_jsonl

    issues: list = []
    try:
        records = [(jl.line, jl.value) for jl in iter_jsonl(path, on_error=on_error, issues=issues)]
    except TranscriptError as e:
        return repr(e), issues
    return repr(records), issues


@pytest.mark.parametrize("on_error", ["stop", "skip"])
@pytest.mark.parametrize("first", range(len(_AWKWARD_LINES)))
def test_jsonl_reads_the_same_with_or_without_orjson(tmp_path, monkeypatch, on_error, first):
    # each line first in turn: with "stop" every line's error (file:line and reason) is compared
    import opctx.importers.base as base

    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(_AWKWARD_LINES[first:] + _AWKWARD_LINES[:first]))
    fast = _read_all(str(path), on_error)
    monkeypatch.setattr(base, "loads_plain", None)
    assert _read_all(str(path), on_error) == fast


@pytest.mark.parametrize("text", [
    '{"a": [1, 2.5, "x"]}', "NaN", '{"n": 1e999}', "[" * 300 + "]" * 300,
    "[" * 256 + "]" * 256, "[" * 257 + "]" * 257, '{"a":' * 256 + "1" + "}" * 256, '{"a":' * 257 + "1" + "}" * 257, "123456789012345678901234567890",
    '"\\ud83d"', '{"a": ', "",
])
def test_decode_json_is_the_same_with_or_without_orjson(monkeypatch, text):
    import opctx.importers.base as base

    def outcome():
        try:
            return repr(base.decode_json(text))
        except ValueError as e:
            return f"{type(e).__name__}: {e}"

    fast = outcome()
    monkeypatch.setattr(base, "loads_plain", None)
    assert outcome() == fast
