"""Recorded aging in the frames: ``recorded_aging_df``, the nodes' ``cleared_by``, Parquet export."""

from __future__ import annotations

import pandas as pd
from _microcompact_sample import BOUNDARY_UUID, tool_id, write_sample

from opctx.importers import import_path
from opctx.lab import frames, recorded_aging_df


def _db(tmp_path):
    db = tmp_path / "aging.db"
    import_path(write_sample(tmp_path), str(db))
    return db


def test_recorded_aging_rows(tmp_path):
    db = _db(tmp_path)
    df = recorded_aging_df(db, with_ids=True)
    assert len(df) == 1
    row = df.iloc[0]
    assert row["uuid"] == BOUNDARY_UUID and row["trigger"] == "auto"
    assert row["pre_tokens"] == 60_000 and row["tokens_saved"] == 30_000
    assert row["cleared"] == 3 and row["missing"] == 0
    assert row["tool_call_ids"] == [tool_id(0), tool_id(2), tool_id(3)]
    # 7 tool-calling requests came before it: it preceded the 8th (index 7)
    assert row["request_index"] == 7
    assert str(df["created_at"].dt.tz) == "UTC"
    assert list(recorded_aging_df(db).columns) == list(
        frames.RECORDED_AGING_COLUMNS[:-1])


def test_nodes_have_cleared_by(tmp_path):
    nodes = frames.nodes_df(_db(tmp_path))
    cleared = nodes[nodes["cleared_by"].notna()]
    assert set(cleared["tool_call_id"]) == {tool_id(0), tool_id(2), tool_id(3)}
    assert set(cleared["cleared_by"]) == {BOUNDARY_UUID}
    assert set(cleared["kind"]) == {"tool"}


def test_parquet_export_keeps_cleared_by(tmp_path):
    db = _db(tmp_path)
    written = frames.write_parquet(db, tmp_path / "out")
    back = pd.read_parquet(written["nodes"][0])
    assert set(back.loc[back["cleared_by"].notna(), "tool_call_id"]) == {tool_id(0), tool_id(2), tool_id(3)}
    # the events themselves are a frame of the export too, read back as recorded_aging_df gives them
    events = pd.read_parquet(written["recorded_aging"][0])
    expected = recorded_aging_df(db)
    assert written["recorded_aging"][1] == len(expected) == 1
    pd.testing.assert_frame_equal(events.astype({"trigger": "category"}), expected, check_dtype=False)


def test_empty_database_has_the_columns(tmp_path):
    from opctx.importers import import_path as imp

    db = tmp_path / "empty.db"
    path = write_sample(tmp_path, n_reads=2, n_cleared=1)
    imp(path, str(db))
    df = recorded_aging_df(db, session_ids=["no-such-session"])
    assert df.empty and "request_index" in df.columns
