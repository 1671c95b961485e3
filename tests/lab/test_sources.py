"""open_database: the one path of a notebook may be a database, a transcript or a folder."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from pathlib import Path

import pytest

from opctx.lab.frames import sessions_df
from opctx.lab.sources import open_database

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def test_a_database_is_returned_as_is(tmp_path):
    from opctx.dag.session import DagSessionManager

    db = tmp_path / "mine.db"
    DagSessionManager(db).close()
    assert open_database(db) == db.resolve()
    assert not list(tmp_path.glob("cache*"))


def test_a_folder_is_imported_once_and_cached(tmp_path):
    folder = tmp_path / "transcripts"
    shutil.copytree(SAMPLES, folder)
    cache = tmp_path / "cache"
    db = open_database(folder, cache=cache)
    assert db.parent == cache and db.is_file()
    sessions = sessions_df(db)
    assert len(sessions) >= 10  # one per sample format at least
    mtime = db.stat().st_mtime_ns
    assert open_database(folder, cache=cache) == db and db.stat().st_mtime_ns == mtime
    assert [p.name for p in cache.iterdir()] == [db.name]  # no WAL or partial files left


def test_a_changed_transcript_is_imported_afresh(tmp_path):
    src = tmp_path / "chat.json"
    messages = [{"role": "user", "content": "first question"}, {"role": "assistant", "content": "first answer"}]
    src.write_text(json.dumps(messages))
    first = open_database(src, cache=tmp_path / "cache")
    messages += [{"role": "user", "content": "second"}, {"role": "assistant", "content": "reply"}]
    src.write_text(json.dumps(messages))
    second = open_database(src, cache=tmp_path / "cache")
    assert second != first
    assert int(sessions_df(second).n_nodes.iloc[0]) == 4


def test_bad_lines_are_skipped_and_logged_with_file_and_line(tmp_path, caplog):
    src = tmp_path / "chat.jsonl"
    good = json.dumps({"role": "user", "content": "hello"})
    src.write_text(good + "\n{not json\n" + json.dumps({"role": "assistant", "content": "hi"}) + "\n")
    with caplog.at_level("WARNING", logger="opctx.lab.sources"):
        db = open_database(src, cache=tmp_path / "cache")
    assert db.is_file()
    assert any("chat.jsonl" in r.getMessage() and "2" in r.getMessage() for r in caplog.records)


def test_nothing_to_import_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no transcript files"):
        open_database(tmp_path / "empty", cache=tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="no such file"):
        open_database(tmp_path / "missing", cache=tmp_path / "cache")


def test_default_database_follows_opctx_db(tmp_path, monkeypatch):
    from opctx.lab.sources import default_database

    db = tmp_path / "mine.db"
    from opctx.dag.store import connect

    connect(str(db)).close()
    monkeypatch.setenv("OPCTX_DB", str(db))
    assert default_database() == db.resolve()


def test_default_database_falls_back_to_the_samples(tmp_path, monkeypatch):
    from opctx.lab import sources

    monkeypatch.delenv("OPCTX_DB", raising=False)
    (tmp_path / "data").mkdir()
    sample = tmp_path / "data" / "sample.db"
    sample.write_bytes(b"SQLite format 3\x00")
    nested = tmp_path / "notebooks"
    nested.mkdir()
    monkeypatch.chdir(nested)
    assert sources.default_database() == sample


def test_default_database_says_what_to_do_when_nothing_is_there(tmp_path, monkeypatch):
    from opctx.lab import sources

    monkeypatch.delenv("OPCTX_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sources, "sample_database", lambda start=None: None)
    with pytest.raises(FileNotFoundError, match="OPCTX_DB"):
        sources.default_database()


# -- several processes at once: one builder, the others wait, only complete caches -------------

ROOT = Path(__file__).resolve().parents[2]

OPENER = r"""
import json, sqlite3, sys
sys.path.insert(0, sys.argv[1])
from opctx.lab.sources import open_database

source, wanted = sys.argv[2], json.loads(sys.argv[3])
for line in sys.stdin:
    cache = line.strip()
    try:
        db = open_database(source, cache=cache)
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        sessions = sorted(r[0] for r in conn.execute("SELECT id FROM sessions"))
        nodes = conn.execute("SELECT count(*) FROM nodes").fetchone()[0]
        conn.close()
        ok = sessions == wanted["sessions"] and nodes == wanted["nodes"]
        print("ok" if ok else f"incomplete {db}: {len(sessions)} sessions, {nodes} nodes", flush=True)
    except BaseException as exc:
        print(f"error {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
"""


def _contents(db: Path) -> dict:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {"sessions": sorted(r[0] for r in conn.execute("SELECT id FROM sessions")),
                "nodes": conn.execute("SELECT count(*) FROM nodes").fetchone()[0]}
    finally:
        conn.close()


@pytest.mark.slow
def test_two_to_four_processes_opening_one_folder_build_one_complete_cache(tmp_path):
    """100 rounds, each with a fresh cache folder and 2, 3 or 4 processes opening the same
    transcripts at the same moment: every process gets the complete database, and the
    folder ends with that one file (no scratch file, no lock) every time."""
    import subprocess
    import sys

    folder = tmp_path / "transcripts"
    folder.mkdir()
    for name in ("openai_chat.json", "anthropic_messages.json", "hermes_sessions.jsonl"):
        shutil.copy(SAMPLES / name, folder / name)
    wanted = _contents(open_database(folder, cache=tmp_path / "reference"))
    assert len(wanted["sessions"]) == 4 and wanted["nodes"] > 10
    workers = [subprocess.Popen([sys.executable, "-c", OPENER, str(ROOT), str(folder), json.dumps(wanted)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(4)]
    failures: list[str] = []
    try:
        for round_no in range(100):
            cache = tmp_path / f"cache-{round_no:03d}"
            taking_part = workers[: 2 + round_no % 3]
            for w in taking_part:  # all at once: each waits only for its line
                w.stdin.write(f"{cache}\n")
            for w in taking_part:
                w.stdin.flush()
            answers = [w.stdout.readline().strip() for w in taking_part]
            failures += [f"round {round_no}: {a}" for a in answers if a != "ok"]
            left = sorted(p.name for p in cache.iterdir())
            if len(left) != 1 or not left[0].endswith(".db") or ".importing" in left[0]:
                failures.append(f"round {round_no}: cache folder holds {left}")
            else:
                assert _contents(cache / left[0]) == wanted
    finally:
        for w in workers:
            w.stdin.close()
        errors = [w.stderr.read() for w in workers]
        for w in workers:
            w.wait(timeout=60)
    assert failures == [], failures[:10]
    assert not any("Traceback" in e for e in errors), errors


def test_a_waiting_process_says_whom_it_waits_for(tmp_path, caplog):
    import threading

    from opctx.lab import sources

    src = tmp_path / "chat.json"
    shutil.copy(SAMPLES / "openai_chat.json", src)
    cache = tmp_path / "cache"
    key = sources._fingerprint(src.resolve(), sources._files_read(src.resolve(), []))
    cache.mkdir()
    warned = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record):
            if "waiting for process" in record.getMessage():
                warned.set()

    handler = Seen()
    logging.getLogger("opctx.lab.sources").addHandler(handler)
    result: list = []
    try:
        with sources._BuildLock(cache / f"chat.json-{key}.db.lock", str(src)):
            opener = threading.Thread(target=lambda: result.append(open_database(src, cache=cache)))
            opener.start()
            assert warned.wait(60), "the waiting process said nothing"
        opener.join(60)
    finally:
        logging.getLogger("opctx.lab.sources").removeHandler(handler)
    assert result and result[0].is_file()
    assert any(f"waiting for process {os.getpid()}" in r.getMessage() for r in caplog.records)


def test_a_killed_builder_leaves_nothing_in_the_way(tmp_path):
    """A builder SIGKILLed holding the lock, its scratch file half written: the next
    process takes the lock over, clears the scratch file and builds the cache."""
    import signal
    import subprocess
    import sys

    if not hasattr(signal, "SIGKILL"):
        pytest.skip("no SIGKILL here")
    src = tmp_path / "chat.json"
    shutil.copy(SAMPLES / "openai_chat.json", src)
    cache = tmp_path / "cache"
    holder = subprocess.Popen([sys.executable, "-c", r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from opctx.lab import sources
src, cache = Path(sys.argv[2]).resolve(), Path(sys.argv[3])
cache.mkdir()
key = sources._fingerprint(src, sources._files_read(src, []))
lock = sources._BuildLock(cache / f"chat.json-{key}.db.lock", str(src)).__enter__()
(cache / f"chat.json-{key}.999-dead.importing.db").write_bytes(b"half an import")
print("holding", flush=True)
time.sleep(600)
""", str(ROOT), str(src), str(cache)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "holding"
    holder.kill()
    holder.wait(30)
    assert any(p.name.endswith(".lock") for p in cache.iterdir())
    db = open_database(src, cache=cache)
    assert [p.name for p in cache.iterdir()] == [db.name]
    assert _contents(db)["nodes"] > 0


def test_an_incomplete_import_is_never_installed(tmp_path, monkeypatch):
    """An import whose database lost a session on the way (another process, a bug) is
    refused by the completeness check: no cache, no scratch file left."""
    import sqlite3

    import opctx.importers as importers
    from opctx.lab.sources import CacheBuildError

    real = importers.import_paths

    def losing_a_session(paths, db, **kw):
        report = real(paths, db, **kw)
        conn = sqlite3.connect(db)
        conn.execute("DELETE FROM nodes WHERE session_id = (SELECT min(id) FROM sessions)")
        conn.execute("DELETE FROM sessions WHERE id = (SELECT min(id) FROM sessions)")
        conn.commit()
        conn.close()
        return report

    monkeypatch.setattr(importers, "import_paths", losing_a_session)
    src = tmp_path / "hermes.jsonl"
    shutil.copy(SAMPLES / "hermes_sessions.jsonl", src)
    cache = tmp_path / "cache"
    with pytest.raises(CacheBuildError, match="incomplete"):
        open_database(src, cache=cache)
    assert list(cache.iterdir()) == []


# -- who may read the cache, and where it lives --------------------------------------------------


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_transcripts_give_a_private_cache(tmp_path, umask_022):
    """Sources at 0600 in a 0700 folder: the cache folder is 0700 and the database 0600."""
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    folder.chmod(0o700)
    for name in ("openai_chat.json", "hermes_sessions.jsonl"):
        shutil.copy(SAMPLES / name, folder / name)
        (folder / name).chmod(0o600)
    cache = tmp_path / "made" / "cache"
    db = open_database(folder, cache=cache)
    assert _mode(db) == 0o600
    assert _mode(cache) == 0o700 and _mode(cache.parent) == 0o700


def test_a_cache_is_no_more_readable_than_its_least_readable_source(umask_022):
    """Shared sources (0644, every folder on the way open) give a 0644 cache; one file
    at 0600 among them, or a folder closed to others, make it 0600."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="opctx-modes-"))
    try:
        top.chmod(0o755)
        folder = top / "shared"
        folder.mkdir(mode=0o755)
        for name in ("openai_chat.json", "anthropic_messages.json"):
            shutil.copy(SAMPLES / name, folder / name)
            (folder / name).chmod(0o644)
        opened_to_all = all(p.stat().st_mode & 0o001 for p in top.parents)
        db = open_database(folder, cache=top / "cache1")
        if opened_to_all:
            assert _mode(db) & 0o004
        (folder / "anthropic_messages.json").chmod(0o600)
        db = open_database(folder, cache=top / "cache2")
        assert _mode(db) == 0o600
        (folder / "anthropic_messages.json").chmod(0o644)
        folder.chmod(0o700)
        db = open_database(folder, cache=top / "cache3")
        assert _mode(db) == 0o600
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_cache_lives_in_the_platform_per_user_cache_folder(tmp_path, monkeypatch, umask_022):
    import sys

    from opctx.lab.sources import cache_dir

    if sys.platform in ("win32", "darwin"):
        pytest.skip("the XDG rule is the Linux and Unix one")
    monkeypatch.delenv("OPCTX_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "opctx"
    src = tmp_path / "chat.json"
    shutil.copy(SAMPLES / "openai_chat.json", src)
    db = open_database(src)
    assert db.parent == tmp_path / "xdg" / "opctx" and _mode(db.parent) == 0o700
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # invalid by the XDG rules: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "opctx"
    monkeypatch.setenv("OPCTX_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_a_changed_side_file_gives_a_fresh_cache(tmp_path):
    """A subagent transcript (or a spilled tool result) is imported with its session: when
    it grows, the cache is rebuilt, though the session file itself did not change."""
    folder = tmp_path / "project"
    folder.mkdir()
    sid = "7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f"
    shutil.copy(SAMPLES / f"{sid}.jsonl", folder / f"{sid}.jsonl")
    shutil.copytree(SAMPLES / sid, folder / sid)
    cache = tmp_path / "cache"
    first = open_database(folder, cache=cache)
    agent = next((folder / sid / "subagents").glob("agent-*.jsonl"))
    last = json.loads(agent.read_text().splitlines()[-1])
    extra = {**last, "uuid": "7f3c2a10-5b8e-4d2a-9c61-0a1b2c3dffff", "parentUuid": last["uuid"],
             "type": "user", "message": {"role": "user", "content": "one more question, appended later"}}
    with agent.open("a") as fh:
        fh.write(json.dumps(extra) + "\n")
    second = open_database(folder, cache=cache)
    assert second != first
    from opctx.lab.frames import nodes_df

    assert "one more question, appended later" in set(nodes_df(second, columns=["text"])["text"])
    spilled = next((folder / sid / "tool-results").glob("*.txt"))
    spilled.write_text(spilled.read_text() + "\nmore output\n")
    assert open_database(folder, cache=cache) not in (first, second)


# -- make lab DATA=<path> -------------------------------------------------------------------------


def test_make_lab_with_a_missing_data_path_says_one_line(tmp_path):
    """``make lab DATA=<missing>`` stops before JupyterLab with one line, no traceback: it
    ran a ``python -c`` whose error was a raw traceback. The lab's prerequisites (the
    virtual environment, the sample database, the notebook copies) are taken as made."""
    import subprocess
    import sys

    missing = tmp_path / "no" / "such" / "folder"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OPCTX_DB", None)
    res = subprocess.run([sys.executable, "-m", "opctx.lab.sources", str(missing)],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.strip() == f"opctx: {missing}: no such file or folder"
    good = subprocess.run([sys.executable, "-m", "opctx.lab.sources", str(SAMPLES / "openai_chat.json")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**env, "OPCTX_CACHE_DIR": str(tmp_path / "cache")})
    assert good.returncode == 0 and good.stdout.startswith(f"data: {tmp_path / 'cache'}")
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make here")
    res = subprocess.run([make, "-s", "-o", "install", "-o", "data", "-o", "lab-files", "-o",
                          ".venv/.installed-stamp", "lab", f"DATA={missing}", f"BIN={Path(sys.executable).parent}"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr and "jupyter" not in (res.stdout + res.stderr).lower()
    assert [line for line in res.stderr.splitlines() if line.startswith("opctx:")] == [
        f"opctx: {missing}: no such file or folder"]
