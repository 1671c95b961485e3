"""``SummarizerConfig``: every parameter of the specification's §4 table, plus the
settings of the summary call (additions).

Its own module because three readers share it: the cut (``_cut.py``), the
summariser (``summarize.py``) and the engine's triggers. The meaning of each
field is in the ``opctx.context.summarize`` docstring ("Parameters").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["SummarizerConfig"]


@dataclass
class SummarizerConfig:
    """Every parameter of the §4 table, plus the summary-call settings (additions)."""

    trigger_pct: float = 0.80
    emergency_pct: float = 0.95
    recommend_pct: float = 0.70
    keep_min_tokens: int = 8_000
    keep_max_tokens: int = 40_000
    keep_ratio: float = 0.10
    keep_min_messages: int = 5
    protect_first_n: int = 3
    protect_last_n: int = 20
    min_prompt_budget: int = 8_000
    min_prompt_ratio: float = 0.25
    # addition (the cut): fold the current turn too, keeping only the latest request verbatim
    fold_current_turn: bool = False
    # addition (replays): tokens a client adds after each compaction that no history holds
    post_compaction_tokens: int = 0
    # additions: the summary call itself
    max_message_chars: int = 4_000
    structural_head_chars: int = 60
    summary_output_tokens: int = 4_096
    timeout: float | None = 120.0

    def __post_init__(self) -> None:
        for name in (
            "trigger_pct",
            "emergency_pct",
            "recommend_pct",
            "keep_ratio",
            "min_prompt_ratio",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"SummarizerConfig.{name} must be within [0, 1], got {value!r}")
        for name in (
            "keep_min_tokens",
            "keep_max_tokens",
            "keep_min_messages",
            "protect_first_n",
            "protect_last_n",
            "min_prompt_budget",
            "max_message_chars",
            "structural_head_chars",
            "summary_output_tokens",
            "post_compaction_tokens",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"SummarizerConfig.{name} must be a non-negative int, got {value!r}"
                )
        if not isinstance(self.fold_current_turn, bool):
            raise ValueError(
                f"SummarizerConfig.fold_current_turn must be a bool, got {self.fold_current_turn!r}"
            )
        if self.keep_min_tokens > self.keep_max_tokens:
            raise ValueError(
                f"SummarizerConfig.keep_min_tokens ({self.keep_min_tokens}) exceeds "
                f"keep_max_tokens ({self.keep_max_tokens})"
            )
        if not self.recommend_pct <= self.trigger_pct <= self.emergency_pct:
            raise ValueError(
                "SummarizerConfig thresholds must satisfy recommend_pct <= trigger_pct <= emergency_pct, "
                f"got {self.recommend_pct}, {self.trigger_pct}, {self.emergency_pct}"
            )
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(
                f"SummarizerConfig.timeout must be positive or None, got {self.timeout!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SummarizerConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d or {}) - known
        if unknown:
            raise ValueError(f"unknown SummarizerConfig field(s): {', '.join(sorted(unknown))}")
        return cls(**(d or {}))
