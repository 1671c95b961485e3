"""The data substrate: nodes, store, sessions, the legacy adapter and the runtime.

Modules: ``nodes`` (Call, Graph, algorithms), ``messages`` (message dicts and
their mapping to Calls), ``store`` (GraphStore over SQLite + FTS5), ``session``
(DagSession, DagSessionManager), ``session_db`` (DagSessionDB, the message-tree
API), ``providers``, ``render``, ``runtime`` (DagRuntime), ``chat`` (chat_turn),
``agentic`` (@agentic_function, Runtime).
"""
