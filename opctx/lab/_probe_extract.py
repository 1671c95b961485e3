"""Retention probes: the facts a continuation needs, and whether a compaction kept them.

A compaction trades tokens for what the agent still knows. Factory's "Evaluating
Context Compression for AI Agents" (factory.ai/news/evaluating-compression, Dec 2025)
asks recall, artifact, continuation and decision questions after a compression and has
an LLM grade the answers. opctx asks the same kinds of question *deterministically*:
probes are extracted from the recorded history before a cut, and each is scored by a
stated matching rule against the context the next request would send after the
compaction. No model is needed, every score can be traced to the probe and to the text
that matched, and the same history always gives the same probes.

Families and how each is extracted (``extract_probes(messages, cut)``)
=====================================================================
``artifact`` (rule ``path``)
    every file a tool call read, created, modified or deleted (``_tool_facts``: Claude
    Code Read / Edit / MultiEdit / Write, Codex apply_patch and shell, SWE-agent
    str_replace_editor / open / create / edit, OpenHands actions, Hermes and OpenAI
    file tools, shell redirections, aider edit blocks), one probe per path with its
    strongest action and what changed (``Probe.detail``).
``recall`` (rule ``substring``)
    the error lines of failed tool results (a Python exception line, ``error:`` /
    ``fatal:`` / ``FAILED`` lines, Claude Code's ``<tool_use_error>``; else the first
    line), the commands that failed, and identifiers the user gave in their requests
    (URLs, versions, paths, back-quoted spans, CamelCase / snake_case names, IP
    addresses, quoted names; at most ``IDENTIFIERS_PER_MESSAGE`` per message, so a
    pasted log does not flood the family).
``continuation`` (rule ``overlap``, failing tests ``substring``)
    the open items of the last plan the agent wrote (TodoWrite, update_plan, todo,
    task_tracker; TaskCreate / TaskUpdate items), the latest user request when no
    assistant answer ended its turn, and the tests the latest test run left failing
    (pytest ``FAILED id``, go ``--- FAIL: name``, cargo ``test name ... FAILED``).
``instruction`` (rule ``overlap``)
    sentences of the user's requests that state a constraint: "do not", "never",
    "always", "must", "make sure", "avoid", "only", "instead of", "please use", and the
    Chinese 不要 / 别 / 必须 / 一定要 / 务必 / 总是 / 始终 / 只 / 禁止 / 不能 / 不得 /
    请使用 / 记得. All of them count as in force (a later withdrawal is not detected).

User requests exclude what clients inject as user messages (tool results, command
echoes, ``<system-reminder>``, ``<environment_context>``, mini-swe-agent observations,
a continued session's summary). Display-only lines are never read: the model never
saw them, and the context scored never holds them.

Scoring (``score_probes(probes, context)``)
===========================================
The context is a list of message dicts: the post-compaction messages plus whatever the
next request adds. Each message is rendered as the model reads it (content, text
blocks, tool-call names and argument values, tool results) and *normalised*: NFKC,
lower case, quotes / back-quotes / backslashes removed, whitespace collapsed.

* ``path``: the normalised path, or one of its trailing parts of two components or
  more (``src/app.py`` for ``/home/u/proj/src/app.py``), occurs with no path
  character glued to either side;
* ``substring``: the normalised probe text occurs;
* ``overlap``: some window of up to three consecutive lines of one message holds at
  least ``OVERLAP_THRESHOLD`` (60 %) of the probe's tokens (words of 2+ characters
  without stop-words, CJK character bigrams); a probe of one or two tokens needs all.

A ``ProbeScore`` carries the probe, whether it was retained, the matched text, which
context message held it (its original id, or ``summary``) and the overlap. By
construction the history before the cut retains every probe (the ``keep-all`` row of
``probe_table`` checks it).

``opctx.lab.probes`` re-exports every name here and runs it over sessions, cuts and
strategies (``probe_table``).

>>> msgs = [
...     {"id": "u1", "role": "user", "content": "Fix calc.py. Do not change the public API."},
...     {"id": "a1", "role": "assistant", "content": "",
...      "tool_calls": [{"id": "t1", "name": "Edit", "arguments": {"file_path": "/repo/calc.py",
...                      "old_string": "a // b", "new_string": "a / b"}}]},
...     {"id": "r1", "role": "tool", "tool_call_id": "t1", "name": "Edit", "content": "ok"},
... ]
>>> [(p.family, p.text) for p in extract_probes(msgs)]
[('artifact', '/repo/calc.py'), ('continuation', 'Fix calc.py. Do not change the public API.'), ('instruction', 'Do not change the public API.')]
>>> [s.retained for s in score_probes(extract_probes(msgs), [{"role": "user", "content": "edited repo/calc.py"}])]
[True, False, False]
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opctx.context.provider_messages import is_display_only
from opctx.context.summarize import is_summary_message
from opctx.dag.messages import blocks, is_tool_result
from opctx.dag.providers import parse_arguments

from . import _tool_facts as tf

__all__ = [
    "FAMILIES",
    "RULES",
    "OVERLAP_THRESHOLD",
    "IDENTIFIERS_PER_MESSAGE",
    "Probe",
    "ProbeScore",
    "extract_probes",
    "score_probes",
    "is_user_request",
    "context_lines",
    "normalise",
    "tokens",
    "error_line",
    "user_identifiers",
    "constraint_sentences",
    "failing_tests",
]

FAMILIES = ("artifact", "recall", "continuation", "instruction")
RULES = ("path", "substring", "overlap")
# share of a probe's tokens one window of the context must hold (rule "overlap")
OVERLAP_THRESHOLD = 0.6
IDENTIFIERS_PER_MESSAGE = 8
_CLIP = 160


@dataclass(frozen=True)
class Probe:
    """A fact a continuation needs, where it was found, and the rule that scores it."""

    family: str
    kind: str
    text: str
    rule: str
    evidence: tuple[str, ...] = ()
    detail: str = ""

    @property
    def id(self) -> str:
        """Stable across runs: the family, kind and normalised text."""
        key = f"{self.family}|{self.kind}|{normalise(self.text)}"
        return hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class ProbeScore:
    """One probe against one context: retained or not, and the text that decided it."""

    probe: Probe
    retained: bool
    matched: str = ""
    where: str = ""
    overlap: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        p = self.probe
        return {
            "probe_id": p.id, "family": p.family, "kind": p.kind, "text": p.text, "rule": p.rule,
            "evidence": list(p.evidence), "detail": p.detail, "retained": self.retained,
            "matched": self.matched, "where": self.where, "overlap": self.overlap,
        }


# -- text ------------------------------------------------------------------------------------

_QUOTES = str.maketrans("", "", "\"'`\u2018\u2019\u201c\u201d\u300c\u300d\u300e\u300f\\")
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[a-z0-9_]{{2,}}")
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
_STOP = frozenset(
    "the a an and or of to in on at for with by is are be was were it this that these those as from "
    "into not no do does did can will would should could may might must have has had you your we our "
    "i me my he she they them please just also then so if but all any some".split()
)


def _fold(text: str) -> str:
    """NFKC, lower case, quotes and backslashes removed (line breaks kept)."""
    return unicodedata.normalize("NFKC", text).lower().translate(_QUOTES)


def _line_tokens(folded: str) -> set[str]:
    out: set[str] = set()
    for tok in _TOKEN.findall(folded):
        if _CJK_RUN.match(tok):
            out.update(tok[i: i + 2] for i in range(max(1, len(tok) - 1)))
        elif tok not in _STOP:
            out.add(tok)
    return out


def normalise(text: str) -> str:
    """NFKC, lower case, quotes and backslashes removed, whitespace collapsed.

    >>> normalise('  "Path\\\\To"  `x`  ')
    'pathto x'
    """
    return " ".join(_fold(text).split())


def tokens(text: str) -> set[str]:
    """Words of 2+ characters without stop-words, and CJK character bigrams."""
    return _line_tokens(_fold(text))


def _leaves(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif value is not None:
        yield str(value)


def context_lines(msg: dict) -> list[str]:
    """The lines of a message as the model reads them: text, tool calls (name, argument values), results."""
    parts: list[str] = []
    content = msg.get("content")
    if isinstance(content, str):
        parts.append(content)
    for b in blocks(msg):
        kind = b.get("type")
        if kind == "text":
            parts.append(str(b.get("text") or ""))
        elif kind == "tool_use":
            parts.append(str(b.get("name") or ""))
            parts.extend(_leaves(b.get("input")))
        elif kind == "tool_result":
            parts.extend(_leaves(b.get("content")))
    for tc in msg.get("tool_calls") or ():
        if isinstance(tc, dict):
            parts.append(str(tc.get("name") or ""))
            args = tc.get("arguments")
            parts.extend(_leaves(parse_arguments(args) if isinstance(args, str) else args))
    return [line for part in parts for line in part.splitlines() if line.strip()]


def _clip_words(text: str, limit: int = _CLIP) -> str:
    """A prefix of ``text`` (one line) cut at a word boundary: still a substring of the source."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit)
    return flat[: cut if cut > limit // 2 else limit]


# -- user requests ---------------------------------------------------------------------------

_INJECTED = (
    "<command-", "<local-command", "<system-reminder>", "<environment_context>", "<user_instructions>",
    "<returncode>", "caveat: the messages below", "[request interrupted", "this session is being continued",
    "<user-prompt-submit-hook>", "<bash-", "<task-notification>", "<ide_", "<permissions",
)
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


def _text(msg: dict) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text") or "") for b in blocks(msg) if b.get("type") == "text")


def is_user_request(msg: dict) -> bool:
    """A message the user typed (not a tool result, command echo, reminder or observation)."""
    if msg.get("role") != "user" or is_tool_result(msg) or is_display_only(msg) or is_summary_message(msg):
        return False
    text = _REMINDER.sub("", _text(msg)).strip().lower()
    return bool(text) and not text.startswith(_INJECTED)


def _request_text(msg: dict) -> str:
    return _REMINDER.sub("", _text(msg)).strip()


# -- extraction ------------------------------------------------------------------------------

_PY_ERROR = re.compile(r"^\s*(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit)): .+$", re.M)
_TOOL_ERROR = re.compile(r"<tool_use_error>(.*?)</tool_use_error>", re.S)
_ERROR_LINE = re.compile(
    r"^\s*(?:error(?:\[[A-Z]?\d+\])?|Error|ERROR|fatal|FATAL|panic|npm ERR!)\b[:\]]?\s*\S.*$|^\s*FAILED .+$", re.M
)
# Claude Code's answers about the tool protocol itself (a Write before a Read, an edit string
# not found, a rejected call, an over-long read): failures of the call, not facts of the task
_TOOL_PROTOCOL_ERRORS = (
    "<tool_use_error>File has not been read yet", "<tool_use_error>String to replace not found",
    "<tool_use_error>Found ", "<tool_use_error>No changes to make", "<tool_use_error>File has been modified",
    "The user doesn't want to proceed", "File has not been read yet", "File content (",
    "<tool_use_error>InputValidationError", "InputValidationError", "Permission to use ",
    "[Request interrupted",
)
_NOISE_LINE = re.compile(r"^\s*(exit code:?\s*-?\d+|output:|wall time:.*|<returncode>.*|<output>|\d+)\s*$", re.I)


def error_line(text: str) -> str:
    """The most telling error line of a tool result (see the module docstring).

    >>> error_line("Traceback (most recent call last):\\n  File x\\nZeroDivisionError: division by zero")
    'ZeroDivisionError: division by zero'
    """
    tool = _TOOL_ERROR.search(text)
    if tool and tool.group(1).strip():
        return _clip_words(tool.group(1).strip().splitlines()[0])
    found = [m.group(0) for m in _PY_ERROR.finditer(text)]
    if found:
        return _clip_words(found[-1].strip())
    m = _ERROR_LINE.search(text)
    if m:
        return _clip_words(m.group(0).strip())
    for line in text.splitlines():
        if line.strip() and not _NOISE_LINE.match(line):
            return _clip_words(line.strip())
    return ""


_IDENTIFIERS = [
    re.compile(r"https?://[^\s<>\"'`)\]}，。]+"),
    re.compile(r"(?<![\w.])v?\d+(?:\.\d+){2,}(?:[-+][\w.]*\w)?(?!\w)"),
    re.compile(r"(?<![\w.])v\d+\.\d+(?![\w.])"),
    re.compile(r"(?<![A-Za-z0-9_/.])(?:~|\.{1,2})?/[A-Za-z0-9_.\-@]+(?:/[A-Za-z0-9_.\-@]+)+"),
    re.compile(r"(?<![A-Za-z0-9_/.])[A-Za-z0-9_\-]+(?:/[A-Za-z0-9_.\-]+)+\.[A-Za-z0-9]{1,8}(?![A-Za-z0-9_/])"),
    re.compile(r"`([^`\n]{3,80})`"),
    re.compile(r"(?<!\w)[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+(?!\w)"),
    re.compile(r"(?<!\w)[a-z][a-z0-9]*(?:_[a-z0-9]+){1,}(?!\w)"),
    re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?::\d{2,5})?(?![\d.])"),
    re.compile(r"[\u201c\u300c\u300e]([^\u201d\u300d\u300f\n]{2,40})[\u201d\u300d\u300f]"),
]
_TRAILING = ".,;:!?)>]}，。；：！？"


def user_identifiers(text: str) -> list[str]:
    """Identifiers in a user's request, in order of appearance, at most ``IDENTIFIERS_PER_MESSAGE``.

    >>> user_identifiers("Deploy v2.3.1 to https://example.com/app, see `build_all` in src/ci/run.py")
    ['v2.3.1', 'https://example.com/app', 'build_all', 'src/ci/run.py']
    """
    found: list[tuple[int, str]] = []
    for pattern in _IDENTIFIERS:
        for m in pattern.finditer(text):
            value = (m.group(1) if m.groups() else m.group(0)).strip().rstrip(_TRAILING)
            if len(value) >= 3:
                found.append((m.start(), value))
    out: list[str] = []
    for _, value in sorted(found):
        if value not in out and not any(value in o for o in out):
            out.append(value)
    return out[:IDENTIFIERS_PER_MESSAGE]


_CONSTRAINT = re.compile(
    r"\b(do not|don't|dont|never|always|must|mustn't|should not|shouldn't|make sure|ensure|avoid|"
    r"only|instead of|please use|no need to|keep using|stop using)\b"
    r"|不要|别再|别用|不准|禁止|必须|一定要|务必|总是|始终|只能|只用|只要|不能|不得|不允许|切勿|请使用|请用|记得|不需要",
    re.I,
)
_SENTENCE = re.compile(r"(?:[^.!?。！？；;\n]|[.!?](?=[^\s.!?]))+[.!?。！？；;]?")


def constraint_sentences(text: str) -> list[str]:
    """The sentences of a user's request that state a constraint (6 to 300 characters).

    >>> constraint_sentences("Add a flag. Never touch main.py! 不要修改测试。")
    ['Never touch main.py!', '不要修改测试。']
    """
    out = []
    for m in _SENTENCE.finditer(text):
        sentence = m.group(0).strip()
        if 6 <= len(sentence) <= 300 and _CONSTRAINT.search(sentence) and sentence not in out:
            out.append(sentence)
    return out


_FAILING_TEST = [
    re.compile(r"^FAILED (\S+)", re.M),
    re.compile(r"^\s*--- FAIL: (\S+)", re.M),
    re.compile(r"^test (\S+) \.\.\. FAILED", re.M),
    re.compile(r"^\s*(?:✕|×|✗) (.+?)(?: \(\d+\s*m?s\))?$", re.M),
]


def failing_tests(text: str) -> list[str]:
    """Test ids a test run reports as failing (pytest, go, cargo, jest / vitest)."""
    out: list[str] = []
    for pattern in _FAILING_TEST:
        out.extend(m.group(1).strip() for m in pattern.finditer(text) if m.group(1).strip() not in out)
    return out


@dataclass
class _Collector:
    """Probes found so far, merged by (family, kind, normalised text)."""

    probes: dict[tuple[str, str, str], Probe] = field(default_factory=dict)

    def add(self, family: str, kind: str, text: str, rule: str, evidence: Iterable[str], detail: str = "") -> None:
        text = text.strip()
        if len(normalise(text)) < 3:
            return
        key = (family, kind, normalise(text))
        ids = tuple(i for i in evidence if i)
        old = self.probes.get(key)
        if old is None:
            self.probes[key] = Probe(family, kind, text, rule, ids, detail)
        else:
            merged = old.evidence + tuple(i for i in ids if i not in old.evidence)
            self.probes[key] = Probe(family, kind, old.text, rule, merged, detail or old.detail)


class _Extractor:
    """One pass over the history before the cut (``extract_probes``)."""

    def __init__(self) -> None:
        self.out = _Collector()
        self.files: dict[str, dict[str, Any]] = {}
        self.calls: dict[str, tuple[tf.ToolCallView, str]] = {}  # call id -> (call, message id)
        self.open_file: str | None = None
        self.plan: list[tuple[str, tuple[str, ...]]] | None = None
        self.tasks: dict[str, list[Any]] = {}  # task id -> [subject, status, evidence]
        self.pending_task: dict[str, str] = {}  # TaskCreate call id -> subject
        self.last_request: tuple[str, str] | None = None  # (text, id) while unanswered
        self.tests: list[tuple[str, tuple[str, ...]]] | None = None
        self.last_bash: tuple[tf.ToolCallView, str] | None = None  # mini-swe-agent's bash block

    def message(self, msg: dict, index: int) -> None:
        mid = str(msg.get("id") or f"#{index}")
        role = msg.get("role")
        if is_user_request(msg):
            self.request(msg, mid)
        elif role == "assistant":
            self.assistant(msg, mid, index)
        elif is_tool_result(msg):
            self.result(msg, mid, _text(msg) or "\n".join(context_lines(msg)))
        elif role == "user" and self.last_bash is not None and _text(msg).lstrip().startswith("<returncode>"):
            self.result(msg, mid, _text(msg), self.last_bash)  # mini-swe-agent's observation
        if role == "user":
            self.last_bash = None

    def request(self, msg: dict, mid: str) -> None:
        text = _request_text(msg)
        for ident in user_identifiers(text):
            self.out.add("recall", "user_identifier", ident, "substring", (mid,))
        for sentence in constraint_sentences(text):
            self.out.add("instruction", "constraint", sentence, "overlap", (mid,))
        # the first line that says something: "yes" or "continue" asks nothing a summary must keep
        first = next((ln.strip() for ln in text.splitlines() if len(tokens(ln)) >= 3), "")
        self.last_request = (_clip_words(first, 200), mid) if first else None

    def assistant(self, msg: dict, mid: str, index: int) -> None:
        text = _text(msg)
        calls = list(tf.iter_tool_calls([msg]))
        if text.strip() and not calls:
            self.last_request = None  # the turn ended with an answer
        for touch in tf.aider_edit_touches(text):
            self.touch(touch, (mid,))
        for call in calls:
            self.call(tf.ToolCallView(call.call_id, call.name, call.arguments, index), mid)

    def call(self, call: tf.ToolCallView, mid: str) -> None:
        if call.call_id:
            self.calls[call.call_id] = (call, mid)
        else:
            self.last_bash = (call, mid)
        for touch in tf.file_touches(call.name, call.arguments, self.open_file):
            self.touch(touch, (mid,))
        low = call.name.lower()
        if low in ("open", "create"):
            self.open_file = next((t.path for t in tf.file_touches(call.name, call.arguments)), self.open_file)
        items = tf.plan_items(call.name, call.arguments)
        if items is not None:
            self.plan = [(i.text, (mid,)) for i in items if tf.is_open(i)]
            self.tasks = {}
        elif low == "taskcreate":
            subject = str(call.arguments.get("subject") or call.arguments.get("description") or "")
            self.pending_task[call.call_id] = subject
            self.tasks[str(len(self.tasks) + 1)] = [subject, "pending", (mid,)]
        elif low == "taskupdate":
            task = self.tasks.get(str(call.arguments.get("taskId") or ""))
            if task is not None and call.arguments.get("status"):
                task[1] = str(call.arguments["status"]).lower()

    def touch(self, touch: tf.FileTouch, evidence: tuple[str, ...]) -> None:
        entry = self.files.setdefault(touch.path, {"action": "read", "details": [], "evidence": []})
        if tf.ACTIONS.index(touch.action) > tf.ACTIONS.index(entry["action"]):
            entry["action"] = touch.action
        if touch.detail and touch.detail not in entry["details"]:
            entry["details"].append(touch.detail)
        entry["evidence"].extend(e for e in evidence if e not in entry["evidence"])

    def result(self, msg: dict, mid: str, text: str, made: tuple[tf.ToolCallView, str] | None = None) -> None:
        made = made or self.calls.get(str(msg.get("tool_call_id") or ""))
        call, call_mid = made if made is not None else (None, "")
        name = call.name if call else str(msg.get("name") or "")
        if call is not None and call.name.lower() == "taskcreate":
            m = re.search(r"#(\d+)", text)
            subject = self.pending_task.pop(call.call_id, "")
            if m and subject:
                # the client's own number wins over the order of creation
                for key in [k for k, v in self.tasks.items() if v[0] == subject]:
                    self.tasks[m.group(1)] = self.tasks.pop(key)
        command = tf.shell_command(name, call.arguments) if call else ""
        text, code = tf.tool_output(msg, text)
        failed = msg.get("is_error") is True or (code is not None and code != 0) or "Traceback (most recent call last)" in text
        evidence = tuple(e for e in (call_mid, mid) if e)
        if failed and not text.lstrip().startswith(_TOOL_PROTOCOL_ERRORS):
            line = error_line(text)
            if line:
                self.out.add("recall", "error", line, "substring", evidence)
            if command.strip():
                first = next((ln for ln in command.splitlines() if ln.strip()), "")
                self.out.add("recall", "failing_command", _clip_words(first), "substring", evidence)
        if command and tf.is_test_command(command):
            self.tests = [(t, evidence) for t in failing_tests(text)]

    def finish(self) -> list[Probe]:
        for path, entry in self.files.items():
            detail = entry["action"] + (": " + "; ".join(entry["details"][:3]) if entry["details"] else "")
            self.out.add("artifact", "file", path, "path", entry["evidence"], detail)
        plan = list(self.plan or [])
        plan += [(subject, ev) for subject, status, ev in self.tasks.values() if tf.is_open(tf.PlanItem(subject, status))]
        for text, evidence in plan:
            self.out.add("continuation", "plan_item", text, "overlap", evidence)
        if self.last_request is not None:
            self.out.add("continuation", "open_request", self.last_request[0], "overlap", (self.last_request[1],))
        for test, evidence in self.tests or ():
            self.out.add("continuation", "failing_test", test, "substring", evidence)
        order = {f: i for i, f in enumerate(FAMILIES)}
        return sorted(self.out.probes.values(), key=lambda p: order[p.family])


def extract_probes(messages: Sequence[dict], cut: int | None = None) -> list[Probe]:
    """The probes of ``messages[:cut]`` (all of them by default), grouped by family in order."""
    end = len(messages) if cut is None else max(0, min(int(cut), len(messages)))
    ex = _Extractor()
    for i, msg in enumerate(messages[:end]):
        if not is_display_only(msg):
            ex.message(msg, i)
    return ex.finish()


# -- scoring ---------------------------------------------------------------------------------

_PATH_BEFORE = re.compile(r"[a-z0-9_.\-]")
_PATH_AFTER = re.compile(r"[a-z0-9_\-/]")


def _path_forms(path: str) -> list[str]:
    norm = normalise(path).rstrip("/")
    parts = [p for p in norm.split("/") if p and p not in (".", "~")]
    forms = [norm] if norm else []
    forms += ["/".join(parts[i:]) for i in range(len(parts) - 1)]
    if len(parts) == 1:
        forms.append(parts[0])
    return list(dict.fromkeys(f for f in forms if f))


def _find_path(forms: list[str], text: str) -> int:
    for form in forms:
        start = text.find(form)
        while start >= 0:
            end = start + len(form)
            before = text[start - 1] if start else " "
            after = text[end] if end < len(text) else " "
            if not _PATH_BEFORE.match(before) and not _PATH_AFTER.match(after):
                return start
            start = text.find(form, start + 1)
    return -1


class _Context:
    """A context rendered once for all probes: normalised text per message, tokens per line."""

    def __init__(self, messages: Sequence[dict]) -> None:
        self.labels: list[str] = []
        self.texts: list[str] = []
        self.lines: list[tuple[int, str]] = []  # (message index, original line)
        self.index: dict[str, list[int]] = defaultdict(list)  # token -> line ids
        for msg in messages:
            if is_display_only(msg):
                continue
            lines = context_lines(msg)
            folded = _fold("\n".join(lines))
            self.labels.append("summary" if is_summary_message(msg) else str(msg.get("copied_from") or msg.get("id") or ""))
            self.texts.append(" ".join(folded.split()))
            for line, low in zip(lines, folded.split("\n"), strict=False):
                lid = len(self.lines)
                self.lines.append((len(self.labels) - 1, line))
                for tok in _line_tokens(low):
                    self.index[tok].append(lid)

    def find(self, needle: str, path: bool) -> tuple[str, str]:
        forms = _path_forms(needle) if path else [normalise(needle)]
        if not forms or not forms[0]:
            return "", ""
        for label, text in zip(self.labels, self.texts, strict=True):
            at = _find_path(forms, text) if path else text.find(forms[0])
            if at >= 0:
                return text[max(0, at - 40): at + len(forms[0]) + 40], label
        return "", ""

    def best_overlap(self, probe_tokens: set[str]) -> tuple[float, str, str]:
        """The window of up to three consecutive lines of one message holding most probe tokens."""
        windows: dict[int, set[str]] = defaultdict(set)
        for tok in probe_tokens:
            for lid in self.index.get(tok, ()):
                msg_index = self.lines[lid][0]
                for start in (lid - 2, lid - 1, lid):
                    if start >= 0 and self.lines[start][0] == msg_index:
                        windows[start].add(tok)
        if not windows:
            return 0.0, "", ""
        start = max(windows, key=lambda w: (len(windows[w]), -w))
        msg_index = self.lines[start][0]
        text = " ".join(line for m, line in self.lines[start: start + 3] if m == msg_index)
        return len(windows[start]) / len(probe_tokens), text, self.labels[msg_index]


def score_probes(probes: Sequence[Probe], context: Sequence[dict]) -> list[ProbeScore]:
    """Each probe against the context (a list of message dicts), by its family's rule."""
    ctx = _Context(context)
    out = []
    for probe in probes:
        if probe.rule == "overlap":
            toks = tokens(probe.text)
            share, window, where = ctx.best_overlap(toks) if toks else (0.0, "", "")
            need = 1.0 if len(toks) <= 2 else OVERLAP_THRESHOLD
            kept = bool(toks) and share >= need - 1e-9
            out.append(ProbeScore(probe, kept, window[:300] if kept else "", where if kept else "", round(share, 3)))
        else:
            matched, where = ctx.find(probe.text, probe.rule == "path")
            out.append(ProbeScore(probe, bool(where or matched), matched, where, 1.0 if matched else 0.0))
    return out

