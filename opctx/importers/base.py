"""Shared machinery of the importers: the parse result, errors, robust readers, the builder.

Every importer is a *pure parser*: ``parse(path) -> list[ImportedSession]``. It never
touches a database; :mod:`opctx.importers.writer` persists the result, one session per
transaction. This module holds what all parsers share.

``ImportedSession``
    ``meta`` (title, model, source info, and every session-level field of the recording
    that has no home of its own), ``calls`` (``Call`` nodes in ``seq`` order, ``seq`` not
    yet assigned: the store assigns it inside its write transaction), ``head``,
    ``recorded_compactions`` (the summary nodes' ids), ``warnings`` and ``skipped``.

Errors
    ``TranscriptError`` always names the file, and the line where there is one
    (``path:line: message``), so that a bad line in a 100 MB transcript can be found.
    ``UnknownFormatError`` is the error of ``detect`` for content it does not recognise.

Strict and lenient reading (``on_error``)
    ``"stop"``: the first bad line (invalid JSON, invalid UTF-8, a truncated last line, a
    line that is not an object) raises ``TranscriptError``; nothing of that file is kept.
    ``"skip"``: a bad JSON line is left out and listed in ``ImportedSession.skipped``
    (file, line, reason); invalid UTF-8 is decoded with U+FFFD replacement characters and
    reported the same way, because dropping a whole line for one bad byte loses more than
    it protects. Nothing is ever skipped silently.

Reading
    JSON Lines are read one line at a time (``iter_jsonl``), never the whole file at once.
    Every JSON text goes through ``decode_json``: ``NaN``/``Infinity`` and numbers too
    large for a float are kept as the text the file wrote (the store writes standard
    JSON only), and nesting deeper than ``MAX_NESTING`` is an error naming the line,
    never a ``RecursionError``.

``SessionBuilder``
    Allocates node ids (fresh ``u_``/``l_``/``c_`` ids: a transcript may be imported twice,
    into two sessions, and node ids are unique in a database; the recording's own ids are
    kept in ``metadata.source_id``/``source_ids``), keeps HEAD, computes ``reads`` of every
    llm node (the chain of its predecessor, root first: for a linear transcript, the
    active branch since the last compaction, because the summary node starts a new chain)
    and lays out recorded compactions exactly as docs/ARCHITECTURE.md "Compaction layout"
    says (``record_compaction``).

Timestamps
    ISO 8601 strings (``Z`` or an offset; naive ones are read as UTC) and epoch numbers
    (seconds or milliseconds) are accepted. A record without a time inherits the time of
    the record before it, so ``created_at`` never jumps to "now" in an old recording. A
    time that is no time (``NaN``, ``Infinity``, outside years 1-9999, text) does the
    same, and is kept: ``metadata.bad_timestamp`` of the record's node, and a warning.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import reprlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opctx.dag._fastjson import loads_plain
from opctx.dag.nodes import Call, new_id

__all__ = [
    "SUMMARY_PREFIX",
    "ON_ERROR_MODES",
    "TranscriptError",
    "UnknownFormatError",
    "Issue",
    "ImportedSession",
    "JsonLine",
    "SessionBuilder",
    "MAX_NESTING",
    "decode_json",
    "read_text",
    "iter_jsonl",
    "load_json",
    "parse_timestamp",
    "content_text",
    "parse_arguments",
    "short_title",
]

SUMMARY_PREFIX = "[Previous conversation summary]\n"
ON_ERROR_MODES = ("stop", "skip")


class TranscriptError(ValueError):
    """A transcript that cannot be read as what it claims to be. Names file and line."""

    def __init__(self, path: str | os.PathLike | None, line: int | None, message: str) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.reason = message
        where = self.path or "<input>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class UnknownFormatError(TranscriptError):
    """``detect`` could not recognise the content of a file."""


@dataclass
class Issue:
    """Something an import left out or changed: reported, never silent."""

    path: str
    line: int | None
    reason: str
    action: str = "skipped"

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.reason} ({self.action})"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "reason": self.reason, "action": self.action}


@dataclass
class ImportedSession:
    """One conversation parsed from a recording, ready to be written in one transaction."""

    format: str
    source_path: str
    session_id: str
    title: str
    model: str
    calls: list[Call]
    head: str | None
    meta: dict[str, Any] = field(default_factory=dict)
    agent_id: str = ""
    recorded_compactions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: list[Issue] = field(default_factory=list)

    @property
    def source(self) -> str:
        return f"import:{self.format}"

    def counts(self) -> dict[str, int]:
        """Node counts by kind: user, llm, system, code, tool_calls, compactions."""
        out = {"user": 0, "llm": 0, "system": 0, "code": 0, "tool_calls": 0, "compactions": 0}
        for c in self.calls:
            if c.metadata.get("copied_from"):
                continue
            if c.role == "user":
                out["user"] += 1
            elif c.role == "code":
                out["code"] += 1
            elif "compaction" in c.metadata:
                out["compactions"] += 1
            elif c.metadata.get("role") == "system":
                out["system"] += 1
            else:
                out["llm"] += 1
                out["tool_calls"] += len(c.metadata.get("tool_calls") or ())
        return out


# -- reading -----------------------------------------------------------------------------

# Deeper JSON is refused with a clear error: real recordings nest a few dozen levels at
# most, and what the importer and the store do with a value (flatten it for search,
# serialise it, walk it) recurses once or twice per level under Python's limit of 1000.
MAX_NESTING = 256
_NON_FINITE = {"NaN", "Infinity", "-Infinity"}


def _finite_float(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else text  # 1e999 overflows: keep what was written


def _too_deep(text: str) -> int | None:
    """The offset where ``text`` nests deeper than ``MAX_NESTING``, or None.

    Brackets inside strings do not count.
    """
    depth = 0
    for m in _BRACKET_OR_STRING.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return m.start()
        elif c in "]}":
            depth -= 1
    return None


_BRACKET_OR_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # a string, or a bracket


_DECODER = json.JSONDecoder(parse_constant=str, parse_float=_finite_float)  # built once: not per line


def decode_json(text: str) -> Any:
    """``json.loads`` for untrusted recordings: standard JSON out, ``ValueError`` or a value.

    * ``NaN``, ``Infinity``, ``-Infinity`` (Python's extension of JSON) and numbers too
      large for a float (``1e999``) are kept as the text the file wrote: JSON has no
      such values, and the store writes standard JSON only.
    * Nesting deeper than ``MAX_NESTING`` raises ``ValueError`` instead of
      ``RecursionError`` (the decoder recurses once per level).

    >>> decode_json('{"t": NaN, "n": 1e999, "ok": 1.5}')
    {'t': 'NaN', 'n': '1e999', 'ok': 1.5}
    """
    value = _decode_plain(text)
    if value is not _NOT_PLAIN:
        return value
    try:
        value = _DECODER.decode(text)
    except RecursionError:  # the decoder ran out of stack
        raise json.JSONDecodeError(f"nesting deeper than {MAX_NESTING} levels", text,
                                   _too_deep(text) or 0) from None
    # deeper than MAX_NESTING takes more opening brackets than that: most texts need no walk
    if isinstance(value, (dict, list)) and text.count("[") + text.count("{") > MAX_NESTING \
            and _deeper_than(value, MAX_NESTING):
        raise json.JSONDecodeError(f"nesting deeper than {MAX_NESTING} levels", text,
                                   _too_deep(text) or 0)
    return value


_NOT_PLAIN = object()


def _decode_plain(data: str | bytes) -> Any:
    """``data`` decoded by orjson (``dag/_fastjson.py``), or ``_NOT_PLAIN``.

    ``_NOT_PLAIN`` where orjson refuses it, and where it nests deeper than
    ``MAX_NESTING``: ``decode_json`` then answers, with its own values and errors.
    """
    if loads_plain is None:
        return _NOT_PLAIN
    try:
        return loads_plain(data, MAX_NESTING)
    except ValueError:
        return _NOT_PLAIN


def _deeper_than(value: Any, limit: int) -> bool:
    """Does a decoded value nest more than ``limit`` containers deep?

    Level by level over the containers only (not the text of the strings), no recursion.
    """
    level = [value]
    for _ in range(limit):
        level = [c for item in level for c in (item.values() if isinstance(item, dict) else item)
                 if isinstance(c, (dict, list))]
        if not level:
            return False
    return True



def _line_of_offset(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def read_text(path: str, data: bytes | None = None, *, on_error: str = "stop",
              issues: list[Issue] | None = None) -> str:
    """The file as text. Invalid UTF-8: an error naming the line, or U+FFFD and an issue."""
    if data is None:
        with open(path, "rb") as fh:
            data = fh.read()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = _line_of_offset(data, exc.start)
        if on_error != "skip":
            raise TranscriptError(
                path, line, f"invalid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
            ) from None
        if issues is not None:
            issues.append(Issue(str(path), line, "invalid UTF-8", "decoded with U+FFFD"))
        return data.decode("utf-8", errors="replace")


@dataclass
class JsonLine:
    """One parsed JSONL record and the 1-based line it came from."""

    line: int
    value: dict[str, Any]


def iter_jsonl(path: str, *, on_error: str = "stop", issues: list[Issue] | None = None,
               data: bytes | None = None) -> Iterator[JsonLine]:
    """Parse a JSON Lines file record by record, with file:line errors.

    The file is read one line at a time (``data``: bytes already in memory instead), so
    a large transcript is never held twice. Blank lines are ignored. A last line with no
    newline that fails to parse is reported as *truncated* (the usual trace of a crash
    mid-write); any other bad line as invalid JSON. Invalid UTF-8 is reported per line.
    Values are decoded by ``decode_json``. ``on_error="skip"`` records an ``Issue``
    instead of raising.
    """
    if data is not None:
        yield from _jsonl_records(io.BytesIO(data), path, on_error, issues)
        return
    with open(path, "rb") as fh:
        yield from _jsonl_records(fh, path, on_error, issues)


def _jsonl_records(lines: Iterable[bytes], path: str, on_error: str,
                   issues: list[Issue] | None) -> Iterator[JsonLine]:
    def refuse(lineno: int, reason: str, action: str = "line skipped") -> None:
        if on_error != "skip":
            raise TranscriptError(path, lineno, reason)
        if issues is not None:
            issues.append(Issue(str(path), lineno, reason, action))

    for lineno, raw in enumerate(lines, 1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if raw.isspace() or not raw:  # a blank line (isspace stops at the first other byte)
            continue
        value = _decode_plain(raw)  # valid UTF-8 and plain JSON: no text decoded first
        if value is _NOT_PLAIN:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                refuse(lineno, f"invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                       "decoded with U+FFFD")
                text = raw.decode("utf-8", errors="replace")
            try:
                value = decode_json(text)
            except ValueError as exc:
                msg = getattr(exc, "msg", str(exc))
                if not raw.endswith(b"\n") and not msg.startswith("nesting"):
                    reason = f"truncated last line (JSON ends early: {msg})"
                else:
                    reason = f"invalid JSON: {msg} at column {getattr(exc, 'colno', '?')}"
                refuse(lineno, reason)
                continue
        if not isinstance(value, dict):
            refuse(lineno, f"expected a JSON object, got {type(value).__name__}")
            continue
        yield JsonLine(lineno, value)


def load_json(path: str, *, on_error: str = "stop", issues: list[Issue] | None = None,
              data: bytes | None = None) -> Any:
    """Parse a whole-file JSON document; errors name the line. Never partially recovered."""
    text = read_text(path, data, on_error=on_error, issues=issues)
    if not text.strip():
        raise TranscriptError(path, None, "file is empty")
    try:
        return decode_json(text)
    except ValueError as exc:
        lineno = getattr(exc, "lineno", None)
        msg = getattr(exc, "msg", str(exc))
        at_end = getattr(exc, "pos", 0) >= len(text.rstrip())
        reason = f"truncated JSON document ({msg})" if at_end else f"invalid JSON: {msg}"
        raise TranscriptError(path, lineno, reason) from None


# -- small value helpers ------------------------------------------------------------------


# datetime's range (years 1-9999): a time outside it is no time a recording was made
_EARLIEST, _LATEST = -62135596800.0, 253402300799.0


def parse_timestamp(value: Any, default: float | None = None) -> float | None:
    """ISO 8601 string or epoch seconds/milliseconds -> epoch seconds (UTC for naive).

    Anything else (``NaN``, ``Infinity``, a time outside years 1-9999, text that is no
    time) gives ``default``: the store keeps standard JSON, and a bad time must not
    refuse a whole session (``SessionBuilder.time`` records the bad value).
    """
    if value is None or value == "" or isinstance(value, bool):
        return default
    if isinstance(value, (int, float)):
        try:
            v = float(value)
        except OverflowError:  # an integer with hundreds of digits
            return default
        v = v / 1000.0 if v > 1e11 else v
        return v if _EARLIEST <= v <= _LATEST else default  # False for NaN too
    if isinstance(value, str):
        s = value.strip()
        if s.endswith("Z") or s.endswith("z"):
            s = s[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(s)
        except ValueError:
            try:
                number = float(s)
            except ValueError:
                return default
            return parse_timestamp(number, default)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        try:
            return dt.timestamp()
        except (OverflowError, ValueError):  # year 1 or 9999 with an offset
            return default
    return default


def content_text(content: Any, sep: str = "\n") -> str:
    """The text of a message content: a string, or the text parts of a list of blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, str):
                parts.append(b)
            elif isinstance(b, dict):
                kind = b.get("type")
                if kind in ("text", "input_text", "output_text") or (kind is None and "text" in b):
                    t = b.get("text")
                    if isinstance(t, str):
                        parts.append(t)
        return sep.join(parts)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    return json.dumps(content, ensure_ascii=False, default=str)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict: JSON text parsed; anything else wrapped, never lost."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        s = raw.strip()
        if not s:
            return {}
        try:
            v = decode_json(s)
        except ValueError:
            return {"_raw": raw}
        return v if isinstance(v, dict) else {"_value": v}
    return {"_value": raw}


# -- the builder -----------------------------------------------------------------------------

_HEAD = object()  # sentinel: "predecessor = the current head"


class SessionBuilder:
    """Builds the ``Call`` list of one imported session (see the module docstring)."""

    def __init__(self, fmt: str, source_path: str, *, default_time: float = 0.0) -> None:
        self.format = fmt
        self.source_path = source_path
        self.calls: list[Call] = []
        self.by_id: dict[str, Call] = {}
        self.head: str | None = None
        self.last_time = default_time
        self.compactions: list[str] = []
        self.last_summary_text: str | None = None
        self.warnings: list[str] = []
        self._bad_time: Any = None  # a record's timestamp that was no time (see ``time``)
        # ids of nodes that never reach a prompt (Claude Code display lines)
        self._not_in_prompt: set[str] = set()
        # the last prompt computed: (node id, its prompt) (see ``prompt_of``)
        self._prompt_memo: tuple[str | None, list[str]] = (None, [])

    # -- nodes --------------------------------------------------------------------------
    def time(self, value: Any, where: str | None = None) -> float:
        """The time of a record: its own, else the time of the record before it.

        A value that is present but no time (``NaN``, ``Infinity``, ``"yesterday"``) is
        recorded: the next node added gets ``metadata["bad_timestamp"]`` (the value as
        written) and a warning names ``where`` (``path:line``) when given.
        """
        self._bad_time = None
        t = parse_timestamp(value)
        if t is None:
            if value is not None and value != "":
                storable = isinstance(value, (str, int)) or (isinstance(value, float) and math.isfinite(value))
                self._bad_time = value if storable else repr(value)
                self.warnings.append(f"{where or self.source_path}: timestamp {reprlib.repr(value)} is not a time; "
                                     "the previous record's time is used (metadata.bad_timestamp)")
            return self.last_time
        self.last_time = t
        return t

    def add(
        self,
        role: str,
        *,
        name: str = "",
        input: Any = None,
        output: Any = None,
        predecessor: Any = _HEAD,
        caller: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_at: float | None = None,
        move_head: bool | None = None,
        in_prompt: bool = True,
        reads: Iterable[str] | None = None,
    ) -> Call:
        pred = self.head if predecessor is _HEAD else predecessor
        meta = {"source": f"import:{self.format}"}
        if metadata:
            meta.update(metadata)
        if self._bad_time is not None:
            meta["bad_timestamp"] = self._bad_time
            self._bad_time = None
        prefix = {"user": "u", "llm": "l", "code": "c"}[role]
        call = Call(
            id=new_id(prefix),
            created_at=self.last_time if created_at is None else created_at,
            role=role,
            name=name or "",
            input=input,
            output=output,
            caller=caller,
            predecessor=pred,
            metadata=meta,
        )
        if role == "llm":
            call.reads = list(reads) if reads is not None else self.prompt_of(pred)
        self.calls.append(call)
        self.by_id[call.id] = call
        if not in_prompt:
            self._not_in_prompt.add(call.id)
        if move_head or (move_head is None and (pred == self.head or self.head is None)):
            self.head = call.id
        return call

    def chain(self, node_id: str | None) -> list[str]:
        """Ids from the root of ``node_id``'s branch down to ``node_id``."""
        out: list[str] = []
        seen: set[str] = set()
        while node_id is not None:
            if node_id in seen:
                raise TranscriptError(self.source_path, None, f"predecessor cycle at {node_id}")
            seen.add(node_id)
            out.append(node_id)
            node_id = self.by_id[node_id].predecessor
        out.reverse()
        return out

    def prompt_of(self, node_id: str | None) -> list[str]:
        """What an llm call after ``node_id`` read: its chain, minus display-only nodes.

        Why the memo: every llm node reads its whole chain, and walking it from the
        root for each one made an import quadratic in the branch length (a fifth of
        parsing a large session). The prompt of the last node asked for is kept; the
        next call walks back only to it (a node's predecessor is set once, when it is
        added, so a prompt once computed never changes).
        """
        if node_id is None:
            return []
        memo_id, memo = self._prompt_memo
        tail: list[str] = []
        seen: set[str] = set()
        at: str | None = node_id
        while at is not None and at != memo_id:
            if at in seen:
                raise TranscriptError(self.source_path, None, f"predecessor cycle at {at}")
            seen.add(at)
            if at not in self._not_in_prompt:
                tail.append(at)
            at = self.by_id[at].predecessor
        tail.reverse()
        prompt = memo + tail if at is not None else tail
        self._prompt_memo = (node_id, prompt)
        return list(prompt)

    # -- compaction ------------------------------------------------------------------------
    def record_compaction(
        self,
        summary_text: str,
        *,
        branch_head: str | None = None,
        trigger: str | None = None,
        pre_tokens: int | None = None,
        protected_ids: Iterable[str] = (),
        kept_ids: Iterable[str] = (),
        extra_protected: Iterable[Call] = (),
        created_at: float | None = None,
        metadata: dict[str, Any] | None = None,
        compaction_extra: dict[str, Any] | None = None,
    ) -> Call:
        """Lay out a recorded compaction (docs/ARCHITECTURE.md, "Compaction layout").

        The active branch ending at ``branch_head`` (default: HEAD) stays untouched. A new
        branch starts: copies of ``protected_ids`` (chained, the first with no
        predecessor), then the summary node ``S``, then copies of ``kept_ids``. Everything
        else on the old branch is named in ``folded_ids``. HEAD moves to the new branch.
        ``extra_protected``: ready-made nodes (not copies) that the recording put before
        the summary without an original to copy (left as they are, chained in).
        """
        head = self.head if branch_head is None else branch_head
        branch = self.chain(head) if head is not None else []
        protected = [i for i in protected_ids if i in self.by_id]
        kept = [i for i in kept_ids if i in self.by_id]
        keep = set(protected) | set(kept)
        folded = [i for i in branch if i not in keep]
        when = self.last_time if created_at is None else created_at
        prev: str | None = None
        for pid in protected:
            prev = self._copy(pid, prev, when).id
        for node in extra_protected:
            node.predecessor = prev
            self.calls.append(node)
            self.by_id[node.id] = node
            prev = node.id
        trigger_reason = trigger if trigger in ("auto", "manual") else "recovered"
        compaction = {
            "kind": "summary",
            "folded_ids": folded,
            "folded_range": [folded[0], folded[-1]] if folded else [],
            "protected_ids": protected,
            "kept_ids": kept,
            "reason": trigger_reason,
            "trigger": trigger,
            "pre_tokens": pre_tokens,
            "tokens_after": None,
            "fell_back_to_structural": False,
            "recorded": True,
            "format": self.format,
        }
        if compaction_extra:
            compaction.update(compaction_extra)
        meta = {
            "role": "system",
            "type": "compactionSummary",
            "extra": {"compaction": True},
            "compaction": compaction,
        }
        if metadata:
            meta.update(metadata)
        meta["source"] = "compaction"
        meta["imported_from"] = f"import:{self.format}"
        summary = self.add(
            "llm",
            name="compaction",
            output=SUMMARY_PREFIX + summary_text,
            predecessor=prev,
            metadata=meta,
            created_at=when,
            move_head=True,
            reads=folded,
        )
        prev = summary.id
        for kid in kept:
            prev = self._copy(kid, prev, when).id
        self.head = prev
        self.compactions.append(summary.id)
        self.last_summary_text = summary_text
        return summary

    def _copy(self, node_id: str, predecessor: str | None, when: float) -> Call:
        orig = self.by_id[node_id]
        copy = orig.copy(id=new_id("k"), seq=-1, predecessor=predecessor)
        copy.metadata["copied_from"] = orig.id
        if copy.role == "llm":
            copy.reads = self.prompt_of(predecessor)
        self.calls.append(copy)
        self.by_id[copy.id] = copy
        if orig.id in self._not_in_prompt:
            self._not_in_prompt.add(copy.id)
        return copy

    # -- result ----------------------------------------------------------------------------
    def finish(
        self,
        *,
        session_id: str,
        title: str,
        model: str,
        meta: dict[str, Any],
        skipped: list[Issue],
        agent_id: str = "",
        head: str | None | object = _HEAD,
    ) -> ImportedSession:
        meta = dict(meta)
        meta.setdefault("source_path", self.source_path)
        meta.setdefault("format", self.format)
        if self.last_summary_text is not None:
            meta["_last_summary_text"] = self.last_summary_text
        if skipped:
            meta["import_skipped"] = [i.to_dict() for i in skipped]
        if self.warnings:
            meta["import_warnings"] = list(self.warnings)
        return ImportedSession(
            format=self.format,
            source_path=self.source_path,
            session_id=session_id,
            title=title,
            model=model,
            calls=self.calls,
            head=self.head if head is _HEAD else head,  # type: ignore[arg-type]
            meta=meta,
            agent_id=agent_id,
            recorded_compactions=list(self.compactions),
            warnings=list(self.warnings),
            skipped=list(skipped),
        )


def short_title(text: str, limit: int = 80) -> str:
    """A one-line title from a message text."""
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
