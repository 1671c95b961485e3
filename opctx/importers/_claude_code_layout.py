"""How Claude Code lays its sessions out: side files, subagents, hook arrays.

Which files a session file's import reads besides itself:

A session ``<s>.jsonl`` owns ``<s>/subagents/agent-*.jsonl`` (with their
``agent-*.meta.json``), ``<s>/tool-results/*`` and, in the older flat layout, the
``agent-*.jsonl`` beside it whose first ``sessionId`` is its own. ``claude_code``
re-exports every name; walking a folder (``api.iter_transcript_files``) and the lab's
cache key (``opctx.lab.sources``) use the same rules, so a side file is never imported
twice and never left out of what decides whether a cache is stale. Only regular files
are listed: a FIFO or device named like a transcript would block the import.

``link_subagent`` ties a subagent's session to the ``Task`` call that started it;
``group_entries`` splits a hook-exported array into its conversations.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from opctx.dag.nodes import Call

from .base import ImportedSession, decode_json

__all__ = ["subagent_files_of", "owned_side_files", "side_file_owner", "first_session_id", "link_subagent",
           "group_entries", "AGENT_FILE", "SAFE_ID"]

AGENT_FILE = re.compile(r"^agent-[A-Za-z0-9_-]+\.jsonl$")
# an id from an untrusted file used as a file or folder name: only a plain id, never a path
SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")


def subagent_files_of(session_file: str) -> list[str]:
    """Subagent transcripts that belong to ``session_file`` (both layouts)."""
    p = Path(session_file)
    out: list[str] = []
    sub = p.with_suffix("") / "subagents"
    if sub.is_dir():
        # a FIFO or device named like a transcript is never opened (it would block)
        out += sorted(str(f) for f in sub.iterdir() if AGENT_FILE.match(f.name) and f.is_file())
    out += _flat_agents(str(p.parent))[0].get(p.stem, [])
    return out


def _flat_agents(folder: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The flat ``agent-*.jsonl`` files of a folder: ({sessionId: files}, {file: sessionId}).

    Cached per folder and modification time: importing a folder of thousands of
    sessions must not list it again for every session file.
    """
    try:
        stamp = os.stat(folder).st_mtime_ns
    except OSError:
        return {}, {}
    return _flat_agents_at(folder, stamp)


@functools.lru_cache(maxsize=16)
def _flat_agents_at(folder: str, stamp: int) -> tuple[dict[str, list[str]], dict[str, str]]:
    by_session: dict[str, list[str]] = {}
    by_file: dict[str, str] = {}
    try:
        with os.scandir(folder) as it:
            names = sorted(e.name for e in it if AGENT_FILE.match(e.name) and e.is_file())
    except OSError:
        return by_session, by_file
    for name in names:
        path = os.path.join(folder, name)
        sid = first_session_id(path)
        if sid is not None:
            by_session.setdefault(sid, []).append(path)
            by_file[path] = sid
    return by_session, by_file


def owned_side_files(session_file: str) -> set[str]:
    """Every file a session file's import also reads (to skip them when walking a folder)."""
    p = Path(session_file)
    owned = set(subagent_files_of(session_file))
    owned |= {str(Path(f).with_suffix(".meta.json")) for f in owned}
    tr = p.with_suffix("") / "tool-results"
    if tr.is_dir():
        owned |= {str(f) for f in tr.iterdir()}
    return {os.path.normpath(f) for f in owned}


def side_file_owner(path: str, session_files: set[str]) -> str | None:
    """The session file among ``session_files`` whose import reads ``path``, or None.

    The rule of ``owned_side_files`` turned around, so that walking a folder decides
    each file on its own: ``<s>/subagents/agent-*.jsonl`` (and ``.meta.json``) and
    ``<s>/tool-results/*`` belong to ``<s>.jsonl``; a flat ``agent-*.jsonl`` (and its
    ``.meta.json``) to the session file named by its first ``sessionId``.
    """
    folder, name = os.path.split(path)
    parent, kind = os.path.split(folder)
    if kind in ("subagents", "tool-results"):
        owner = parent + ".jsonl"
        if owner in session_files and not os.path.basename(owner).startswith("agent-") and (
                kind == "tool-results" or name.startswith("agent-")):
            return owner
    if name.startswith("agent-"):
        agent = path[: -len(".meta.json")] + ".jsonl" if name.endswith(".meta.json") else path
        sid = _flat_agents(folder)[1].get(agent) if AGENT_FILE.match(os.path.basename(agent)) else None
        if sid is not None and os.path.join(folder, sid + ".jsonl") in session_files:
            return os.path.join(folder, sid + ".jsonl")
    return None


def first_session_id(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            for _ in range(20):
                raw = fh.readline()
                if not raw:
                    break
                try:
                    v = decode_json(raw.decode("utf-8", errors="replace"))
                except ValueError:
                    continue
                if isinstance(v, dict) and v.get("sessionId"):
                    return str(v["sessionId"])
    except OSError:
        return None
    return None


def link_subagent(parent: ImportedSession, sub: ImportedSession) -> None:
    """Find the Task call of ``parent`` that started ``sub`` and link both ways."""
    agent_id = sub.meta.get("parent", {}).get("agent_id")
    first_user = next((c for c in sub.calls if c.role == "user"), None)
    prompt = first_user.output.strip() if first_user and isinstance(first_user.output, str) else None
    code_by_tool = {c.metadata.get("tool_call_id"): c for c in parent.calls if c.role == "code"}
    found: Call | None = None
    for c in code_by_tool.values():
        tur = c.metadata.get("tool_use_result")
        if isinstance(tur, dict) and agent_id and str(tur.get("agentId")) == str(agent_id):
            found = c
            break
    tool_id = found.metadata.get("tool_call_id") if found else None
    if found is None and prompt:
        for c in parent.calls:
            for tc in c.metadata.get("tool_calls") or ():
                args = tc.get("arguments") or {}
                if tc.get("name") in ("Task", "Agent") and str(args.get("prompt", "")).strip() == prompt:
                    tool_id = tc.get("id")
                    found = code_by_tool.get(tool_id)
                    break
            if tool_id:
                break
    if tool_id:
        sub.meta["parent"]["tool_call_id"] = tool_id
    if found is not None:
        sub.meta["parent"]["node_id"] = found.id
        found.metadata["subagent_session_id"] = sub.session_id


def group_entries(elements: list[tuple[int, dict]]) -> list[list[tuple[int, dict]]]:
    """Split the entries of a hook array into conversations.

    ``sessionId`` alone is not enough: hook-logged lines carry the id of the process that
    ran the hook while hanging (``parentUuid``) on lines of another id. Entries are
    grouped by union-find over shared ``sessionId`` and ``parentUuid`` links; entries with
    neither (``file-history-snapshot``) join the group of the entry before them (or
    after, at the start). Groups keep file order.
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra

    keys: list[str | None] = []
    for _, e in elements:
        own = [f"u:{e['uuid']}"] if e.get("uuid") else []
        if e.get("sessionId"):
            own.append(f"s:{e['sessionId']}")
        if e.get("parentUuid"):
            own.append(f"u:{e['parentUuid']}")
        if e.get("messageId") and e.get("type") == "file-history-snapshot":
            own.append(f"u:{e['messageId']}")
        for k in own[1:]:
            union(own[0], k)
        keys.append(own[0] if own else None)
    # entries with no key follow their neighbour
    last = next((k for k in keys if k is not None), "s:unknown")
    resolved = []
    for k in keys:
        if k is None:
            k = last
        last = k
        resolved.append(k)
    groups: dict[str, list[tuple[int, dict]]] = {}
    for key, item in zip(resolved, elements, strict=True):
        groups.setdefault(find(key), []).append(item)
    return list(groups.values())
