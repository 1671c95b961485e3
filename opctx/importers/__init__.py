"""Importers: real recorded agent histories into opctx's DAG of ``Call`` nodes.

Every format is a *pure parser* (file -> ``ImportedSession``: meta, ``Call`` nodes,
HEAD, recorded compactions, warnings, skipped lines) that is testable without a
database; ``writer.write_session`` persists one parsed session all or nothing, and
``import_paths`` ties detection, parsing and writing together. See docs/importers.md.

Formats (``FORMATS``): ``claude_code`` (JSONL, subagents, spilled tool results),
``claude_code_hook`` (the hook-exported JSON array), ``codex`` (rollout JSONL),
``openai``, ``anthropic`` (message lists), ``hermes`` (session export),
``swe_agent`` (.traj), ``mini_swe_agent``, ``openhands`` (output.jsonl and event
arrays), ``opctx_jsonl`` (opctx's own lossless export) and ``aider`` (Markdown, lossy).
"""

from __future__ import annotations

from .api import (
    FORMATS,
    ImportDatabaseError,
    ImportReport,
    import_path,
    import_paths,
    iter_transcript_files,
    parse_path,
)
from .base import ImportedSession, Issue, TranscriptError, UnknownFormatError
from .detect import detect, sniff
from .export import export_jsonl, export_openai, session_to_openai
from .writer import write_session

__all__ = [
    "FORMATS",
    "ImportReport",
    "ImportDatabaseError",
    "ImportedSession",
    "Issue",
    "TranscriptError",
    "UnknownFormatError",
    "detect",
    "sniff",
    "parse_path",
    "iter_transcript_files",
    "import_path",
    "import_paths",
    "write_session",
    "export_openai",
    "export_jsonl",
    "session_to_openai",
]
