"""build_system_prompt (spec §1): five layers, containment, skills index, memory, failure handling."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context import system_prompt as sp
from opctx.context.system_prompt import (
    BANNER_END,
    BANNER_START,
    MAX_WORKSPACE_FILE_BYTES,
    AgentSpec,
    FileMemoryBackend,
    MemoryBackend,
    build_system_prompt,
    build_system_prompt_report,
    skills_index,
)

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


def _skill(root, folder, body):
    d = root / folder
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(body, encoding="utf-8")
    return d / "SKILL.md"


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "AGENTS.md").write_text("Agents rules here.", encoding="utf-8")
    (ws / "SOUL.md").write_text("   \n", encoding="utf-8")  # empty: skipped
    (ws / "USER.md").write_text("The user prefers tabs.", encoding="utf-8")
    (ws / "MEMORY.md").write_text("Remembered: deploy on Fridays is banned.", encoding="utf-8")
    _skill(ws / "skills", "pdf", "---\nname: pdf-tools\ndescription: Read and split PDF files\n---\n# PDF\n")
    _skill(ws / "skills", "git", "# Git\n\nHelps with git history.\nSecond line ignored.\n")
    return ws


def test_five_layers_in_order(workspace):
    agent = AgentSpec(id="a1", name="Ada", mentions=["@ada", "ada"], system_prompt="Be terse.", workspace=workspace)
    out = build_system_prompt(agent)
    lines = out.splitlines()
    assert lines[0] == BANNER_START and lines[-1] == BANNER_END
    order = [
        "You are Ada (agent_id=a1). Users may address you via: @ada, ada.",
        "[AGENTS.md]",
        "[USER.md]",
        "Be terse.",
        "<available_skills>",
        "<memory>",
    ]
    positions = [out.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "[SOUL.md]" not in out


def test_dict_agent_is_accepted(workspace):
    out = build_system_prompt({"id": "b2", "name": "Bob", "system_prompt": "Inline.", "workspace": str(workspace)})
    assert "You are Bob (agent_id=b2)." in out and "Users may address" not in out
    assert "Inline." in out


def test_skills_index_fields(workspace):
    out = skills_index(AgentSpec(id="x", workspace=workspace))
    assert f"- pdf-tools: Read and split PDF files ({(workspace / 'skills' / 'pdf' / 'SKILL.md').resolve()})" in out
    assert "- git: Helps with git history. (" in out and "Second line" not in out


def test_skill_description_truncated_to_250(tmp_path):
    _skill(tmp_path / "s", "long", "x" * 600)
    out = skills_index({"id": "x", "skills_dirs": [tmp_path / "s"]})
    line = next(line for line in out.splitlines() if line.startswith("- long"))
    description = line[len("- long: "): line.rindex(" (")]
    assert len(description) == 250


def test_at_most_20_skills_then_more(tmp_path):
    for i in range(27):
        _skill(tmp_path / "s", f"skill{i:02d}", f"Skill number {i}")
    out = skills_index({"id": "x", "skills_dirs": [tmp_path / "s"]})
    assert sum(line.startswith("- ") for line in out.splitlines()) == 20
    assert "... (+7 more)" in out


def test_enabled_skills_filter(workspace):
    out = skills_index(AgentSpec(id="x", workspace=workspace, skills=["git"]))
    assert "git" in out and "pdf-tools" not in out


def test_workspace_escape_through_symlink_and_dotdot_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET", encoding="utf-8")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(secret, ws / "USER.md")
    os.symlink(tmp_path, ws / "skills")  # skills folder pointing outside
    _skill(tmp_path, "evil", "steal things")
    (ws / "AGENTS.md").write_text("fine", encoding="utf-8")
    out = build_system_prompt(AgentSpec(id="x", workspace=ws))
    assert "TOP SECRET" not in out and "steal things" not in out
    assert "fine" in out
    # a workspace given with .. is resolved first, then containment holds
    out2 = build_system_prompt(AgentSpec(id="x", workspace=str(ws / ".." / "ws")))
    assert "TOP SECRET" not in out2 and "fine" in out2


def test_workspace_file_cache_follows_mtime(workspace):
    agent = AgentSpec(id="x", workspace=workspace)
    assert "Agents rules here." in build_system_prompt(agent)
    path = workspace / "AGENTS.md"
    path.write_text("New rules, longer than before.", encoding="utf-8")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert "New rules, longer than before." in build_system_prompt(agent)


def test_memory_backends(workspace, tmp_path):
    class Custom:
        def system_prompt(self):
            return "<memory>custom</memory>"

    assert isinstance(Custom(), MemoryBackend)
    out = build_system_prompt(AgentSpec(id="x", workspace=workspace, memory=Custom()))
    assert "custom" in out and "Fridays" not in out
    other = tmp_path / "elsewhere.md"
    other.write_text("elsewhere memory", encoding="utf-8")
    assert FileMemoryBackend(other).system_prompt() == "<memory>\nelsewhere memory\n</memory>"
    assert FileMemoryBackend(tmp_path / "missing.md").system_prompt() == ""


def test_failing_layer_is_logged_and_skipped(workspace, caplog):
    class Broken:
        def system_prompt(self):
            raise RuntimeError("memory store offline")

    report = build_system_prompt_report(
        AgentSpec(id="x", system_prompt="Inline.", workspace=workspace, memory=Broken())
    )
    out = report.text
    assert "Inline." in out and "[AGENTS.md]" in out and out.endswith(BANNER_END)
    assert "memory layer failed" in caplog.text and "memory store offline" in caplog.text
    assert report.failed_layers == {"memory": "RuntimeError: memory store offline"}


def test_every_layer_failing_still_gives_banners_and_inline(caplog):
    class Agent:
        id = "x"
        system_prompt = "only inline"

        @property
        def name(self):
            raise RuntimeError("no name")

        @property
        def workspace(self):
            raise RuntimeError("no workspace")

    out = build_system_prompt(Agent())
    assert out == "\n".join([BANNER_START, "only inline", BANNER_END])
    assert "identity layer failed" in caplog.text and "skills index layer failed" in caplog.text


def test_assembly_failure_returns_inline_prompt(monkeypatch):
    from opctx.context import system_prompt as sp

    monkeypatch.setattr(sp, "BANNER_START", None)  # the final join cannot work
    assert sp.build_system_prompt(AgentSpec(id="x", system_prompt="inline only")) == "inline only"


def test_missing_workspace_is_not_an_error():
    out = build_system_prompt(AgentSpec(id="x", system_prompt="hi"))
    assert out == "\n".join([BANNER_START, "You are x (agent_id=x).\n\nhi", BANNER_END])


@settings(max_examples=50, deadline=None)
@given(name=st.text(max_size=30), inline=st.text(max_size=200), mentions=st.lists(st.text(max_size=10), max_size=4))
def test_always_banners_and_inline_text(name, inline, mentions):
    out = build_system_prompt(AgentSpec(id="agent", name=name, system_prompt=inline, mentions=mentions))
    assert out.startswith(BANNER_START + "\n") and out.endswith("\n" + BANNER_END)
    assert inline.strip() in out


# ------------------------------------------------------------------------------ races (defect: TOCTOU)
# The files an attacker can swap: a workspace file, the memory file and a skill file.
SWAPPABLE = ["USER.md", "MEMORY.md", "skills/pdf/SKILL.md"]


def _swap_for_symlink(path: Path, target: Path) -> None:
    path.unlink()
    os.symlink(target, path)


def _swap_for_file(path: Path, text: str) -> None:
    path.unlink()
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_text("TOP SECRET outside the workspace", encoding="utf-8")
    return path


@pytest.mark.parametrize("target", SWAPPABLE)
def test_symlink_swapped_in_right_after_the_check_is_not_read(workspace, secret, monkeypatch, target):
    real_contained = sp._contained

    def check_then_swap(path, root):
        result = real_contained(path, root)
        if path == workspace / target:
            _swap_for_symlink(path, secret)
        return result

    monkeypatch.setattr(sp, "_contained", check_then_swap)
    out = build_system_prompt(AgentSpec(id="x", workspace=workspace))
    assert "TOP SECRET" not in out
    assert "Agents rules here." in out  # the other files are still there


def test_symlink_opened_then_swapped_back_before_the_check_is_refused(workspace, secret, monkeypatch, caplog):
    # open() follows the symlink to the secret; the name is a harmless file again by the time
    # it is checked. Only the (st_dev, st_ino) comparison tells the two apart.
    user_md = workspace / "USER.md"
    _swap_for_symlink(user_md, secret)
    real_contained = sp._contained

    def swap_back_then_check(path, root):
        if path == user_md and path.is_symlink():
            _swap_for_file(path, "harmless")
        return real_contained(path, root)

    monkeypatch.setattr(sp, "_contained", swap_back_then_check)
    out = build_system_prompt(AgentSpec(id="x", workspace=workspace))
    assert "TOP SECRET" not in out and "[USER.md]" not in out
    assert "changed while being checked" in caplog.text


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="the kernel does not name open files here")
def test_a_folder_swapped_out_and_back_around_the_name_checks_is_caught_by_the_descriptor(
    workspace, secret, monkeypatch, caplog
):
    # USER.md -> docs/user.md (inside). docs is a symlink to the outside folder when the file
    # is opened and when the resolved name is lstat'ed, a real folder only while the name is
    # resolved: every name-based check passes, the descriptor's own path does not.
    (secret.parent / "user.md").write_text("TOP SECRET through a swapped folder", encoding="utf-8")
    (workspace / "USER.md").unlink()
    (workspace / "USER.md").symlink_to("docs/user.md")
    docs = workspace / "docs"
    docs.symlink_to(secret.parent, target_is_directory=True)
    real_contained = sp._contained

    def swap_folder_around_resolve(path, root):
        if path != workspace / "USER.md":
            return real_contained(path, root)
        docs.unlink()
        docs.mkdir()
        (docs / "user.md").write_text("harmless", encoding="utf-8")
        result = real_contained(path, root)
        (docs / "user.md").unlink()
        docs.rmdir()
        docs.symlink_to(secret.parent, target_is_directory=True)
        return result

    monkeypatch.setattr(sp, "_contained", swap_folder_around_resolve)
    out = build_system_prompt(AgentSpec(id="x", workspace=workspace))
    assert "TOP SECRET" not in out
    assert "was opened outside" in caplog.text


def test_symlink_swapped_back_and_forth_around_the_check_is_refused(workspace, secret, monkeypatch):
    # A regular file while resolved, a symlink to the secret before and after: a stat() that
    # follows symlinks would find the open file again; lstat() does not.
    user_md = workspace / "USER.md"
    _swap_for_symlink(user_md, secret)
    real_contained = sp._contained

    def swap_around_check(path, root):
        if path != user_md:
            return real_contained(path, root)
        _swap_for_file(path, "harmless")
        result = real_contained(path, root)
        _swap_for_symlink(path, secret)
        return result

    monkeypatch.setattr(sp, "_contained", swap_around_check)
    out = build_system_prompt(AgentSpec(id="x", workspace=workspace))
    assert "TOP SECRET" not in out


def test_symlink_race_against_a_swapping_thread_never_leaks(workspace, secret):
    user_md, link, tmp = workspace / "USER.md", workspace / ".link", workspace / ".tmp"
    stop = threading.Event()

    def attacker():
        while not stop.is_set():
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(secret, link)
            tmp.write_text("harmless user notes", encoding="utf-8")
            os.replace(tmp, user_md)  # a regular file, passes any check
            os.replace(link, user_md)  # a symlink out of the workspace

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert "TOP SECRET" not in sp.workspace_files_block(AgentSpec(id="x", workspace=workspace))
    finally:
        stop.set()
        thread.join(5)


def _build_within(agent, fifos, seconds=5.0):
    """build_system_prompt(agent) in a thread; fail (after unblocking it) if it hangs."""
    result = {}
    thread = threading.Thread(target=lambda: result.update(out=build_system_prompt(agent)), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:  # a writer end releases a reader stuck in open()
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        thread.join(seconds)
        pytest.fail("build_system_prompt blocked on a FIFO")
    return result["out"]


@needs_fifo
@pytest.mark.timeout(30)
def test_fifos_are_skipped_without_blocking(workspace, caplog):
    fifos = []
    for target in SWAPPABLE:
        path = workspace / target
        path.unlink()
        os.mkfifo(path)
        fifos.append(path)
    started = time.monotonic()
    out = _build_within(AgentSpec(id="x", workspace=workspace), fifos)
    assert time.monotonic() - started < 5
    assert "Agents rules here." in out and "[USER.md]" not in out and "<memory>" not in out
    assert "pdf-tools" not in out and "- git:" in out
    assert "is not a regular file" in caplog.text


@needs_fifo
@pytest.mark.timeout(30)
def test_fifo_swapped_in_by_a_racing_thread_never_blocks(workspace):
    # The swap the old check-then-open code hung on: USER.md is a regular file when checked
    # and a FIFO with no writer when opened. The FIFO keeps one inode (hard links), so a stuck
    # reader can be released through the spare name.
    user_md, spare, tmp = workspace / "USER.md", workspace / ".fifo", workspace / ".tmp"
    os.mkfifo(spare)
    stop = threading.Event()

    def attacker():
        while not stop.is_set():
            tmp.write_text("harmless user notes", encoding="utf-8")
            os.replace(tmp, user_md)
            os.link(spare, tmp)
            os.replace(tmp, user_md)

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 1.5
        agent = AgentSpec(id="x", workspace=workspace)
        while time.monotonic() < deadline:
            assert "Agents rules here." in _build_within(agent, [spare])
    finally:
        stop.set()
        thread.join(5)


def test_symlink_inside_the_workspace_is_still_followed(tmp_path):
    ws = tmp_path / "ws"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "user.md").write_text("Notes kept in docs.", encoding="utf-8")
    os.symlink(ws / "docs" / "user.md", ws / "USER.md")
    os.symlink("docs/user.md", ws / "MEMORY.md")  # relative symlinks too
    shared = _skill(ws, "shared/generic", "Generic helper skill.")
    (ws / "skills" / "mytool").mkdir(parents=True)
    os.symlink(shared, ws / "skills" / "mytool" / "SKILL.md")
    out = build_system_prompt(AgentSpec(id="x", workspace=ws))
    assert "[USER.md]\nNotes kept in docs." in out
    assert "<memory>\nNotes kept in docs.\n</memory>" in out
    # the fallback name is the skill folder's own name, not the symlink target's folder
    assert f"- mytool: Generic helper skill. ({shared.resolve()})" in out


def test_big_workspace_file_is_capped_with_a_marker(workspace):
    (workspace / "USER.md").write_text("u" * (MAX_WORKSPACE_FILE_BYTES + 5000), encoding="utf-8")
    out = build_system_prompt(AgentSpec(id="x", workspace=workspace))
    assert f"[... truncated at {MAX_WORKSPACE_FILE_BYTES} bytes]" in out
    assert "u" * MAX_WORKSPACE_FILE_BYTES in out and "u" * (MAX_WORKSPACE_FILE_BYTES + 1) not in out


def test_cache_notices_a_replacement_with_same_size_and_mtime(workspace):
    agent = AgentSpec(id="x", workspace=workspace)
    path = workspace / "AGENTS.md"
    assert "Agents rules here." in build_system_prompt(agent)
    st_old = path.stat()
    new = workspace / "new.tmp"
    new.write_text("Better rules here.", encoding="utf-8")  # same length
    os.utime(new, ns=(st_old.st_atime_ns, st_old.st_mtime_ns))
    os.replace(new, path)
    assert path.stat().st_size == st_old.st_size and path.stat().st_mtime_ns == st_old.st_mtime_ns
    out = build_system_prompt(agent)
    assert "Better rules here." in out and "Agents rules here." not in out


# ------------------------------------------------------------------------------ explicit skills_dirs


@pytest.mark.parametrize("as_str", [False, True])
def test_explicit_workspace_skills_dir_keeps_workspace_containment(workspace, secret, as_str):
    (workspace / "skills" / "leak").mkdir()
    os.symlink(secret, workspace / "skills" / "leak" / "SKILL.md")
    folder = workspace / "skills"
    out = skills_index(AgentSpec(id="x", workspace=workspace, skills_dirs=[str(folder) if as_str else folder]))
    assert "TOP SECRET" not in out and "leak" not in out
    assert "pdf-tools" in out and "- git:" in out


def test_explicit_skills_dir_symlinked_out_of_the_workspace_stays_contained(workspace, tmp_path):
    # <workspace>/skills2 -> an outside folder: still the workspace's folder, as for the default
    _skill(tmp_path / "elsewhere", "evil", "steal things")
    os.symlink(tmp_path / "elsewhere", workspace / "skills2")
    out = skills_index(AgentSpec(id="x", workspace=workspace, skills_dirs=[workspace / "skills2"]))
    assert "steal things" not in out


def test_explicit_skills_dir_outside_the_workspace_contains_its_own_reads(workspace, tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    (private / "notes.txt").write_text("db password: hunter2", encoding="utf-8")
    skills = tmp_path / "team-skills"
    _skill(skills, "ok", "A fine skill.")
    _skill(skills, "shared", "Shared text.")
    (skills / "leak").mkdir()
    os.symlink(private / "notes.txt", skills / "leak" / "SKILL.md")
    (skills / "alias").mkdir()
    os.symlink(skills / "shared" / "SKILL.md", skills / "alias" / "SKILL.md")  # stays inside
    out = skills_index(
        AgentSpec(id="x", workspace=workspace, skills_dirs=[skills], allow_outside_skills_dirs=True)
    )
    assert "hunter2" not in out and "private" not in out
    assert "- ok: A fine skill." in out and "- alias: Shared text." in out and "- shared: Shared text." in out
    assert "pdf-tools" not in out  # explicit folders replace the default one


@pytest.mark.parametrize("spelling", ["sibling", "dotdot"])
def test_skills_dirs_outside_the_workspace_need_an_opt_in(workspace, tmp_path, spelling):
    _skill(tmp_path / "x", "outsider", "Runs anything.")
    folder = tmp_path / "x" if spelling == "sibling" else workspace / ".." / "x"
    agent = AgentSpec(id="a", workspace=workspace, skills_dirs=[folder])
    report = build_system_prompt_report(agent)
    assert "outsider" not in report.text
    assert [s.path for s in report.skipped] == [str(folder)]
    assert "allow_outside_skills_dirs=True" in report.skipped[0].reason
    for opted_in in (
        build_system_prompt(agent, allow_outside_skills_dirs=True),
        build_system_prompt(AgentSpec(**{**vars(agent), "allow_outside_skills_dirs": True})),
        build_system_prompt({**vars(agent), "allow_outside_skills_dirs": True}),
    ):
        assert "- outsider: Runs anything." in opted_in


# ------------------------------------------------------------------------------ hard links


@pytest.mark.skipif(not hasattr(os, "link"), reason="no hard links on this platform")
@pytest.mark.parametrize("target", ["USER.md", "MEMORY.md", "skills/git/SKILL.md"])
def test_a_hard_link_to_an_outside_file_is_refused_unless_allowed(workspace, secret, target):
    (workspace / target).unlink()
    os.link(secret, workspace / target)  # one file, two names: no path check can tell
    agent = AgentSpec(id="x", workspace=workspace)
    report = build_system_prompt_report(agent)
    assert "TOP SECRET" not in report.text
    assert [s.path for s in report.skipped] == [str(workspace / target)]
    assert "hard link (2 names" in report.skipped[0].reason
    assert "allow_hard_links=True" in report.skipped[0].reason
    assert str(secret) not in report.files and str(workspace / target) not in report.files
    assert "Agents rules here." in report.text  # the other files are read as usual
    assert "TOP SECRET" in build_system_prompt(agent, allow_hard_links=True)
    assert "TOP SECRET" in build_system_prompt(AgentSpec(id="x", workspace=workspace, allow_hard_links=True))


def test_the_report_lists_the_files_read(workspace):
    report = build_system_prompt_report(AgentSpec(id="x", workspace=workspace))
    names = [Path(f).relative_to(workspace.resolve()).as_posix() for f in report.files]
    assert names == ["AGENTS.md", "SOUL.md", "USER.md", "skills/git/SKILL.md", "skills/pdf/SKILL.md", "MEMORY.md"]
    assert report.skipped == [] and report.failed_layers == {}
    assert report.text == build_system_prompt(AgentSpec(id="x", workspace=workspace))


# ------------------------------------------------------------------------------ skill front matter


@pytest.mark.parametrize(
    "front, expected",
    [
        ("description: >\n  Extract text and tables\n  from PDF files.\n\n  More later.", "Extract text and tables from PDF files."),
        ("description: >-\n  Folded, stripped\n  at the end.", "Folded, stripped at the end."),
        ("description: >+\n  Folded, kept.\n", "Folded, kept."),
        ("description: >2\n  Folded with indentation indicator.", "Folded with indentation indicator."),
        ("description: |\n  Literal first line.\n  Literal second line.", "Literal first line."),
        ("description: |-\n\n  After a blank line.\n  Next.", "After a blank line."),
        ("description: |+\n  Literal kept.", "Literal kept."),
        ("description:\n  Plain value\n  on two lines.", "Plain value on two lines."),
        ("description: Plain start\n  continued below.", "Plain start continued below."),
        ("description: 'It''s single quoted'", "It's single quoted"),
        ('description: "Double \\"quoted\\" value"', 'Double "quoted" value'),
        ("description: 'unbalanced", "'unbalanced"),
        ("description: >\n  " + "w" * 300, "w" * 249 + "…"),
    ],
)
def test_skill_front_matter_values(tmp_path, front, expected):
    _skill(tmp_path / "s", "tool", f"---\nname: tool\n{front}\nlicense: MIT\n---\n# Tool\nBody line.\n")
    out = skills_index({"id": "x", "skills_dirs": [tmp_path / "s"]})
    assert f"- tool: {expected} (" in out, out


def test_skill_front_matter_with_bom_and_quoted_name(tmp_path):
    d = tmp_path / "s" / "bom"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_bytes('\ufeff---\nname: "bom-skill"\ndescription: Edited on Windows\n---\nbody\n'.encode())
    out = skills_index({"id": "x", "skills_dirs": [tmp_path / "s"]})
    assert "- bom-skill: Edited on Windows (" in out and "\ufeff" not in out


def test_skill_without_closing_front_matter_falls_back_to_the_body(tmp_path):
    _skill(tmp_path / "s", "rule", "---\nNot front matter after all.\n")
    out = skills_index({"id": "x", "skills_dirs": [tmp_path / "s"]})
    assert "- rule: Not front matter after all. (" in out


# ------------------------------------------------------------------------------ strings for lists


@pytest.mark.parametrize("as_dict", [False, True])
def test_lone_strings_count_as_one_element_lists(workspace, tmp_path, as_dict):
    _skill(tmp_path / "team", "deploy", "Deploys things.")
    fields = {"id": "x", "name": "Ada", "mentions": "@ada", "workspace": str(workspace), "skills": "git"}
    agent = fields if as_dict else AgentSpec(**fields)
    out = build_system_prompt(agent)
    assert "Users may address you via: @ada." in out
    assert "- git:" in out and "pdf-tools" not in out
    for skills_dirs in (str(tmp_path / "team"), tmp_path / "team"):
        fields2 = {"id": "x", "skills_dirs": skills_dirs}
        out = skills_index(fields2 if as_dict else AgentSpec(**fields2))
        assert out.splitlines()[1:-1] == [f"- deploy: Deploys things. ({(tmp_path / 'team' / 'deploy' / 'SKILL.md').resolve()})"]
