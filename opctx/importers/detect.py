"""Recognise a recording's format from its CONTENT (the file name is only a tie-breaker).

``detect(path) -> str`` names the format; ``sniff(path) -> (format, parsed)`` also hands
back the whole-file JSON document when it had to parse one to decide, so the parser does
not parse a large file twice.

Rules, in order:

* a directory -> ``"directory"`` (walked by ``import_paths``); an empty file -> error.
* a text file beginning ``# aider chat started at`` -> ``aider``.
* JSON Lines (the first line is a complete JSON object): the first 50 records decide.
  Claude Code entries -> ``claude_code``; Codex ``{type, payload}`` lines -> ``codex``;
  ``{messages: [...], system_prompt|started_at|end_reason}`` -> ``hermes``;
  ``{history: [...]}`` (``instance_id``) -> ``openhands``; opctx export records ->
  ``opctx_jsonl``; chat messages or ``{messages}`` per line -> ``anthropic`` when
  Anthropic blocks (``tool_use``/``tool_result``/``thinking``) appear, else ``openai``.
* a whole JSON document: an array of Claude Code entries -> ``claude_code_hook``; of
  OpenHands events -> ``openhands``; of chat messages -> ``mini_swe_agent`` (its
  one-bash-block protocol), ``anthropic`` or ``openai``. An object with ``history`` ->
  ``openhands`` (events) or ``swe_agent``; with ``messages`` -> ``mini_swe_agent``
  (``trajectory_format``), ``anthropic`` or ``openai``.
* anything else -> ``UnknownFormatError`` naming the file and what was seen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import claude_code, codex, openhands
from .base import TranscriptError, UnknownFormatError, load_json
from .message_lists import is_message, looks_mini_swe_agent, uses_anthropic_blocks

__all__ = ["detect", "sniff", "classify_records", "classify_document", "SNIFF_BYTES"]

SNIFF_BYTES = 1 << 20
_OPCTX_KEYS = {"id", "seq", "role", "caller", "predecessor", "reads", "metadata"}


def classify_records(records: list[dict], path: str = "<input>") -> str:
    """The format of a JSONL file from its first records."""
    if any(claude_code.looks_like_entry(r) for r in records):
        return "claude_code"
    if any(codex.looks_like_line(r) for r in records):
        return "codex"
    first = records[0]
    if first.get("opctx_export") or _OPCTX_KEYS <= set(first):
        return "opctx_jsonl"
    if isinstance(first.get("messages"), list) and (
            {"system_prompt", "started_at", "end_reason", "message_count"} & set(first)):
        return "hermes"
    if isinstance(first.get("history"), list):
        return "openhands"
    if all(is_message(r) for r in records):
        return "anthropic" if uses_anthropic_blocks(records) else "openai"
    if all(isinstance(r.get("messages"), list) for r in records):
        msgs = [m for r in records for m in r["messages"]]
        return "anthropic" if uses_anthropic_blocks(msgs) else "openai"
    keys = sorted(first)[:8]
    raise UnknownFormatError(path, None, f"unrecognised JSON Lines records (first record keys: {keys})")


def classify_document(doc: Any, path: str = "<input>") -> str:
    """The format of a whole-file JSON document."""
    if isinstance(doc, list):
        items = [x for x in doc[:50] if isinstance(x, dict)]
        if not items:
            raise UnknownFormatError(path, None, "a JSON array with no objects in it" if doc
                                     else "an empty JSON array: nothing to import")
        if any(claude_code.looks_like_entry(x) for x in items):
            return "claude_code_hook"
        if any(openhands.looks_like_event(x) for x in items):
            return "openhands"
        if all(is_message(x) for x in items):
            if looks_mini_swe_agent(items):
                return "mini_swe_agent"
            return "anthropic" if uses_anthropic_blocks(doc) else "openai"
        raise UnknownFormatError(path, None, f"a JSON array of unrecognised objects (keys: {sorted(items[0])[:8]})")
    if isinstance(doc, dict):
        hist = doc.get("history")
        if isinstance(hist, list):
            if any(openhands.looks_like_event(x) for x in hist[:20]):
                return "openhands"
            return "swe_agent"
        msgs = doc.get("messages")
        if isinstance(msgs, list):
            if str(doc.get("trajectory_format", "")).startswith("mini-swe-agent") or looks_mini_swe_agent(msgs):
                return "mini_swe_agent"
            return "anthropic" if uses_anthropic_blocks(msgs) or isinstance(doc.get("system"), list) else "openai"
        if is_message(doc):
            return "anthropic" if uses_anthropic_blocks([doc]) else "openai"
        raise UnknownFormatError(path, None, f"a JSON object of an unrecognised shape (keys: {sorted(doc)[:8]})")
    raise UnknownFormatError(path, None, f"a JSON {type(doc).__name__}, not a transcript")


def sniff(path: str | Path) -> tuple[str, Any]:
    """(format, parsed whole-file JSON document or None)."""
    p = Path(path)
    if p.is_dir():
        return "directory", None
    if not p.exists():
        raise TranscriptError(str(p), None, "no such file or directory")
    with open(p, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if not stripped:
        raise TranscriptError(str(p), None, "file is empty")
    if stripped.startswith("# aider chat started at"):
        return "aider", None
    if stripped[0] not in "[{":
        preview = stripped[:40].splitlines()[0]
        raise UnknownFormatError(str(p), 1, f"not a JSON, JSON Lines or Aider transcript (starts with {preview!r})")
    first_line = stripped.split("\n", 1)[0].strip()
    records: list[dict] = []
    if first_line.startswith("{"):
        for raw in text.split("\n")[:51]:
            raw = raw.strip()
            if not raw:
                continue
            try:
                v = json.loads(raw)
            except ValueError:
                break
            if isinstance(v, dict):
                records.append(v)
    if records:
        # a one-line JSON document and a one-record JSONL file look alike: decide by shape
        fmt_doc = None
        if len(records) == 1 and "\n" not in stripped.strip():
            try:
                fmt_doc = classify_document(records[0], str(p))
            except UnknownFormatError:
                fmt_doc = None
        if fmt_doc in ("swe_agent", "mini_swe_agent", "openhands") or (
                fmt_doc in ("openai", "anthropic") and isinstance(records[0].get("messages"), list)
                and not {"system_prompt", "started_at"} & set(records[0])):
            return fmt_doc, records[0]
        return classify_records(records, str(p)), None
    doc = load_json(str(p))
    return classify_document(doc, str(p)), doc


def detect(path: str | Path) -> str:
    """The format name of ``path`` (see the module docstring); raises on unknown content."""
    return sniff(path)[0]
