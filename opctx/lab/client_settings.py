"""The client settings a recording shows: was the client's automatic compaction on?

Claude Code compacts by itself only while ``autoCompactEnabled`` is on (its default;
``/config``, ``DISABLE_AUTO_COMPACT`` and ``DISABLE_COMPACT`` switch it off), and the
setting also moves its microcompaction threshold (``opctx.lab.client_rules``). No
transcript records it, but a recording shows it:

* **on**: the recording holds an automatic compaction (``trigger == "auto"``), or a
  microcompaction line written after a check under the warning threshold of
  auto-compaction off (only the threshold of auto-compaction on was reached);
* **off**: a request went out after a check the client compares (``check_tokens``:
  the version's own figure) had reached the version's threshold, with no compaction in
  between (the client would have compacted first); or, for the clients that write a
  line for each microcompaction (2.1.8-2.1.62), a request went out with no line where the
  microcompaction rule with auto-compaction on would have cleared (its warning threshold
  reached, enough to clear), while the same rule with it off would not have.

``infer_client_settings(history)`` reads the whole recording (it is a property of the
session, like its client version) and says which evidence decided (``evidence``);
``None`` where the recording shows neither. ``loso_settings(histories)`` gives each
session the setting the *other* session groups of its rule show (majority; the client's
default, on, where none does): the figure to score fidelity with, since reading a
session's setting off the session itself is a fit on the scored session.

>>> from opctx.lab.history import RecordedHistory
>>> infer_client_settings(RecordedHistory(messages=[])).auto_compact is None
True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .client_rules import check_tokens, resolve_client_trigger, rule_for
from .history import RecordedHistory

__all__ = ["ClientSettings", "SETTINGS_MODES", "infer_client_settings", "loso_settings", "settings_for"]

# how fidelity tables choose a recording's client settings
SETTINGS_MODES = ("default", "recording", "loso")


@dataclass(frozen=True)
class ClientSettings:
    """A recording's client settings as far as it shows them, and why."""

    auto_compact: bool | None = None
    evidence: str = "nothing recorded decides it"

    def params(self) -> dict[str, Any]:
        """Preset parameters (``replay(..., **settings.params())``): only what is known."""
        return {} if self.auto_compact is None else {"auto_compact": self.auto_compact}


def _window(history: RecordedHistory) -> int:
    from opctx.context.tokens import real_context_window

    return int(history.context_window or real_context_window(history.model or None))


def infer_client_settings(history: RecordedHistory) -> ClientSettings:
    """What ``history`` shows of its client's automatic compaction (module docstring)."""
    if history.client != "claude-code" or not history.messages:
        return ClientSettings()
    auto = [c for c in history.compactions if c.recorded and c.trigger == "auto"]
    if auto:
        return ClientSettings(True, f"automatic compaction recorded at stream index {auto[0].stream_index}")
    window = _window(history)
    found = _trigger_evidence(history, window) or _clearing_evidence(history, window)
    return found or ClientSettings()


def _trigger_evidence(history: RecordedHistory, window: int) -> ClientSettings | None:
    compaction_at = {c.stream_index for c in history.compactions}
    start = 0
    for i, msg in enumerate(history.messages):
        if i in compaction_at:
            start = i
            continue
        if msg.get("role") != "assistant":
            continue
        version = history.version_at(i)
        rule, _ = rule_for("claude-code", version)
        count = check_tokens(history.messages, i, rule.count, start=start, fmt=history.format, model=history.model)
        if count is None:
            continue
        threshold = resolve_client_trigger("claude-code", context_window=window, model=history.model,
                                           client_version=version).auto_tokens
        if count >= threshold:
            return ClientSettings(False, f"request at stream index {i} went out after a check of {count:,} "
                                         f">= the {threshold:,} threshold without a compaction")
    return None


def _clearing_evidence(history: RecordedHistory, window: int) -> ClientSettings | None:
    """A request the on-rule would have cleared before, that went out with no line (2.1.8-2.1.62)."""
    from .microcompact import candidates, plan_clearing, records_microcompaction, rule_for_version

    messages = history.messages
    compaction_at = {c.stream_index for c in history.compactions}
    start, cleared, line_before = 0, set(), False
    for i, msg in enumerate(messages):
        if i in compaction_at:
            start = i
        mc = msg.get("microcompaction")
        if isinstance(mc, dict):
            cleared.update(str(t) for t in mc.get("tool_call_ids") or ())
            line_before = True
            version = history.version_at(i)
            count = check_tokens(messages, i, "last-response", start=start, fmt=history.format, model=history.model)
            off = rule_for_version(version, context_window=window, model=history.model or None, auto_compact=False)
            if off is not None and count is not None and count < off.warning_tokens:
                return ClientSettings(True, f"microcompaction line at stream index {i} after a check of {count:,}, "
                                            f"under the {off.warning_tokens:,} warning threshold of auto-compaction off")
            continue
        if msg.get("role") != "assistant":
            continue
        version = history.version_at(i)
        on = rule_for_version(version, context_window=window, model=history.model or None) \
            if records_microcompaction(version) else None
        count = check_tokens(messages, i, "last-response", start=start, fmt=history.format, model=history.model)
        if on is not None and count is not None and not line_before:
            off = rule_for_version(version, context_window=window, model=history.model or None, auto_compact=False)
            pending = candidates(messages[start:i], on, cleared)
            if plan_clearing(pending, count, on) is not None and plan_clearing(pending, count, off) is None:
                return ClientSettings(False, f"request at stream index {i} went out with no microcompaction line "
                                             f"after a check of {count:,} >= the {on.warning_tokens:,} warning "
                                             "threshold of auto-compaction on")
        line_before = False
    return None


def _group_key(history: RecordedHistory) -> str:
    return rule_for(history.client, history.client_version)[0].label if history.client else ""


def loso_settings(histories: Sequence[RecordedHistory], groups: Sequence[Any] | None = None) -> list[ClientSettings]:
    """Per history: the setting the other session groups of its rule show (module docstring).

    ``groups``: a session-group label per history (histories sharing one are left out
    together; default: each history its own group).
    """
    groups = list(groups) if groups is not None else list(range(len(histories)))
    inferred = [h.derived("client_settings", lambda h=h: infer_client_settings(h)) for h in histories]
    out = []
    for k, history in enumerate(histories):
        votes = Counter(s.auto_compact for j, (h, s) in enumerate(zip(histories, inferred, strict=True))
                        if groups[j] != groups[k] and s.auto_compact is not None
                        and h.client == history.client and _group_key(h) == _group_key(history))
        if not votes:
            out.append(ClientSettings(None, "no other session of this rule shows the setting: the client's default"))
            continue
        value, n = max(votes.items(), key=lambda kv: (kv[1], kv[0]))
        out.append(ClientSettings(value, f"{n} of {sum(votes.values())} other sessions of "
                                         f"{_group_key(history)} show auto-compaction {'on' if value else 'off'}"))
    return out


def settings_for(histories: Sequence[RecordedHistory], mode: str, groups: Sequence[Any] | None = None,
                 ) -> list[ClientSettings]:
    """Each history's settings under ``mode``: ``"default"`` (the client's defaults),
    ``"recording"`` (read off the history itself) or ``"loso"`` (off the other groups)."""
    if mode not in SETTINGS_MODES:
        raise ValueError(f"settings must be one of {SETTINGS_MODES}, got {mode!r}")
    if mode == "default":
        return [ClientSettings(None, "the client's defaults") for _ in histories]
    if mode == "recording":
        return [h.derived("client_settings", lambda h=h: infer_client_settings(h)) for h in histories]
    return loso_settings(histories, groups)
