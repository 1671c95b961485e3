"""DataFrames over opctx databases: typed columns, projections, filters, several databases."""

from __future__ import annotations

import pandas as pd
import pytest

from opctx.context.engine import DefaultContextEngine
from opctx.dag.session_db import DagSessionDB
from opctx.lab import frames
from opctx.lab.scenarios import build_scenario_sessions, generate_session


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("frames") / "lab.db"
    build_scenario_sessions(path, n=2, n_turns=12)
    sdb = DagSessionDB(str(path))
    # one provider usage record and one real compaction, to see them in the frames
    first_llm = next(m for m in sdb.get_branch("scenario-0001") if m["role"] == "assistant")
    sdb.update_message("scenario-0001", first_llm["id"], usage={
        "input_tokens": 100, "output_tokens": 20, "cache_read_tokens": 1000, "cache_write_tokens": 50})
    engine = DefaultContextEngine(session_db=sdb, context_window=20_000, aging=False)
    result = engine.compact(None, "scenario-0002", None, user_initiated=True)
    assert result.ok, result.error
    sdb.close()
    return path


def test_sessions_df(db):
    df = frames.sessions_df(db, columns=[*frames.SESSION_COLUMNS[:-1]])
    default = frames.sessions_df(db)
    # the count of compactions is a default column (notebooks 02-05 filter on it); extra is not
    assert list(default["n_compactions"]) == [0, 1] and "extra" not in default.columns
    assert list(df["session_id"]) == ["scenario-0001", "scenario-0002"]
    assert isinstance(df["created_at"].dtype, pd.DatetimeTZDtype) and str(df["created_at"].dt.tz) == "UTC"
    assert df["format"].dtype == "category" and set(df["format"]) == {"scenario"}
    assert list(df["n_compactions"]) == [0, 1]
    assert (df["n_nodes"] == df["n_user"] + df["n_llm"] + df["n_code"]).all()
    extra = frames.sessions_df(db, columns=["session_id", "extra"], session_ids=["scenario-0001"])
    assert extra.loc[0, "extra"]["scenario"]["seed"] == 1


def test_nodes_df_types_kinds_and_projection(db):
    scenario = generate_session(1, n_turns=12)
    df = frames.nodes_df(db, session_ids=["scenario-0001"])
    assert len(df) == len(scenario.messages)
    assert df["role"].dtype == "category" and list(df["role"].cat.categories) == ["user", "llm", "code"]
    assert df["kind"].dtype == "category"
    roles = {"user": "user", "assistant": "assistant", "tool": "tool"}
    assert list(df["kind"].astype(str)) == [roles[m["role"]] for m in scenario.messages]
    assert list(df["n_tool_calls"]) == [len(m.get("tool_calls") or ()) for m in scenario.messages]
    assert isinstance(df["created_at"].dtype, pd.DatetimeTZDtype)
    assert df["usage_input_tokens"].dtype == "Int64" and df["usage_input_tokens"].notna().sum() == 1
    assert "data" not in df.columns and "text" not in df.columns  # lazy by default
    rich = frames.nodes_df(db, columns=["id", "text", "tokens", "data"], session_ids=["scenario-0001"])
    assert list(rich.columns) == ["id", "text", "tokens", "data"]
    assert rich.loc[0, "text"].startswith("You are working in a Python repository")
    assert rich["tokens"].dtype == "int64" and (rich["tokens"] > 0).all()
    assert isinstance(rich.loc[0, "data"], dict)
    summary = frames.nodes_df(db, columns=["id", "kind"], session_ids=["scenario-0002"])
    assert (summary["kind"] == "summary").sum() == 1
    with pytest.raises(ValueError, match="unknown node column"):
        frames.nodes_df(db, columns=["nope"])
    with pytest.raises(ValueError, match="unknown role"):
        frames.nodes_df(db, roles=["robot"])
    llm = frames.nodes_df(db, roles=["llm"], columns=["id", "role"])
    assert set(llm["role"]) == {"llm"}


def test_edges_df(db):
    edges = frames.edges_df(db, session_ids=["scenario-0001"])
    nodes = frames.nodes_df(db, session_ids=["scenario-0001"], columns=["id", "predecessor"])
    assert edges["kind"].dtype == "category"
    pred = edges[edges["kind"] == "predecessor"]
    assert len(pred) == nodes["predecessor"].notna().sum()
    assert set(zip(pred["source"], pred["target"], strict=True)) == {
        (i, p) for i, p in zip(nodes["id"], nodes["predecessor"], strict=True) if pd.notna(p)
    }
    only_reads = frames.edges_df(db, kinds=["reads"])
    assert set(only_reads["kind"].astype(str)) <= {"reads"}
    with pytest.raises(ValueError, match="unknown edge kind"):
        frames.edges_df(db, kinds=["parent"])


def test_turns_df(db):
    scenario = generate_session(1, n_turns=12)
    turns = frames.turns_df(db, session_ids=["scenario-0001"])
    assert list(turns["turn"]) == list(range(1, 13))
    user_idx = [i for i, m in enumerate(scenario.messages) if m["role"] == "user"]
    bounds = user_idx + [len(scenario.messages)]
    expected_msgs = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
    assert list(turns["messages"]) == expected_msgs
    assert turns["tool_calls"].sum() == sum(len(m.get("tool_calls") or ()) for m in scenario.messages)
    assert turns["tool_results"].sum() == sum(m["role"] == "tool" for m in scenario.messages)
    # provider usage: input + cache reads + cache writes, missing elsewhere (not 0)
    assert turns.loc[0, "provider_input_tokens_sum"] == 1150
    assert turns.loc[0, "cache_read_tokens"] == 1000
    assert turns["provider_input_tokens_sum"].isna().sum() == 11
    assert isinstance(turns["started_at"].dtype, pd.DatetimeTZDtype)
    # a compacted session: copies and the summary are not counted again
    t2 = frames.turns_df(db, session_ids=["scenario-0002"])
    s2 = generate_session(2, n_turns=12)
    assert t2["messages"].sum() == len(s2.messages)


def test_compactions_df(db):
    df = frames.compactions_df(db, with_text=True)
    assert len(df) == 1
    row = df.iloc[0]
    assert row["session_id"] == "scenario-0002" and not row["recorded"]
    assert row["reason"] == "manual" and row["folded"] > 0 and row["fell_back_to_structural"]
    assert row["summary_text"].startswith("[Previous conversation summary]")
    assert row["pre_tokens"] > row["tokens_after"]


def test_several_databases_get_a_db_column(db, tmp_path):
    other = tmp_path / "other.db"
    build_scenario_sessions(other, n=1, first_seed=5, n_turns=3)
    df = frames.sessions_df([db, other])
    assert df["db"].dtype == "category" and list(df["db"].cat.categories) == [str(db), str(other)]
    assert list(df["session_id"]) == ["scenario-0001", "scenario-0002", "scenario-0005"]
    nodes = frames.nodes_df([db, other], columns=["id"], session_ids=["scenario-0005"])
    assert set(nodes["db"].astype(str)) == {str(other)}
    with pytest.raises(FileNotFoundError):
        frames.sessions_df(tmp_path / "missing.db")
    with pytest.raises(ValueError, match="no database"):
        frames.sessions_df([])


def _clone_sessions(path, source: str, n: int) -> None:
    """Sessions ``s00001`` .. ``s{n:05d}``, copies of ``source`` (rows copied in SQL: seconds)."""
    import sqlite3

    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?)"
            " INSERT INTO sessions (id, title, created_at, updated_at, model, agent_id, source,"
            " extra_json, last_node_id, next_seq)"
            " SELECT printf('s%05d', i), title, created_at + i, updated_at + i, model, agent_id,"
            " source, extra_json, last_node_id, next_seq FROM sessions, k WHERE id = ?",
            (n, source),
        )
        conn.execute(
            "INSERT INTO nodes (id, session_id, type, predecessor, caller, created_at, seq, data_json)"
            " SELECT n.id, s.id, n.type, n.predecessor, n.caller, n.created_at, n.seq, n.data_json"
            " FROM nodes n, sessions s WHERE n.session_id = ? AND s.id GLOB 's[0-9]*'"
            " AND s.id != 's00000'",
            (source,),
        )
        conn.execute("DELETE FROM nodes WHERE session_id = ?", (source,))
        conn.execute("DELETE FROM sessions WHERE id = ?", (source,))
    conn.close()


def test_ten_thousand_sessions_stay_quick_typed_and_lazy(tmp_path):
    import time

    path = tmp_path / "many.db"
    sdb = DagSessionDB(str(path))
    messages = generate_session(1, n_turns=2).messages
    sdb.create_session(session_id="s00000", model="claude-sonnet-4-5", source="import:claude_code")
    sdb.append_messages("s00000", messages)
    engine = DefaultContextEngine(session_db=sdb, context_window=20_000, aging=False)
    assert engine.compact(None, "s00000", None, user_initiated=True).ok  # one compaction
    sdb.create_session(session_id="template", model="claude-sonnet-4-5", source="import:claude_code")
    sdb.append_messages("template", [dict(m, id=f"t{i}") for i, m in enumerate(messages[:6])])
    sdb.close()
    _clone_sessions(path, "template", 9_999)

    started = time.perf_counter()
    df = frames.sessions_df(path)
    elapsed = time.perf_counter() - started
    assert len(df) == 10_000
    print(f"sessions_df over 10,000 sessions: {elapsed:.2f} s")  # timed by benchmarks/replay.py
    assert list(df["n_compactions"].value_counts().sort_index().items()) == [(0, 9_999), (1, 1)]
    assert (df["n_nodes"].iloc[1:] == 6).all()
    assert isinstance(df["created_at"].dtype, pd.DatetimeTZDtype)
    assert isinstance(df["last_at"].dtype, pd.DatetimeTZDtype)
    assert df["format"].dtype == "category" and list(df["format"].cat.categories) == ["claude_code"]
    assert df["n_nodes"].dtype == "int64"

    # columns= computes only what is asked for; session_ids= filters in SQL
    narrow = frames.sessions_df(path, columns=["session_id", "n_nodes"])
    assert list(narrow.columns) == ["session_id", "n_nodes"]
    some = ["s00000"] + [f"s{i:05d}" for i in range(1_000, 10_000, 1_000)]
    nodes = frames.nodes_df(path, columns=["session_id", "kind", "text"], session_ids=some)
    assert set(nodes["session_id"]) == set(some) and nodes["kind"].dtype == "category"
    assert (nodes["kind"] == "summary").sum() == 1


# -- Parquet -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_db(db, tmp_path_factory):
    """The scenario sessions plus every sample transcript (all formats, recorded compactions)."""
    import shutil
    from pathlib import Path

    from opctx.importers import import_paths

    path = tmp_path_factory.mktemp("parquet") / "mixed.db"
    shutil.copy(db, path)
    for suffix in ("-wal", "-shm"):
        if Path(str(db) + suffix).exists():
            shutil.copy(str(db) + suffix, str(path) + suffix)
    report = import_paths([Path(__file__).resolve().parents[2] / "data" / "samples"], path)
    assert report.ok
    return path


def _comparable(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    out = df.copy()
    for col in out.columns:
        if isinstance(out[col].dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].astype(object).where(out[col].notna(), None)
    return out.sort_values(keys).reset_index(drop=True)


def test_write_parquet_streams_batches_and_reads_back_as_the_frames(mixed_db, tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    seen_batches = []
    real_nodes_df = frames.nodes_df

    def recording_nodes_df(db, **kw):
        seen_batches.append(len(kw["session_ids"]))
        return real_nodes_df(db, **kw)

    monkeypatch.setattr(frames, "nodes_df", recording_nodes_df)
    written = frames.write_parquet(mixed_db, tmp_path / "out", batch_sessions=4)
    monkeypatch.setattr(frames, "nodes_df", real_nodes_df)
    n_sessions = len(frames.sessions_df(mixed_db))
    # one empty call for the schema, then batches of at most 4 sessions: never the whole corpus
    assert seen_batches[0] == 0 and max(seen_batches) == 4 and sum(seen_batches) == n_sessions
    expected = {
        "sessions": (frames.sessions_df(mixed_db), ["session_id"]),
        "nodes": (frames.nodes_df(mixed_db, columns=[*frames._NODE_ORDER, "tokens"]), ["session_id", "seq"]),
        "edges": (frames.edges_df(mixed_db), ["session_id", "source", "kind", "target"]),
        "turns": (frames.turns_df(mixed_db), ["session_id", "turn"]),
        "compactions": (frames.compactions_df(mixed_db), ["session_id", "seq"]),
    }
    assert list(written) == list(frames.FRAMES)
    for name, (frame, keys) in expected.items():
        path, rows = written[name]
        assert path == tmp_path / "out" / f"{name}.parquet" and rows == len(frame) > 0
        back = pd.read_parquet(path)
        assert list(back.columns) == list(frame.columns)
        pd.testing.assert_frame_equal(_comparable(back, keys), _comparable(frame, keys), check_dtype=False)
        for col in frame.columns:  # the dtypes come back as the frame has them
            kinds = [isinstance(f[col].dtype, pd.CategoricalDtype) for f in (frame, back)]
            assert kinds[0] == kinds[1], (name, col)
            assert str(frame[col].dtype) == str(back[col].dtype) or kinds[0] or \
                pd.api.types.is_string_dtype(frame[col]) and pd.api.types.is_string_dtype(back[col]), (name, col)
    assert not list((tmp_path / "out").glob("*.partial"))


def test_write_parquet_is_readable_by_duckdb(mixed_db, tmp_path):
    pytest.importorskip("pyarrow")
    duckdb = pytest.importorskip("duckdb")
    frames.write_parquet(mixed_db, tmp_path, batch_sessions=3, estimate_tokens=False)
    nodes = tmp_path / "nodes.parquet"
    [(count,)] = duckdb.sql(f"SELECT count(*) FROM '{nodes}'").fetchall()
    assert count == len(frames.nodes_df(mixed_db))
    kinds = dict(duckdb.sql(f"SELECT kind, count(*) FROM '{nodes}' GROUP BY 1").fetchall())
    assert kinds["summary"] >= 1 and "tokens" not in pd.read_parquet(nodes).columns


def test_a_failed_write_parquet_leaves_no_file(mixed_db, tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    real = frames._batch_frames
    calls = []

    def failing(db, ids, estimate_tokens):
        calls.append(len(ids))
        if len(calls) == 3:
            raise RuntimeError("disk on fire")
        return real(db, ids, estimate_tokens)

    monkeypatch.setattr(frames, "_batch_frames", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):
        frames.write_parquet(mixed_db, tmp_path, batch_sessions=2)
    assert list(tmp_path.iterdir()) == []


def test_export_frames_command(mixed_db, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    from opctx.cli import EXIT_OK, EXIT_USAGE, main

    assert main(["export-frames", "--db", str(mixed_db), "--out", str(tmp_path / "f"), "--batch", "5",
                 "--quiet"]) == EXIT_OK
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == list(frames.FRAMES)
    assert len(pd.read_parquet(tmp_path / "f" / "sessions.parquet")) == len(frames.sessions_df(mixed_db))
    (tmp_path / "file").write_text("x")
    assert main(["export-frames", "--db", str(mixed_db), "--out", str(tmp_path / "file")]) == EXIT_USAGE
    assert "not a folder" in capsys.readouterr().err


def test_display_only_lines_cost_no_tokens(tmp_path):
    """A line the client showed but never sent keeps its text in the frame and costs 0 tokens,
    as in every request and replay figure."""
    from pathlib import Path

    from opctx.importers import import_paths

    sample = Path(__file__).resolve().parents[2] / "data" / "samples" / "claude_code_hook_chat.json"
    db = tmp_path / "hook.db"
    import_paths([sample], db)
    nodes = frames.nodes_df(db, columns=["id", "text", "tokens", "data"])
    shown = nodes[[bool((d.get("metadata") or {}).get("display_only")) for d in nodes["data"]]]
    assert len(shown) and (shown["tokens"] == 0).all() and shown["text"].str.len().gt(0).all()
    assert nodes.loc[~nodes.index.isin(shown.index), "tokens"].gt(0).any()
