"""A made-up Claude Code 2.0.76 transcript resumed from before an automatic compaction.

Nothing here comes from a real transcript; the line format follows the documented one
(``compact_boundary`` with ``compactMetadata`` and ``logicalParentUuid``, then the
``isCompactSummary`` user line). The session: a user request, then ``turns`` tool turns
whose provider counts grow by ``step`` tokens each from ``first``; once the last
response's total reaches 155,000 the client compacts (``auto``), continues a little on
the summary, and then the user resumes from the response ``back`` turns before the
compaction: a second branch whose first line's ``parentUuid`` points there. That branch
grows again and compacts again at the same size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SESSION = "5e551011-0000-4000-8000-0000000e5e01"
VERSION = "2.0.76"
MODEL = "claude-opus-4-5-20251101"


class _Writer:
    def __init__(self) -> None:
        self.lines: list[dict] = []
        self.minute = 0

    def add(self, kind: str, uuid: str, parent: str | None, **fields: Any) -> str:
        self.minute += 1
        self.lines.append({"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": SESSION,
                           "version": VERSION, "cwd": "/workspace/sample", "isSidechain": False, "userType": "external",
                           "timestamp": f"2026-03-10T{10 + self.minute // 60:02d}:{self.minute % 60:02d}:00.000Z",
                           **fields})
        return uuid

    def turn(self, tag: str, parent: str, prompt: int, chars: int) -> str:
        """One assistant request (a Read call) with the provider's count, then its result."""
        a = self.add("assistant", f"a-{tag}", parent, message={
            "id": f"msg_{tag}", "role": "assistant", "model": MODEL,
            "content": [{"type": "tool_use", "id": f"toolu_{tag}", "name": "Read", "input": {"file_path": f"/f{tag}"}}],
            "usage": {"input_tokens": 10, "cache_read_input_tokens": prompt - 10, "cache_creation_input_tokens": 0,
                      "output_tokens": 100}})
        text = (f"line {tag} of a file that was read " * (chars // 30 + 1))[:chars]
        return self.add("user", f"r-{tag}", a, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{tag}", "content": text}]})

    def compaction(self, tag: str, parent: str, pre_tokens: int) -> str:
        boundary = self.add("system", f"b-{tag}", None, subtype="compact_boundary", content="Conversation compacted",
                            isMeta=False, level="info", logicalParentUuid=parent,
                            compactMetadata={"trigger": "auto", "preTokens": pre_tokens})
        return self.add("user", f"s-{tag}", boundary, isCompactSummary=True, message={
            "role": "user", "content": f"This session is being continued from a previous conversation. Summary {tag}."})


def resumed_lines(turns: int = 12, first: int = 100_000, step: int = 5_000, back: int = 4) -> list[dict]:
    w = _Writer()
    parent = w.add("user", "u-0", None, message={"role": "user", "content": "work through the list"})
    tails, totals = [], []
    for i in range(turns):
        prompt = first + step * i
        parent = w.turn(f"{i:03d}", parent, prompt, step * 3)
        tails.append(parent)
        totals.append(prompt + 100)
        if prompt + 100 >= 155_000:
            break
    summary = w.compaction("one", parent, totals[-1])
    after = w.turn("post0", summary, 40_000, 2_000)
    w.turn("post1", after, 42_100, 2_000)
    # the user resumes from an earlier point: a new branch from the real parent
    fork = tails[-1 - back]
    parent = w.add("user", "u-resume", fork, message={"role": "user", "content": "go on from here, differently"})
    prompt = totals[-1 - back] + 2_000
    k = 0
    while True:
        parent = w.turn(f"res{k:02d}", parent, prompt, step * 3)
        if prompt + 100 >= 155_000:
            break
        prompt += step
        k += 1
    w.compaction("two", parent, prompt + 100)
    w.turn("post2", "s-two", 40_500, 2_000)
    return w.lines


def write_resumed(folder: Path, **kw: Any) -> Path:
    path = Path(folder) / f"{SESSION}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in resumed_lines(**kw)), encoding="utf-8")
    return path
