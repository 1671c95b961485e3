"""A small Claude Code 2.1.x transcript with a recorded microcompaction, made up for tests.

Nothing here comes from a real transcript: the shape follows the documented line
format (``system`` line, ``subtype: microcompact_boundary``, ``microcompactMetadata``).
The session: a user request, then ``n_reads`` assistant turns that each call ``Read``
(and one ``Task`` call, never cleared), each answered by a tool result of
``result_chars`` characters, then the boundary clearing the oldest ``n_cleared`` Read
results, then one more assistant turn whose usage is lower. ``<script>`` text in a
result checks escaping downstream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SESSION = "5e551011-0000-4000-8000-00000000a61e"
BOUNDARY_UUID = "b0000000-0000-4000-8000-00000000b001"
VERSION = "2.1.15"


def _line(kind: str, uuid: str, parent: str | None, minute: int, session: str = SESSION, **fields: Any) -> dict:
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": session,
            "version": VERSION, "cwd": "/workspace/sample", "isSidechain": False, "userType": "external",
            "timestamp": f"2026-03-10T10:{minute:02d}:00.000Z", **fields}


def tool_id(i: int) -> str:
    return f"toolu_sample_{i:03d}"


def sample_lines(n_reads: int = 6, n_cleared: int = 3, result_chars: int = 40_000,
                 usage_before: int = 150_000, usage_after: int = 120_000, session: str = SESSION,
                 boundary_uuid: str = BOUNDARY_UUID) -> list[dict]:
    lines: list[dict] = []
    parent: str | None = None

    def add(line: dict) -> None:
        nonlocal parent
        line["sessionId"] = session
        lines.append(line)
        parent = line["uuid"]

    add(_line("user", "u-000", None, 0, message={"role": "user", "content": "Read the files <b>please</b>"}))
    minute = 1
    for i in range(n_reads + 1):
        name = "Task" if i == 1 else "Read"
        args = {"prompt": "look around"} if name == "Task" else {"file_path": f"/workspace/sample/f{i}.py"}
        add(_line("assistant", f"a-{i:03d}", parent, minute, message={
            "id": f"msg_{i:03d}", "role": "assistant", "model": "claude-opus-4-5",
            "content": [{"type": "tool_use", "id": tool_id(i), "name": name, "input": args}],
            "usage": {"input_tokens": 10, "cache_read_input_tokens": usage_before - 10 - 5000 * (n_reads - i),
                      "cache_creation_input_tokens": 0, "output_tokens": 50}}))
        text = (f"<script>alert({i})</script> line of text {i}\n" * (result_chars // 40))[:result_chars]
        add(_line("user", f"r-{i:03d}", parent, minute, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id(i), "content": text}]}))
        minute += 1
    cleared = [tool_id(i) for i in range(n_reads + 1) if i != 1][:n_cleared]
    add(_line("system", boundary_uuid, parent, minute, subtype="microcompact_boundary",
              content="Context microcompacted", isMeta=False, level="info",
              microcompactMetadata={"trigger": "auto", "preTokens": (n_reads * result_chars) // 4,
                                    "tokensSaved": (n_cleared * result_chars) // 4,
                                    "compactedToolIds": cleared, "clearedAttachmentUUIDs": []}))
    add(_line("assistant", "a-end", parent, minute + 1, message={
        "id": "msg_end", "role": "assistant", "model": "claude-opus-4-5",
        "content": [{"type": "text", "text": "Done."}],
        "usage": {"input_tokens": 10, "cache_read_input_tokens": usage_after,
                  "cache_creation_input_tokens": 0, "output_tokens": 5}}))
    return lines


def write_sample(folder: Path, **kw: Any) -> Path:
    path = Path(folder) / f"{kw.get('session', SESSION)}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in sample_lines(**kw)), encoding="utf-8")
    return path
