"""The store's exceptions: ``StoreError`` and its two "not found" kinds.

Every problem the store can explain (a file that is not a database, a duplicate
id, a value that is not JSON, a bad query, any ``sqlite3`` error) reaches the
caller as a ``StoreError`` naming the file, the session or the node; the two
lookups that fail are also ``KeyError``. Re-exported by ``opctx.dag.store``.
"""

from __future__ import annotations

__all__ = ["StoreError", "SessionNotFound", "NodeNotFound"]


class StoreError(Exception):
    """A storage problem explained: bad file, duplicate id, value not JSON, bad query."""


class SessionNotFound(StoreError, KeyError):
    """No session with that id in this database (also a ``KeyError``)."""

    def __str__(self) -> str:  # KeyError would repr-quote the message
        return str(self.args[0]) if self.args else "session not found"


class NodeNotFound(StoreError, KeyError):
    """No node with that id in this session (also a ``KeyError``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "node not found"
