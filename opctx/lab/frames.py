"""pandas DataFrames over opctx databases: sessions, nodes, edges, turns, compactions, recorded aging.

Every function takes one database path or a list of them. With a list, the
frames of each database are concatenated and a ``db`` column (the path as
given, categorical) says where each row comes from; with one path there is no
``db`` column. ``session_ids=`` restricts every query to those sessions (in
SQL, so a 10,000-session file is never read whole), and ``columns=`` picks the
columns to compute.

Laziness
--------
Columns are SQL projections over the documented schema (docs/ARCHITECTURE.md:
``sessions``, ``nodes(id, session_id, type, predecessor, caller, created_at,
seq, data_json)``). Values inside ``data_json`` come from *one* multi-path
``json_extract`` call per row (SQLite 3.40 has no JSON parse cache, so one call
per column would parse each row as many times as there are columns); ``kind``
and ``n_tool_calls`` use substring tests on the stored JSON text, which is
compact JSON where a quote inside a string is always escaped, so a key such as
``"type":"tool_result"`` cannot be faked by message text. Python never parses a
node's full JSON unless a column needs it: ``data`` (the whole ``{name, input,
output, reads, metadata}`` dict), ``text`` (``opctx.dag.messages.message_text``)
and ``tokens`` (what the message costs in a request: the estimate of that text, 0 for
a display-only line, which is never sent) are computed only when asked for.
Databases are opened read-only (``mode=ro`` URI), so a frame never migrates,
locks or creates a file.

Types
-----
Datetimes are tz-aware UTC (``datetime64[ns, UTC]``), from the stored epoch
seconds. ``role`` (``user|llm|code``), ``kind`` (``user|assistant|system|tool|
tool_result|summary``), ``format`` and edge ``kind`` are categoricals with fixed
categories where the set is closed. Counts are ``int64``; provider token figures
that may be missing are nullable ``Int64``.

``kind`` of a node, in order: ``summary`` (``metadata.compaction`` present),
``tool`` (``role=code``), ``system`` (llm with ``metadata.role="system"``),
``assistant`` (other llm), ``tool_result`` (a user node with empty text whose
content blocks hold a ``tool_result``: the Anthropic-style wrapper), ``user``.

Frames
------
``sessions_df``  one row per session (+ node counts, format, first/last activity).
``nodes_df``     one row per node.
``edges_df``     one row per edge: ``source`` is the node that holds the edge,
                 ``target`` the node it names; ``kind`` is ``caller``,
                 ``predecessor`` or ``reads`` (one row per read).
``turns_df``     one row per user turn of the recorded stream (copies made by
                 compactions and summary nodes excluded; a turn starts at a
                 ``kind == "user"`` node, in ``seq`` order): messages, tool calls,
                 tool results, estimated tokens of the turn's own messages,
                 provider-reported prompt tokens (last and sum over the turn's
                 llm calls), cache reads, output tokens.
``compactions_df`` one row per summary node: recorded or opctx's own, trigger,
                 reason, pre-compaction tokens, counts of folded / kept /
                 protected nodes, summary length (and text on request).
``recorded_aging_df`` one row per recorded aging event (Claude Code's
                 ``microcompact_boundary``, imported as a display-only node with
                 ``metadata.microcompaction``): when (``seq``, ``request_index``:
                 how many requests the session had made before it, so the 0-based
                 index of the request it preceded), trigger, ``pre_tokens``,
                 ``tokens_saved``, how many tool results it cleared. The nodes
                 frame's ``cleared_by`` column names, on each cleared tool result,
                 the boundary that cleared it (its recorded ``uuid``).

Provider prompt tokens: opctx's importers store ``usage.input_tokens`` as the
*uncached* input (Anthropic's convention; the Codex and OpenAI importers subtract
cached input), so the prompt a provider saw is ``input + cache_read +
cache_write`` (``prompt_tokens``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from typing import Any

import pandas as pd

from .history import open_readonly

__all__ = [
    "NODE_KINDS",
    "ROLES",
    "EDGE_KINDS",
    "NODE_COLUMNS",
    "SESSION_COLUMNS",
    "open_readonly",
    "prompt_tokens",
    "sessions_df",
    "nodes_df",
    "edges_df",
    "turns_df",
    "compactions_df",
    "recorded_aging_df",
    "RECORDED_AGING_COLUMNS",
    "write_parquet",
    "FRAMES",
]

ROLES = ("user", "llm", "code")
NODE_KINDS = ("user", "assistant", "system", "tool", "tool_result", "summary")
EDGE_KINDS = ("caller", "predecessor", "reads")

DbArg = str | os.PathLike | Sequence[str | os.PathLike]

# Substring tests on the stored JSON text. The store writes compact JSON (",", ":"), and a
# quote inside a JSON string is escaped, so these keys cannot be faked by message text.
_HAS_COMPACTION = "instr(n.data_json, '\"compaction\":{') > 0"
_HAS_TOOL_RESULT = "instr(n.data_json, '\"type\":\"tool_result\"') > 0"
_EMPTY_OUTPUT = "(instr(n.data_json, '\"output\":\"\"') > 0 OR instr(n.data_json, '\"output\":null') > 0)"
_TOOL_USE = '\"type\":\"tool_use\"'
_N_TOOL_USE = (
    f"((length(n.data_json) - length(replace(n.data_json, '{_TOOL_USE}', ''))) / {len(_TOOL_USE.replace(chr(92), ''))})"
)

# plain columns of the nodes table
_NODE_PLAIN: dict[str, str] = {
    "session_id": "n.session_id",
    "id": "n.id",
    "seq": "n.seq",
    "created_at": "n.created_at",
    "role": "n.type",
    "predecessor": "n.predecessor",
    "caller": "n.caller",
    "data_chars": "length(n.data_json)",
}
# values inside data_json: all requested paths come from ONE json_extract call per row
# (SQLite 3.40 has no JSON parse cache: one call per column would parse the row N times)
_NODE_PATHS: dict[str, str] = {
    "name": "$.name",
    "tool_call_id": "$.metadata.tool_call_id",
    "is_error": "$.metadata.is_error",
    "cleared_by": "$.metadata.cleared_by",
    "usage_input_tokens": "$.metadata.usage.input_tokens",
    "usage_output_tokens": "$.metadata.usage.output_tokens",
    "usage_cache_read_tokens": "$.metadata.usage.cache_read_tokens",
    "usage_cache_write_tokens": "$.metadata.usage.cache_write_tokens",
    "copied_from": "$.metadata.copied_from",
    "source": "$.metadata.source",
    "model": "$.name",
    "n_reads": "$.reads",
    "n_tool_calls": "$.metadata.tool_calls",
    "kind": "$.metadata.role",
}
_NODE_EXTRA_SQL: dict[str, str] = {
    "output_chars": "COALESCE(length(json_extract(n.data_json, '$.output')), 0)",
}
_NODE_ORDER = (
    "session_id", "id", "seq", "created_at", "role", "kind", "name", "predecessor", "caller",
    "n_reads", "output_chars", "data_chars", "n_tool_calls", "tool_call_id", "is_error",
    "cleared_by", "usage_input_tokens", "usage_output_tokens", "usage_cache_read_tokens",
    "usage_cache_write_tokens", "copied_from", "source", "model",
)
_NODE_PYTHON = ("data", "text", "tokens")  # computed in Python from the whole data_json
NODE_COLUMNS: tuple[str, ...] = _NODE_ORDER + _NODE_PYTHON
_NODE_DEFAULT = tuple(c for c in _NODE_ORDER if c not in ("data_chars", "output_chars"))


def _node_kind(role: str, meta_role: Any, compaction: int, empty: int, tool_result: int) -> str:
    """The ``kind`` of a node (module docstring), from cheap per-row facts."""
    if compaction:
        return "summary"
    if role == "code":
        return "tool"
    if role == "llm":
        return "system" if meta_role == "system" else "assistant"
    return "tool_result" if (empty and tool_result) else "user"


_SESSION_SQL: dict[str, str] = {
    "session_id": "s.id",
    "title": "s.title",
    "created_at": "s.created_at",
    "updated_at": "s.updated_at",
    "model": "s.model",
    "agent_id": "s.agent_id",
    "source": "s.source",
    "format": "CASE WHEN s.source LIKE 'import:%' THEN substr(s.source, 8) ELSE s.source END",
    "head": "s.last_node_id",
    # correlated subqueries: each is an index range of one session (measured faster than
    # one grouped scan of the nodes, which SQLite runs through a secondary index)
    "n_nodes": "(SELECT count(*) FROM nodes n WHERE n.session_id = s.id)",
    "n_user": "(SELECT count(*) FROM nodes n WHERE n.session_id = s.id AND n.type = 'user')",
    "n_llm": "(SELECT count(*) FROM nodes n WHERE n.session_id = s.id AND n.type = 'llm')",
    "n_code": "(SELECT count(*) FROM nodes n WHERE n.session_id = s.id AND n.type = 'code')",
    # summary nodes are llm nodes; the substring test skips JSON parsing for every other
    # node and json_type confirms the few candidates (an argument named "compaction" is not one)
    "n_compactions": "(SELECT count(*) FROM nodes n WHERE n.session_id = s.id AND n.type = 'llm'"
    f" AND {_HAS_COMPACTION} AND json_type(n.data_json, '$.metadata.compaction') IS NOT NULL)",
    "first_at": "(SELECT min(created_at) FROM nodes n WHERE n.session_id = s.id)",
    "last_at": "(SELECT max(created_at) FROM nodes n WHERE n.session_id = s.id)",
    "extra": "s.extra_json",
}
SESSION_COLUMNS: tuple[str, ...] = tuple(_SESSION_SQL)
# ``extra`` parses every session's JSON in Python: on request only. ``n_compactions`` is a
# default column (the first thing a user filters on); it parses only summary candidates
_SESSION_DEFAULT = tuple(c for c in _SESSION_SQL if c != "extra")

_DATETIME_COLUMNS = {"created_at", "updated_at", "first_at", "last_at", "started_at", "ended_at"}
_NULLABLE_INT = {
    "usage_input_tokens",
    "usage_output_tokens",
    "usage_cache_read_tokens",
    "usage_cache_write_tokens",
}


# -- connections -------------------------------------------------------------------------


def _as_paths(db: DbArg) -> tuple[list[str | os.PathLike], bool]:
    if isinstance(db, str | os.PathLike):
        return [db], False
    paths = list(db)
    if not paths:
        raise ValueError("no database paths given")
    return paths, True


def _pick(columns: Iterable[str] | None, known: Sequence[str], default: Sequence[str], what: str) -> list[str]:
    if columns is None:
        return list(default)
    cols = list(columns)
    unknown = [c for c in cols if c not in known]
    if unknown:
        raise ValueError(f"unknown {what} column(s) {unknown}; known: {', '.join(known)}")
    return cols


def _session_filter(alias: str, session_ids: Iterable[str] | None) -> tuple[str, list[Any]]:
    if session_ids is None:
        return "", []
    ids = [str(s) for s in session_ids]
    if not ids:
        return " AND 0", []
    return f" AND {alias}.session_id IN (SELECT value FROM json_each(?))", [json.dumps(ids)]


def _concat(frames: list[pd.DataFrame], paths: list, multi: bool, columns: list[str]) -> pd.DataFrame:
    if multi:
        for frame, path in zip(frames, paths, strict=True):
            frame.insert(0, "db", str(path))
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["db", *columns])
        df["db"] = df["db"].astype(pd.CategoricalDtype(list(dict.fromkeys(str(p) for p in paths))))
        return df
    return frames[0]


def _to_utc(values: pd.Series) -> pd.Series:
    return pd.to_datetime(pd.to_numeric(values, errors="coerce"), unit="s", utc=True)


def _type_columns(df: pd.DataFrame) -> pd.DataFrame:
    for col in df.columns:
        if col in _DATETIME_COLUMNS:
            df[col] = _to_utc(df[col])
        elif col in _NULLABLE_INT:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
        elif col == "role":
            df[col] = df[col].astype(pd.CategoricalDtype(ROLES))
        elif col == "kind":
            df[col] = df[col].astype(pd.CategoricalDtype(NODE_KINDS))
        elif col in ("format", "source", "model"):
            df[col] = df[col].fillna("").astype("category")
        elif col in ("seq", "n_reads", "output_chars", "data_chars", "n_tool_calls") or col.startswith("n_"):
            df[col] = pd.to_numeric(df[col], errors="coerce").fillna(0).astype("int64")
        elif col == "is_error":
            df[col] = df[col].fillna(False).astype(bool)
        elif col == "cleared_by":
            # text, also when no node of the batch was cleared (an all-None object column
            # would not round-trip through Parquet as text)
            df[col] = df[col].astype("string")
    return df


# -- sessions ----------------------------------------------------------------------------------


def sessions_df(
    db: DbArg, *, columns: Iterable[str] | None = None, session_ids: Iterable[str] | None = None
) -> pd.DataFrame:
    """One row per session. Columns: ``SESSION_COLUMNS`` (``extra`` parsed, on request)."""
    cols = _pick(columns, SESSION_COLUMNS, _SESSION_DEFAULT, "session")
    paths, multi = _as_paths(db)
    frames = []
    for path in paths:
        where, params = _session_filter("s", session_ids)
        where = where.replace("s.session_id", "s.id")
        sql = (
            "SELECT " + ", ".join(f"{_SESSION_SQL[c]} AS {c}" for c in cols)
            + f" FROM sessions s WHERE 1{where} ORDER BY s.created_at, s.id"
        )
        with closing(open_readonly(path)) as conn:
            df = pd.DataFrame(conn.execute(sql, params).fetchall(), columns=cols)
        if "extra" in df.columns:
            df["extra"] = [json.loads(x) if x else {} for x in df["extra"]]
        frames.append(_type_columns(df))
    return _concat(frames, paths, multi, cols)


# -- nodes -------------------------------------------------------------------------------------


def nodes_df(
    db: DbArg,
    *,
    columns: Iterable[str] | None = None,
    session_ids: Iterable[str] | None = None,
    roles: Iterable[str] | None = None,
    model: str | None = None,
) -> pd.DataFrame:
    """One row per node, ordered by session and ``seq``. Columns: ``NODE_COLUMNS``.

    The default leaves out ``output_chars`` and ``data_chars`` (the former parses
    each row once more). ``text`` and ``tokens`` (estimated with
    ``opctx.context.tokens``, for ``model``) and ``data`` parse the node's whole
    JSON in Python; the other columns come from SQL.
    """
    cols = _pick(columns, NODE_COLUMNS, _NODE_DEFAULT, "node")
    role_list = list(roles) if roles is not None else None
    if role_list is not None:
        bad = [r for r in role_list if r not in ROLES]
        if bad:
            raise ValueError(f"unknown role(s) {bad}; a node's role is one of {', '.join(ROLES)}")
    need_json = any(c in _NODE_PYTHON for c in cols)
    plain = [c for c in cols if c in _NODE_PLAIN]
    paths = [c for c in cols if c in _NODE_PATHS]
    extra = [c for c in cols if c in _NODE_EXTRA_SQL]
    select = [f"{_NODE_PLAIN[c]} AS {c}" for c in plain]
    select += ["n.type AS _type"]
    if paths:
        # >= 2 paths so that json_extract always returns an array
        path_list = [_NODE_PATHS[c] for c in paths] + ["$.name"]
        select.append("json_extract(n.data_json, " + ", ".join(f"'{p}'" for p in path_list) + ") AS _bundle")
    if "n_tool_calls" in cols:
        select.append(f"{_N_TOOL_USE} AS _n_tool_use")
    if "kind" in cols:
        select += [f"{_HAS_COMPACTION} AS _compaction", f"{_EMPTY_OUTPUT} AS _empty", f"{_HAS_TOOL_RESULT} AS _tool_result"]
    select += [f"{_NODE_EXTRA_SQL[c]} AS {c}" for c in extra]
    if need_json:
        select += ["n.id AS _id", "n.predecessor AS _pred", "n.created_at AS _at", "n.data_json AS _data"]
    paths_db, multi = _as_paths(db)
    frames = []
    for path in paths_db:
        where, params = _session_filter("n", session_ids)
        if role_list is not None:
            where += " AND n.type IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(role_list))
        sql = f"SELECT {', '.join(select)} FROM nodes n WHERE 1{where} ORDER BY n.session_id, n.seq"
        with closing(open_readonly(path)) as conn:
            cur = conn.execute(sql, params)
            names = [d[0] for d in cur.description]
            df = pd.DataFrame(cur.fetchall(), columns=names)
        if paths:
            _unbundle(df, paths)
        if need_json:
            _add_python_columns(df, cols, model)
        df = df[list(cols)] if cols else df.iloc[:, :0]
        frames.append(_type_columns(df))
    return _concat(frames, paths_db, multi, list(cols))


def _unbundle(df: pd.DataFrame, paths: list[str]) -> None:
    bundles = [json.loads(b) if b else [None] * (len(paths) + 1) for b in df["_bundle"]]
    for k, name in enumerate(paths):
        values = [b[k] for b in bundles]
        if name == "n_reads":
            values = [len(v) if isinstance(v, list) else 0 for v in values]
        elif name == "n_tool_calls":
            values = [
                (len(v) if isinstance(v, list) else 0) + int(n or 0)
                for v, n in zip(values, df["_n_tool_use"], strict=True)
            ]
        elif name == "model":
            values = [v if t == "llm" else None for v, t in zip(values, df["_type"], strict=True)]
        elif name == "kind":
            values = [
                _node_kind(t, v, c, e, r)
                for t, v, c, e, r in zip(df["_type"], values, df["_compaction"], df["_empty"], df["_tool_result"], strict=True)
            ]
        elif name == "is_error":
            values = [bool(v) for v in values]
        df[name] = values


def _row_message(node_type: str, node_id: str, pred: str | None, created_at: float, data: dict) -> dict:
    from opctx.dag.messages import call_to_message
    from opctx.dag.nodes import Call

    call = Call.__new__(Call)
    call.id = node_id
    call.seq = -1
    call.created_at = created_at
    call.role = node_type
    call.name = data.get("name", "")
    call.input = data.get("input")
    call.output = data.get("output")
    call._caller = None
    call._predecessor = pred
    call.reads = data.get("reads") or []
    call.metadata = data.get("metadata") or {}
    return call_to_message(call)


def _add_python_columns(df: pd.DataFrame, cols: list[str], model: str | None) -> None:
    from opctx.dag.messages import message_text

    datas = [json.loads(x) for x in df["_data"]]
    if "data" in cols:
        df["data"] = datas
    if "text" in cols or "tokens" in cols:
        messages = [
            _row_message(t, i, p, a, d)
            for t, i, p, a, d in zip(df["_type"], df["_id"], df["_pred"], df["_at"], datas, strict=True)
        ]
        if "text" in cols:
            df["text"] = [message_text(m) for m in messages]
        if "tokens" in cols:
            from opctx.context.provider_messages import is_display_only
            from opctx.context.tokens import estimate_message_tokens

            df["tokens"] = pd.array([0 if is_display_only(m) else estimate_message_tokens(m, model)
                                     for m in messages], dtype="int64")


# -- edges -------------------------------------------------------------------------------------


def edges_df(
    db: DbArg,
    *,
    session_ids: Iterable[str] | None = None,
    kinds: Iterable[str] = EDGE_KINDS,
) -> pd.DataFrame:
    """One row per edge: ``session_id, source, target, kind`` (+ ``seq`` of the source).

    ``source`` holds the edge (a node's ``caller``, ``predecessor`` or one of its
    ``reads``), ``target`` is the node it names.
    """
    kind_list = list(kinds)
    bad = [k for k in kind_list if k not in EDGE_KINDS]
    if bad:
        raise ValueError(f"unknown edge kind(s) {bad}; edge kinds are {', '.join(EDGE_KINDS)}")
    cols = ["session_id", "source", "target", "kind", "seq"]
    paths, multi = _as_paths(db)
    frames = []
    for path in paths:
        where, params = _session_filter("n", session_ids)
        parts = []
        all_params: list[Any] = []
        if "caller" in kind_list:
            parts.append(
                "SELECT n.session_id, n.id, n.caller, 'caller', n.seq FROM nodes n"
                f" WHERE n.caller IS NOT NULL{where}"
            )
            all_params += params
        if "predecessor" in kind_list:
            parts.append(
                "SELECT n.session_id, n.id, n.predecessor, 'predecessor', n.seq FROM nodes n"
                f" WHERE n.predecessor IS NOT NULL{where}"
            )
            all_params += params
        if "reads" in kind_list:
            parts.append(
                "SELECT n.session_id, n.id, r.value, 'reads', n.seq FROM nodes n,"
                f" json_each(n.data_json, '$.reads') r WHERE 1{where}"
            )
            all_params += params
        rows: list[tuple] = []
        if parts:
            sql = " UNION ALL ".join(parts) + " ORDER BY 1, 5, 4"
            with closing(open_readonly(path)) as conn:
                rows = conn.execute(sql, all_params).fetchall()
        df = pd.DataFrame(rows, columns=cols)
        df["kind"] = df["kind"].astype(pd.CategoricalDtype(EDGE_KINDS))
        df["seq"] = df["seq"].astype("int64")
        frames.append(df)
    return _concat(frames, paths, multi, cols)


# -- turns -------------------------------------------------------------------------------------


def prompt_tokens(input_tokens: Any, cache_read: Any, cache_write: Any) -> float | None:
    """The prompt size a provider reported (see the module docstring), or ``None``."""

    def value(x: Any) -> float | None:
        if x is None or x is pd.NA or (isinstance(x, float) and x != x):
            return None
        return float(x)

    base = value(input_tokens)
    if base is None:
        return None
    return base + (value(cache_read) or 0.0) + (value(cache_write) or 0.0)


def turns_df(
    db: DbArg,
    *,
    session_ids: Iterable[str] | None = None,
    model: str | None = None,
    estimate_tokens: bool = True,
) -> pd.DataFrame:
    """One row per user turn of each session's recorded stream (see the module docstring).

    ``estimate_tokens=False`` skips the one Python-side pass over the turn's
    messages (``estimated_tokens`` is then absent), for very large databases.
    """
    node_cols = [
        "session_id", "id", "seq", "created_at", "kind", "copied_from", "n_tool_calls",
        "usage_input_tokens", "usage_output_tokens", "usage_cache_read_tokens",
        "usage_cache_write_tokens", "model", "output_chars",
    ]
    if estimate_tokens:
        node_cols.append("tokens")
    paths, multi = _as_paths(db)
    frames = []
    for path in paths:
        nodes = nodes_df(path, columns=node_cols, session_ids=session_ids, model=model)
        frames.append(_turns_from_nodes(nodes, estimate_tokens))
    cols = list(frames[0].columns)
    return _concat(frames, paths, multi, cols)


def _turns_from_nodes(nodes: pd.DataFrame, with_tokens: bool) -> pd.DataFrame:
    columns = [
        "session_id", "turn", "start_id", "started_at", "ended_at", "user_chars", "messages",
        "assistant_messages", "tool_calls", "tool_results", "llm_calls",
        "provider_input_tokens_last", "provider_input_tokens_sum", "cache_read_tokens",
        "cache_write_tokens", "output_tokens",
    ]
    if with_tokens:
        columns.insert(columns.index("provider_input_tokens_last"), "estimated_tokens")
    stream = nodes[nodes["copied_from"].isna() & (nodes["kind"] != "summary")].copy()
    if stream.empty:
        out = pd.DataFrame(columns=columns)
        return _type_turns(out)
    stream["turn"] = (stream["kind"] == "user").groupby(stream["session_id"], observed=True).cumsum()
    prompt = [
        prompt_tokens(i, r, w)
        for i, r, w in zip(
            stream["usage_input_tokens"], stream["usage_cache_read_tokens"],
            stream["usage_cache_write_tokens"], strict=True,
        )
    ]
    stream["_prompt"] = pd.array(prompt, dtype="Float64")
    is_user = stream["kind"] == "user"
    stream["_user_chars"] = stream["output_chars"].where(is_user, 0)
    stream["_assistant"] = (stream["kind"] == "assistant").astype("int64")
    stream["_llm"] = stream["kind"].isin(["assistant", "system"]).astype("int64")
    stream["_results"] = stream["kind"].isin(["tool", "tool_result"]).astype("int64")
    grouped = stream.groupby(["session_id", "turn"], sort=True, observed=True)
    agg = {
        "start_id": ("id", "first"),
        "started_at": ("created_at", "min"),
        "ended_at": ("created_at", "max"),
        "user_chars": ("_user_chars", "sum"),
        "messages": ("id", "size"),
        "assistant_messages": ("_assistant", "sum"),
        "tool_calls": ("n_tool_calls", "sum"),
        "tool_results": ("_results", "sum"),
        "llm_calls": ("_llm", "sum"),
        "provider_input_tokens_last": ("_prompt", "last"),
    }
    if with_tokens:
        agg["estimated_tokens"] = ("tokens", "sum")
    out = grouped.agg(**agg)
    # sums stay missing (not 0) for turns without any provider usage
    sums = grouped[["_prompt", "usage_cache_read_tokens", "usage_cache_write_tokens", "usage_output_tokens"]].sum(min_count=1)
    sums.columns = ["provider_input_tokens_sum", "cache_read_tokens", "cache_write_tokens", "output_tokens"]
    out = out.join(sums).reset_index()
    return _type_turns(out[columns])


def _type_turns(out: pd.DataFrame) -> pd.DataFrame:
    for col in ("turn", "user_chars", "messages", "assistant_messages", "tool_calls", "tool_results", "llm_calls", "estimated_tokens"):
        if col in out.columns:
            out[col] = pd.to_numeric(out[col]).fillna(0).astype("int64")
    for col in ("provider_input_tokens_last", "provider_input_tokens_sum", "cache_read_tokens", "cache_write_tokens", "output_tokens"):
        if col in out.columns:
            out[col] = pd.to_numeric(out[col], errors="coerce").round().astype("Int64")
    for col in ("started_at", "ended_at"):
        if col in out.columns and not isinstance(out[col].dtype, pd.DatetimeTZDtype):
            out[col] = pd.to_datetime(out[col], utc=True)
    return out


# -- compactions -----------------------------------------------------------------------------------


def compactions_df(
    db: DbArg, *, session_ids: Iterable[str] | None = None, with_text: bool = False
) -> pd.DataFrame:
    """One row per summary node (``metadata.compaction``), recorded or opctx's own.

    Columns: ``session_id, id, seq, created_at, recorded, format, reason,
    trigger, pre_tokens, tokens_after, folded, kept, protected, first_folded,
    last_folded, fell_back_to_structural, summary_chars`` (+ ``summary_text``).
    """
    c = "json_extract(n.data_json, '$.metadata.compaction"
    select = {
        "session_id": "n.session_id",
        "id": "n.id",
        "seq": "n.seq",
        "created_at": "n.created_at",
        "recorded": f"COALESCE({c}.recorded'), 0)",
        "format": f"{c}.format')",
        "reason": f"{c}.reason')",
        "trigger": f"{c}.trigger')",
        "pre_tokens": f"{c}.pre_tokens')",
        "tokens_after": f"{c}.tokens_after')",
        "folded": "COALESCE(json_array_length(n.data_json, '$.metadata.compaction.folded_ids'), 0)",
        "kept": "COALESCE(json_array_length(n.data_json, '$.metadata.compaction.kept_ids'), 0)",
        "protected": "COALESCE(json_array_length(n.data_json, '$.metadata.compaction.protected_ids'), 0)",
        "first_folded": f"{c}.folded_range[0]')",
        "last_folded": f"{c}.folded_range[1]')",
        "fell_back_to_structural": f"COALESCE({c}.fell_back_to_structural'), 0)",
        "summary_chars": "length(json_extract(n.data_json, '$.output'))",
    }
    if with_text:
        select["summary_text"] = "json_extract(n.data_json, '$.output')"
    def typed(df: pd.DataFrame) -> pd.DataFrame:
        for col in ("recorded", "fell_back_to_structural"):
            df[col] = df[col].fillna(0).astype(bool)
        for col in ("pre_tokens", "tokens_after"):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
        for col in ("seq", "folded", "kept", "protected", "summary_chars"):
            df[col] = pd.to_numeric(df[col], errors="coerce").fillna(0).astype("int64")
        df["format"] = df["format"].fillna("opctx").astype("category")
        df["reason"] = df["reason"].astype(pd.CategoricalDtype(["auto", "manual", "recovered", "recorded"]))
        return df

    return _node_rows_df(db, select, "json_type(n.data_json, '$.metadata.compaction') IS NOT NULL",
                         session_ids, typed)


def _node_rows_df(
    db: DbArg, select: dict[str, str], condition: str, session_ids: Iterable[str] | None,
    typed: Any,
) -> pd.DataFrame:
    """One row per node matching ``condition``, columns ``select`` (name -> SQL), in session
    and branch-time order, over one or several databases; ``typed`` sets each frame's dtypes."""
    cols = list(select)
    paths, multi = _as_paths(db)
    frames = []
    for path in paths:
        where, params = _session_filter("n", session_ids)
        sql = (
            "SELECT " + ", ".join(f"{v} AS {k}" for k, v in select.items())
            + " FROM nodes n WHERE " + condition + where + " ORDER BY n.session_id, n.seq"
        )
        with closing(open_readonly(path)) as conn:
            df = pd.DataFrame(conn.execute(sql, params).fetchall(), columns=cols)
        df["created_at"] = _to_utc(df["created_at"])
        frames.append(typed(df))
    return _concat(frames, paths, multi, cols)


_MC = "json_extract(n.data_json, '$.metadata.microcompaction"
# a request is an llm node that is neither a system line nor a summary
_IS_REQUEST = ("m.type = 'llm' AND json_extract(m.data_json, '$.metadata.role') IS NULL"
               " AND json_type(m.data_json, '$.metadata.compaction') IS NULL")
_RECORDED_AGING_SQL: dict[str, str] = {
    "session_id": "n.session_id",
    "id": "n.id",
    "seq": "n.seq",
    "created_at": "n.created_at",
    "request_index": f"(SELECT count(*) FROM nodes m WHERE m.session_id = n.session_id AND m.seq < n.seq AND {_IS_REQUEST})",
    "uuid": f"{_MC}.uuid')",
    "trigger": f"{_MC}.trigger')",
    "pre_tokens": f"{_MC}.pre_tokens')",
    "tokens_saved": f"{_MC}.tokens_saved')",
    "cleared": "COALESCE(json_array_length(n.data_json, '$.metadata.microcompaction.tool_call_ids'), 0)",
    "cleared_attachments": "COALESCE(json_array_length(n.data_json, '$.metadata.microcompaction.cleared_attachment_uuids'), 0)",
    "missing": "COALESCE(json_array_length(n.data_json, '$.metadata.microcompaction.missing_tool_call_ids'), 0)",
}
RECORDED_AGING_COLUMNS: tuple[str, ...] = (*_RECORDED_AGING_SQL, "tool_call_ids")


def recorded_aging_df(
    db: DbArg, *, session_ids: Iterable[str] | None = None, with_ids: bool = False
) -> pd.DataFrame:
    """One row per recorded microcompaction (a node with ``metadata.microcompaction``).

    Columns: ``session_id, id, seq, created_at, request_index, uuid, trigger,
    pre_tokens, tokens_saved, cleared, cleared_attachments, missing`` (+
    ``tool_call_ids``, a list per row, with ``with_ids=True``). ``request_index``
    counts the session's requests (llm nodes that are neither system lines nor
    summaries) before the event: the 0-based index of the request it preceded.
    ``pre_tokens`` / ``tokens_saved`` are the client's figures (the clearable tool
    results and what clearing them saved, about characters / 4), not context sizes.
    """
    select = dict(_RECORDED_AGING_SQL)
    if with_ids:
        select["tool_call_ids"] = f"{_MC}.tool_call_ids')"

    def typed(df: pd.DataFrame) -> pd.DataFrame:
        for col in ("pre_tokens", "tokens_saved"):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
        for col in ("seq", "request_index", "cleared", "cleared_attachments", "missing"):
            df[col] = pd.to_numeric(df[col], errors="coerce").fillna(0).astype("int64")
        df["trigger"] = df["trigger"].astype("category")
        if with_ids:
            df["tool_call_ids"] = [json.loads(v) if isinstance(v, str) else [] for v in df["tool_call_ids"]]
        return df

    # the substring test skips JSON parsing for every node that is not a candidate
    condition = ("n.type = 'llm' AND instr(n.data_json, '\"microcompaction\":{') > 0"
                 " AND json_type(n.data_json, '$.metadata.microcompaction') IS NOT NULL")
    return _node_rows_df(db, select, condition, session_ids, typed)


# -- Parquet, a batch of sessions at a time ----------------------------------------------------

FRAMES = ("sessions", "nodes", "edges", "turns", "compactions", "recorded_aging")

# The Arrow type of every column a frame can have: one schema for every batch (a batch
# with no compaction, or no value in a column, must not change the file's types).
_TS = "timestamp"
_ARROW_TYPES: dict[str, str] = {
    **dict.fromkeys(("session_id", "id", "title", "agent_id", "head", "name", "predecessor",
                     "caller", "tool_call_id", "copied_from", "text", "target", "cleared_by", "uuid",
                     "start_id", "trigger", "first_folded", "last_folded", "summary_text"), "string"),
    **dict.fromkeys(("created_at", "updated_at", "first_at", "last_at", "started_at", "ended_at"), _TS),
    **dict.fromkeys(("model", "source", "format", "role", "kind", "reason"), "dictionary"),
    **dict.fromkeys(("is_error", "recorded", "fell_back_to_structural"), "bool"),
}
# everything else is a count: int64 (nullable in Arrow; pandas' Int64 where the frame has it)
_FRAME_ARROW_TYPES = {("edges", "source"): "string"}  # there a node id, not a session's source


def _arrow_kind(frame: str, column: str) -> str:
    return _FRAME_ARROW_TYPES.get((frame, column)) or _ARROW_TYPES.get(column, "int64")


def _arrow_type(frame: str, column: str) -> Any:
    import pyarrow as pa

    kind = _arrow_kind(frame, column)
    return {
        "string": pa.string(), _TS: pa.timestamp("ns", tz="UTC"), "bool": pa.bool_(),
        "dictionary": pa.dictionary(pa.int32(), pa.string()), "int64": pa.int64(),
    }[kind]


def _as_text(value: Any) -> Any:
    """A JSON value in a text column (``$.name`` may be anything): text, or JSON text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value != value:
        return None
    return json.dumps(value, ensure_ascii=False)


def _arrow_ready(frame: str, df: pd.DataFrame) -> pd.DataFrame:
    """Text in the text and categorical columns (values from JSON may be numbers)."""
    for col in df.columns:
        kind = _arrow_kind(frame, col)
        if kind == "string" and pd.api.types.infer_dtype(df[col], skipna=True) not in ("string", "empty"):
            df[col] = df[col].map(_as_text)
        elif kind == "dictionary" and isinstance(df[col].dtype, pd.CategoricalDtype):
            cats = df[col].cat.categories
            if pd.api.types.infer_dtype(cats, skipna=True) not in ("string", "empty"):
                df[col] = df[col].cat.rename_categories([_as_text(c) for c in cats])
    return df


class _FrameWriter:
    """One Parquet file written batch by batch with a fixed schema, under a temporary
    name in its folder (``_outputs``) until ``write_parquet`` renames every frame at once."""

    def __init__(self, frame: str, path: os.PathLike, empty: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ._outputs import temp_name

        self.frame = frame
        self.path = os.fspath(path)
        self.tmp = temp_name(self.path)
        self.rows = 0
        schema = pa.schema([pa.field(c, _arrow_type(frame, c)) for c in empty.columns])
        # the pandas metadata of the typed empty frame: readers get Int64 / category back
        empty = _arrow_ready(frame, empty)
        self.schema = pa.Table.from_pandas(empty, schema=schema, preserve_index=False).schema
        self._writer = None
        with self._failing_as_output():
            self._writer = pq.ParquetWriter(str(self.tmp), self.schema)

    @contextlib.contextmanager
    def _failing_as_output(self) -> Iterator[None]:
        from ._outputs import OutputError, output_error

        try:
            yield
        except OutputError:
            raise
        except OSError as exc:  # pyarrow's or Python's: one line naming the frame's file
            raise output_error(self.path, exc) from None

    def write(self, df: pd.DataFrame) -> None:
        import pyarrow as pa

        if len(df):
            ready = _arrow_ready(self.frame, df)
            table = pa.Table.from_pandas(ready, schema=self.schema, preserve_index=False)
            with self._failing_as_output():
                self._writer.write_table(table)
            self.rows += len(df)

    def close(self) -> None:
        """Write the footer: the temporary file is complete (not yet in place)."""
        with self._failing_as_output():
            self._writer.close()

    def abandon(self) -> None:
        from ._outputs import discard

        try:
            if self._writer is not None:
                self._writer.close()
        except Exception:  # noqa: BLE001 - a full disk fails the footer too; the file goes anyway
            pass
        discard([self.tmp])


def _batch_frames(db: str | os.PathLike, ids: list[str], estimate_tokens: bool) -> dict[str, pd.DataFrame]:
    """The frames of the sessions ``ids``; the nodes are read once for nodes and turns."""
    node_cols = list(_NODE_ORDER) + (["tokens"] if estimate_tokens else [])
    nodes = nodes_df(db, columns=node_cols, session_ids=ids)
    return {
        "sessions": sessions_df(db, session_ids=ids),
        "nodes": nodes,
        "edges": edges_df(db, session_ids=ids),
        "turns": _turns_from_nodes(nodes, estimate_tokens),
        "compactions": compactions_df(db, session_ids=ids),
        "recorded_aging": recorded_aging_df(db, session_ids=ids),
    }


def write_parquet(
    db: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    batch_sessions: int = 500,
    estimate_tokens: bool = True,
    progress: bool = False,
) -> dict[str, tuple[Any, int]]:
    """Write ``sessions, nodes, edges, turns, compactions, recorded_aging`` of ``db`` as
    ``out_dir/<frame>.parquet``, ``batch_sessions`` sessions at a time.

    Memory is that of one batch, whatever the database's size. Every file has one
    schema for all batches (``_ARROW_TYPES``: text, ``timestamp[ns, UTC]``,
    dictionary-encoded categoricals, int64 counts, nullable where the frame's are),
    and pandas' metadata, so ``pd.read_parquet`` gives the frame's dtypes back; DuckDB
    and any other Parquet reader read the same files. The nodes frame has every SQL
    column (``NODE_COLUMNS`` but ``data``/``text``) plus ``tokens`` unless
    ``estimate_tokens=False`` (the one Python-side pass over each node; the turns
    frame's ``estimated_tokens`` goes with it). Returns ``{frame: (path, rows)}``.

    All or nothing: the frames are written under temporary names in ``out_dir``
    (``opctx.lab._outputs``) and renamed into place together once every one of them is
    complete, so an error or an interrupt (a read-only folder, a full disk, Ctrl-C)
    leaves the frames that were there before as they were, and no temporary file.
    Errors that concern the output raise ``OutputError`` (an ``OSError``), one line
    naming the path: the folder cannot be created or written, a ``<frame>.parquet``
    that is a directory or a FIFO, no space left.

    >>> write_parquet("data/sample.db", "/tmp/frames")  # doctest: +SKIP
    {'sessions': (PosixPath('/tmp/frames/sessions.parquet'), 13), ...}
    """
    from pathlib import Path

    from ._outputs import check_target, output_error, publish, remove_leftovers

    if batch_sessions < 1:
        raise ValueError(f"batch_sessions must be >= 1, got {batch_sessions}")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(out, exc) from None
    targets = {name: out / f"{name}.parquet" for name in FRAMES}
    for target in targets.values():
        check_target(target)
        remove_leftovers(target, ".partial")  # killed exports, of this version or an older one
    with closing(open_readonly(db)) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY created_at, id")]
    empty = _batch_frames(db, [], estimate_tokens)
    writers: dict[str, _FrameWriter] = {}
    try:
        for name in FRAMES:
            writers[name] = _FrameWriter(name, targets[name], empty[name])
        _write_batches(db, ids, writers, batch_sessions, estimate_tokens, progress)
        for writer in writers.values():
            writer.close()
        publish((writer.tmp, Path(writer.path)) for writer in writers.values())
    except BaseException:
        for writer in writers.values():
            writer.abandon()
        raise
    return {name: (Path(w.path), w.rows) for name, w in writers.items()}


def _write_batches(db: str | os.PathLike, ids: list[str], writers: dict[str, _FrameWriter],
                   batch_sessions: int, estimate_tokens: bool, progress: bool) -> None:
    """The frames of ``batch_sessions`` sessions at a time, appended to their writers."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(ids), desc="export-frames", unit="session")
    try:
        for start in range(0, len(ids), batch_sessions):
            batch = ids[start:start + batch_sessions]
            for name, df in _batch_frames(db, batch, estimate_tokens).items():
                writers[name].write(df)
            if bar is not None:
                bar.update(len(batch))
    finally:
        if bar is not None:
            bar.close()
