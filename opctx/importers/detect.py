"""Recognise a recording's format from its CONTENT (the file name is only a tie-breaker).

``detect(path) -> str`` names the format; ``sniff(path) -> (format, parsed)`` also hands
back the whole-file JSON document when it had to parse one to decide, so the parser does
not parse a large file twice.

Rules, in order:

* a directory -> ``"directory"`` (walked by ``import_paths``); an empty file -> error;
  anything that is not a regular file (a FIFO, a device, a link to one) -> an error,
  before it is opened: a FIFO would wait for a writer, ``/dev/zero`` never ends.
* a text file beginning ``# aider chat started at`` -> ``aider``.
* JSON Lines (the first line is a complete JSON object): the first 50 records decide.
  Claude Code entries -> ``claude_code``; Codex ``{type, payload}`` lines -> ``codex``;
  ``{messages: [...], system_prompt|started_at|end_reason}`` -> ``hermes``;
  ``{history: [...]}`` (``instance_id``) -> ``openhands``; opctx export records ->
  ``opctx_jsonl``; chat messages or ``{messages}`` per line -> ``anthropic`` when
  Anthropic blocks (``tool_use``/``tool_result``/``thinking``) appear, else ``openai``.
* a whole JSON document: an array of Claude Code entries -> ``claude_code_hook``; of
  OpenHands events -> ``openhands``; of chat messages -> ``mini_swe_agent`` (its
  one-bash-block protocol), ``anthropic`` or ``openai``. An OpenHands completion log
  (``messages`` + ``response.choices``, or ``fncall_messages``) -> ``openhands_completions``.
  An object with ``history`` ->
  ``openhands`` (events) or ``swe_agent``; with ``messages`` -> ``mini_swe_agent``
  (``trajectory_format``), ``anthropic`` or ``openai``.
* anything else -> ``UnknownFormatError`` naming the file and what was seen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import claude_code, codex, openhands, openhands_completions
from .base import TranscriptError, UnknownFormatError, decode_json, load_json
from .message_lists import is_message, looks_mini_swe_agent, uses_anthropic_blocks

__all__ = ["detect", "sniff", "classify_records", "classify_document", "SNIFF_BYTES", "NOT_REGULAR"]

SNIFF_BYTES = 1 << 20
NOT_REGULAR = "not a regular file (a FIFO, device or socket, or a link to one): not opened"
_OPCTX_KEYS = {"id", "seq", "role", "caller", "predecessor", "reads", "metadata"}


def _mostly(test: Any, items: list) -> bool:
    """Does ``test`` hold for at least half of ``items`` (and one)?"""
    hits = sum(1 for x in items if test(x))
    return hits >= 1 and 2 * hits >= len(items)


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
    if _mostly(is_message, records):
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
        if _mostly(is_message, items):  # a damaged message is the parser's to report
            if looks_mini_swe_agent(items):
                return "mini_swe_agent"
            return "anthropic" if uses_anthropic_blocks(doc) else "openai"
        raise UnknownFormatError(path, None, f"a JSON array of unrecognised objects (keys: {sorted(items[0])[:8]})")
    if isinstance(doc, dict):
        if openhands_completions.looks_like_completion(doc):
            return "openhands_completions"  # one logged LLM call: checked before plain messages
        hist = doc.get("history")
        if isinstance(hist, list):
            if any(openhands.looks_like_event(x) or openhands.looks_like_pair(x) for x in hist[:20]):
                return "openhands"  # events, or the [action, observation] pairs of 2024 outputs
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
    if not p.is_file():
        raise TranscriptError(str(p), None, NOT_REGULAR)
    head, whole = _head(p)
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if not stripped:
        raise TranscriptError(str(p), None, "file is empty")
    if stripped.startswith("# aider chat started at"):
        return "aider", None
    if stripped[0] not in "[{":
        preview = stripped[:40].splitlines()[0]
        raise UnknownFormatError(str(p), 1, f"not a JSON, JSON Lines or Aider transcript (starts with {preview!r})")
    lines = [raw.strip() for raw in text.split("\n") if raw.strip()]
    first = _record(lines[0])
    if first is not None:
        if whole and len(lines) == 1:
            # a one-line JSON document and a one-record JSONL file look alike: decide by shape
            fmt_doc = _document_format(first, str(p))
            if fmt_doc in ("swe_agent", "mini_swe_agent", "openhands", "openhands_completions") or (
                    fmt_doc in ("openai", "anthropic") and isinstance(first.get("messages"), list)
                    and not {"system_prompt", "started_at"} & set(first)):
                return fmt_doc, first
        records = [first] + [r for r in map(_record, lines[1:_SNIFF_RECORDS]) if r is not None]
        return classify_records(records, str(p)), None
    try:
        doc = load_json(str(p))
    except TranscriptError:
        # Not one JSON document. JSON Lines whose first line is damaged are still JSON
        # Lines: classify them by the lines that parse (the parser reports line 1).
        records = [r for r in map(_record, lines[1:_SNIFF_RECORDS]) if r is not None]
        if records and stripped[0] == "{" and len(records) >= min(len(lines) - 2, 2):
            return classify_records(records, str(p)), None
        raise
    return classify_document(doc, str(p)), doc


_SNIFF_RECORDS = 51


def _head(p: Path) -> tuple[bytes, bool]:
    """The first ``SNIFF_BYTES`` of a file, extended to the end of its first line.

    A Claude Code line carrying a large pasted text or tool output may be longer than
    the sniffed prefix: cut, it would not parse and the file would be taken for a JSON
    document. Returns (bytes, whether that is the whole file).
    """
    with open(p, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
        body = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if len(head) == SNIFF_BYTES and b"\n" not in body:
            head += fh.readline()
        whole = not fh.read(1)
    return head, whole


def _record(line: str) -> dict | None:
    """One JSONL line as an object, or None (not JSON, not an object, cut short)."""
    if not line.startswith("{"):
        return None
    try:
        value = decode_json(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _document_format(doc: Any, path: str) -> str | None:
    try:
        return classify_document(doc, path)
    except UnknownFormatError:
        return None


def detect(path: str | Path) -> str:
    """The format name of ``path`` (see the module docstring); raises on unknown content."""
    return sniff(path)[0]
