"""The command line for many sessions: --version, OPCTX_DB as the default database, the
sessions table (header, recording dates, sort and filters), search filters, examples."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from opctx import __version__
from opctx.cli import EXIT_DB, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
CC_ID = "cc-7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f"
CODEX_ID = "codex-019c0000-aaaa-7bbb-8ccc-0123456789ab"
COMMANDS = ("import", "sessions", "show", "search", "export", "export-frames", "build-samples", "info")


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path, capsys):
    path = tmp_path / "cli.db"
    assert run(capsys, "import", SAMPLES, "--db", path, "--quiet")[0] == EXIT_OK
    return path


def sessions_json(capsys, *argv) -> list[dict]:
    code, out, err = run(capsys, "sessions", *argv, "--json")
    assert code == EXIT_OK, err
    return json.loads(out)


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"opctx {__version__}"


def test_every_command_help_has_examples(capsys):
    for command in COMMANDS:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        examples = out.split("examples:", 1)[1].strip().splitlines()
        assert examples and all(line.strip().startswith(("opctx ", "python ", "duckdb "))
                                for line in examples), (command, out)
        assert f"opctx {command}" in out.split("examples:", 1)[1]


# -- OPCTX_DB ------------------------------------------------------------------------------


def test_opctx_db_is_the_default_database(db, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPCTX_DB", str(db))
    code, out, _ = run(capsys, "sessions")
    assert code == EXIT_OK and CC_ID in out
    assert run(capsys, "show", CC_ID)[0] == EXIT_OK
    code, out, _ = run(capsys, "search", "分页")
    assert code == EXIT_OK and CC_ID in out
    assert json.loads(run(capsys, "export", CC_ID)[1])[0]["role"] in ("system", "user")
    code, out, _ = run(capsys, "export-frames", "--out", tmp_path / "frames", "--quiet")
    assert code == EXIT_OK and (tmp_path / "frames" / "nodes.parquet").is_file()
    # --db still wins
    other = tmp_path / "other.db"
    assert run(capsys, "import", SAMPLES / f"{CC_ID[3:]}.jsonl", "--db", other, "--quiet")[0] == EXIT_OK
    assert len(sessions_json(capsys, "--db", other)) == 2


def test_opctx_db_may_name_a_transcript_folder(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "projects"
    folder.mkdir()
    shutil.copy(SAMPLES / f"rollout-2026-02-02T10-00-00-{CODEX_ID[6:]}.jsonl", folder / "rollout.jsonl")
    monkeypatch.setenv("OPCTX_DB", str(folder))
    monkeypatch.setenv("OPCTX_CACHE_DIR", str(tmp_path / "cache"))
    rows = sessions_json(capsys)
    assert [r["session_id"] for r in rows] == [CODEX_ID]
    cached = list((tmp_path / "cache").glob("*.db"))
    assert len(cached) == 1  # imported once; the second run reads the cache
    assert [r["session_id"] for r in sessions_json(capsys)] == [CODEX_ID]
    assert list((tmp_path / "cache").glob("*.db")) == cached
    assert sorted(p.name for p in folder.iterdir()) == ["rollout.jsonl"]  # the user's files only read


def test_db_may_name_a_transcript_folder_or_file_like_opctx_db(tmp_path, capsys, monkeypatch):
    """``--db FOLDER`` (or a transcript file) reads what ``OPCTX_DB=FOLDER`` reads: it was
    refused as "a directory"."""
    folder = tmp_path / "projects"
    folder.mkdir()
    shutil.copy(SAMPLES / f"rollout-2026-02-02T10-00-00-{CODEX_ID[6:]}.jsonl", folder / "rollout.jsonl")
    monkeypatch.delenv("OPCTX_DB", raising=False)
    monkeypatch.setenv("OPCTX_CACHE_DIR", str(tmp_path / "cache"))
    assert [r["session_id"] for r in sessions_json(capsys, "--db", folder)] == [CODEX_ID]
    assert [r["session_id"] for r in sessions_json(capsys, "--db", folder / "rollout.jsonl")] == [CODEX_ID]
    code, out, _ = run(capsys, "search", "rollout", "--db", folder)
    assert code == EXIT_OK
    monkeypatch.setenv("OPCTX_DB", str(folder))
    assert [r["session_id"] for r in sessions_json(capsys)] == [CODEX_ID]
    code, _, err = run(capsys, "sessions", "--db", tmp_path / "empty-folder-that-is-missing")
    assert code == EXIT_DB and "does not exist" in err
    (tmp_path / "nothing").mkdir()
    code, _, err = run(capsys, "sessions", "--db", tmp_path / "nothing")
    assert code == EXIT_DB and "no transcript files" in err and "Traceback" not in err


def test_no_database_anywhere_says_how_to_name_one(capsys, monkeypatch, tmp_path):
    from opctx.lab import sources

    monkeypatch.delenv("OPCTX_DB", raising=False)
    monkeypatch.setattr(sources, "sample_database", lambda start=None: None)
    code, _, err = run(capsys, "sessions")
    assert code == EXIT_DB and "OPCTX_DB" in err and "--db FILE" in err
    monkeypatch.setenv("OPCTX_DB", str(tmp_path / "nowhere"))
    code, _, err = run(capsys, "sessions")
    assert code == EXIT_DB and f"OPCTX_DB={tmp_path / 'nowhere'}" in err and "no such file" in err


def test_build_samples_never_defaults_to_opctx_db(tmp_path, capsys, monkeypatch):
    from opctx.cli import build_parser

    monkeypatch.setenv("OPCTX_DB", str(tmp_path / "mine.db"))
    args = build_parser().parse_args(["build-samples"])
    assert Path(args.db) == ROOT / "data" / "sample.db"


# -- sessions ------------------------------------------------------------------------------


def test_sessions_table_has_a_header_and_the_recording_dates(db, capsys):
    code, out, _ = run(capsys, "sessions", "--db", db)
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0].split() == ["SESSION", "NODES", "FORMAT", "MODEL", "STARTED", "(UTC)",
                                "ENDED", "(UTC)", "TITLE"]
    codex = next(line for line in lines if line.startswith(CODEX_ID))
    assert " codex " in codex and "2026-02-02 10:00  2026-02-02 10:01" in codex
    # a transcript without any time (an OpenAI message list) has no dates, not 1970
    openai = next(line for line in lines if line.startswith("openai-"))
    assert "1970" not in openai and "  -  " in openai
    rows = {r["session_id"]: r for r in sessions_json(capsys, "--db", db)}
    assert rows[CODEX_ID]["started_at"] == "2026-02-02T10:00:00Z"
    assert rows[CODEX_ID]["format"] == "codex" and rows[CODEX_ID]["nodes"] == 11
    assert rows["openai-2cfd7db804346daf"]["started_at"] is None


def test_sessions_sort_by_recording_not_import_time(db, capsys):
    ids = [r["session_id"] for r in sessions_json(capsys, "--db", db)]
    starts = [r["started_at"] for r in sessions_json(capsys, "--db", db) if r["started_at"]]
    assert starts == sorted(starts, reverse=True)  # newest recording first (default)
    assert ids[0].startswith("cc-7f3c2a10") and ids[-1].startswith(("openai-", "swe_agent-", "mini_", "anthropic-"))
    reverse = [r["started_at"] for r in sessions_json(capsys, "--db", db, "--reverse") if r["started_at"]]
    assert reverse == sorted(starts)
    nodes = [r["nodes"] for r in sessions_json(capsys, "--db", db, "--sort", "nodes")]
    assert nodes == sorted(nodes, reverse=True) and nodes[0] == 22
    fmts = [r["format"] for r in sessions_json(capsys, "--db", db, "--sort", "format")]
    assert fmts == sorted(fmts)
    ends = [r["ended_at"] for r in sessions_json(capsys, "--db", db, "--sort", "end") if r["ended_at"]]
    assert ends == sorted(ends, reverse=True)


def test_sessions_filters(db, capsys):
    def ids(*argv):
        return {r["session_id"] for r in sessions_json(capsys, "--db", db, *argv)}

    everything = ids()
    assert ids("--format", "hermes") == {"hermes-20260301_090000_abc123", "hermes-20260301_100000_def456"}
    assert ids("--format", "codex", "--format", "AIDER") == {CODEX_ID, "aider-2a8b1e0b8d1c851c-0"}
    assert ids("--model", "OPUS-4.6") == ids("--format", "hermes")
    rows = sessions_json(capsys, "--db", db)
    large = {r["session_id"] for r in rows if r["nodes"] >= 11}
    assert {CC_ID, CODEX_ID} <= large < everything  # a real filter: some in, some out
    assert ids("--min-nodes", 11) == large
    assert ids("--max-nodes", 4) == {r for r in everything if r.endswith("a5a3c0ffee1234567")} | {
        "hermes-20260301_100000_def456", "openhands-3333ffcc22aed5d8"}
    # dates: sessions whose recording overlaps the range; a bare --until date is the whole day
    assert ids("--since", "2026-03-01", "--until", "2026-03-01") == ids("--format", "hermes")
    assert ids("--since", "2026-03-01T09:30") == ids("--format", "claude_code") | {"hermes-20260301_100000_def456"}
    early = {r["session_id"] for r in rows if r["started_at"] and r["started_at"] <= "2025-01-20T20:29:59Z"}
    assert "openhands-3333ffcc22aed5d8" in early and early < everything
    assert ids("--until", "2025-01-20T20:29:59+00:00") == early
    assert ids("--since", "2026-03-15") == set()
    assert len(sessions_json(capsys, "--db", db, "--limit", 3)) == 3
    code, out, _ = run(capsys, "sessions", "--db", db, "--format", "nope")
    assert code == EXIT_OK and out.strip() == "(no sessions)"
    for bad in (["--since", "yesterday"], ["--min-nodes", "-3"], ["--sort", "size"]):
        with pytest.raises(SystemExit) as exc:
            main(["sessions", "--db", str(db), *bad])
        assert exc.value.code == EXIT_USAGE
    capsys.readouterr()


# -- search --------------------------------------------------------------------------------


def test_search_within_a_session_or_a_format(db, capsys):
    def hits(*argv):
        code, out, err = run(capsys, "search", "--db", db, "--json", "--limit", 200, *argv)
        assert code == EXIT_OK, err
        return json.loads(out)

    everywhere = hits("file")
    assert len({h["session_id"] for h in everywhere}) > 3
    in_codex = hits("file", "--format", "codex")
    assert in_codex and {h["session_id"] for h in in_codex} == {CODEX_ID}
    assert in_codex == [h for h in everywhere if h["session_id"] == CODEX_ID]  # same ranking
    assert hits("file", "--session", "codex-019c") == in_codex
    assert hits("file", "--session", "codex-019c", "--format", "hermes") == []
    # a filter never comes back short when enough matches exist further down the ranking
    claude = {r["session_id"] for r in sessions_json(capsys, "--db", db, "--format", "claude_code")}
    matching = [h for h in everywhere if h["session_id"] in claude]
    assert len(matching) > 2 and everywhere.index(matching[1]) > 2
    assert hits("file", "--format", "claude_code", "--limit", 2) == matching[:2]
    code, _, err = run(capsys, "search", "file", "--db", db, "--session", "nope")
    assert code == EXIT_NOT_FOUND and "no session" in err
