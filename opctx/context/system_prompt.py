"""System prompt assembly (spec §1).

``build_system_prompt(agent)`` joins five layers, most stable first (so a provider's
prefix cache keeps hitting as long as possible), between two banner lines::

    ── Agent prompt ──
    [1] identity      You are <name> (agent_id=<id>). Users may address you via: <mentions>.
    [2] workspace     AGENTS.md, SOUL.md, USER.md from the agent's workspace (empty ones skipped)
    [3] inline        agent.system_prompt
    [4] skills        <available_skills> ... </available_skills>, at most 20, then "... (+N more)"
    [5] memory        MemoryBackend.system_prompt()
    ── End of agent prompt ──

``agent`` is an ``AgentSpec`` or a plain dict with the same keys (the web UI passes
profile dicts, the CLI dataclasses); ``_attr`` reads either. A profile form easily stores
a single value where a list is meant, so ``mentions``, ``skills`` and ``skills_dirs``
given as one string (or one path, for ``skills_dirs``) count as a one-element list:
``mentions="@ada"`` is ``["@ada"]``, never the characters ``@, a, d, a``, and
``skills_dirs="/srv/skills"`` never turns into a scan of ``/``.

Choices where the specification is open
=======================================
* Identity: the mentions clause is left out when the agent has none; ``name`` defaults
  to the id.
* Workspace files are read from ``agent.workspace`` only. Each path is resolved (``..``
  and symlinks followed) and must stay inside the resolved workspace folder, else the
  file is skipped with a warning: a symlinked ``USER.md -> /etc/passwd`` never reaches a
  prompt, while a symlink to another file of the workspace is followed as usual.
  Whoever can write in the workspace can also swap a file while it is being checked, so
  checking a name and then opening the name again is not enough (a swap in between
  would read the outside file, or hang on a FIFO). ``_read_file`` therefore opens first
  (``O_NONBLOCK``, so a FIFO cannot block), requires the descriptor to be a regular
  file, then resolves the name and checks containment, then requires the resolved name
  to still be the very file that is open (same ``st_dev``/``st_ino``), and only then
  reads, from the descriptor. Whatever the name points to by then, the bytes read come
  from a file that was inside the workspace when it was checked. The identity check uses
  ``lstat``: the resolved name has no symlink left in it, so a symlink found there now
  is a swap (with ``stat`` a second swap back would pass). Where the system names the
  path an open descriptor was opened by (Linux ``/proc/self/fd``), that path must be in
  the workspace too: it closes the last gap of the name-based checks, a folder on the
  way to a symlinked file swapped out and back around them. Files that fail any step are
  skipped with a warning. Reads are cached by the descriptor's ``(st_dev, st_ino,
  mtime_ns, size)``, so an unchanged file costs an ``open``, two ``stat`` calls and a
  ``resolve`` per turn, and replacing a file with another one of the same size and
  mtime is still noticed. A regular file with more than one hard link is refused
  unless the caller opts in (``allow_hard_links=True`` on the ``AgentSpec`` or
  ``build_system_prompt``): a hard link is the same file under two names, and no path
  check can see that the other name is ``~/.aws/credentials``; whoever can write in
  the workspace can make one (on the same file system) without touching a symlink.
  Files that are legitimately linked (some backup and deduplication tools link
  identical files) need the opt-in. At most ``MAX_WORKSPACE_FILE_BYTES`` (256 KiB) of a file are
  read, the rest replaced by a ``[... truncated at N bytes]`` marker: one huge file
  would otherwise ride along in every prompt. Text is decoded as UTF-8 with a leading
  BOM dropped and bad bytes replaced. Each file appears under a ``[FILE.md]`` header
  line.
* Skills: every direct sub-folder holding a ``SKILL.md`` of ``agent.skills_dirs`` (default:
  ``<workspace>/skills``). Name and description come from a ``---`` front matter
  (``name:``, ``description:``) when present, else the folder name and the first
  non-heading, non-empty line. The front matter is read as the small part of YAML that
  skill files use: quotes around a value are removed, a block value (``description: >``,
  ``|``, ``>-``, ``|+`` ... or nothing after the colon) is taken from the indented lines
  below it, folded with spaces (``>``, plain) or line by line (``|``). Only the first
  line of the description is kept, cut to 250 characters. ``agent.skills``, when given,
  lists the enabled skill names (others are left out). Sorted by name, so the layer is
  stable between turns. Skill folders under the workspace obey the same containment
  rule as workspace files, also when named in ``skills_dirs`` (how the folder was found
  does not change who can write in it). A ``skills_dirs`` folder outside the workspace
  (``<workspace>/../x`` included: the spelled-out path is normalised first) is only
  searched when the caller opts in (``allow_outside_skills_dirs=True``), and then
  contains its own reads: a ``SKILL.md`` there that leads out of that folder is
  skipped. An agent without a workspace has nothing to stay inside: its
  ``skills_dirs`` are searched, each containing its own reads.
* Memory: ``MemoryBackend`` is a protocol with one method, ``system_prompt() -> str``.
  ``FileMemoryBackend(path)`` (default: ``<workspace>/MEMORY.md``) returns the file's text
  under a ``<memory>`` tag, cached by mtime. ``agent.memory`` may hold a backend; else a
  ``FileMemoryBackend`` for the workspace is used when the workspace has a ``MEMORY.md``.
* Failure: each layer runs in its own ``try``; a failing layer is logged and skipped.
  If assembling fails as a whole, the inline prompt is returned as is.
* Report: ``build_system_prompt_report(agent)`` returns a :class:`PromptReport`: the
  same text, the files read into it, and every file or folder left out with the
  reason (outside the workspace, a hard link, not a regular file, swapped while
  checked, ...) and failed layers; ``build_system_prompt`` is its ``text``. Every
  skip is also logged as a warning.

Example::

    >>> report = build_system_prompt_report(AgentSpec(id="a1", system_prompt="Be terse."))
    >>> report.text.splitlines()[1:4]
    ['You are a1 (agent_id=a1).', '', 'Be terse.']
    >>> report.files, report.skipped
    ([], [])
"""

from __future__ import annotations

import contextvars
import logging
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "AgentSpec",
    "MemoryBackend",
    "FileMemoryBackend",
    "PromptReport",
    "SkippedSource",
    "build_system_prompt",
    "build_system_prompt_report",
    "workspace_files_block",
    "skills_index",
    "BANNER_START",
    "BANNER_END",
    "WORKSPACE_FILES",
    "MAX_SKILLS",
    "SKILL_DESCRIPTION_CHARS",
    "MAX_WORKSPACE_FILE_BYTES",
]

logger = logging.getLogger(__name__)

BANNER_START = "── Agent prompt ──"
BANNER_END = "── End of agent prompt ──"
WORKSPACE_FILES = ("AGENTS.md", "SOUL.md", "USER.md")
MAX_SKILLS = 20
SKILL_DESCRIPTION_CHARS = 250
MAX_WORKSPACE_FILE_BYTES = 256 * 1024


@dataclass
class AgentSpec:
    """What the system prompt needs to know about an agent."""

    id: str
    name: str = ""
    system_prompt: str = ""
    mentions: list[str] | str = field(default_factory=list)
    workspace: str | os.PathLike | None = None
    skills_dirs: list[str | os.PathLike] | str | os.PathLike | None = None
    skills: list[str] | str | None = None  # enabled skill names; None = all found
    memory: Any = None  # a MemoryBackend, or None for the workspace MEMORY.md
    allow_hard_links: bool = False  # read files that have other names (module docstring)
    allow_outside_skills_dirs: bool = False  # search skills_dirs outside the workspace


@dataclass
class SkippedSource:
    """A file or folder the system prompt left out, and why."""

    path: str
    reason: str


@dataclass
class PromptReport:
    """What :func:`build_system_prompt_report` assembled: the text, the files read into
    it (resolved paths, in reading order), what was left out and why, failed layers."""

    text: str = ""
    files: list[str] = field(default_factory=list)
    skipped: list[SkippedSource] = field(default_factory=list)
    failed_layers: dict[str, str] = field(default_factory=dict)


# the report being filled by the assembly running in this context (None outside one)
_REPORT: contextvars.ContextVar[PromptReport | None] = contextvars.ContextVar(
    "opctx_prompt_report", default=None
)


def _skip(path: Any, reason: str) -> None:
    """Leave ``path`` out of the prompt: a warning, and an entry in the running report."""
    logger.warning("system prompt: %s %s; skipped", path, reason)
    report = _REPORT.get()
    if report is not None:
        report.skipped.append(SkippedSource(str(path), reason))


def _read_into_report(path: Path) -> None:
    report = _REPORT.get()
    if report is not None:
        report.files.append(str(path))


def _attr(obj: Any, name: str, default: Any = None) -> Any:
    """Read ``name`` from a dict or an object, ``default`` when absent or None."""
    value = obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)
    return default if value is None else value


def _as_list(value: Any, *, paths: bool = False) -> list[Any] | None:
    """``value`` as a list; a lone string (or, with ``paths``, a path) is one element.

    Iterating a string would split it into characters, which is never what a profile
    that says ``mentions: "@ada"`` means.
    """
    if value is None:
        return None
    if isinstance(value, str) or (paths and isinstance(value, os.PathLike)):
        return [value]
    return list(value)


# ------------------------------------------------------------------------------ file access

# key: (resolved path, byte limit); value: ((st_dev, st_ino, mtime_ns, size), text)
_READ_CACHE: dict[tuple[str, int], tuple[tuple[int, int, int, int], str]] = {}
_READ_LOCK = threading.Lock()

# O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused right after, by
# fstat). O_BINARY: no newline translation on Windows. Flags a platform lacks are 0.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_BINARY", 0)
)


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _contained(path: Path, root: Path) -> Path | None:
    """``path`` resolved, if it stays inside ``root`` (already resolved); else None."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if _within(resolved, root):
        return resolved
    _skip(path, f"resolves outside {root}")
    return None


def _descriptor_path(fd: int) -> Path | None:
    """The path the kernel opened ``fd`` by, where the system says (Linux ``/proc``); else None."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


def _read_file(
    path: Path,
    root: Path | None,
    limit: int = MAX_WORKSPACE_FILE_BYTES,
    *,
    allow_hard_links: bool = False,
) -> tuple[str, Path] | None:
    """``(text, resolved path)`` of the regular file ``path``; None if it is missing,
    not a regular file, a hard link (unless ``allow_hard_links``), outside ``root``
    (when given) or swapped while being checked.

    The order of the steps is the point (module docstring): open, check the open file,
    check the name, check that the name still is the open file, read the descriptor.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        _skip(path, f"cannot be opened ({exc})")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _skip(path, "is not a regular file")
            return None
        if st.st_nlink > 1 and not allow_hard_links:
            # the same file under another name, which may be anywhere on this file system
            _skip(
                path,
                f"is a hard link ({st.st_nlink} names for one file): refused, since its "
                "other names may lie outside the workspace; pass allow_hard_links=True to read it",
            )
            return None
        if root is not None:
            resolved = _contained(path, root)
        else:
            try:
                resolved = path.resolve(strict=True)
            except (OSError, RuntimeError):
                resolved = None
        if resolved is None:
            return None
        try:
            now = os.lstat(resolved)
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            _skip(path, "changed while being checked")
            return None
        opened = _descriptor_path(fd)
        if root is not None and opened is not None and not _within(opened, root):
            # the name checks out, but the kernel opened the file through a path outside
            # (a folder on the way swapped and swapped back): only the descriptor knows
            _skip(path, f"was opened outside {root}")
            return None
        key = (str(resolved), limit)
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        with _READ_LOCK:
            hit = _READ_CACHE.get(key)
        if hit is not None and hit[0] == stamp:
            _read_into_report(resolved)
            return hit[1], resolved
        try:
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(limit + 1)
        except OSError as exc:
            _skip(path, f"cannot be read ({exc})")
            return None
    finally:
        os.close(fd)
    text = data[:limit].decode("utf-8-sig", errors="replace")
    if len(data) > limit:
        text += f"\n[... truncated at {limit} bytes]"
    with _READ_LOCK:
        if len(_READ_CACHE) > 1024:
            _READ_CACHE.clear()
        _READ_CACHE[key] = (stamp, text)
    _read_into_report(resolved)
    return text, resolved


def _workspace_root(agent: Any) -> Path | None:
    ws = _attr(agent, "workspace")
    if not ws:
        return None
    root = Path(ws).expanduser()
    try:
        return root.resolve(strict=True)
    except (OSError, RuntimeError):
        logger.warning("system prompt: workspace %s does not exist", root)
        return None


def _allows_hard_links(agent: Any) -> bool:
    return bool(_attr(agent, "allow_hard_links", False))


def workspace_files_block(agent: Any) -> str:
    """Layer 2: the non-empty AGENTS.md, SOUL.md, USER.md of the agent's workspace."""
    root = _workspace_root(agent)
    if root is None:
        return ""
    parts = []
    for name in WORKSPACE_FILES:
        read = _read_file(root / name, root, allow_hard_links=_allows_hard_links(agent))
        text = read[0].strip() if read else ""
        if text:
            parts.append(f"[{name}]\n{text}")
    return "\n\n".join(parts)


# ------------------------------------------------------------------------------ skills


# a YAML block scalar header: ">" or "|", optionally with chomping (+/-) and indentation
_BLOCK_HEADER = re.compile(r"[>|][0-9+-]*")


def _fold(lines: list[str]) -> str:
    """YAML folding: lines of a paragraph joined by spaces, blank lines between paragraphs."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines:
        if line:
            current.append(line)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n".join(paragraphs)


def _scalar(value: str, below: list[str]) -> str:
    """The text of ``key: value`` followed by the (stripped) indented lines ``below``."""
    if _BLOCK_HEADER.fullmatch(value):
        if value[0] == "|":  # literal: lines stay lines; the first one is all we keep
            return next((line for line in below if line), "")
        return _fold(below)
    # a plain or quoted value may continue on indented lines; YAML folds those too
    text = _fold([value, *below])
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        inner = text[1:-1]
        text = inner.replace("''", "'") if text[0] == "'" else inner.replace('\\"', '"')
    return text


def _front_matter(lines: list[str]) -> tuple[dict[str, str], int]:
    """Top-level ``key: value`` pairs of a ``---`` front matter, and where the body starts.

    Not a YAML parser: skill files use a handful of string keys, and a dependency (or a
    ``yaml.load`` on files anyone can drop in a folder) would cost more than it saves.
    """
    if not lines or lines[0].strip() != "---":
        return {}, 0
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:  # no closing line: a horizontal rule, not front matter
        return {}, 1
    fields: dict[str, str] = {}
    i = 1
    while i < end:
        line = lines[i]
        i += 1
        if not line.strip() or line[0].isspace() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        below = []
        while i < end and (not lines[i].strip() or lines[i][0].isspace()):
            below.append(lines[i].strip())
            i += 1
        if sep:
            fields[key.strip()] = _scalar(value.strip(), below)
    return fields, end + 1


def _parse_skill(text: str, folder_name: str) -> tuple[str, str]:
    """``(name, description)`` of a SKILL.md; ``folder_name`` when it names none."""
    lines = text.splitlines()
    fields, body_start = _front_matter(lines)
    name = fields.get("name", "").strip() or folder_name
    description = fields.get("description", "").strip()
    if not description:
        for line in lines[body_start:]:
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                description = stripped
                break
    description = description.splitlines()[0].strip() if description else ""
    if len(description) > SKILL_DESCRIPTION_CHARS:
        description = description[: SKILL_DESCRIPTION_CHARS - 1] + "…"
    return name, description


def _skill_dirs(agent: Any, root: Path | None) -> list[tuple[Path, Path]]:
    """(folder, containment root) pairs to search.

    A folder counts as under the workspace if its resolved path or its spelled-out path
    is: ``<workspace>/skills`` symlinked elsewhere is still the workspace's folder, and
    whoever writes in the workspace must not reach further through it. A folder outside
    the workspace is searched only with ``allow_outside_skills_dirs`` (no workspace:
    nothing to be outside of), containing its own reads.
    """
    explicit = _as_list(_attr(agent, "skills_dirs"), paths=True)
    if not explicit:
        return [(root / "skills", root)] if root is not None else []
    spelled_roots = []
    if root is not None:
        workspace = Path(_attr(agent, "workspace")).expanduser()
        spelled_roots = [root, Path(os.path.abspath(workspace))]
    outside_allowed = root is None or bool(_attr(agent, "allow_outside_skills_dirs", False))
    pairs = []
    for d in explicit:
        folder = Path(d).expanduser()
        try:
            resolved = folder.resolve(strict=True)
        except (OSError, RuntimeError):
            continue  # a missing folder has no skills
        spelled = Path(os.path.abspath(folder))
        if root is not None and (
            _within(resolved, root) or any(_within(spelled, r) for r in spelled_roots)
        ):
            pairs.append((folder, root))
        elif outside_allowed:
            pairs.append((folder, resolved))
        else:
            _skip(
                folder,
                f"is a skills folder outside the workspace {root}: "
                "pass allow_outside_skills_dirs=True to search it",
            )
    return pairs


def skills_index(agent: Any) -> str:
    """Layer 4: ``<available_skills>`` with at most ``MAX_SKILLS`` entries."""
    root = _workspace_root(agent)
    enabled = _as_list(_attr(agent, "skills"))
    enabled_set = set(enabled) if enabled is not None else None
    found: dict[str, tuple[str, Path]] = {}
    for folder, containment in _skill_dirs(agent, root):
        try:
            children = sorted(folder.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            logger.warning("system prompt: cannot list skills in %s: %s", folder, exc)
            continue
        for child in children:
            read = _read_file(
                child / "SKILL.md",
                containment,
                64 * 1024,
                allow_hard_links=_allows_hard_links(agent),
            )
            if read is None:
                continue
            text, resolved = read
            name, description = _parse_skill(text, child.name)
            if enabled_set is not None and name not in enabled_set and child.name not in enabled_set:
                continue
            found.setdefault(name, (description, resolved))
    if not found:
        return ""
    names = sorted(found)
    lines = ["<available_skills>"]
    for name in names[:MAX_SKILLS]:
        description, path = found[name]
        lines.append(f"- {name}: {description} ({path})" if description else f"- {name} ({path})")
    if len(names) > MAX_SKILLS:
        lines.append(f"... (+{len(names) - MAX_SKILLS} more)")
    lines.append("</available_skills>")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ memory


@runtime_checkable
class MemoryBackend(Protocol):
    """Persistent memory that contributes a snapshot to the system prompt."""

    def system_prompt(self) -> str: ...


class FileMemoryBackend:
    """Memory kept in a Markdown file (default ``MEMORY.md``), read with an mtime cache."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        root: str | os.PathLike | None = None,
        allow_hard_links: bool = False,
    ):
        self.path = Path(path).expanduser()
        self.root = Path(root).expanduser().resolve() if root is not None else None
        self.allow_hard_links = allow_hard_links

    @classmethod
    def for_workspace(
        cls, workspace: str | os.PathLike, *, allow_hard_links: bool = False
    ) -> FileMemoryBackend:
        return cls(Path(workspace) / "MEMORY.md", root=workspace, allow_hard_links=allow_hard_links)

    def system_prompt(self) -> str:
        read = _read_file(self.path, self.root, allow_hard_links=self.allow_hard_links)
        text = read[0].strip() if read else ""
        return f"<memory>\n{text}\n</memory>" if text else ""


def _memory_block(agent: Any) -> str:
    backend = _attr(agent, "memory")
    if backend is None:
        root = _workspace_root(agent)
        if root is None:
            return ""
        backend = FileMemoryBackend.for_workspace(
            root, allow_hard_links=_allows_hard_links(agent)
        )
    if not callable(getattr(backend, "system_prompt", None)):
        raise TypeError(f"memory backend {type(backend).__name__} has no system_prompt()")
    text = backend.system_prompt()
    if not isinstance(text, str):
        raise TypeError(f"memory backend returned {type(text).__name__}, expected str")
    return text.strip()


# ------------------------------------------------------------------------------ assembly


def _identity(agent: Any) -> str:
    agent_id = _attr(agent, "id", "") or _attr(agent, "agent_id", "")
    name = _attr(agent, "name", "") or agent_id or "an assistant"
    line = f"You are {name} (agent_id={agent_id})." if agent_id else f"You are {name}."
    mentions = [str(m) for m in _as_list(_attr(agent, "mentions", [])) if str(m).strip()]
    if mentions:
        line += f" Users may address you via: {', '.join(mentions)}."
    return line


def build_system_prompt(
    agent: Any,
    *,
    allow_hard_links: bool | None = None,
    allow_outside_skills_dirs: bool | None = None,
) -> str:
    """The five-layer system prompt of ``agent`` (module docstring).

    ``allow_hard_links`` / ``allow_outside_skills_dirs`` override the agent's own
    settings (default: refused). :func:`build_system_prompt_report` says what was
    read and what was left out.
    """
    return build_system_prompt_report(
        agent,
        allow_hard_links=allow_hard_links,
        allow_outside_skills_dirs=allow_outside_skills_dirs,
    ).text


def build_system_prompt_report(
    agent: Any,
    *,
    allow_hard_links: bool | None = None,
    allow_outside_skills_dirs: bool | None = None,
) -> PromptReport:
    """:func:`build_system_prompt` with its account: the files read, what was skipped
    and why, which layers failed (a :class:`PromptReport`)."""
    options = {
        key: value
        for key, value in (
            ("allow_hard_links", allow_hard_links),
            ("allow_outside_skills_dirs", allow_outside_skills_dirs),
        )
        if value is not None
    }
    if options:
        agent = _with_options(agent, options)
    report = PromptReport()
    token = _REPORT.set(report)
    try:
        report.text = _assemble(agent, report)
    finally:
        _REPORT.reset(token)
    return report


class _AgentWithOptions:
    """An agent seen with some attributes overridden (a dict agent is copied instead)."""

    def __init__(self, agent: Any, options: dict[str, Any]):
        self._agent = agent
        self._options = options

    def __getattr__(self, name: str) -> Any:
        if name in self._options:
            return self._options[name]
        return getattr(self._agent, name)


def _with_options(agent: Any, options: dict[str, Any]) -> Any:
    if isinstance(agent, dict):
        return {**agent, **options}
    return _AgentWithOptions(agent, options)


def _assemble(agent: Any, report: PromptReport) -> str:
    try:
        inline = _attr(agent, "system_prompt", "")
        inline = inline if isinstance(inline, str) else str(inline)
    except Exception as exc:
        logger.warning("system prompt: cannot read the inline prompt: %s", exc)
        report.failed_layers["inline prompt"] = f"{type(exc).__name__}: {exc}"
        inline = ""
    try:
        layers = []
        for label, build in (
            ("identity", _identity),
            ("workspace files", workspace_files_block),
            ("inline prompt", lambda a: inline.strip()),
            ("skills index", skills_index),
            ("memory", _memory_block),
        ):
            try:
                text = build(agent)
            except Exception as exc:  # one broken layer must not break the turn
                logger.warning("system prompt: %s layer failed and was skipped: %s", label, exc)
                report.failed_layers[label] = f"{type(exc).__name__}: {exc}"
                continue
            if text:
                layers.append(text)
        return "\n".join([BANNER_START, "\n\n".join(layers), BANNER_END])
    except Exception as exc:
        logger.warning("system prompt assembly failed, using the inline prompt: %s", exc)
        report.failed_layers["assembly"] = f"{type(exc).__name__}: {exc}"
        return inline
