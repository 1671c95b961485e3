"""Aider ``.aider.chat.history.md``: lossy Markdown, read as well as it can be.

The file is a log of chats, each starting ``# aider chat started at <time>`` (one
session per chat). Inside a chat:

* ``#### text`` lines are the user's input; consecutive ones form one user node.
* ``> text`` lines are Aider's console output (confirmations, commits, "Tokens: ..."):
  consecutive ones form one display-only system node (``metadata.role = "system"``,
  ``display_only``, ``aider_kind = "console"``), kept in the chain but out of the llm
  nodes' ``reads``, because the model never saw them.
* everything else is the model's reply (a fenced block of the reply is reply text even
  where its lines start with ``>``, e.g. the ``>>>>>>> REPLACE`` marker of an edit) (one llm node per run of such lines, surrounding
  blank lines trimmed). Aider writes no model name per reply; the ``Model:`` console
  line of the chat gives the session's model.
* ``Tokens: 2.4k sent, 104 received`` (with optional cache figures) -> ``metadata.usage``
  of the reply before it (Aider rounds: ``2.4k`` is read as 2400); the cost text is kept in
  ``metadata.aider_cost`` and the report's line in ``metadata.aider_token_line``. Every
  report is also listed, in order, in ``metadata.token_reports`` of its console node
  (``{"line", "usage", "cost", "reply"}``, ``reply`` = the id of the llm node it was
  given to, or ``None`` when there was no reply since the last report, e.g. a second
  report for one reply: such a report is kept there and named in the warnings, never
  dropped and never added to a reply that already has its usage).

Timestamps: the chat's start time for every node (Aider records no other). What cannot
be recovered (tool calls, exact token counts, the system prompt) is simply absent;
``meta.lossy = True`` says so.
"""

from __future__ import annotations

import re
from typing import Any

from .base import ImportedSession, Issue, SessionBuilder, TranscriptError, read_text, short_title
from .fields import FieldTable
from .message_lists import file_digest

__all__ = ["FORMAT", "FIELDS", "parse_aider", "parse_token_report"]

FORMAT = "aider"
# Markdown, not JSON: no field can hold a value of another type (opctx.importers.fields);
# damaged text is read line by line, as the module docstring says.
FIELDS = FieldTable(FORMAT, "line", [], is_record=lambda value, top: False)
_START = re.compile(r"^# aider chat started at (.+?)\s*$")
_TOKENS = re.compile(r"Tokens:\s*(?P<body>.*?)(?:\.\s*(?P<cost>Cost:.*))?\.?\s*$")
_FIGURE = re.compile(r"([\d.]+)(k|M)?\s+(sent|received|cache write|cache hit)")
_MODEL = re.compile(r"^Model:\s*(\S+)")


def _number(value: str, unit: str | None) -> int:
    n = float(value)
    return int(round(n * {"k": 1_000, "M": 1_000_000}.get(unit or "", 1)))


def parse_token_report(line: str) -> dict[str, Any] | None:
    """``Tokens: 2.4k sent, 104 received. Cost: ...`` -> usage dict (+ ``cost``)."""
    m = _TOKENS.search(line)
    if not m:
        return None
    figures = {kind: _number(v, u) for v, u, kind in _FIGURE.findall(m.group("body"))}
    if not figures:
        return None
    cache_hit = figures.get("cache hit", 0)
    cache_write = figures.get("cache write", 0)
    usage = {
        "input_tokens": max(figures.get("sent", 0) - cache_hit - cache_write, 0),
        "output_tokens": figures.get("received", 0),
        "cache_read_tokens": cache_hit,
        "cache_write_tokens": cache_write,
    }
    return {"usage": usage, "cost": (m.group("cost") or "").strip()}


def parse_aider(path: str, *, on_error: str = "stop") -> list[ImportedSession]:
    path = str(path)
    issues: list[Issue] = []
    text = read_text(path, on_error=on_error, issues=issues)
    digest = file_digest(text.encode("utf-8"))
    lines = text.splitlines()
    chats: list[tuple[int, str, list[tuple[int, str]]]] = []
    for no, line in enumerate(lines, 1):
        m = _START.match(line)
        if m:
            chats.append((no, m.group(1), []))
        elif chats:
            chats[-1][2].append((no, line))
    if not chats:
        raise TranscriptError(path, 1, "no '# aider chat started at' header")
    return [_chat(path, n, start_line, started, body, digest, issues if n == 0 else [])
            for n, (start_line, started, body) in enumerate(chats)]


def _chat(path: str, n: int, start_line: int, started: str, body: list[tuple[int, str]],
          digest: str, issues: list[Issue]) -> ImportedSession:
    b = SessionBuilder(FORMAT, path)
    b.time(started.replace(" ", "T"))
    model = ""
    block_kind: str | None = None
    block: list[str] = []
    block_nos: list[int] = []  # the source line of each entry of ``block``
    block_line = start_line
    last_llm = None
    first_user = ""

    def flush() -> None:
        nonlocal block, block_nos, block_kind, last_llm, first_user, model
        if block_kind is None:
            return
        if block_kind == "user":
            txt = "\n".join(block).strip("\n")
            b.add("user", name="user", output=txt,
                  metadata={"source_line": block_line, "source_line_count": len(block)})
            first_user = first_user or txt
        elif block_kind == "console":
            meta: dict[str, Any] = {"role": "system", "display_only": True,
                                    "aider_kind": "console", "source_line": block_line,
                                    "source_line_count": len(block)}
            reports = []
            for no, ln in zip(block_nos, block, strict=True):
                report = parse_token_report(ln)
                if report:
                    reply = last_llm if last_llm is not None and "usage" not in last_llm.metadata else None
                    if reply is not None:
                        reply.metadata["usage"] = report["usage"]
                        reply.metadata["aider_cost"] = report["cost"]
                        reply.metadata["aider_token_line"] = no
                    else:
                        b.warnings.append(f"{path}:{no}: token report with no reply of its own "
                                          "since the last one; kept in the console node")
                    reports.append({"line": no, **report, "reply": reply.id if reply else None})
                mm = _MODEL.match(ln)
                if mm and not model:
                    model = mm.group(1)
            if reports:
                meta["token_reports"] = reports
            b.add("llm", output="\n".join(block), metadata=meta, in_prompt=False)
        else:
            txt = "\n".join(block).strip("\n")
            if txt.strip():
                last_llm = b.add("llm", name=model, output=txt,
                                 metadata={"source_line": block_line, "tool_calls": []})
        block, block_nos, block_kind = [], [], None

    in_fence = False
    for no, line in body:
        if in_fence or (block_kind == "assistant" and line.startswith("```")):
            # inside a fenced block of the reply everything is reply text, including the
            # ">>>>>>> REPLACE" marker of an edit block
            if line.startswith("```"):
                in_fence = not in_fence
            block.append(line)
            block_nos.append(no)
            continue
        if line.startswith("####"):
            kind, content = "user", line[4:].removeprefix(" ").rstrip()
        elif line.startswith(">") and not line.startswith(">>"):
            kind, content = "console", line[1:].removeprefix(" ").rstrip()
        else:
            kind, content = "assistant", line
            if line.startswith("```"):
                in_fence = True
            if block_kind in ("user", "console") and not line.strip():
                continue  # the blank line that ends a user or console block
        if kind != block_kind:
            flush()
            block_kind, block_line = kind, no
        block.append(content)
        block_nos.append(no)
    flush()
    # the chat's model, for replies written before the Model: line was seen
    for c in b.calls:
        if c.role == "llm" and not c.metadata.get("role") and not c.name:
            c.name = model
    return b.finish(
        session_id=f"aider-{digest}-{n}", title=short_title(first_user) or f"aider chat {started}",
        model=model, meta={"started": started, "source_line": start_line, "lossy": True},
        skipped=issues)
