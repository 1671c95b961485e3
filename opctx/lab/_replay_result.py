"""What a replay produces: :class:`ReplayResult` and :class:`ReplayCompaction`.

The result of ``opctx.lab.replay.replay`` (described in that module's docstring),
re-exported there. Imports point one way: ``replay`` -> this module -> ``metrics``.
``ReplayResult.metrics()`` and ``stream_identifiers`` are ``metrics``' functions
applied to the result; ``metrics`` itself never imports this module (it reads any
object of the ``metrics.Replayed`` shape), so there is no circle, not even inside a
function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .history import RecordedCompaction, RecordedHistory
from .metrics import identifiers, summarize

__all__ = ["ReplayResult", "ReplayCompaction"]


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
    # what the summariser read and wrote for this compaction (opctx.lab._summary_meter): the
    # model that made the summary, its whole prompt (cached part included: opctx's Usage
    # convention) and its reply; 0 calls for a structural or recorded summary. A summary
    # served by the summary cache keeps the counts measured when it was made
    # (summary_cached); summary_tokens_estimated when the provider reported no usage.
    summary_model: str | None = None
    summary_input_tokens: int = 0
    summary_output_tokens: int = 0
    summary_cache_read_tokens: int = 0
    summary_cache_write_tokens: int = 0
    summary_calls: int = 0
    summary_cached: bool = False
    summary_tokens_estimated: bool = False

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
    #: the exact policy the engine ran with (resolved for the window, model and client
    #: version: ``engine.policy``); None for an engine without one
    policy: Any = None

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
        return summarize(self, prices, reference_loss=reference_loss)

    def compactions_df(self) -> Any:
        import pandas as pd

        cols = [
            "step", "stream_index", "turn", "reason", "tokens_before", "tokens_after", "folded",
            "kept", "protected", "fell_back_to_structural", "ok", "error", "cut_index", "summary_chars",
            "summary_model", "summary_input_tokens", "summary_output_tokens", "summary_calls", "summary_cached",
            "policy",
        ]
        policy = self.policy_json
        rows = [
            {
                **{k: getattr(c, k) for k in cols if hasattr(c, k)},
                "folded": len(c.folded_ids),
                "kept": len(c.kept_ids),
                "protected": len(c.protected_ids),
                "summary_chars": len(c.summary_text),
                "policy": policy,
            }
            for c in self.compactions
        ]
        return pd.DataFrame(rows, columns=cols)

    def summary_requests(self) -> list[dict[str, Any]]:
        """The summariser's calls, one per compaction that made any: ``model``, the token
        counts under ``opctx.lab.prices.request_cost``'s names, ``step``, ``time`` (the
        request's recorded time), ``cached``, ``estimated``. ``opctx.lab.costs.requests_from_summaries``
        prices them directly (``kind="summary"``, apart from the agent's requests)."""
        times = self.steps_df["timestamp"].tolist() if len(self.steps_df) else []
        return [
            {"model": c.summary_model or self.model, "input_tokens": c.summary_input_tokens,
             "output_tokens": c.summary_output_tokens, "cache_read_tokens": c.summary_cache_read_tokens,
             "cache_write_tokens": c.summary_cache_write_tokens, "step": c.step,
             "time": times[c.step] if c.step < len(times) else None, "calls": c.summary_calls,
             "cached": c.summary_cached, "estimated": c.summary_tokens_estimated}
            for c in self.compactions if c.summary_calls
        ]

    @property
    def policy_json(self) -> str | None:
        """``policy`` as the JSON the frames carry (``CompactionPolicy.to_json``), or None."""
        return self.policy.to_json() if self.policy is not None else None
