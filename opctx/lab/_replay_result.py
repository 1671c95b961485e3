"""What a replay produces, and what both ``replay`` and ``metrics`` read from it.

* :class:`ReplayResult` and :class:`ReplayCompaction`: the result of
  ``opctx.lab.replay.replay`` (described in that module's docstring);
* :func:`guard_counts`: the engine's anti-thrash guard at work, counted from a
  result's ``events``;
* :func:`common_prefix_length`: how many leading messages a request shares with
  the previous one (the replay records ``prefix_kept_tokens`` with it, the
  metrics compare contexts with it).

Its own module so that ``replay`` (which makes results) and ``metrics`` (which
reads them) both import it and neither imports the other. Two conveniences of
``ReplayResult`` call into ``metrics`` when used (``metrics()`` and
``stream_identifiers``), imported inside them as ``compactions_df`` imports
pandas. Each name is re-exported where it was defined before:
``opctx.lab.replay`` (the result types, ``guard_counts``) and ``opctx.lab.metrics``
(``common_prefix_length``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .history import RecordedCompaction, RecordedHistory

__all__ = ["ReplayResult", "ReplayCompaction", "guard_counts", "common_prefix_length"]


def guard_counts(events: Sequence[dict]) -> dict[str, int]:
    """``compactions_failed`` / ``auto_compaction_disabled`` counted from a replay's events."""
    return {
        "compactions_failed": sum(1 for e in events if e.get("event") == "compaction_failed"),
        "auto_compaction_disabled": sum(1 for e in events if e.get("event") == "auto_compaction_disabled"),
    }


@dataclass
class ReplayCompaction:
    """One compaction during a replay."""

    step: int
    stream_index: int
    turn: int
    reason: str
    tokens_before: int
    tokens_after: int
    folded_ids: list[str]
    kept_ids: list[str]
    protected_ids: list[str]
    summary_text: str
    fell_back_to_structural: bool
    ok: bool = True
    error: str | None = None
    cut_index: int | None = None
    summary_id: str | None = None
    duration_ms: float = 0.0
    # the same nodes as stream indices (ids of copies and summaries are random; these are not)
    folded_indices: list[int | None] = field(default_factory=list)
    kept_indices: list[int | None] = field(default_factory=list)
    protected_indices: list[int | None] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ReplayResult:
    """Everything a replay produced (see the ``opctx.lab.replay`` docstring)."""

    history: RecordedHistory
    preset: str
    params: dict[str, Any]
    model: str
    context_window: int
    summaries: str
    steps_df: Any
    compactions: list[ReplayCompaction]
    contexts: list[list[dict]] | None
    origin_ids: dict[str, int]
    elapsed_s: float = 0.0
    events: list[dict] = field(default_factory=list)

    @property
    def stream(self) -> list[dict]:
        return self.history.messages

    @property
    def recorded_compactions(self) -> list[RecordedCompaction]:
        return self.history.compactions

    @property
    def stream_texts(self) -> list[str]:
        return self.history.texts()

    @property
    def stream_identifiers(self) -> list[list[str]]:
        from .metrics import identifiers

        texts = self.stream_texts
        return self.history.derived("identifiers", lambda: [identifiers(t) for t in texts])

    def context(self, step: int) -> list[dict]:
        """The request messages (history part, after aging/masking) of ``step``."""
        if self.contexts is None:
            raise RuntimeError("this replay ran with keep_contexts=False; rerun with keep_contexts=True")
        return self.contexts[step]

    def origin_of(self, msg: dict) -> int | None:
        """The stream index ``msg`` comes from (copies resolved), ``None`` for summaries."""
        mid = msg.get("id")
        idx = self.origin_ids.get(mid) if mid is not None else None
        if idx is not None:
            return idx
        source = msg.get("copied_from")
        return self.origin_ids.get(source) if source is not None else None

    def metrics(self, prices: Any = None, *, reference_loss: bool = True) -> dict[str, Any]:
        from .metrics import summarize

        return summarize(self, prices, reference_loss=reference_loss)

    def compactions_df(self) -> Any:
        import pandas as pd

        cols = [
            "step", "stream_index", "turn", "reason", "tokens_before", "tokens_after", "folded",
            "kept", "protected", "fell_back_to_structural", "ok", "cut_index", "summary_chars",
        ]
        rows = [
            {
                **{k: getattr(c, k) for k in cols if hasattr(c, k)},
                "folded": len(c.folded_ids),
                "kept": len(c.kept_ids),
                "protected": len(c.protected_ids),
                "summary_chars": len(c.summary_text),
            }
            for c in self.compactions
        ]
        return pd.DataFrame(rows, columns=cols)


def common_prefix_length(previous: Sequence[dict], current: Sequence[dict]) -> int:
    """How many leading messages ``current`` shares unchanged with ``previous``.

    Identity is checked first (a replay shares unchanged dicts between steps),
    then equality of role, id and text.
    """
    n = min(len(previous), len(current))
    # C-speed identity pass first: a replay shares unchanged dicts between steps
    same = list(map(operator.is_, previous[:n], current[:n]))
    i = same.index(False) if False in same else n
    while i < n:
        a, b = previous[i], current[i]
        if a is not b and not _same_message(a, b):
            break
        i += 1
    return i


def _same_message(a: dict, b: dict) -> bool:
    return (
        a.get("role") == b.get("role")
        and a.get("id") == b.get("id")
        and a.get("content") == b.get("content")
        and a.get("extra") == b.get("extra")
        and a.get("tool_calls") == b.get("tool_calls")
    )
