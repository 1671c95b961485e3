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
profile dicts, the CLI dataclasses); ``_attr`` reads either.

Choices where the specification is open
=======================================
* Identity: the mentions clause is left out when the agent has none; ``name`` defaults
  to the id.
* Workspace files are read from ``agent.workspace`` only. Each path is resolved (``..``
  and symlinks followed) and must stay inside the resolved workspace folder, else the
  file is skipped with a warning: a symlinked ``USER.md -> /etc/passwd`` never reaches a
  prompt. Reads are cached by ``(path, mtime_ns, size)``, so an unchanged file costs one
  ``stat`` per turn. Files over ``MAX_WORKSPACE_FILE_BYTES`` (256 KiB) are truncated with a
  marker. Each file appears under a ``[FILE.md]`` header line.
* Skills: every direct sub-folder holding a ``SKILL.md`` of ``agent.skills_dirs`` (default:
  ``<workspace>/skills``). Name and description come from a ``---`` front matter
  (``name:``, ``description:``) when present, else the folder name and the first
  non-heading, non-empty line. The description is cut to 250 characters. ``agent.skills``,
  when given, lists the enabled skill names (others are left out). Sorted by name, so the
  layer is stable between turns. Skill folders under the workspace obey the same
  containment rule as workspace files.
* Memory: ``MemoryBackend`` is a protocol with one method, ``system_prompt() -> str``.
  ``FileMemoryBackend(path)`` (default: ``<workspace>/MEMORY.md``) returns the file's text
  under a ``<memory>`` tag, cached by mtime. ``agent.memory`` may hold a backend; else a
  ``FileMemoryBackend`` for the workspace is used when the workspace has a ``MEMORY.md``.
* Failure: each layer runs in its own ``try``; a failing layer is logged and skipped.
  If assembling fails as a whole, the inline prompt is returned as is.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "AgentSpec",
    "MemoryBackend",
    "FileMemoryBackend",
    "build_system_prompt",
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
    mentions: list[str] = field(default_factory=list)
    workspace: str | os.PathLike | None = None
    skills_dirs: list[str | os.PathLike] | None = None
    skills: list[str] | None = None  # enabled skill names; None = all found
    memory: Any = None  # a MemoryBackend, or None for the workspace MEMORY.md


def _attr(obj: Any, name: str, default: Any = None) -> Any:
    """Read ``name`` from a dict or an object, ``default`` when absent or None."""
    value = obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)
    return default if value is None else value


# ------------------------------------------------------------------------------ file access

_READ_CACHE: dict[str, tuple[int, int, str]] = {}
_READ_LOCK = threading.Lock()


def _contained(path: Path, root: Path) -> Path | None:
    """``path`` resolved, if it stays inside ``root`` (already resolved); else None."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if resolved == root or root in resolved.parents:
        return resolved
    logger.warning("system prompt: %s resolves outside the workspace %s; skipped", path, root)
    return None


def _read_cached(path: Path, limit: int = MAX_WORKSPACE_FILE_BYTES) -> str:
    st = path.stat()
    key = str(path)
    with _READ_LOCK:
        hit = _READ_CACHE.get(key)
    if hit and hit[0] == st.st_mtime_ns and hit[1] == st.st_size:
        return hit[2]
    with path.open("rb") as fh:
        data = fh.read(limit + 1)
    text = data[:limit].decode("utf-8", errors="replace")
    if len(data) > limit:
        text += f"\n[... truncated at {limit} bytes]"
    with _READ_LOCK:
        if len(_READ_CACHE) > 1024:
            _READ_CACHE.clear()
        _READ_CACHE[key] = (st.st_mtime_ns, st.st_size, text)
    return text


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


def workspace_files_block(agent: Any) -> str:
    """Layer 2: the non-empty AGENTS.md, SOUL.md, USER.md of the agent's workspace."""
    root = _workspace_root(agent)
    if root is None:
        return ""
    parts = []
    for name in WORKSPACE_FILES:
        resolved = _contained(root / name, root)
        if resolved is None or not resolved.is_file():
            continue
        text = _read_cached(resolved).strip()
        if text:
            parts.append(f"[{name}]\n{text}")
    return "\n\n".join(parts)


# ------------------------------------------------------------------------------ skills


def _parse_skill(path: Path) -> tuple[str, str]:
    text = _read_cached(path, 64 * 1024)
    name = path.parent.name
    description = ""
    lines = text.splitlines()
    body_start = 0
    if lines and lines[0].strip() == "---":
        for i, line in enumerate(lines[1:], 1):
            if line.strip() == "---":
                body_start = i + 1
                break
            key, _, value = line.partition(":")
            if key.strip() == "name" and value.strip():
                name = value.strip().strip("\"'")
            elif key.strip() == "description" and value.strip():
                description = value.strip().strip("\"'")
    if not description:
        for line in lines[body_start:]:
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                description = stripped
                break
    description = description.splitlines()[0] if description else ""
    if len(description) > SKILL_DESCRIPTION_CHARS:
        description = description[: SKILL_DESCRIPTION_CHARS - 1] + "…"
    return name, description


def _skill_dirs(agent: Any, root: Path | None) -> list[tuple[Path, Path | None]]:
    """(folder, containment root or None) pairs to search."""
    explicit = _attr(agent, "skills_dirs")
    if explicit:
        return [(Path(d).expanduser(), None) for d in explicit]
    if root is not None:
        return [(root / "skills", root)]
    return []


def skills_index(agent: Any) -> str:
    """Layer 4: ``<available_skills>`` with at most ``MAX_SKILLS`` entries."""
    root = _workspace_root(agent)
    enabled = _attr(agent, "skills")
    enabled_set = set(enabled) if enabled is not None else None
    found: dict[str, tuple[str, Path]] = {}
    for folder, containment in _skill_dirs(agent, root):
        if not folder.is_dir():
            continue
        for child in sorted(folder.iterdir()):
            skill_md = child / "SKILL.md"
            if containment is not None:
                resolved = _contained(skill_md, containment)
            else:
                resolved = skill_md.resolve() if skill_md.is_file() else None
            if resolved is None or not resolved.is_file():
                continue
            try:
                name, description = _parse_skill(resolved)
            except OSError as exc:
                logger.warning("system prompt: cannot read skill %s: %s", skill_md, exc)
                continue
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

    def __init__(self, path: str | os.PathLike, *, root: str | os.PathLike | None = None):
        self.path = Path(path).expanduser()
        self.root = Path(root).expanduser().resolve() if root is not None else None

    @classmethod
    def for_workspace(cls, workspace: str | os.PathLike) -> FileMemoryBackend:
        return cls(Path(workspace) / "MEMORY.md", root=workspace)

    def system_prompt(self) -> str:
        path = self.path
        if self.root is not None:
            resolved = _contained(path, self.root)
            if resolved is None:
                return ""
            path = resolved
        if not path.is_file():
            return ""
        text = _read_cached(path).strip()
        return f"<memory>\n{text}\n</memory>" if text else ""


def _memory_block(agent: Any) -> str:
    backend = _attr(agent, "memory")
    if backend is None:
        root = _workspace_root(agent)
        if root is None:
            return ""
        backend = FileMemoryBackend.for_workspace(root)
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
    mentions = [str(m) for m in _attr(agent, "mentions", []) if str(m).strip()]
    if mentions:
        line += f" Users may address you via: {', '.join(mentions)}."
    return line


def build_system_prompt(agent: Any) -> str:
    """The five-layer system prompt of ``agent`` (module docstring)."""
    try:
        inline = _attr(agent, "system_prompt", "")
        inline = inline if isinstance(inline, str) else str(inline)
    except Exception as exc:
        logger.warning("system prompt: cannot read the inline prompt: %s", exc)
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
                continue
            if text:
                layers.append(text)
        return "\n".join([BANNER_START, "\n\n".join(layers), BANNER_END])
    except Exception as exc:
        logger.warning("system prompt assembly failed, using the inline prompt: %s", exc)
        return inline
