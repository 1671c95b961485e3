"""What a replay produces: :class:`ReplayResult` and :class:`ReplayCompaction`.

The result of ``opctx.lab.replay.replay`` (described in that module's docstring),
re-exported there. Imports point one way: ``replay`` -> this module -> ``metrics``.
``ReplayResult.metrics()`` and ``stream_identifiers`` are ``metrics``' functions
applied to the result; ``metrics`` itself never imports this module (it reads any
object of the ``metrics.Replayed`` shape), so there is no circle, not even inside a
function. ``feasibility`` (whether the configuration can work at all) likewise reads the
result without importing it.

``mode`` says how the replay counted its requests: ``"provider usage"`` (the recording's
provider counts fed back, the default where the recording has them) or ``"estimates"``.
``metrics()`` carries it (``replay_mode``) with the feasibility columns, so a sweep row
says which of the two a figure was measured in and whether its configuration could work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .feasibility import ESTIMATES, FeasibilityReport, feasibility
from .history import RecordedCompaction, RecordedHistory
from .metrics import identifiers, summarize

__all__ = ["ReplayResult", "ReplayCompaction"]

_SUMMARY_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


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
    #: how the requests were counted: "provider usage" (feed_usage) or "estimates"
    mode: str = ESTIMATES

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

    def metrics(self, prices: Any = None, *, reference_loss: bool | None = None, cache: Any = None,
                warn: bool = True) -> dict[str, Any]:
        """``opctx.lab.metrics.summarize`` plus the mode and the feasibility columns
        (``FeasibilityReport.row``: ``replay_mode``, ``feasible``, ``feasibility_problems`` ...);
        ``reference_loss`` defaults to whether the replay kept its contexts (reference loss
        reads them)."""
        if reference_loss is None:
            reference_loss = self.contexts is not None
        return {**summarize(self, prices, reference_loss=reference_loss, cache=cache, warn=warn),
                **self.feasibility().row()}

    def feasibility(self) -> FeasibilityReport:
        """Whether this configuration can work on this session (``opctx.lab.feasibility``)."""
        return feasibility(self)

    def compactions_df(self) -> Any:
        import pandas as pd

        cols = [
            "step", "stream_index", "turn", "reason", "tokens_before", "tokens_after", "folded",
            "kept", "protected", "fell_back_to_structural", "ok", "error", "cut_index", "summary_chars",
            "summary_model", "summary_input_tokens", "summary_output_tokens", "summary_calls", "summary_cached",
            "policy", "replay_mode",
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
                "replay_mode": self.mode,
            }
            for c in self.compactions
        ]
        return pd.DataFrame(rows, columns=cols)

    def summary_requests(self) -> list[dict[str, Any]]:
        """The summariser's calls, one per compaction that made any (a compaction that
        summarised and then made no progress included: its ``compaction_failed`` event),
        in step order: ``model``, the token counts under ``opctx.lab.prices.request_cost``'s
        names, ``step``, ``time`` (the request's recorded time), ``calls``, ``cached``,
        ``estimated``, ``compacted``. ``opctx.lab.costs.requests_from_summaries`` prices them
        directly (``kind="summary"``, apart from the agent's requests)."""
        times = self.steps_df["timestamp"].tolist() if len(self.steps_df) else []
        made = [(c.to_dict(), True) for c in self.compactions]
        made += [(e, False) for e in self.events if e.get("event") == "compaction_failed"]
        out = []
        for d, compacted in sorted(made, key=lambda x: x[0].get("step", 0)):
            if not d.get("summary_calls"):
                continue
            step = int(d.get("step", 0))
            out.append({
                "model": d.get("summary_model") or self.model,
                **{k: int(d.get(f"summary_{k}", 0)) for k in _SUMMARY_TOKENS},
                "step": step, "time": times[step] if step < len(times) else None, "calls": d["summary_calls"],
                "cached": bool(d.get("summary_cached")), "estimated": bool(d.get("summary_tokens_estimated")),
                "compacted": compacted,
            })
        return out

    @property
    def policy_json(self) -> str | None:
        """``policy`` as the JSON the frames carry (``CompactionPolicy.to_json``), or None."""
        return self.policy.to_json() if self.policy is not None else None
