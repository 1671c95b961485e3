"""``opctx import``: exit codes for a read-only database, unreadable folders and nothing found.

File modes do not bind root (CI runs as root),
so the permission cases run the command as an unprivileged user: ``setpriv`` drops to
uid/gid 65534 with no capabilities. Where that is impossible (not root and no way to be
refused, or no ``setpriv``) they skip, saying why.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _privileges import without_bypass_prefix

from opctx.cli import EXIT_DB, EXIT_INPUT, EXIT_OK, main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
OPENAI = SAMPLES / "openai_chat.json"
ANTHROPIC = SAMPLES / "anthropic_messages.json"
NOBODY = 65534


def _unprivileged_prefix() -> list[str]:
    """A command prefix that runs without the power to ignore file modes, or skip."""
    if os.geteuid() != 0:
        return []  # file modes already bind us
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot be enforced here")
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import opctx"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot run Python as uid {NOBODY} here: {probe.stderr.strip()[-200:]}")
    return prefix


@pytest.fixture
def open_dir():
    """A folder under /tmp that the unprivileged user may enter and write (tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="opctx-cli-import-"))
    d.chmod(0o777)
    yield d
    for p in [d, *d.rglob("*")]:  # give back whatever the test took away
        try:
            p.chmod(0o777 if p.is_dir() else 0o666)
        except OSError:
            pass
    shutil.rmtree(d, ignore_errors=True)


def opctx_as_nobody(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    prefix = _unprivileged_prefix()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPCTX_")}
    env.update(HOME=str(cwd), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([*prefix, sys.executable, "-m", "opctx.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_read_only_database_is_one_database_error(open_dir, capsys):
    db = open_dir / "ro.db"
    assert main(["import", str(OPENAI), "--db", str(db), "--quiet"]) == EXIT_OK
    capsys.readouterr()
    db.chmod(0o444)
    transcripts = open_dir / "t"
    transcripts.mkdir()
    for f in (OPENAI, ANTHROPIC, SAMPLES / "swe_agent_calc.traj"):
        shutil.copy(f, transcripts / f.name)
    for p in [transcripts, *transcripts.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    for mode in ("stop", "skip"):
        res = opctx_as_nobody("import", transcripts, "--db", db, "--on-error", mode, cwd=open_dir)
        assert res.returncode == EXIT_DB, res.stderr
        lines = [line for line in res.stderr.splitlines() if line.startswith("opctx:")]
        assert len(lines) == 1, res.stderr
        assert "read" in lines[0] and "only" in lines[0] and str(db) in lines[0]
        assert not any(f.name in res.stderr for f in transcripts.iterdir()), "a transcript was blamed"
    # a folder the database cannot be created in: the same kind of error
    locked = open_dir / "locked"
    locked.mkdir(mode=0o555)
    res = opctx_as_nobody("import", OPENAI, "--db", locked / "new.db", cwd=open_dir)
    assert res.returncode == EXIT_DB, res.stderr


def test_unreadable_subfolder_is_a_warning_and_exit_1(open_dir):
    tree = open_dir / "projects"
    (tree / "ok").mkdir(parents=True)
    (tree / "secret").mkdir()
    shutil.copy(OPENAI, tree / "ok" / OPENAI.name)
    shutil.copy(ANTHROPIC, tree / "secret" / ANTHROPIC.name)
    for p in (tree, tree / "ok"):
        p.chmod(0o755)
    (tree / "ok" / OPENAI.name).chmod(0o644)
    (tree / "secret").chmod(0o000)
    res = opctx_as_nobody("import", tree, "--db", open_dir / "x.db", "--quiet", cwd=open_dir)
    assert res.returncode == EXIT_INPUT, res.stderr
    assert f"warning: skipped {tree / 'secret'}: folder not readable" in res.stderr
    assert "1 session(s) imported" in res.stderr


def test_no_transcripts_found_exits_1(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("# not a transcript\n")
    (tmp_path / "notes" / "data.json").write_text('{"what": "a config file"}')
    for folder, said in ((empty, "no transcripts found in"),
                         (tmp_path / "notes", "1 file(s) looked at, none a recognised transcript")):
        code = main(["import", str(folder), "--db", str(tmp_path / "x.db")])
        _, err = capsys.readouterr()
        assert code == EXIT_INPUT and said in err, err


def test_a_fifo_in_a_walked_folder_is_not_opened(tmp_path, capsys):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    folder = tmp_path / "f"
    folder.mkdir()
    shutil.copy(OPENAI, folder / OPENAI.name)
    os.mkfifo(folder / "pipe.jsonl")
    assert stat.S_ISFIFO(os.stat(folder / "pipe.jsonl").st_mode)
    code = main(["import", str(folder), "--db", str(tmp_path / "x.db"), "--quiet"])
    capsys.readouterr()
    assert code == EXIT_OK


def test_import_writes_into_opctx_db_when_it_names_a_database(tmp_path, monkeypatch, capsys):
    from opctx.cli import EXIT_OK, main

    target = tmp_path / "mine.db"
    monkeypatch.setenv("OPCTX_DB", str(target))
    assert main(["import", str(SAMPLES / "hermes_sessions.jsonl"), "--quiet"]) == EXIT_OK
    assert target.is_file()
    assert main(["sessions", "--json"]) == EXIT_OK  # the same switch reads it back
    assert "hermes-" in capsys.readouterr().out


def test_import_refuses_opctx_db_naming_transcripts_or_nothing(tmp_path, monkeypatch, capsys):
    from opctx.cli import EXIT_USAGE, main

    monkeypatch.setenv("OPCTX_DB", str(SAMPLES))
    assert main(["import", str(SAMPLES / "hermes_sessions.jsonl")]) == EXIT_USAGE
    assert "names transcripts" in capsys.readouterr().err
    monkeypatch.delenv("OPCTX_DB")
    assert main(["import", str(SAMPLES / "hermes_sessions.jsonl")]) == EXIT_USAGE
    assert "--db FILE" in capsys.readouterr().err


def test_unreadable_subfolder_without_the_bypass_capabilities_is_counted(tmp_path):
    """Root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH: the unreadable folder is
    named, and the summary counts it as a warning (it said 0 warning(s))."""
    tree = tmp_path / "projects"
    (tree / "ok").mkdir(parents=True)
    (tree / "secret").mkdir()
    shutil.copy(OPENAI, tree / "ok" / OPENAI.name)
    shutil.copy(ANTHROPIC, tree / "secret" / ANTHROPIC.name)
    (tree / "secret").chmod(0o000)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPCTX_")}
        res = subprocess.run([*without_bypass_prefix(), sys.executable, "-m", "opctx.cli", "import", str(tree),
                              "--db", str(tmp_path / "x.db"), "--quiet"],
                             capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    finally:
        (tree / "secret").chmod(0o755)
    assert res.returncode == EXIT_INPUT, res.stderr
    assert f"warning: skipped {tree / 'secret'}: folder not readable" in res.stderr
    assert "1 session(s) imported" in res.stderr and "1 warning(s)" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "link to a device"])
def test_a_special_file_named_on_the_command_line_is_refused_unopened(tmp_path, capsys, kind):
    """A FIFO would hang the import, /dev/zero would grow until MemoryError: one line, and
    no database is created."""
    if kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs on this platform")
        target = tmp_path / "pipe.jsonl"
        os.mkfifo(target)
    elif not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    elif kind == "device":
        target = Path("/dev/zero")
    else:
        target = tmp_path / "zero.jsonl"
        target.symlink_to("/dev/zero")
    db = tmp_path / "new.db"
    code = main(["import", str(target), "--db", str(db), "--quiet"])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == EXIT_INPUT and len(lines) == 1, err
    assert str(target) in lines[0] and "not a regular file" in lines[0]
    assert not db.exists()
    from opctx.importers import TranscriptError, parse_path

    with pytest.raises(TranscriptError, match="not a regular file"):  # the library refuses it too
        parse_path(target)


def test_a_special_file_in_a_walked_folder_is_listed_not_opened(tmp_path, capsys):
    folder = tmp_path / "f"
    folder.mkdir()
    shutil.copy(OPENAI, folder / OPENAI.name)
    (folder / "zero.jsonl").symlink_to("/dev/zero")
    code = main(["import", str(folder), "--db", str(tmp_path / "x.db")])
    _, err = capsys.readouterr()
    assert code == EXIT_OK
    assert f"ignored {folder / 'zero.jsonl'}: not a regular file" in err and "1 session(s) imported" in err


def test_a_failed_import_leaves_no_empty_database(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    db = tmp_path / "new.db"
    assert main(["import", str(bad), "--db", str(db), "--quiet"]) == EXIT_INPUT
    assert not db.exists() and list(tmp_path.iterdir()) == [bad]  # nor its -wal or -shm
    # a new database that got a session before the error stays, with that session
    first = tmp_path / "first.db"
    assert main(["import", str(OPENAI), str(bad), "--db", str(first), "--quiet"]) == EXIT_INPUT
    assert first.is_file()
    # a database that was there before is never removed, even when nothing was written to it
    assert main(["import", str(OPENAI), "--db", str(db), "--quiet"]) == EXIT_OK
    assert main(["import", str(bad), "--db", str(db), "--quiet"]) == EXIT_INPUT
    assert db.is_file()
    capsys.readouterr()
