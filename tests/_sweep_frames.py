"""Comparing a sweep's Parquet output with the frame ``sweep`` returns (shared by the sweep tests).

The file holds the rows in finishing order, its text columns are plain strings and a
missing ``error`` reads back as NaN; these put it in the frame's order and types.
"""

from __future__ import annotations

import pandas as pd


def sorted_like(back: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """``back`` (read from Parquet) in ``frame``'s row order, columns and categories."""
    back = back.sort_values(["session_index", "config_index"]).reset_index(drop=True)
    back = back[list(frame.columns)]
    for col in ("session", "config", "preset"):
        back[col] = back[col].astype("category")
    return none_for_missing_errors(back)


def none_for_missing_errors(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every missing ``error`` as ``None`` (the frame's way)."""
    df = df.copy()
    df["error"] = df["error"].astype(object).where(df["error"].notna(), None)
    return df
