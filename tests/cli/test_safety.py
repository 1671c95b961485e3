"""The command line against hostile and odd input: control characters in every field,
FIFOs and devices, damaged and foreign databases, impossible outputs and limits."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _privileges import without_bypass_prefix
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.cli import EXIT_DB, EXIT_INPUT, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, main
from opctx.dag.nodes import Call
from opctx.dag.store import GraphStore, connect
from opctx.terminal import printable, printable_json

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
CC_ID = "cc-7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f"

# what must never reach a terminal raw (a line break between output lines is fine)
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def samples_db(tmp_path, capsys):
    path = tmp_path / "samples.db"
    assert run(capsys, "import", SAMPLES, "--db", path, "--quiet")[0] == EXIT_OK
    return path


# -- #15.8: every field escaped the same way --------------------------------------------------

EVIL_ID = "evil\x1b[2J\x1b]0;pwned\x07-id\nforged line"
EVIL_MODEL = "model\x9b31m\u202eledom"
EVIL_TOOL = "tool\x1b[8m\x00"


@pytest.fixture
def evil_db(tmp_path):
    path = tmp_path / "evil.db"
    with GraphStore(path, EVIL_ID, title="title\x1b[1m", model=EVIL_MODEL,
                    source="import:claude_code") as store:
        user = store.append(Call(role="user", name="user", output="find the needle please"))
        llm = store.append(Call(role="llm", name=EVIL_MODEL, output="calling the needle tool",
                                predecessor=user.id,
                                metadata={"tool_calls": [{"id": "t1", "name": EVIL_TOOL,
                                                          "arguments": "{}"}]}))
        store.append(Call(role="code", name=EVIL_TOOL, output="needle found", predecessor=llm.id,
                          metadata={"tool_call_id": "t1"}))
    return path


def test_control_characters_in_ids_models_and_tools_are_escaped(evil_db, capsys):
    outputs = []
    for argv in (["sessions"], ["sessions", "--json"], ["show", "evil"], ["show", "evil", "--json"],
                 ["search", "needle"], ["search", "needle", "--json"], ["export", "evil"],
                 ["export", "evil", "--format", "jsonl"], ["show", "nope"]):
        code, out, err = run(capsys, *argv, "--db", evil_db)
        assert code in (EXIT_OK, EXIT_NOT_FOUND), (argv, err)
        assert not RAW_CONTROL.search(out + err), (argv, out, err)
        outputs.append((argv, out))
    text = dict((" ".join(a), o) for a, o in outputs)
    # the escapes are what is printed, the same function for every field
    assert printable(EVIL_ID) in text["sessions"] and printable(EVIL_ID) in text["search needle"]
    assert f"session {printable(EVIL_ID)}:" in text["show evil"]
    assert printable(EVIL_MODEL) in text["show evil"] and printable(EVIL_TOOL) in text["show evil"]
    assert "\\x1b[2J" in text["sessions"] and "\\x9b31m" in text["show evil"]
    # JSON stays valid and decodes to exactly what was stored
    rows = json.loads(text["sessions --json"])
    assert rows[0]["session_id"] == EVIL_ID and rows[0]["model"] == EVIL_MODEL
    shown = json.loads(text["show evil --json"])
    assert shown["nodes"][2]["name"] == EVIL_TOOL
    assert json.loads(text["search needle --json"])[0]["session_id"] == EVIL_ID
    header = json.loads(text["export evil --format jsonl"].splitlines()[0])
    assert header["session_id"] == EVIL_ID and header["model"] == EVIL_MODEL


def test_import_escapes_the_session_ids_it_reports(tmp_path, capsys):
    """Ids come from the transcript (Claude Code's sessionId): import prints them escaped."""
    sample = SAMPLES / f"{CC_ID[3:]}.jsonl"
    evil = "7f3c\x1b[2J\x1b]0;pwned\x07"
    text = sample.read_text(encoding="utf-8").replace(CC_ID[3:], json.dumps(evil)[1:-1])
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "evil.jsonl").write_text(text, encoding="utf-8")
    for _ in range(2):  # "imported ..." and then "already imported ..."
        code, out, err = run(capsys, "import", folder, "--db", tmp_path / "e.db")
        assert code == EXIT_OK, err
        assert "\\x1b[2J" in out and not RAW_CONTROL.search(out + err), out


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_printable_never_lets_a_control_through(text):
    shown = printable(text)
    assert not RAW_CONTROL.search(shown) and "\n" not in shown
    assert not re.search("[\ud800-\udfff]", shown)
    assert json.loads(printable_json(text)) == text
    if not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]", text):
        assert shown == text  # ordinary text, CJK and emoji included, is left alone


# -- #15.9: FIFOs and devices are refused, never opened -----------------------------------------


def _cli(*argv, env=None, timeout=60) -> subprocess.CompletedProcess:
    # a subprocess with a timeout: before the fix these hung forever
    return subprocess.run([sys.executable, "-m", "opctx.cli", *map(str, argv)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=ROOT)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_or_device_as_database_or_output_is_refused(tmp_path, samples_db):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for argv in (["sessions", "--db", fifo], ["show", "x", "--db", fifo], ["search", "a", "--db", fifo],
                 ["export", "x", "--db", fifo], ["export-frames", "--db", fifo, "--out", tmp_path / "f"],
                 ["sessions", "--db", fifo, "--init"], ["import", SAMPLES, "--db", fifo],
                 ["build-samples", "--db", fifo], ["sessions", "--db", "/dev/zero"]):
        proc = _cli(*argv)
        assert proc.returncode == EXIT_DB, (argv, proc.stderr)
        assert "not a regular file (a FIFO, device or socket)" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    proc = _cli("export", CC_ID, "--db", samples_db, "-o", fifo)
    assert proc.returncode == EXIT_USAGE and "output" in proc.stderr and "not a regular file" in proc.stderr
    proc = _cli("sessions", env={"OPCTX_DB": str(fifo)})
    assert proc.returncode == EXIT_DB and "not a regular file or folder" in proc.stderr
    assert proc.stderr.count("OPCTX_DB=") == 1


# -- #15.10: damage met while reading is exit 3 with a message -----------------------------------


def test_damaged_database_exits_3_with_a_message(samples_db, tmp_path, capsys):
    conn = sqlite3.connect(samples_db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ids = [r[0] for r in conn.execute("SELECT id FROM sessions")]
    conn.close()
    intact = samples_db.read_bytes()
    damaged = tmp_path / "damaged.db"
    codes: dict[int, int] = {}
    for offset in range(8192, len(intact) - 2048, 12288):
        data = bytearray(intact)
        data[offset:offset + 2048] = b"\xff" * 2048
        damaged.write_bytes(bytes(data))
        for argv in (["sessions"], ["search", "the"], *(["show", sid, "--all"] for sid in ids),
                     *(["export", sid, "--format", f] for sid in ids for f in ("openai", "jsonl"))):
            code, _, err = run(capsys, *argv, "--db", damaged)  # never raises
            assert code in (EXIT_OK, EXIT_DB, EXIT_NOT_FOUND), (offset, argv, err)
            if code == EXIT_DB:
                assert str(damaged) in err and "Traceback" not in err
            codes[code] = codes.get(code, 0) + 1
    assert codes.get(EXIT_DB, 0) > 0  # the damage was met, and reported


# -- #15.11: reading never modifies a database ---------------------------------------------------


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reading_commands_leave_a_foreign_database_alone(tmp_path, capsys):
    other = tmp_path / "app.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE settings (key TEXT, value TEXT)")
    conn.execute("INSERT INTO settings VALUES ('theme', 'dark')")
    conn.commit()
    conn.close()
    before = _digest(other)
    for argv in (["sessions"], ["show", "x"], ["search", "dark"], ["export", "x"],
                 ["export-frames", "--out", tmp_path / "frames"]):
        code, out, err = run(capsys, *argv, "--db", other)
        assert code == EXIT_DB, (argv, err)
        assert "not an opctx database" in err and "--init" in err
    assert _digest(other) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite"]  # no -wal, no frames
    # told to, it is initialised (and then it is an opctx database)
    code, out, _ = run(capsys, "sessions", "--db", other, "--init")
    assert code == EXIT_OK and "(no sessions)" in out
    tables = {r[0] for r in sqlite3.connect(other).execute("SELECT name FROM sqlite_master")}
    assert {"settings", "sessions", "nodes"} <= tables


def test_reading_commands_leave_an_opctx_database_unchanged(samples_db, tmp_path, capsys):
    # a database in rollback-journal mode (what open_database's cache holds): opening it
    # for writing would switch it to WAL
    conn = sqlite3.connect(samples_db)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    before = _digest(samples_db)
    for argv in (["sessions"], ["show", CC_ID], ["search", "TODO"], ["export", CC_ID],
                 ["export", CC_ID, "--format", "jsonl"]):
        code, _, err = run(capsys, *argv, "--db", samples_db)
        assert code == EXIT_OK, (argv, err)
    assert _digest(samples_db) == before
    assert not Path(str(samples_db) + "-wal").exists()
    mode = sqlite3.connect(samples_db).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "delete"


def test_an_older_schema_is_not_migrated_by_reading(samples_db, capsys):
    conn = sqlite3.connect(samples_db)
    conn.execute("DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)")
    conn.commit()
    conn.close()
    code, _, err = run(capsys, "sessions", "--db", samples_db)
    assert code == EXIT_DB and "schema version" in err and "--init" in err
    code, out, _ = run(capsys, "sessions", "--db", samples_db, "--init")  # migrates
    assert code == EXIT_OK and CC_ID in out


# -- #15.14: outputs, limits, NUL, a failed build ------------------------------------------------


def test_export_to_a_missing_folder_or_a_directory_is_a_usage_error(samples_db, tmp_path, capsys):
    code, _, err = run(capsys, "export", CC_ID, "--db", samples_db, "-o", tmp_path / "no" / "x.json")
    assert code == EXIT_USAGE and "does not exist" in err
    code, _, err = run(capsys, "export", CC_ID, "--db", samples_db, "-o", tmp_path)
    assert code == EXIT_USAGE and "is a directory" in err
    assert not (tmp_path / "no").exists()
    # a database error leaves no truncated output behind
    target = tmp_path / "out.json"
    code, _, _ = run(capsys, "export", "nope", "--db", samples_db, "-o", target)
    assert code == EXIT_NOT_FOUND and not target.exists()


def test_search_limit_beyond_64_bits_is_a_usage_error(samples_db, capsys):
    for limit in (str(2**64), "-1", "many"):
        with pytest.raises(SystemExit) as exc:
            main(["search", "TODO", "--db", str(samples_db), "--limit", limit])
        assert exc.value.code == EXIT_USAGE
        assert "--limit" in capsys.readouterr().err
    code, out, _ = run(capsys, "search", "TODO", "--db", samples_db, "--limit", 2**63 - 1)
    assert code == EXIT_OK and out


def test_a_nul_in_a_query_is_a_word_separator(samples_db):
    with GraphStore(samples_db, CC_ID, create=False) as store:
        expected = store.search("分页 page")
        assert expected
        assert store.search("分页\x00page") == expected
        assert store.search("\x00") == [] and store.search("\x00", raw=True) == []
        assert store.search("分页\x00page", raw=True) == store.search("分页 page", raw=True)


def test_a_failed_build_samples_leaves_nothing_behind(tmp_path, capsys):
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "good.jsonl").write_bytes((SAMPLES / f"{CC_ID[3:]}.jsonl").read_bytes())
    (samples / "bad.jsonl").write_text('{"type": "user", "message": \n', encoding="utf-8")
    target = tmp_path / "out" / "sample.db"
    code, _, err = run(capsys, "build-samples", "--db", target, "--samples", samples, "--no-scenarios")
    assert code == EXIT_INPUT and "sample import failed" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []


def test_the_read_only_connection_refuses_to_write(samples_db):
    from opctx.dag.store import StoreError, connect_readonly

    conn = connect_readonly(samples_db)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("DELETE FROM sessions")
        with GraphStore(conn, CC_ID, create=False) as store:
            assert store.count() == 22
    finally:
        conn.close()
    with pytest.raises(StoreError, match="no such database file"):
        connect_readonly(samples_db.with_name("missing.db"))
    connect(samples_db).close()


# -- export-frames: all six frames or none, and one line when the output cannot be written -------

FRAME_FILES = ("sessions", "nodes", "edges", "turns", "compactions", "recorded_aging")


def _frames_state(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _export(capsys, db: Path, out: Path) -> tuple[int, str, str]:
    return run(capsys, "export-frames", "--db", db, "--out", out, "--quiet", "--no-tokens")


def _one_error_line(err: str, path: Path) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("opctx: cannot write ") and str(path) in lines[0], err
    return lines[0]


def _no_bypass(argv: list[str], **kw) -> subprocess.CompletedProcess:
    """``opctx argv`` run without the capabilities that ignore file modes, or skip."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPCTX_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([*without_bypass_prefix(), sys.executable, "-m", "opctx.cli", *map(str, argv)],
                          capture_output=True, text=True, env=env, timeout=600, **kw)


def test_export_frames_to_a_read_only_folder_or_parent_is_one_line(samples_db, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    out = tmp_path / "frames"
    assert _export(capsys, samples_db, out)[0] == EXIT_OK
    before = _frames_state(out)
    out.chmod(0o555)
    parent = tmp_path / "locked"
    parent.mkdir(mode=0o555)
    parent.chmod(0o555)
    try:
        res = _no_bypass(["export-frames", "--db", samples_db, "--out", out, "--quiet", "--no-tokens"])
        assert res.returncode == EXIT_USAGE
        assert "Permission denied" in _one_error_line(res.stderr, out)
        res = _no_bypass(["export-frames", "--db", samples_db, "--out", parent / "frames", "--quiet"])
        assert res.returncode == EXIT_USAGE
        assert "Permission denied" in _one_error_line(res.stderr, parent / "frames")
    finally:
        out.chmod(0o755)
        parent.chmod(0o755)
    assert _frames_state(out) == before and list(parent.iterdir()) == []


def test_export_frames_where_a_frame_is_a_directory_changes_nothing(samples_db, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    out = tmp_path / "frames"
    assert _export(capsys, samples_db, out)[0] == EXIT_OK
    (out / "nodes.parquet").unlink()
    (out / "nodes.parquet").mkdir()
    before = _frames_state(out)
    code, _, err = _export(capsys, samples_db, out)
    assert code == EXIT_USAGE
    assert "is a directory" in _one_error_line(err, out / "nodes.parquet")
    assert _frames_state(out) == before and (out / "nodes.parquet").is_dir()


def test_an_interrupted_export_leaves_the_old_frames_and_no_partial_file(samples_db, tmp_path, capsys,
                                                                            monkeypatch):
    """Ctrl-C in the middle of the batches: the frames there before are all still there,
    unchanged (never some new and some old), with no temporary or ``.partial`` file; the
    leftovers of a killed export are cleared by the next one."""
    pytest.importorskip("pyarrow")
    from opctx.lab import frames

    out = tmp_path / "frames"
    assert _export(capsys, samples_db, out)[0] == EXIT_OK
    before = _frames_state(out)
    real, calls = frames._batch_frames, []

    def interrupted(db, ids, estimate_tokens):
        calls.append(ids)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(db, ids, estimate_tokens)

    monkeypatch.setattr(frames, "_batch_frames", interrupted)
    code, _, err = run(capsys, "export-frames", "--db", samples_db, "--out", out, "--quiet", "--batch", "2")
    assert code == 130 and _frames_state(out) == before
    monkeypatch.setattr(frames, "_batch_frames", real)
    (out / "nodes.parquet.partial").write_bytes(b"PAR1 cut short")  # an older version's leftover
    (out / ".turns.parquet.999-dead.tmp").write_bytes(b"PAR1 cut short")  # a killed export's
    assert _export(capsys, samples_db, out)[0] == EXIT_OK
    assert sorted(_frames_state(out)) == sorted(f"{name}.parquet" for name in FRAME_FILES)


@pytest.mark.slow
def test_export_frames_on_a_full_disk_is_one_line_and_changes_nothing(samples_db, tmp_path, capsys):
    """A small tmpfs, nearly full (as root, where one can be mounted); elsewhere a file
    size limit (RLIMIT_FSIZE) makes the writes fail the same way."""
    pytest.importorskip("pyarrow")
    import shutil

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = os.geteuid() == 0 and shutil.which("mount") and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode == 0
    try:
        out = disk / "frames"
        assert _export(capsys, samples_db, out)[0] == EXIT_OK
        before = _frames_state(out)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPCTX_")}
        env["PYTHONPATH"] = str(ROOT)
        argv = [sys.executable, "-m", "opctx.cli", "export-frames", "--db", str(samples_db), "--out", str(out),
                "--quiet", "--no-tokens"]
        if mounted:
            free = shutil.disk_usage(disk).free
            (disk / "filler").write_bytes(b"\0" * max(0, free - 40_000))
            res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
            said = "No space left on device"
        else:
            limit = r"""
import resource, signal, sys, runpy
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))
sys.argv = sys.argv[1:]
runpy.run_module("opctx.cli", run_name="__main__")
"""
            if not hasattr(__import__("signal"), "SIGXFSZ"):
                pytest.skip("no tmpfs and no RLIMIT_FSIZE here")
            res = subprocess.run([sys.executable, "-c", limit, *argv[2:]], capture_output=True, text=True,
                                 env=env, timeout=600)
            said = "File too large"
        assert res.returncode == EXIT_USAGE, res.stderr
        assert said in _one_error_line(res.stderr, out)
        assert _frames_state(out) == before  # no temporary file, no frame replaced
    finally:
        if mounted:
            subprocess.run(["umount", str(disk)], check=False)
