"""Claude Code transcripts: ``~/.claude/projects/<cwd>/<session>.jsonl`` and friends.

What is read
============
* One ``<session>.jsonl`` file = one session (a resumed session may carry lines with an
  older ``sessionId``; they are kept, Claude Code writes one file per conversation).
* The hook-exported JSON array (``logs/chat.json``): the same entries in one array, possibly
  of several sessions; split by ``sessionId`` (entries without one, such as
  ``file-history-snapshot``, go with the session of the entry before them).
* Subagents, both layouts: ``<session>/subagents/agent-*.jsonl`` (+ ``agent-*.meta.json``,
  whose fields land in the subagent session's meta) and the older flat ``agent-*.jsonl``
  beside the session file (same ``sessionId`` as the parent). Each subagent file is its own
  session, linked to its parent (``meta.parent``) and to the ``Task`` tool call that
  started it when that can be identified: a tool result whose ``toolUseResult.agentId`` is
  the subagent's id, else a ``Task`` call whose ``prompt`` is the subagent's first user
  message. The parent's code node gets ``metadata.subagent_session_id``.
  Inline sidechains (older clients logged subagents in the parent file with
  ``isSidechain: true``) stay in the session as separate roots; the root's ``caller`` is
  the ``Task`` code node it answers, matched by prompt. They never move HEAD.
* Spilled outputs ``<session>/tool-results/<tool_use_id>.txt``: the file content becomes
  the code node's ``output``; the inline text, when different (a truncated preview or a
  pointer), is kept in ``metadata.inline_output`` and the file in ``metadata.spilled_file``.

Mapping
=======
* ``user`` lines: text (and images, kept as ``metadata.content_blocks``) -> user node;
  ``tool_result`` blocks -> one code node each (``caller`` = the llm node that made the
  ``tool_use``, ``name``/``input`` from that call, ``metadata.tool_call_id``, ``is_error``,
  ``tool_use_result`` = the line's structured ``toolUseResult``).
* ``assistant`` lines sharing one ``message.id`` (Claude Code writes one line per content
  block) that continue one another (each line's parent is a line of that message or a
  result of its tool calls) -> ONE llm node. A line with a known id whose parent is
  elsewhere starts a node of its own: resumed/forked sessions copy earlier lines with
  new uuids, and some proxies reuse message ids. The merged node has: text blocks
  joined with a blank line, ``tool_use`` blocks -> ``metadata.tool_calls``, thinking -> ``metadata.thinking`` (signatures kept),
  ``metadata.source_ids`` lists every line's uuid. Usage is counted once: the last line's
  usage (the streamed lines repeat the same request; the last has the final output count).
  ``<synthetic>`` lines (client-made, no request) get ``metadata.synthetic = True``.
* ``system`` lines -> llm nodes with ``metadata.role = "system"``, kept in the chain
  where they were written, but never in an llm node's ``reads``: Claude Code shows them
  (hook output, command output, turn durations) and does not send them to the model.
* ``compact_boundary`` (``compactMetadata.trigger``, ``preTokens``) + the following
  ``isCompactSummary`` user line -> a recorded compaction in the shared layout (summary
  node ``S`` starting a new branch, originals untouched, ``recorded = True``). A summary
  without a boundary (older clients) is recorded the same way with ``trigger = None`` and
  ``reason = "recovered"``. After a compaction Claude Code sometimes parents the next lines
  (the ``/compact`` command echo) on the *pre-compaction* branch; such a line (parented on
  the very point the compaction summarised) is re-attached to the new branch
  (``metadata.source_parent`` keeps the recorded parent), because the model never saw the
  folded branch again. A line parented further back is a session resumed from before
  the compaction: it starts a branch of its own from its real parent (the client sends
  that earlier context again, and may compact it again).
* ``microcompact_boundary`` system lines (Claude Code 2.1.x: the client cleared old tool
  results before the next request; ``microcompactMetadata.trigger``, ``preTokens``,
  ``tokensSaved``, ``compactedToolIds``, ``clearedAttachmentUUIDs``) are *recorded aging
  events*: the line stays a display-only system node (never sent) carrying
  ``metadata.microcompaction`` = ``{"trigger", "pre_tokens", "tokens_saved",
  "tool_call_ids", "cleared_attachment_uuids", "uuid", "missing_tool_call_ids"}``, and
  every code node whose ``tool_call_id`` was cleared gets ``metadata.cleared_by`` = the
  boundary's ``uuid`` (the node id when the line has none). The results themselves stay
  untouched: the file holds no placeholder text, only the next request's usage drops.
* A ``uuid`` used by two entries (a client writing a line twice, a damaged file): both
  stay, as distinct nodes; the later one gets ``metadata.duplicate_uuid`` (the uuid and
  the first line that used it) and a warning names both lines; lines written after it
  that name the uuid as parent hang on the later one.
* ``parentUuid`` -> ``predecessor`` (forks kept). The lines of one merged message map to
  its llm node; tool results chain one after the other below it. HEAD = the node of the
  last non-sidechain line.
* ``summary`` lines (titles for a leaf) -> ``meta.summaries`` (the last one naming a
  leaf of this session is the title); ``file-history-snapshot`` -> the node of its
  ``messageId`` (``metadata.file_history_snapshots``); anything else (``attachment``,
  ``permission-mode``, types not invented yet) -> ``metadata.events`` of the node it hangs
  on, with one warning per type. Line fields constant over the session (``cwd``,
  ``version``, ``gitBranch``, ...) are kept once in ``meta.claude_code``; per node only
  what differs or is unknown (``metadata.source_fields``). Nothing is dropped.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opctx.dag.nodes import Call

from ._claude_code_layout import (
    AGENT_FILE,
    SAFE_ID,
    first_session_id,
    group_entries,
    link_subagent,
    owned_side_files,
    side_file_owner,
    subagent_files_of,
)
from .base import (
    ImportedSession,
    Issue,
    SessionBuilder,
    TranscriptError,
    content_text,
    decode_json,
    iter_jsonl,
    load_json,
    parse_timestamp,
    read_text,
    short_title,
)
from .fields import Field, FieldTable

__all__ = [
    "FORMAT",
    "HOOK_FORMAT",
    "parse_claude_code",
    "parse_claude_code_jsonl",
    "parse_claude_code_hook_json",
    "convert_entries",
    "looks_like_entry",
    "subagent_files_of",
    "owned_side_files",
    "side_file_owner",
    "link_subagent",
    "group_entries",
    "anthropic_usage",
    "tool_result_text",
    "ENTRY_TYPES",
    "FIELDS",
]

log = logging.getLogger(__name__)

FORMAT = "claude_code"
HOOK_FORMAT = "claude_code_hook"

ENTRY_TYPES = {"user", "assistant", "system", "summary", "file-history-snapshot"}
# Per-line fields that are constant over a session: kept once, in meta.claude_code.
_SESSION_FIELDS = ("sessionId", "cwd", "version", "gitBranch", "userType", "slug",
                   "entrypoint", "agentId", "isSidechain")
# Fields with a home of their own on the node.
_CONSUMED = {"type", "uuid", "parentUuid", "timestamp", "message", "isCompactSummary",
             "toolUseResult", "content", "subtype", "compactMetadata", "logicalParentUuid",
             "microcompactMetadata"}
_MESSAGE_CONSUMED = {"role", "content", "model", "id", "usage", "stop_reason"}


_TALK = {"type": ("user", "assistant")}
_ASSISTANT = {"type": ("assistant",)}
_USER = {"type": ("user",)}
_TOOL_USE = "message.content[type=tool_use|server_tool_use]"
_RESULT = "message.content[type=tool_result]"


def _entry_record(value: Any, top: bool) -> bool:
    """An entry: a JSONL line, or an element of the hook-exported array."""
    return looks_like_entry(value)


# The fields an entry is read with (opctx.importers.fields): ids that link entries and
# the shape of a message are needed to place or read the entry at all ("skip"); names,
# models and ids used as labels or keys are kept as their JSON text ("text"); counts,
# times and flags are read from any value ("read").
FIELDS = FieldTable(("claude_code", "claude_code_hook"), "entry", [
    Field("type", ("string",)),
    Field("uuid", ("string",)),
    Field("parentUuid", ("string",)),
    Field("logicalParentUuid", ("string",)),
    Field("sessionId", ("string",), "text"),
    Field("agentId", ("string",), "text"),
    Field("timestamp", ("string", "number"), "read"),
    Field("isSidechain", ("boolean",), "read"),
    Field("isMeta", ("boolean",), "read"),
    Field("isCompactSummary", ("boolean",), "read"),
    Field("subtype", ("string",), "read"),
    Field("content", ("string", "list"), "read"),
    Field("message", ("object",), when=_TALK),
    Field("message.content", ("string", "list"), when=_TALK),
    Field("message.id", ("string",), "text", when=_TALK),
    Field("message.model", ("string",), "text", when=_ASSISTANT),
    Field("message.stop_reason", ("string",), "read", when=_ASSISTANT),
    Field("message.usage", ("object",), "read", when=_ASSISTANT),
    Field("message.usage.input_tokens", ("integer",), "read", when=_ASSISTANT),
    Field("message.usage.output_tokens", ("integer",), "read", when=_ASSISTANT),
    Field("message.usage.cache_read_input_tokens", ("integer",), "read", when=_ASSISTANT),
    Field("message.usage.cache_creation_input_tokens", ("integer",), "read", when=_ASSISTANT),
    Field("message.content[type=text].text", ("string",), "text", when=_TALK),
    Field(f"{_TOOL_USE}.id", ("string",), "text", when=_ASSISTANT),
    Field(f"{_TOOL_USE}.name", ("string",), "text", when=_ASSISTANT),
    Field(f"{_TOOL_USE}.input", ("object",), "read", when=_ASSISTANT),
    Field(f"{_RESULT}.tool_use_id", ("string",), "text", when=_USER),
    Field(f"{_RESULT}.content", ("string", "list"), "read", when=_USER),
    Field(f"{_RESULT}.is_error", ("boolean",), "read", when=_USER),
    Field("compactMetadata", ("object",), when={"type": ("system",)}),
    Field("compactMetadata.trigger", ("string",), "read", when={"type": ("system",)}),
    Field("compactMetadata.preTokens", ("integer",), "read", when={"type": ("system",)}),
    Field("microcompactMetadata", ("object",), "read", when={"type": ("system",)}),
    Field("summary", ("string",), "text", when={"type": ("summary",)}),
    Field("leafUuid", ("string",), "text", when={"type": ("summary",)}),
    Field("messageId", ("string",), "text", when={"type": ("file-history-snapshot",)}),
], is_record=_entry_record)


def looks_like_entry(value: Any) -> bool:
    """A Claude Code transcript entry (used by ``detect``)."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    if kind in ("user", "assistant", "system"):
        return "uuid" in value or "sessionId" in value or "parentUuid" in value
    if kind == "summary":
        return "leafUuid" in value
    if kind == "file-history-snapshot":
        return "snapshot" in value or "messageId" in value
    return False


def _count(value: Any) -> int:
    """A token count from a recording: numbers as they are, anything else 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return int(value)


def anthropic_usage(usage: dict | None) -> dict[str, int] | None:
    if not isinstance(usage, dict):
        return None
    return {
        "input_tokens": _count(usage.get("input_tokens")),
        "output_tokens": _count(usage.get("output_tokens")),
        "cache_read_tokens": _count(usage.get("cache_read_input_tokens")),
        "cache_write_tokens": _count(usage.get("cache_creation_input_tokens")),
    }


def tool_result_text(content: Any) -> tuple[str, list[dict]]:
    """(text, non-text blocks) of a tool_result's content."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if isinstance(content, list):
        others = [b for b in content if isinstance(b, dict) and b.get("type") != "text"]
        return content_text(content), others
    return json.dumps(content, ensure_ascii=False), []


class _Converter:
    """Turns the entries of one Claude Code session into an ImportedSession."""

    def __init__(self, path: str, fmt: str, *, tool_results_dir: str | None,
                 session_meta: dict[str, Any] | None = None, on_error: str = "stop",
                 issues: list[Issue] | None = None) -> None:
        self.path = path
        # hook arrays number their entries by array position, not by file line
        self.in_array = fmt == HOOK_FORMAT
        self.on_error = on_error
        self.issues = issues if issues is not None else []
        self.b = SessionBuilder(fmt, path)
        self.tool_results_dir = tool_results_dir
        self.extra_meta = dict(session_meta or {})
        self.node_of_uuid: dict[str, str] = {}
        self.line_of_uuid: dict[str, int] = {}  # the first line of each uuid (duplicates)
        self.entries = 0
        self.first_session_key: str | None = None
        self.first_agent_id: str | None = None
        self.index: dict[str, int] = {}  # node id -> creation index (epoch test)
        self.llm_of_msgid: dict[str, Call] = {}
        self.tail_of_llm: dict[str, str] = {}
        self.tool_owner: dict[str, tuple[Call, dict]] = {}
        self.code_of_tool: dict[str, Call] = {}
        self.task_prompts: dict[str, str] = {}  # Task tool_use id -> prompt
        self.sidechain_roots: list[Call] = []
        self.epoch_start = 0  # index of the latest compaction's first new node
        self.folded_head: str | None = None  # the last node the latest compaction summarised
        self.branch_ids: set[str] = set()
        self.pending_boundary: dict | None = None
        self.main_head: str | None = None
        self.side_head: str | None = None
        self.session_fields: dict[str, Any] = {}
        self.summaries: list[dict] = []
        self.snapshots: list[dict] = []
        self.unattached: list[dict] = []
        self.unknown_types: Counter[str] = Counter()
        self.session_ids: list[str] = []
        self.models: Counter[str] = Counter()
        self.first_user_text = ""

    # -- helpers ---------------------------------------------------------------------------
    def _source_fields(self, entry: dict) -> dict[str, Any]:
        out = {}
        for k, v in entry.items():
            if k in _CONSUMED:
                continue
            if k in _SESSION_FIELDS:
                if k not in self.session_fields:
                    self.session_fields[k] = v
                    continue
                if self.session_fields[k] == v:
                    continue
            out[k] = v
        return out

    def _where(self, line: int) -> str:
        """Where an entry is: ``path:line`` (JSONL) or ``path, array element N`` (hook array)."""
        return f"{self.path}, array element {line}" if self.in_array else f"{self.path}:{line}"

    def _register(self, call: Call) -> Call:
        self.index[call.id] = len(self.b.calls) - 1
        return call

    def _resolve_parent(self, entry: dict, line: int) -> str | None:
        parent = entry.get("parentUuid")
        if parent is None:
            return None
        nid = self.node_of_uuid.get(parent)
        if nid is None:
            self.b.warnings.append(
                f"{self._where(line)}: parentUuid {parent} not found; attached to the current head"
            )
            return self.side_head if entry.get("isSidechain") and not self._all_side else self.b.head
        target = self.tail_of_llm.get(nid, nid)
        if not entry.get("isSidechain") and self.b.compactions and self.index.get(nid, 0) < self.epoch_start \
                and target == self.folded_head:
            # Parented on the point the latest compaction summarised (the /compact echo):
            # the model continued on the new branch. A parent further back is a session
            # resumed from before the compaction: a branch of its own, from its real parent.
            entry.setdefault("_redirected_from", parent)
            return self.b.head
        return target

    def _move_head(self, entry: dict, node_id: str) -> None:
        if entry.get("isSidechain") and not self._all_side:
            self.side_head = node_id
        else:
            self.main_head = node_id
            self.b.head = node_id

    # -- entry handlers ------------------------------------------------------------------------
    def run(self, entries: Iterable[tuple[int, dict]]) -> None:
        """Convert ``(line, entry)`` pairs as they come (a list or a file being read).

        Whether every conversation line is a sidechain (a subagent's own file) decides
        how sidechain lines attach; it is known at the first line that is not one, so
        only the entries before it wait (all of them in a file of sidechains only).
        """
        waiting: list[tuple[int, dict]] | None = []
        self._all_side = False
        for line, entry in entries:
            self._note(entry)
            if waiting is not None:
                waiting.append((line, entry))
                if entry.get("type") in ("user", "assistant") and not entry.get("isSidechain"):
                    for item in waiting:
                        self._entry(*item)
                    waiting = None
                continue
            self._entry(line, entry)
        if waiting is not None:
            self._all_side = bool(waiting)
            for item in waiting:
                self._entry(*item)
        if self.pending_boundary is not None:
            # A boundary whose summary line never came (file cut short): record what we know.
            self._compact_summary(None, None)
        self._attach_snapshots()
        self._link_sidechains()

    def _note(self, entry: dict) -> None:
        """Count an entry; keep the first session and agent ids (the file's own names)."""
        self.entries += 1
        if self.first_session_key is None and entry.get("sessionId"):
            self.first_session_key = str(entry["sessionId"])
        if self.first_agent_id is None and entry.get("agentId"):
            self.first_agent_id = str(entry["agentId"])

    def _entry(self, line: int, entry: dict) -> None:
        """One entry: checked against ``FIELDS``, dispatched by type; a bad one raised or
        skipped with its line (its array element in a hook array)."""
        kind = entry.get("type")
        label = f"{kind} entry" if isinstance(kind, str) else "entry"
        if self.in_array:
            label = f"array element {line}: {label}"
        file_line = None if self.in_array else line
        if not FIELDS.check_record(entry, path=self.path, line=file_line, on_error=self.on_error,
                                   issues=self.issues, label=label):
            return
        try:
            first_line = self._first_line_of_uuid(entry, line)
            self._dispatch(line, entry)
            if first_line is not None:
                self._mark_duplicate(entry, line, first_line)
            return
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            # a shape no field of the table describes: still this entry only, with its line
            log.debug("%s:%s: %s", self.path, line, exc, exc_info=True)
        reason = f"{label}: a field has a type or shape this importer does not read"
        if self.on_error != "skip":
            raise TranscriptError(self.path, file_line, reason)
        self.issues.append(Issue(self.path, file_line, reason, "entry skipped"))

    def _first_line_of_uuid(self, entry: dict, line: int) -> int | None:
        """Where this entry's ``uuid`` was first seen, if it was (else remember it here)."""
        uid = entry.get("uuid")
        if not isinstance(uid, str):
            return None
        first = self.line_of_uuid.setdefault(uid, line)
        return None if first == line else first

    def _mark_duplicate(self, entry: dict, line: int, first_line: int) -> None:
        """A second entry with a uuid already used: both stay, as distinct nodes.

        The later node gets ``metadata.duplicate_uuid`` (the uuid and the first line
        that used it); lines naming that uuid as parent afterwards hang on the later
        entry, as they were written after it.
        """
        uid = entry["uuid"]
        where = "element" if self.in_array else "line"
        self.b.warnings.append(
            f"{self._where(line)}: uuid {uid} already used at {where} {first_line}; both kept as "
            f"distinct nodes (metadata.duplicate_uuid on the later one)")
        node = self.b.by_id.get(self.node_of_uuid.get(uid, ""))
        if node is not None:
            node.metadata.setdefault("duplicate_uuid", {"uuid": uid, f"first_{where}": first_line})

    def _dispatch(self, line: int, entry: dict) -> None:
        kind = entry.get("type")
        if entry.get("timestamp") is not None:
            self.b.time(entry.get("timestamp"), self._where(line))
        sid = entry.get("sessionId")
        if isinstance(sid, str) and sid not in self.session_ids:
            self.session_ids.append(sid)
        if kind == "user":
            if entry.get("isCompactSummary"):
                self._compact_summary(entry, line)
            else:
                self._user(entry, line)
        elif kind == "assistant":
            self._assistant(entry, line)
        elif kind == "system":
            if entry.get("subtype") == "compact_boundary":
                self.pending_boundary = entry
            elif entry.get("subtype") == "microcompact_boundary":
                self._microcompact(entry, line)
            else:
                self._system(entry, line)
        elif kind == "summary":
            self.summaries.append({k: v for k, v in entry.items() if k != "type"})
        elif kind == "file-history-snapshot":
            self.snapshots.append(entry)
        else:
            self._event(entry, line)

    def _event(self, entry: dict, line: int) -> None:
        kind = str(entry.get("type"))
        self.unknown_types[kind] += 1
        target = None
        if entry.get("parentUuid") is not None:
            target = self.node_of_uuid.get(entry["parentUuid"])
        if target is None:
            target = self.b.head
        if entry.get("uuid") and target is not None:
            # Transparent in the chain: a child of this line hangs on its parent's node.
            self.node_of_uuid[entry["uuid"]] = target
        record = dict(entry)
        record["_element" if self.in_array else "_line"] = line
        if target is not None:
            self.b.by_id[target].metadata.setdefault("events", []).append(record)
        else:
            self.unattached.append(record)

    def _user(self, entry: dict, line: int) -> None:
        msg = entry.get("message") or {}
        content = msg.get("content")
        pred = self._resolve_parent(entry, line)
        fields = self._source_fields(entry)
        if "_redirected_from" in entry:
            fields.pop("_redirected_from", None)
            fields["source_parent"] = entry.pop("_redirected_from")
        extra_msg = {k: v for k, v in msg.items() if k not in _MESSAGE_CONSUMED}
        when = self.b.last_time
        results = []
        others: list[Any] = []
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results.append(block)
                else:
                    others.append(block)
        last: Call | None = None
        for block in results:
            last = self._tool_result(entry, block, pred, fields, when)
            pred = last.id
        has_text = isinstance(content, str) or bool(others) or (not results)
        if has_text:
            text = content if isinstance(content, str) else content_text(others)
            meta: dict[str, Any] = {"source_id": entry.get("uuid")}
            non_text = [b for b in others if not (isinstance(b, dict) and b.get("type") == "text")]
            if non_text:
                meta["content_blocks"] = non_text
            if entry.get("isMeta"):
                meta["is_meta"] = True
            if fields and not results:
                meta["source_fields"] = fields
            if extra_msg:
                meta["message_fields"] = extra_msg
            if entry.get("toolUseResult") is not None and not results:
                meta["tool_use_result"] = entry["toolUseResult"]
            last = self._register(self.b.add(
                "user", name="user", output=text, predecessor=pred, metadata=meta,
                created_at=when, move_head=False,
            ))
            if entry.get("isSidechain") and pred is None and not self._all_side:
                self.sidechain_roots.append(last)
            if not entry.get("isMeta") and not self.first_user_text and text.strip() \
                    and not text.lstrip().startswith(("<command", "<local-command", "Caveat:")):
                self.first_user_text = text
        if entry.get("uuid"):
            self.node_of_uuid[entry["uuid"]] = last.id
        self._move_head(entry, last.id)

    def _tool_result(self, entry: dict, block: dict, pred: str | None, fields: dict,
                     when: float) -> Call:
        tool_id = block.get("tool_use_id")
        owner = self.tool_owner.get(tool_id)
        output, blocks = tool_result_text(block.get("content"))
        meta: dict[str, Any] = {
            "tool_call_id": tool_id,
            "is_error": bool(block.get("is_error")),
            "source_id": entry.get("uuid"),
        }
        extra_block = {k: v for k, v in block.items()
                       if k not in ("type", "tool_use_id", "content", "is_error")}
        if extra_block:
            meta["block_fields"] = extra_block
        if blocks:
            meta["content_blocks"] = blocks
        if entry.get("toolUseResult") is not None:
            meta["tool_use_result"] = entry["toolUseResult"]
        if fields:
            meta["source_fields"] = fields
        spilled = self._spilled(tool_id)
        if spilled is not None:
            rel, text = spilled
            meta["spilled_file"] = rel
            if text != output:
                meta["inline_output"] = output
                output = text
        if owner is None:
            meta["orphan_result"] = True
            self.b.warnings.append(
                f"{self.path}: tool_result {tool_id} answers no tool_use in this session"
            )
            name, args, caller = "", None, None
        else:
            llm, tc = owner
            name, args, caller = tc.get("name", ""), tc.get("arguments"), llm.id
        call = self._register(self.b.add(
            "code", name=name, input=args, output=output, predecessor=pred, caller=caller,
            metadata=meta, created_at=when, move_head=False,
        ))
        if owner is not None:
            llm = owner[0]
            if pred in (llm.id, self.tail_of_llm.get(llm.id)):
                self.tail_of_llm[llm.id] = call.id
            self.code_of_tool[tool_id] = call
        return call

    def _spilled(self, tool_id: str | None) -> tuple[str, str] | None:
        # The id comes from an untrusted file: only a plain id may name a file, never a
        # path ("../../x" must not read outside tool-results/).
        if not isinstance(tool_id, str) or not SAFE_ID.fullmatch(tool_id) or not self.tool_results_dir:
            return None
        fpath = os.path.join(self.tool_results_dir, f"{tool_id}.txt")
        if not os.path.isfile(fpath):
            return None
        text = read_text(fpath, on_error="skip")
        return os.path.relpath(fpath, os.path.dirname(self.path)), text

    def _assistant(self, entry: dict, line: int) -> None:
        msg = entry.get("message") or {}
        mid = msg.get("id") or entry.get("uuid") or f"line-{line}"
        content = msg.get("content")
        blocks = content if isinstance(content, list) else (
            [{"type": "text", "text": content}] if isinstance(content, str) else [])
        texts, tool_calls, thinking, others = [], [], [], []
        for block in blocks:
            if not isinstance(block, dict):
                others.append(block)
                continue
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text") or "")
            elif kind in ("tool_use", "server_tool_use"):
                tc = {"id": block.get("id"), "name": block.get("name", ""),
                      "arguments": block.get("input") if isinstance(block.get("input"), dict)
                      else {"_value": block.get("input")}}
                if kind != "tool_use":
                    tc["type"] = kind
                tool_calls.append(tc)
            elif kind in ("thinking", "redacted_thinking"):
                thinking.append({k: v for k, v in block.items()})
            else:
                others.append(block)
        model = msg.get("model") or ""
        llm = self.llm_of_msgid.get(mid)
        if llm is not None and not self._continues(llm, entry):
            # Same message id, but not a continuation of that message: a resumed or
            # forked session copies earlier lines with new uuids (and some proxies reuse
            # ids). The copy is a node of its own on its own branch.
            llm = None
        if llm is None:
            pred = self._resolve_parent(entry, line)
            fields = self._source_fields(entry)
            meta: dict[str, Any] = {"message_id": msg.get("id"), "source_ids": [],
                                    "tool_calls": []}
            if "_redirected_from" in entry:
                fields.pop("_redirected_from", None)
                meta["source_parent"] = entry.pop("_redirected_from")
            if fields:
                meta["source_fields"] = fields
            llm = self._register(self.b.add(
                "llm", name=model, output="", predecessor=pred, metadata=meta, move_head=False,
            ))
            self.llm_of_msgid[mid] = llm
            if model and model != "<synthetic>":
                self.models[model] += 1
        else:
            fields = self._source_fields(entry)
            if fields:
                llm.metadata.setdefault("line_fields", []).append(fields)
        meta = llm.metadata
        meta["source_ids"].append(entry.get("uuid"))
        if texts:
            joined = "\n\n".join(t for t in texts if t)
            llm.output = f"{llm.output}\n\n{joined}" if llm.output and joined else (llm.output or joined)
        for tc in tool_calls:
            meta["tool_calls"].append(tc)
            self.tool_owner[tc["id"]] = (llm, tc)
            if tc["name"] == "Task" and isinstance(tc["arguments"].get("prompt"), str):
                self.task_prompts[tc["id"]] = tc["arguments"]["prompt"]
        if thinking:
            meta.setdefault("thinking", []).extend(thinking)
        if others:
            meta.setdefault("content_blocks", []).extend(others)
        usage = anthropic_usage(msg.get("usage"))
        if usage is not None:
            meta["usage"] = usage
            meta["usage_raw"] = msg.get("usage")
        if msg.get("stop_reason") is not None:
            meta["stop_reason"] = msg.get("stop_reason")
        extra_msg = {k: v for k, v in msg.items() if k not in _MESSAGE_CONSUMED
                     and not (k == "type" and v == "message")}  # the constant adds nothing
        if extra_msg:
            meta["message_fields"] = extra_msg
        if model == "<synthetic>":
            meta["synthetic"] = True
        if entry.get("isApiErrorMessage"):
            meta["api_error"] = True
        if entry.get("uuid"):
            self.node_of_uuid[entry["uuid"]] = llm.id
        self._move_head(entry, self.tail_of_llm.get(llm.id, llm.id))

    def _continues(self, llm: Call, entry: dict) -> bool:
        """Does this assistant line hang on ``llm`` (or on a result of its tool calls)?"""
        parent = self.node_of_uuid.get(entry.get("parentUuid"))
        if parent is None:
            return False
        if parent == llm.id:
            return True
        node = self.b.by_id.get(parent)
        return node is not None and node.role == "code" and node.caller == llm.id

    def _system(self, entry: dict, line: int) -> None:
        pred = self._resolve_parent(entry, line)
        fields = self._source_fields(entry)
        meta: dict[str, Any] = {"role": "system", "display_only": True,
                                "source_id": entry.get("uuid")}
        if entry.get("subtype") is not None:
            meta["subtype"] = entry["subtype"]
        if "_redirected_from" in entry:
            fields.pop("_redirected_from", None)
            meta["source_parent"] = entry.pop("_redirected_from")
        if fields:
            meta["source_fields"] = fields
        content = entry.get("content")
        text = content if isinstance(content, str) else content_text(content)
        call = self._register(self.b.add(
            "llm", output=text, predecessor=pred, metadata=meta, move_head=False, in_prompt=False,
        ))
        if entry.get("uuid"):
            self.node_of_uuid[entry["uuid"]] = call.id
        self._move_head(entry, call.id)

    def _microcompact(self, entry: dict, line: int) -> None:
        """A recorded microcompaction: a display-only node plus ``cleared_by`` on what it cleared.

        Values come from an untrusted file: counts that are not numbers become None,
        ids that are not strings are dropped (never used as keys).
        """
        self._system(entry, line)
        node = self.b.calls[-1]  # the node _system just added
        raw = entry.get("microcompactMetadata")
        raw = raw if isinstance(raw, dict) else {}

        def number(value: Any) -> int | None:
            return None if isinstance(value, bool) or not isinstance(value, (int, float)) else int(value)

        def ids(value: Any) -> list[str]:
            return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

        tool_ids = ids(raw.get("compactedToolIds"))
        marker = entry.get("uuid") if isinstance(entry.get("uuid"), str) else node.id
        missing = []
        for tool_id in tool_ids:
            code = self.code_of_tool.get(tool_id)
            if code is None:
                missing.append(tool_id)
            else:
                # the first boundary that cleared a result is the one that matters
                code.metadata.setdefault("cleared_by", marker)
        record: dict[str, Any] = {
            "trigger": raw.get("trigger") if isinstance(raw.get("trigger"), str) else None,
            "pre_tokens": number(raw.get("preTokens")),
            "tokens_saved": number(raw.get("tokensSaved")),
            "tool_call_ids": tool_ids,
            "cleared_attachment_uuids": ids(raw.get("clearedAttachmentUUIDs")),
            "uuid": marker,
        }
        if missing:
            record["missing_tool_call_ids"] = missing
            self.b.warnings.append(
                f"{self._where(line)}: microcompact_boundary clears {len(missing)} tool result(s) "
                "not in this session; listed in metadata.microcompaction.missing_tool_call_ids")
        extra = {k: v for k, v in raw.items() if k not in (
            "trigger", "preTokens", "tokensSaved", "compactedToolIds", "clearedAttachmentUUIDs")}
        if extra:
            record["extra"] = extra
        node.metadata["microcompaction"] = record

    def _compact_summary(self, entry: dict | None, line: int | None) -> None:
        boundary = self.pending_boundary
        self.pending_boundary = None
        branch_head = None
        if boundary is not None and boundary.get("logicalParentUuid"):
            branch_head = self.node_of_uuid.get(boundary["logicalParentUuid"])
        if branch_head is None and entry is not None and entry.get("parentUuid"):
            parent = self.node_of_uuid.get(entry["parentUuid"])
            if parent is not None and self.b.by_id[parent].metadata.get("compaction") is None:
                branch_head = parent
        if branch_head is None:
            branch_head = self.b.head
        cmeta = (boundary or {}).get("compactMetadata") or {}
        text = ""
        meta: dict[str, Any] = {"source_ids": []}
        if boundary is not None:
            meta["source_ids"].append(boundary.get("uuid"))
            meta["boundary"] = {k: v for k, v in boundary.items()
                                if k not in ("type", "compactMetadata", *_SESSION_FIELDS)}
        if entry is not None:
            msg = entry.get("message") or {}
            text = content_text(msg.get("content"))
            meta["source_ids"].append(entry.get("uuid"))
            fields = self._source_fields(entry)
            if fields:
                meta["source_fields"] = fields
        else:
            meta["summary_missing"] = True
            self.b.warnings.append(
                f"{self.path}: compact_boundary without its summary line; recorded with an empty summary"
            )
        when = parse_timestamp((entry or boundary or {}).get("timestamp"), self.b.last_time)
        self.epoch_start = len(self.b.calls)
        self.folded_head = self.tail_of_llm.get(branch_head, branch_head)
        summary = self.b.record_compaction(
            text,
            branch_head=branch_head,
            trigger=cmeta.get("trigger"),
            pre_tokens=cmeta.get("preTokens"),
            created_at=when,
            metadata=meta,
            compaction_extra={k: v for k, v in cmeta.items() if k not in ("trigger", "preTokens")}
            or None,
        )
        self._register(summary)
        for key in ((boundary or {}).get("uuid"), (entry or {}).get("uuid")):
            if key:
                self.node_of_uuid[key] = summary.id
        self.main_head = summary.id

    def _attach_snapshots(self) -> None:
        for snap in self.snapshots:
            target = self.node_of_uuid.get(snap.get("messageId"))
            if target is None:
                self.unattached.append(snap)
            else:
                self.b.by_id[target].metadata.setdefault("file_history_snapshots", []).append(snap)

    def _link_sidechains(self) -> None:
        by_prompt = {p.strip(): tid for tid, p in self.task_prompts.items()}
        for root in self.sidechain_roots:
            text = root.output.strip() if isinstance(root.output, str) else ""
            tid = by_prompt.get(text)
            if tid is None:
                continue
            root.metadata["parent_tool_call_id"] = tid
            code = self.code_of_tool.get(tid)
            if code is not None:
                root.caller = code.id

    # -- result --------------------------------------------------------------------------------
    def finish(self, session_id: str, skipped: list[Issue]) -> ImportedSession:
        for kind, n in sorted(self.unknown_types.items()):
            self.b.warnings.append(
                f"{self.path}: {n} entr{'y' if n == 1 else 'ies'} of type {kind!r} kept in metadata.events"
            )
        known_nodes = set(self.node_of_uuid.values())
        title = ""
        for s in self.summaries:
            if s.get("leafUuid") in self.node_of_uuid and s.get("summary"):
                title = s["summary"]
        if not title:
            title = short_title(self.first_user_text) or Path(self.path).stem
        meta = dict(self.extra_meta)
        meta["claude_code"] = dict(self.session_fields)
        meta["source_session_ids"] = self.session_ids
        if self.summaries:
            meta["summaries"] = self.summaries
        if self.unattached:
            meta["unattached_entries"] = self.unattached
        head = self.main_head if self.main_head is not None else self.side_head
        if head is None and known_nodes:
            head = self.b.calls[-1].id
        model = self.models.most_common(1)[0][0] if self.models else ""
        return self.b.finish(
            session_id=session_id, title=title, model=model, meta=meta, skipped=skipped,
            agent_id=str(self.session_fields.get("agentId") or ""), head=head,
        )


def convert_entries(entries: list[tuple[int, dict]], path: str, *, fmt: str = FORMAT,
                    session_id: str, tool_results_dir: str | None = None,
                    session_meta: dict | None = None,
                    skipped: list[Issue] | None = None, on_error: str = "stop") -> ImportedSession:
    skipped = skipped if skipped is not None else []
    conv = _Converter(path, fmt, tool_results_dir=tool_results_dir, session_meta=session_meta,
                      on_error=on_error, issues=skipped)
    conv.run(entries)
    return conv.finish(session_id, skipped)


def parse_claude_code_jsonl(path: str, *, on_error: str = "stop",
                            with_subagents: bool = True) -> list[ImportedSession]:
    """A session file, its spilled tool results and (by default) its subagents.

    The file is converted as it is read, line by line: a large transcript is never held
    as parsed records and as nodes at once.
    """
    path = str(path)
    issues: list[Issue] = []
    p = Path(path)
    is_agent = bool(AGENT_FILE.match(p.name))
    tr_dir = str(p.with_suffix("") / "tool-results")
    if is_agent:
        # a subagent's own spilled outputs live beside the parent's
        # (the session id comes from the file: used as a folder name only when it is a plain id)
        sid = first_session_id(path) or p.stem
        parent_dir = p.parent.parent if p.parent.name == "subagents" else (
            p.parent / sid if SAFE_ID.fullmatch(sid) else None)
        tr_dir = str(parent_dir / "tool-results") if parent_dir is not None else ""
    conv = _Converter(path, FORMAT, tool_results_dir=tr_dir if tr_dir and os.path.isdir(tr_dir) else None,
                      on_error=on_error, issues=issues)
    conv.run((jl.line, jl.value) for jl in iter_jsonl(path, on_error=on_error, issues=issues))
    if not conv.entries:
        raise TranscriptError(path, None, "no Claude Code entries in the file")
    source_sid = conv.first_session_key or p.stem
    if is_agent:
        agent_id = conv.first_agent_id or p.stem[len("agent-"):]
        session_id = f"cc-{source_sid}-agent-{agent_id}"
        meta_file = p.with_suffix(".meta.json")
        if meta_file.is_file():
            try:
                conv.extra_meta["subagent_meta"] = decode_json(read_text(str(meta_file), on_error="skip"))
            except ValueError:
                conv.extra_meta["subagent_meta_error"] = f"{meta_file}: not JSON"
        conv.extra_meta["parent"] = {"source_session_id": source_sid, "session_id": f"cc-{source_sid}",
                                     "agent_id": agent_id}
    else:
        session_id = f"cc-{p.stem if _looks_uuid(p.stem) else source_sid}"
    main = conv.finish(session_id, issues)
    out = [main]
    if with_subagents and not is_agent:
        for f in subagent_files_of(path):
            for sub in parse_claude_code_jsonl(f, on_error=on_error, with_subagents=False):
                sub.meta["parent"]["session_id"] = main.session_id
                link_subagent(main, sub)
                out.append(sub)
    return out


def _looks_uuid(s: str) -> bool:
    return bool(re.fullmatch(r"[0-9a-fA-F-]{36}", s))


def parse_claude_code_hook_json(path: str, *, on_error: str = "stop",
                                data: Any = None) -> list[ImportedSession]:
    """The hook-exported JSON array, split into sessions by ``sessionId``."""
    path = str(path)
    issues: list[Issue] = []
    if data is None:
        data = load_json(path, on_error=on_error, issues=issues)
    if not isinstance(data, list):
        raise TranscriptError(path, None, "expected a JSON array of Claude Code entries")
    elements: list[tuple[int, dict]] = []
    for i, e in enumerate(data):
        if not isinstance(e, dict):
            reason = f"array element {i} is {type(e).__name__}, not an entry object"
            if on_error != "skip":
                raise TranscriptError(path, None, reason)
            issues.append(Issue(path, None, reason, "element skipped"))
            continue
        # checked before the entries are grouped by their ids (a list where an id belongs)
        kind = e.get("type")
        label = f"array element {i + 1}: " + (f"{kind} entry" if isinstance(kind, str) else "entry")
        if FIELDS.check_record(e, path=path, line=None, on_error=on_error, issues=issues, label=label):
            elements.append((i + 1, e))
    groups = group_entries(elements)
    out = []
    for entries in groups:
        sid = Counter(e.get("sessionId") for _, e in entries if e.get("sessionId"))
        key = sid.most_common(1)[0][0] if sid else Path(path).stem
        out.append(convert_entries(entries, path, fmt=HOOK_FORMAT, session_id=f"cc-{key}",
                                   skipped=issues if not out else [], on_error=on_error))
    if not out:
        raise TranscriptError(path, None, "no Claude Code entries in the array")
    return out


def parse_claude_code(path: str, *, on_error: str = "stop") -> list[ImportedSession]:
    """A session JSONL file or a hook JSON array (decided by the first byte)."""
    with open(path, "rb") as fh:
        head = fh.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"["):
        return parse_claude_code_hook_json(path, on_error=on_error)
    return parse_claude_code_jsonl(path, on_error=on_error)
