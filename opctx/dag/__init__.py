"""The data substrate: nodes, store, sessions, the legacy adapter and the runtime.

Modules: ``nodes`` (Call, Graph, algorithms), ``messages`` (message dicts and
their mapping to Calls), ``store`` (GraphStore over SQLite + FTS5; its private
modules ``_schema``, ``_connection``, ``_search``, ``_rows`` and ``_errors`` hold
the migrations, the connection rules, full-text search, the row format and the
exceptions, all re-exported by ``store``), ``session``
(DagSession, DagSessionManager), ``session_db`` (DagSessionDB, the message-tree
API), ``memory_db`` (MemorySessionDB, its message API over sessions in memory),
``providers``, ``render``, ``runtime`` (DagRuntime), ``chat`` (chat_turn), ``agentic``
(@agentic_function, Runtime).
"""
