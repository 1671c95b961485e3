"""Jupyter widgets (ipywidgets) over replays, cut points and compaction diffs.

* ``CompactionTuner(session)``  - preset dropdown and a control for every engine
  and summariser parameter; each change replays the session (debounced, cached)
  and redraws the budget timeline and the cut-point table.
* ``CutPointExplorer(session)`` - a step slider over the recorded history: the
  active context at that step and what a compaction there would fold
  (``find_cut_index``).
* ``BranchDiffViewer(source, session_id)`` - pick a compaction, see before/after
  side by side and both branches as a graph.

Every widget renders escaped HTML only (transcripts are untrusted). Names
resolve lazily so that ``import opctx.widgets`` does not import ipywidgets.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CompactionTuner": "tuner",
    "CutPointExplorer": "cutpoints",
    "BranchDiffViewer": "diffview",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'opctx.widgets' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
