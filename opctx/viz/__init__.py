"""Visual toolkit: session graphs, plots, compaction diffs, and the escaping they share.

* ``opctx.viz.graph``  - ``to_networkx`` (caller / predecessor / reads edges, node
  attributes incl. compaction membership) and ``render_graph``: an offline
  vis-network page (inline JS from pyvis's bundle, no CDN) with notebook display
  through a sandboxed ``<iframe srcdoc>`` and ``save_html`` (its parts in the private
  ``_graph_nodes``, ``_graph_labels``, ``_graph_layout`` and ``_graph_page``).
* ``opctx.viz.plots``  - matplotlib figures (no pyplot state): budget timeline,
  token composition, sweep trade-offs, estimator error.
* ``opctx.viz.diff``   - ``branch_diff`` / ``compare_compaction``: before/after rows
  of one compaction, side-by-side HTML and a graph coloured the same way.
* ``opctx.viz.html``   - the three escaping helpers every HTML producer uses.
* ``opctx.viz.synthetic`` - synthetic sessions of any size for demos and benchmarks
  (``opctx.lab.synthetic_history.synthetic_session``, re-exported).

Names resolve lazily, so ``import opctx.viz`` imports neither networkx nor matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "to_networkx": "graph",
    "render_graph": "graph",
    "to_pyvis": "graph",
    "GraphView": "graph",
    "load_session": "graph",
    "node_infos": "graph",
    "compaction_membership": "graph",
    "budget_timeline": "plots",
    "token_composition": "plots",
    "sweep_tradeoff": "plots",
    "estimator_error_plot": "plots",
    "branch_diff": "diff",
    "compare_compaction": "diff",
    "list_compactions": "diff",
    "diff_html": "diff",
    "diff_graph": "diff",
    "escape_text": "html",
    "iframe_srcdoc": "html",
    "json_for_script": "html",
    "synthetic_session": "synthetic",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'opctx.viz' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
