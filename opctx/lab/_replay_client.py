"""The recording's client in a replay: which client a preset models, the client version a
replay of its own client's recording runs with, and what that client compares with its
trigger (``opctx.lab.replay`` re-exports all of it)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from .history import RecordedHistory

__all__ = ["TRIGGER_CHECKS", "preset_client", "with_client_version", "client_check_count",
           "resolve_trigger_check"]

logger = logging.getLogger("opctx.lab.replay")

TRIGGER_CHECKS = ("request", "last-response")

_NO_VERSION_WARNED: set[str] = set()
_NO_VERSION_LOCK = threading.Lock()


def preset_client(engine_or_preset: Any) -> str | None:
    """The client a preset models (``"claude-code"``, ``"codex"``), ``None`` for the others.

    Preset names look the client up in ``PRESETS``; objects that take a client
    version (a ``CalibratedPreset``: ``accepts_client_version``) say it in ``client``.
    """
    from opctx.context.policy import CompactionPolicy

    from .presets import PRESETS, PresetSpec

    if isinstance(engine_or_preset, str):
        spec = PRESETS.get(engine_or_preset)
        return spec.client if spec is not None else None
    if isinstance(engine_or_preset, PresetSpec):
        return engine_or_preset.client
    if isinstance(engine_or_preset, CompactionPolicy):
        return engine_or_preset.client.name
    if getattr(engine_or_preset, "accepts_client_version", False):
        return getattr(engine_or_preset, "client", None)
    return None


def with_client_version(history: RecordedHistory, engine_or_preset: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the recording's ``client_version`` for a preset that models its client.

    Explicit ``client_version`` wins; a preset of another client (or none) gets
    nothing. The version is the one in force where the replayed stream starts
    (``version_at(prefix_len)``: a ``resume_after`` segment starts after its head and
    summary). A recording of the client that names no version resolves the default
    rule of ``TRIGGER_RULES`` (said once per process and client).
    """
    client = preset_client(engine_or_preset)
    if client is None or "client_version" in params or client != history.client:
        return params
    version = history.version_at(history.prefix_len) if history.messages else history.client_version
    if version is None:
        with _NO_VERSION_LOCK:
            first = client not in _NO_VERSION_WARNED
            _NO_VERSION_WARNED.add(client)
        if first:
            logger.warning(
                "replay: a %s recording names no client version (%s); its %s preset uses the default rule "
                "of opctx.lab.presets.TRIGGER_RULES (pass client_version= to choose one)",
                client, history.session_id or history.title or "a message list", client,
            )
    return {**params, "client_version": version}


def client_check_count(history: RecordedHistory, engine_or_preset: Any, params: dict[str, Any]) -> str:
    """What the recording's client compares with its trigger (``client_rules.CHECK_COUNTS``):
    the last response's prompt + output, plus (Claude Code 2.1.2+) its estimate of the
    messages after it or (Codex) of the older encrypted reasoning, per the version's row of
    ``client_rules.TRIGGER_RULES``. Only for a client preset on its own client's recording;
    ``"last-response"`` otherwise."""
    from .client_rules import rule_for

    client = preset_client(engine_or_preset)
    if client is None or client != history.client:
        return "last-response"
    return rule_for(client, params.get("client_version"))[0].count


def resolve_trigger_check(history: RecordedHistory, engine_or_preset: Any, trigger_check: str | None) -> str:
    """``trigger_check`` or its default: the client's way for its own recordings."""
    if trigger_check is not None:
        if trigger_check not in TRIGGER_CHECKS:
            raise ValueError(f"trigger_check must be one of {TRIGGER_CHECKS}, got {trigger_check!r}")
        return trigger_check
    client = preset_client(engine_or_preset)
    return "last-response" if client is not None and client == history.client else "request"
