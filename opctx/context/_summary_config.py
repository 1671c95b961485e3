"""``SummarizerConfig``: the flat view of a policy that the cut and the summariser read.

The settings themselves live in ``opctx.context.policy.CompactionPolicy`` (their
defaults and sources are stated there, once). The cut (``_cut.py``) and the summariser
(``summarize.py``) read them flat, under the names of the specification's §4 table,
so this view keeps that shape: ``SummarizerConfig.from_policy(policy)`` builds it, and a
directly constructed one (older code) has the policy's defaults and is checked by the
policy's rules (``to_policy``). The meaning of each field is in the
``opctx.context.summarize`` docstring ("Parameters") and in the policy's field metadata.

``trigger_pct`` / ``recommend_pct`` / ``emergency_pct`` are the summariser's copy of
the engine's thresholds, kept within [0, 1] (a threshold that never fires, or one past
the input budget, is 1.0 here); the engine's own figures come from the policy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from .policy import FROM_CLIENT, LEGACY_NAMES, CompactionPolicy

__all__ = ["SummarizerConfig"]

_D = CompactionPolicy()
_THRESHOLDS = ("trigger_pct", "emergency_pct", "recommend_pct")


@dataclass
class SummarizerConfig:
    """The cut and summary settings of a policy, flat (module docstring)."""

    trigger_pct: float = _D.trigger.auto_pct  # type: ignore[assignment]
    emergency_pct: float = _D.trigger.emergency_pct  # type: ignore[assignment]
    recommend_pct: float = _D.trigger.recommend_pct  # type: ignore[assignment]
    keep_min_tokens: int = _D.cut.keep_min_tokens
    keep_max_tokens: int = _D.cut.keep_max_tokens
    keep_ratio: float = _D.cut.keep_ratio
    keep_min_messages: int = _D.cut.keep_min_messages
    protect_first_n: int = _D.cut.protect_first_n
    protect_last_n: int = _D.cut.protect_last_n
    min_prompt_budget: int = _D.cut.min_prompt_budget
    min_prompt_ratio: float = _D.cut.min_prompt_ratio
    fold_current_turn: bool = _D.cut.fold_current_turn
    keep_initial_request: bool = _D.cut.keep_initial_request
    post_compaction_tokens: int = _D.client.post_compaction_tokens
    max_message_chars: int = _D.summary.max_message_chars
    structural_head_chars: int = _D.summary.structural_head_chars
    summary_output_tokens: int = _D.summary.summary_output_tokens
    timeout: float | None = _D.summary.timeout

    def __post_init__(self) -> None:
        for name in _THRESHOLDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise ValueError(f"SummarizerConfig.{name} must be within [0, 1], got {value!r}")
        self.to_policy()  # every other rule, with the policy's messages (dotted names)

    @classmethod
    def from_policy(cls, policy: CompactionPolicy) -> SummarizerConfig:
        """The view of ``policy`` (thresholds clipped to [0, 1]; never is 1.0)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = policy.get(LEGACY_NAMES[f.name])
            if f.name in _THRESHOLDS:
                if value == FROM_CLIENT:
                    raise ValueError(f"{LEGACY_NAMES[f.name]} is {FROM_CLIENT!r}: resolve the policy first")
                value = 1.0 if value is None else min(1.0, value)
            values[f.name] = value
        return cls(**values)

    def to_policy(self, base: CompactionPolicy | None = None) -> CompactionPolicy:
        """``base`` (default: the default policy) with this view's values; a threshold of
        1.0 stays 1.0 (the view cannot tell it from "never")."""
        changes = {LEGACY_NAMES[f.name]: getattr(self, f.name) for f in fields(self)}
        return (base or _D).replace(**changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SummarizerConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d or {}) - known
        if unknown:
            raise ValueError(f"unknown SummarizerConfig field(s): {', '.join(sorted(unknown))}")
        return cls(**(d or {}))
