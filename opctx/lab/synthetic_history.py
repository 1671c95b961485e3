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
"""

from __future__ import annotations

import json
import random

__all__ = ["make_history"]

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


if __name__ == "__main__":
    h = make_history(2_000)
    chars = sum(len(json.dumps(m)) for m in h)
    print(f"{len(h)} messages, {chars / len(h):.0f} JSON chars per message")
