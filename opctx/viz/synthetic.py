"""Synthetic sessions for the toolkit's own demos, tests and benchmarks.

``synthetic_session(n_nodes)`` is ``opctx.lab.synthetic_history.synthetic_session``
(re-exported here for ``opctx.viz``): an in-memory ``Graph`` shaped like a real agent
session, compacted by ``Persister`` in opctx's own layout, so that rendering can be
measured and tested at any size without recorded transcripts (which may not be
redistributed). One generator of synthetic coding sessions serves the lab and the viz.
"""

from __future__ import annotations

from ..lab.synthetic_history import synthetic_session

__all__ = ["synthetic_session"]
