"""open_database: the one path of a notebook may be a database, a transcript or a folder."""

from __future__ import annotations

import json
import shutil
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
