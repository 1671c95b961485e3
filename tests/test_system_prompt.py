"""build_system_prompt (spec §1): five layers, containment, skills index, memory, failure handling."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context.system_prompt import (
    BANNER_END,
    BANNER_START,
    AgentSpec,
    FileMemoryBackend,
    MemoryBackend,
    build_system_prompt,
    skills_index,
)


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

    out = build_system_prompt(AgentSpec(id="x", system_prompt="Inline.", workspace=workspace, memory=Broken()))
    assert "Inline." in out and "[AGENTS.md]" in out and out.endswith(BANNER_END)
    assert "memory layer failed" in caplog.text and "memory store offline" in caplog.text


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
