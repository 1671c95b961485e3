"""What the agent's tool calls did, read the same way for every recorded format.

The probes (``opctx.lab.probes``) ask which files a session read and changed, which
commands failed and which plan items were open. Every importer stores a tool call as
``{"id", "name", "arguments"}`` on the assistant message and its result as a
``role="tool"`` message, but each client names its tools differently. This module
knows the names:

=====================  =====================================================================
Claude Code            ``Read`` / ``Edit`` / ``MultiEdit`` / ``Write`` / ``NotebookEdit``
                       (``file_path``, ``notebook_path``), ``Bash`` (``command``),
                       ``TodoWrite`` (``todos``), ``TaskCreate`` / ``TaskUpdate``
Codex CLI              ``apply_patch`` (``input``: ``*** Update File: path``), ``shell``
                       (``command`` as a list), ``shell_command`` / ``exec_command``
                       (``command`` / ``cmd``), ``update_plan`` (``plan``)
SWE-agent              ``str_replace_editor`` (``command`` view / create / str_replace /
                       insert, ``path``), ``open`` / ``create`` (set the open file),
                       ``edit`` (edits the open file), ``bash``
mini-swe-agent         no tool calls: the assistant's one bash block (``command``), its
                       result the next user message (``<returncode>``)
OpenHands              ``str_replace_editor``, ``execute_bash``, ``task_tracker``; before
                       function calling: ``run`` / ``run_ipython`` / ``read`` / ``write`` /
                       ``edit`` (``path``)
Hermes / OpenAI        ``read_file`` / ``write_file`` / ``patch`` (``path``), ``terminal``,
                       ``todo`` (``todos``); any other tool with a ``path``-like argument
Aider                  ``path`` + fenced ``<<<<<<< SEARCH`` block in the assistant's text
=====================  =====================================================================

Shell commands are read for the files they change (``> file``, ``>> file``, ``tee``,
``sed -i``, ``touch``, ``rm``, ``mv``, ``cp``, ``mkdir`` is not a file) and read
(``cat``, ``head``, ``tail``, ``less``); the word splitting is ``shlex`` with a
whitespace fallback for unbalanced quotes. Every reader is a pure function of the
call's name and arguments, so each one is tested on hand-written calls of its format.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opctx.dag.providers import parse_arguments

__all__ = [
    "FileTouch",
    "PlanItem",
    "ToolCallView",
    "iter_tool_calls",
    "file_touches",
    "shell_command",
    "shell_file_touches",
    "patch_touches",
    "aider_edit_touches",
    "plan_items",
    "tool_output",
    "is_test_command",
]

# what a touch did, strongest last: a file read then edited is "modified"
ACTIONS = ("read", "created", "modified", "deleted")


@dataclass(frozen=True)
class FileTouch:
    """One file a tool call read or changed, and a few words on what changed."""

    path: str
    action: str  # one of ACTIONS
    detail: str = ""


@dataclass(frozen=True)
class PlanItem:
    """One item of an agent's plan or todo list, as the last update left it."""

    text: str
    status: str


@dataclass(frozen=True)
class ToolCallView:
    """A tool call with its arguments parsed, and the message it came from."""

    call_id: str
    name: str
    arguments: dict
    message_index: int


def iter_tool_calls(messages: list[dict]) -> Iterator[ToolCallView]:
    """Every tool call of the assistant messages, in order (mini-swe-agent's bash block too)."""
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        calls = msg.get("tool_calls") or ()
        for tc in calls:
            if not isinstance(tc, dict):
                continue
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
            name = str(tc.get("name") or fn.get("name") or "")
            args = tc.get("arguments", fn.get("arguments"))
            yield ToolCallView(str(tc.get("id") or ""), name, parse_arguments(args) if args is not None else {}, i)
        command = msg.get("command")
        if not calls and isinstance(command, str) and command.strip():
            yield ToolCallView("", "bash", {"command": command}, i)


_PATH_KEYS = ("file_path", "path", "notebook_path", "filename", "file", "target_file", "file_name")
_READ_TOOLS = {"read", "read_file", "view", "open", "cat", "view_file", "readfile"}
_WRITE_TOOLS = {"write", "write_file", "create", "create_file", "writefile"}
_EDITOR_TOOLS = {"str_replace_editor", "str_replace_based_edit_tool", "text_editor"}
_EDIT_TOOLS = {"edit", "multiedit", "notebookedit", "patch", "edit_file", "str_replace", "replace",
               "insert", "apply_diff", "search_replace"}
_SHELL_TOOLS = {"bash", "shell", "shell_command", "exec_command", "execute_bash", "run", "terminal",
                "local_shell", "run_command", "command"}
_NOT_FILES = {"/dev/null", "/dev/stdout", "/dev/stderr", "-", ""}


def _clip(text: str, limit: int = 80) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _path_arg(args: dict) -> str:
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _editor_touch(args: dict) -> list[FileTouch]:
    """SWE-agent / OpenHands ``str_replace_editor``: the sub-command says what it did."""
    path = _path_arg(args)
    command = str(args.get("command") or "")
    if not path:
        return []
    if command == "view":
        return [FileTouch(path, "read")]
    if command == "create":
        return [FileTouch(path, "created", _clip(args.get("file_text") or "", 60))]
    if command in ("str_replace", "insert", "undo_edit"):
        old, new = args.get("old_str") or "", args.get("new_str") or ""
        return [FileTouch(path, "modified", _clip(f"{old} -> {new}", 80))]
    return [FileTouch(path, "modified")]


def file_touches(name: str, args: dict, open_file: str | None = None) -> list[FileTouch]:
    """The files one tool call read or changed (``open_file``: SWE-agent's open file, for ``edit``)."""
    low = name.lower()
    if low in _EDITOR_TOOLS or (low == "edit" and "command" in args and _path_arg(args)):
        return _editor_touch(args)
    if low == "apply_patch":
        text = args.get("input") or args.get("patch") or args.get("_raw") or ""
        return patch_touches(str(text))
    if low in _SHELL_TOOLS or low == "run_ipython":
        command = shell_command(name, args)
        return shell_file_touches(command) if command else []
    path = _path_arg(args)
    if low == "edit" and not path and open_file:
        return [FileTouch(open_file, "modified", _clip(args.get("replacement_text") or args.get("replace") or "", 60))]
    if low == "patch" and not path:
        return patch_touches(str(args.get("patch") or ""))
    if not path:
        return []
    if low in _READ_TOOLS:
        return [FileTouch(path, "read")]
    if low in _WRITE_TOOLS:
        return [FileTouch(path, "created", _clip(args.get("content") or args.get("file_text") or "", 60))]
    if low in _EDIT_TOOLS:
        edits = args.get("edits")
        if isinstance(edits, list) and edits and isinstance(edits[0], dict):
            first = edits[0]
            detail = f"{len(edits)} edits: " + _clip(f"{first.get('old_string', '')} -> {first.get('new_string', '')}", 60)
        else:
            old = args.get("old_string", args.get("old_str", ""))
            new = args.get("new_string", args.get("new_str", args.get("content", "")))
            detail = _clip(f"{old} -> {new}", 80) if (old or new) else ""
        return [FileTouch(path, "modified", detail)]
    return []


def shell_command(name: str, args: dict) -> str:
    """The command line of a shell-like call (a Codex list is joined), ``""`` for other tools."""
    low = name.lower()
    if low == "run_ipython":
        code = args.get("code")
        return code if isinstance(code, str) else ""
    if low not in _SHELL_TOOLS:
        return ""
    value = args.get("command", args.get("cmd", args.get("_raw")))
    if isinstance(value, list):
        parts = [str(v) for v in value]
        # Codex's ["bash", "-lc", "<script>"]: the script is the command
        if len(parts) >= 3 and parts[0] in ("bash", "sh", "zsh") and parts[1] in ("-lc", "-c"):
            return parts[2]
        return " ".join(parts)
    return value if isinstance(value, str) else ""


_REDIRECT = re.compile(r"(?:^|[^0-9&<>])>>?\s*([^\s;&|<>()]+)")
_SEGMENT_SPLIT = re.compile(r"&&|\|\||;|\n|\|")
_SHELL_READS = {"cat", "head", "tail", "less", "more", "bat", "nl"}
_SHELL_CHANGES = {"touch": "created", "rm": "deleted", "unlink": "deleted", "tee": "modified"}


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=False)
    except ValueError:
        return segment.split()


def _looks_like_file(word: str) -> bool:
    if not word or word.startswith("-") or word in _NOT_FILES or "$" in word or "*" in word:
        return False
    return "/" in word or "." in word.strip(".")


def shell_file_touches(command: str) -> list[FileTouch]:
    """Files a shell command changes (redirection, tee, sed -i, touch, rm, mv, cp) or reads (cat ...).

    >>> [(t.path, t.action) for t in shell_file_touches("cat a.py && echo x > out/b.txt; rm -f c.log")]
    [('out/b.txt', 'created'), ('a.py', 'read'), ('c.log', 'deleted')]
    """
    out: list[FileTouch] = []
    for m in _REDIRECT.finditer(command):
        target = m.group(1).strip("'\"")
        if _looks_like_file(target):
            out.append(FileTouch(target, "created", _clip(command, 60)))
    for segment in _SEGMENT_SPLIT.split(command):
        words = _words(segment.strip())
        while words and (("=" in words[0] and not words[0].startswith("-")) or words[0] in ("sudo", "env")):
            words = words[1:]
        if not words:
            continue
        head, rest = words[0].rsplit("/", 1)[-1], words[1:]
        files = [w for w in rest if _looks_like_file(w) and not w.startswith(">")]
        if head in _SHELL_READS:
            out.extend(FileTouch(f, "read") for f in files)
        elif head in _SHELL_CHANGES:
            out.extend(FileTouch(f, _SHELL_CHANGES[head], _clip(segment, 60)) for f in files)
        elif head == "sed" and any(w == "-i" or w.startswith("-i") for w in rest):
            out.extend(FileTouch(f, "modified", _clip(segment, 60)) for f in files[-1:])
        elif head in ("mv", "cp") and len(files) >= 2:
            sources, dest = files[:-1], files[-1]
            out.extend(FileTouch(f, "deleted" if head == "mv" else "read", _clip(segment, 60)) for f in sources)
            if dest.endswith("/"):  # into a folder: each source keeps its name
                out.extend(FileTouch(dest + f.rstrip("/").rsplit("/", 1)[-1], "created", _clip(segment, 60)) for f in sources)
            else:
                out.append(FileTouch(dest, "created", _clip(segment, 60)))
    return out


_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$", re.M)
_PATCH_MOVE = re.compile(r"^\*\*\* Move to: (.+?)\s*$", re.M)
_DIFF_FILE = re.compile(r"^\+\+\+ (?:b/)?(.+?)\s*$", re.M)
_PATCH_ACTION = {"Add": "created", "Update": "modified", "Delete": "deleted"}


def patch_touches(text: str) -> list[FileTouch]:
    """Files of a Codex ``apply_patch`` envelope, else of a unified diff (``+++ b/path``).

    >>> [(t.path, t.action) for t in patch_touches("*** Begin Patch\\n*** Add File: a/new.py\\n+x\\n*** End Patch")]
    [('a/new.py', 'created')]
    """
    out: list[FileTouch] = []
    for m in _PATCH_FILE.finditer(text):
        block = text[m.end(): text.find("\n*** ", m.end()) if "\n*** " in text[m.end():] else len(text)]
        changed = [ln[1:] for ln in block.splitlines() if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))]
        out.append(FileTouch(m.group(2).strip(), _PATCH_ACTION[m.group(1)], _clip(" | ".join(changed), 80)))
    out.extend(FileTouch(m.group(1).strip(), "created") for m in _PATCH_MOVE.finditer(text))
    if not out:
        out.extend(FileTouch(m.group(1), "modified") for m in _DIFF_FILE.finditer(text) if m.group(1) != "/dev/null")
    return out


_AIDER_BLOCK = re.compile(r"^([^\n`]*?\S)\n```[^\n]*\n<<<<<<< SEARCH\n(.*?)\n=======\n(.*?)\n>>>>>>> REPLACE", re.S | re.M)


def aider_edit_touches(text: str) -> list[FileTouch]:
    """Aider's edit blocks: the file name line, a fence, then ``<<<<<<< SEARCH ... >>>>>>> REPLACE``."""
    out = []
    for m in _AIDER_BLOCK.finditer(text):
        path = m.group(1).strip().strip("`*")
        if path and " " not in path:
            action = "created" if not m.group(2).strip() else "modified"
            out.append(FileTouch(path, action, _clip(f"{m.group(2)} -> {m.group(3)}", 80)))
    return out


_DONE = {"completed", "complete", "done", "finished", "cancelled", "canceled", "deleted", "skipped"}


def _items(entries: Any, text_keys: tuple[str, ...]) -> list[PlanItem]:
    out = []
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        text = next((entry[k] for k in text_keys if isinstance(entry.get(k), str) and entry[k].strip()), "")
        if text:
            out.append(PlanItem(text.strip(), str(entry.get("status") or "pending").lower()))
    return out


def plan_items(name: str, args: dict) -> list[PlanItem] | None:
    """The whole plan a plan-writing call sets (``None`` for any other call).

    Claude Code ``TodoWrite`` (``todos``: content, status), Codex ``update_plan`` (``plan``:
    step, status), Hermes ``todo`` (``todos``), OpenHands ``task_tracker`` (``task_list``:
    title, status). ``TaskCreate`` / ``TaskUpdate`` change one item and are handled by the
    caller (``opctx.lab.probes``).
    """
    low = name.lower()
    if low in ("todowrite", "todo", "todo_write", "write_todos"):
        return _items(args.get("todos"), ("content", "text", "title", "task"))
    if low == "update_plan":
        return _items(args.get("plan"), ("step", "text", "content"))
    if low == "task_tracker" and args.get("command") in ("plan", None):
        return _items(args.get("task_list"), ("title", "content", "notes"))
    return None


def is_open(item: PlanItem) -> bool:
    """Not completed (nor cancelled)."""
    return item.status not in _DONE


_EXIT_CODE = re.compile(r"(?:Exit code:?|exit code|returncode>)\s*(-?\d+)", re.I)


def _extras_code(msg: dict) -> int | None:
    event = msg.get("event") if isinstance(msg.get("event"), dict) else {}
    for extras in (msg.get("extras"), event.get("extras")):
        if not isinstance(extras, dict):
            continue
        meta = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else {}
        for value in (meta.get("exit_code"), extras.get("exit_code")):
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def tool_output(msg: dict, text: str) -> tuple[str, int | None]:
    """A tool result's text and exit code, read the way each client writes them.

    OpenHands keeps the code in the observation's ``extras`` (``metadata.exit_code``);
    Hermes and Codex custom tools answer with JSON (``{"output", "exit_code"}``,
    ``{"output", "metadata": {"exit_code"}}``); Codex shells, mini-swe-agent and
    Claude Code write it into the text (``Exit code: 1``, ``<returncode>1</returncode>``).
    ``-1`` (OpenHands: still running) counts as no code.
    """
    code = _extras_code(msg)
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict):
            meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
            value = data.get("exit_code", meta.get("exit_code"))
            if code is None and isinstance(value, int) and not isinstance(value, bool):
                code = value
            parts = [data.get(k) for k in ("output", "stdout", "stderr", "error", "content")]
            body = "\n".join(p for p in parts if isinstance(p, str) and p)
            text = body or text
    if code is None:
        m = _EXIT_CODE.search(text[:400])
        code = int(m.group(1)) if m else None
    return text, (None if code == -1 else code)


_TEST_RUNNER = re.compile(
    r"\b(pytest|py\.test|unittest|tox|nox|npm (run )?test|yarn test|pnpm test|jest|vitest|mocha|"
    r"go test|cargo test|mvn test|gradle test|make test|rspec|phpunit|ctest)\b"
)


def is_test_command(command: str) -> bool:
    """Whether a shell command runs a test suite (the runners most agents use)."""
    return bool(_TEST_RUNNER.search(command))
