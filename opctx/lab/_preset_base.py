"""What every preset is made of: :class:`PresetSpec` (a name, a description, a
``CompactionPolicy`` and where its numbers come from) and ``REPLAY_POLICY``, the policy
every preset starts from. The catalogue itself is ``_preset_specs.PRESETS`` (the client
presets) and ``_strategy_specs`` (the strategies of the literature).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from opctx.context.policy import FROM_CLIENT, LEGACY_NAMES, CompactionPolicy, policy_fields

__all__ = ["PresetSpec", "REPLAY_POLICY", "REPLAY_SOURCE"]

_DEFAULT = CompactionPolicy()
_DOTTED = re.compile(r"\b[a-z]+\.[a-z_]+\b")
# older flat name of each field (the first of its legacy names), for PresetSpec.params
_FLAT = {dotted: flat for flat, dotted in reversed(list(LEGACY_NAMES.items()))}

#: What every preset starts from: the default policy, with a summary call that may take as
#: long as it takes (a replay's own clock decides time, a timeout would be wall-clock).
REPLAY_POLICY = _DEFAULT.replace(**{"summary.timeout": None})
REPLAY_SOURCE = {
    "summary.timeout (None: a replay waits for its summary call)": (
        "assumed (replays are deterministic on the recording's clock; a wall-clock timeout "
        "would make a slow provider's summary structural)"
    ),
}


@dataclass(frozen=True)
class PresetSpec:
    """A named strategy: its policy, and where each of its numbers comes from."""

    name: str
    description: str
    policy: CompactionPolicy
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def client(self) -> str | None:
        """The client whose trigger table applies (``policy.client.name``)."""
        return self.policy.client.name

    @property
    def kind(self) -> str:
        """``"masking"``, ``"view"`` (the recent-events view: the first and last messages sent,
        nothing compacted), ``"none"`` (no ager, no thinking clearing, never compacts) or
        ``"default"``."""
        policy = self.policy
        never = all(v is None for v in (policy.trigger.recommend_pct, policy.trigger.auto_pct,
                                        policy.trigger.emergency_pct))
        if policy.aging.kind == "masking":
            return "masking"
        if policy.aging.kind == "recent-events":
            return "view"
        if never and policy.aging.kind == "none" and policy.aging.keep_thinking_turns is None:
            return "none"
        return "default"

    @property
    def params(self) -> dict[str, Any]:
        """The fields this preset sets differently from the default policy, under their
        older flat names (``keep_ratio``, ``aging_protect_first_n``, ``aging``: False for no
        ager ...): what ``ReplayResult.params`` reports. A field the client decides is left
        out (its value is only known for a window)."""
        out: dict[str, Any] = {}
        for change in _DEFAULT.diff(self.policy):
            if change.new == FROM_CLIENT:
                continue
            if change.name == "aging.kind":
                if change.new == "none":
                    out["aging"] = False
                continue
            if change.name in ("client.name", "summary.timeout") or change.name.startswith("trigger.") and change.new is None:
                continue
            out[_FLAT.get(change.name, change.name)] = change.new
        return out

    def set_fields(self) -> list[str]:
        """The dotted fields this preset sets differently from the default policy."""
        return [c.name for c in _DEFAULT.diff(self.policy)]

    def source_of(self, name: str) -> str:
        """Where the value of dotted field ``name`` comes from, for this preset."""
        for key, source in self.sources.items():
            if name in _DOTTED.findall(key):
                return source
        return next(pf.source for pf in policy_fields() if pf.name == name)
