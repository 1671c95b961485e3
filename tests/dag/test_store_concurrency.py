"""Two processes appending to one session, and a writer killed mid-transaction.

Both run real OS processes (``subprocess``) against one database file: the
guarantees under test (seq allocated inside ``BEGIN IMMEDIATE``, batches atomic
under WAL) are about processes, not threads.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opctx.dag.store import GraphStore, connect

ROOT = Path(__file__).resolve().parents[2]

APPENDER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from opctx.dag.nodes import Call
from opctx.dag.store import GraphStore

db, session, tag, total, batch = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
store = GraphStore(db, session)
for start in range(0, total, batch):
    store.append_many(
        Call(id=f"{tag}-{i}", role="user", output=f"tok{tag}x{i} shared words for node {i} of {tag}")
        for i in range(start, min(total, start + batch))
    )
store.close()
"""

CRASHER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from opctx.dag.nodes import Call
from opctx.dag.store import GraphStore

db, batch = sys.argv[2], int(sys.argv[3])
store = GraphStore(db, "crash")
conn = store.connection
real_executemany = conn.executemany
batch_no = 0

def announcing_executemany(sql, rows):
    # Say so just before the FTS insert: the transaction is open and holds the
    # batch's node rows, the slow part (tokenising) is about to start.
    if "nodes_fts" in sql:
        print(f"fts {batch_no}", flush=True)
    return real_executemany(sql, rows)

conn.executemany = announcing_executemany
filler = " ".join(f"word{k} lorem ipsum dolor" for k in range(160))
while True:
    store.append_many(
        Call(id=f"b{batch_no}-{i}", role="code", name="bash", output=f"batch{batch_no} item{i} {filler}")
        for i in range(batch)
    )
    batch_no += 1
"""


IMPORTER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from opctx.dag.nodes import Call
from opctx.dag.session import DagSessionManager

db = sys.argv[2]
mgr = DagSessionManager(db)
mgr.create(session_id="done", title="complete", nodes=[Call(id="d0", role="user", output="whole")])
with mgr.transaction():
    mgr.create(session_id="half", title="import", extra_meta={"format": "x"},
               nodes=[Call(id=f"h{i}", role="user", output=f"node {i}") for i in range(2000)])
    mgr.update_extra_meta("half", progress="nodes written")
    print("inside", flush=True)
    time.sleep(60)  # killed here, before the commit
"""


def _spawn(code: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, str(ROOT), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _reap_killed(proc: subprocess.Popen) -> None:
    """Wait for a process this test SIGKILLed (or that died) and close its pipes."""
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()


@pytest.mark.slow
def test_two_processes_appending_to_one_session_lose_nothing(db_path):
    per_process, batch = 5000, 250
    procs = [_spawn(APPENDER, db_path, "shared", tag, per_process, batch) for tag in ("a", "b")]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err

    store = GraphStore(db_path, "shared", create=False)
    rows = store.connection.execute(
        "SELECT id, seq FROM nodes WHERE session_id = 'shared' ORDER BY seq"
    ).fetchall()
    assert len(rows) == 2 * per_process
    seqs = [s for _, s in rows]
    assert seqs == list(range(2 * per_process)), "seq unique, strictly increasing, no gaps"
    ids = [i for i, _ in rows]
    assert set(ids) == {f"{t}-{i}" for t in "ab" for i in range(per_process)}
    for tag in "ab":  # each writer's nodes keep their own order
        mine = [int(i.split("-")[1]) for i in ids if i.startswith(tag + "-")]
        assert mine == list(range(per_process))
    loaded = store.load()
    assert len(loaded) == 2 * per_process and [n.seq for n in loaded] == seqs

    # FTS: every node's unique token is in the index exactly once (checked in bulk
    # through the fts5vocab table), and a sample is found through search().
    conn = store.connection
    conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, 'nodes_fts', 'row')")
    terms = dict(conn.execute("SELECT term, doc FROM temp.vocab WHERE term GLOB 'tok[ab]x*'"))
    expected = {f"tok{t}x{i}" for t in "ab" for i in range(per_process)}
    assert set(terms) == expected and set(terms.values()) == {1}
    rng = random.Random(5)
    for token in rng.sample(sorted(expected), 25):
        hits = store.search(token)
        assert [h.node_id for h in hits] == [token[3] + "-" + token.split("x", 1)[1]]
    assert len(store.search("shared words", limit=50)) == 50
    store.close()


@pytest.mark.slow
def test_a_writer_killed_mid_append_many_leaves_whole_batches(db_path):
    batch = 3000
    proc = _spawn(CRASHER, db_path, batch)
    try:
        deadline = time.monotonic() + 120
        while True:
            line = proc.stdout.readline()
            assert line, f"writer exited early: {proc.stderr.read()}"
            if line.strip() == "fts 2":
                break
            assert time.monotonic() < deadline, "writer too slow"
        time.sleep(0.02)  # inside batch 2's transaction, FTS insert under way
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        _reap_killed(proc)
    assert proc.returncode == -signal.SIGKILL

    conn = connect(db_path)  # opens fine, recovers the WAL
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.execute("INSERT INTO nodes_fts(nodes_fts) VALUES ('integrity-check')")  # raises if not
    rows = conn.execute("SELECT id FROM nodes WHERE session_id = 'crash'").fetchall()
    batches: dict[str, int] = {}
    for (nid,) in rows:
        b = nid.split("-")[0]
        batches[b] = batches.get(b, 0) + 1
    assert batches == {"b0": batch, "b1": batch}, "only whole, committed batches; batch 2 rolled back"
    fts_rows = conn.execute("SELECT COUNT(*) FROM nodes_fts").fetchone()[0]
    assert fts_rows == len(rows)
    seqs = [r[0] for r in conn.execute("SELECT seq FROM nodes ORDER BY seq")]
    assert seqs == list(range(2 * batch))
    conn.close()
    # and the database takes new writes where it left off
    store = GraphStore(db_path, "crash", create=False)
    assert store.append_many([]) == []
    from opctx.dag.nodes import UserMessage

    assert store.append(UserMessage("after the crash")).seq == 2 * batch
    assert [h.node_id for h in store.search("after the crash")][:1]
    store.close()
    with pytest.raises(sqlite3.Error):
        sqlite3.connect(db_path).execute("SELECT * FROM no_such_table")


def test_an_importer_killed_inside_a_transaction_leaves_no_session(db_path):
    proc = _spawn(IMPORTER, db_path)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "inside", f"importer failed: {proc.stderr.read()}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        _reap_killed(proc)
    assert proc.returncode == -signal.SIGKILL
    conn = connect(db_path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [r[0] for r in conn.execute("SELECT id FROM sessions")] == ["done"]
    assert conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0] == 1
    assert conn.execute("SELECT COUNT(*) FROM nodes_fts").fetchone()[0] == 1
    conn.close()


def test_switching_a_new_database_to_wal_waits_out_a_lock():
    # a second process opening the same new file can hold the lock the switch needs; SQLite
    # says "locked" without calling its busy handler, so connect retries
    from opctx.dag.store import _switch_to_wal

    class Busy:
        def __init__(self, failures: int):
            self.failures = failures

        def execute(self, sql):
            if self.failures:
                self.failures -= 1
                raise sqlite3.OperationalError("database is locked")
            return self

        def fetchone(self):
            return ("wal",)

    assert _switch_to_wal(Busy(3)) == "wal"

    class Broken(Busy):
        def execute(self, sql):
            raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _switch_to_wal(Broken(0))
