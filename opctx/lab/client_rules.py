"""What the recorded clients compare with their auto-compaction threshold, version by version.

A replay that claims to compact "where Claude Code would" needs three things for the
client version of the recording: the threshold, the figure the client compares with
it, and the settings that switch it off. This module is the one home of those rules
(``TRIGGER_RULES``, ``resolve_client_trigger``, ``check_tokens``); the presets
(``opctx.lab.presets``), the microcompaction model (``opctx.lab.microcompact``) and
the fidelity tables read them from here. Each row names where it was read.

Claude Code
===========
Read in the client itself: ``package/cli.js`` of the npm package
``@anthropic-ai/claude-code`` at each version listed (minified; the names below are
the de-minified reading). The check runs before every request of the main loop.

==============  ======================================================  ==========================
versions        threshold (default settings, 200K window)               figure compared
==============  ======================================================  ==========================
1.0.0-1.0.15    0.92 x 180,000 = 165,600 (the window is a constant)     the last response's usage:
                                                                        input + cache creation +
                                                                        cache read + output
1.0.16-1.0.70   0.92 x (200,000 - max output) = 154,560                 the same
1.0.71-2.1.1    window - max output - 13,000 = 155,000                  the same
2.1.2-2.1.20    the same                                                the same plus an estimate of
                                                                        every message after that
                                                                        response (text and tool
                                                                        results: characters / 4,
                                                                        1,334 per image)
2.1.21-         window - min(max output, 20,000) - 13,000 = 167,000     the same as 2.1.2
==============  ======================================================  ==========================

Max output: before 1.0.71, 8,192 for "3-5" and "haiku" models, else
``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` (default 32,000); from 2.0 the smaller of that
setting (default 32,000, capped at 64,000) and the model's own maximum. opctx takes the
model's maximum from its model table, at most 32,000 (``max_output_tokens=`` sets the
client's setting). The window is 200,000, or 1,000,000 for ``[1m]`` models.

The warning threshold (microcompaction fires only above it): 1.0.x ``0.6`` (to 1.0.50;
"Increased auto-compact warning threshold from 60% to 80%", changelog 1.0.51) then
``0.8`` times the auto-compaction threshold; from 1.0.71 the threshold minus 20,000.
With auto-compaction off (``autoCompactEnabled`` false in the settings, or
``DISABLE_COMPACT`` / ``DISABLE_AUTO_COMPACT`` set) the client never compacts by itself
and the warning is taken from the effective window (window - reserve) instead: 148,000
instead of 135,000 for 2.0-2.1.20 at 200K (``auto_compact=False``).

Versions before 1.0.0 have no rule here: ``rule_for`` says so (``known=False``) and the
fidelity tables report such rows as unsourced. ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``
(``autocompact_pct_override``) lowers the threshold (``min``); from 2.1.75
``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` (``auto_compact_window``) lowers the window; later
clients can also take it from their settings or a server-side experiment, which no
transcript records.

Codex
=====
``model_auto_compact_token_limit``, else 90 % of the model family's context window
(272,000 for gpt-5.x: 244,800; openai/codex ``codex-rs/core/src/models_manager/
model_family.rs``). After each sampling request that needs a follow-up, Codex compares
``ContextManager::get_total_token_usage``: the last response's ``total_tokens`` plus
the estimated size of the encrypted reasoning items *before the last user message*
(``ceil(sum(max(0, len(encrypted_content) * 3 / 4 - 650)) / 4)``, codex-rs
``context_manager/history.rs``, ``get_non_last_reasoning_items_tokens`` and
``estimate_reasoning_length``). On the corpus the only Codex compaction (0.77.0) came at
210,652 + 39,107 = 249,759 after a check at 201,114 + 39,107 = 240,221: 244,800 lies
between, where the last total alone never reached it.

>>> rule_for("claude-code", "1.0.70")[0].label
'claude-code 1.0.51-1.0.70'
>>> rule_for("claude-code", "0.2.125")[1]
False
>>> resolve_client_trigger("claude-code", context_window=200_000, client_version="1.0.70").auto_tokens
154560
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .history import parse_version, provider_prompt_tokens

__all__ = [
    "TriggerRule",
    "TriggerResolution",
    "TRIGGER_RULES",
    "DEFAULT_TRIGGER_RULES",
    "CHECK_COUNTS",
    "rule_for",
    "resolve_client_trigger",
    "check_tokens",
    "extra_check_tokens",
    "codex_reasoning_tokens",
    "js_round",
    "CLAUDE_CODE_BUFFER",
    "CLAUDE_CODE_DEFAULT_MAX_OUTPUT",
    "CLAUDE_CODE_WARNING_BUFFER",
    "CLAUDE_CODE_BLOCKING_BUFFER",
    "CLAUDE_CODE_IMAGE_TOKENS",
    "CODEX_MODEL_WINDOWS",
    "CODEX_EFFECTIVE_WINDOW_PERCENT",
    "NEVER",
]

logger = logging.getLogger(__name__)

# Claude Code constants (tokens); cli.js 1.0.71-2.1.101 (module docstring)
CLAUDE_CODE_BUFFER = 13_000
CLAUDE_CODE_DEFAULT_MAX_OUTPUT = 32_000
CLAUDE_CODE_WARNING_BUFFER = 20_000
CLAUDE_CODE_BLOCKING_BUFFER = 3_000
# what cli.js 2.1.2+ adds for an image in the messages after the last response
CLAUDE_CODE_IMAGE_TOKENS = 1_334
# Codex: the context window of a model family (codex-rs model_family.rs), longest prefix wins;
# rollouts report 95% of it (effective_context_window_percent) as model_context_window
CODEX_MODEL_WINDOWS = {
    "gpt-5": 272_000,
    "codex-": 272_000,
    "codex-mini-latest": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-oss": 96_000,
    "gpt-3.5": 16_385,
}
CODEX_EFFECTIVE_WINDOW_PERCENT = 95
# a threshold that is never reached (auto-compaction off)
NEVER = 10**15
# what a client compares with its threshold (module docstring)
CHECK_COUNTS = ("last-response", "last-response+after", "last-response+reasoning")

_CLI = "npm @anthropic-ai/claude-code package/cli.js"


@dataclass(frozen=True)
class TriggerRule:
    """One row of a client's trigger table: the versions it covers, the rule, its source.

    Claude Code rows: threshold = ``window - reserve - buffer`` (reserve = the max output,
    capped at ``reserve_cap`` when set), or, with ``trigger_fraction``, that fraction of
    ``(base - max output)`` where ``base`` is ``fixed_window`` (1.0.x: a constant, the
    1.0.0-1.0.15 form has no reserve: ``fixed_reserve`` False) ... Codex rows: threshold =
    ``window_fraction`` x the model's context window. ``count``: what is compared
    (``CHECK_COUNTS``). ``warning_fraction``: the warning threshold as a fraction of the
    threshold (1.0.x), else the threshold minus 20,000.
    """

    client: str
    first: str | None  # first version covered (inclusive); None: every earlier one
    last: str | None  # last version covered (inclusive); None: every later one
    rule: str
    source: str
    reserve_cap: int | None = None
    buffer: int = 0
    window_fraction: float = 0.0
    trigger_fraction: float = 0.0
    fixed_window: int | None = None
    fixed_reserve: bool = True
    count: str = "last-response"
    warning_fraction: float = 0.0

    @property
    def label(self) -> str:
        if self.first is None and self.last is None:
            return f"{self.client} (all versions)"
        if self.last is None:
            return f"{self.client} >={self.first}"
        return f"{self.client} {self.first or '0'}-{self.last}"

    def covers(self, version: tuple[int, int, int] | None) -> bool:
        if version is None:
            return False
        first = parse_version(self.first) if self.first else None
        last = parse_version(self.last) if self.last else None
        return (first is None or version >= first) and (last is None or version <= last)


_ONE_ZERO = ("0.92 x (200,000 - max output): 154,560 at the default 32,000 (max output 8,192 for "
             "'3-5'/'haiku' models, else CLAUDE_CODE_MAX_OUTPUT_TOKENS)")
TRIGGER_RULES: tuple[TriggerRule, ...] = (
    TriggerRule(
        "claude-code", "1.0.0", "1.0.15",
        rule="0.92 x 180,000 = 165,600 (a constant window; compared: the last response's prompt + output)",
        source=f"{_CLI} 1.0.0, 1.0.11, 1.0.15 (var 180000, 0.92: isAboveAutoCompactThreshold = count >= 180000*0.92; "
               "warning 0.6 of it)",
        trigger_fraction=0.92, fixed_window=180_000, fixed_reserve=False, warning_fraction=0.6,
    ),
    TriggerRule(
        "claude-code", "1.0.16", "1.0.50",
        rule=_ONE_ZERO,
        source=f"{_CLI} 1.0.16, 1.0.17, 1.0.22, 1.0.30 (200000 - maxOutput(model), x 0.92; warning 0.6 of it)",
        trigger_fraction=0.92, fixed_window=200_000, warning_fraction=0.6,
    ),
    TriggerRule(
        "claude-code", "1.0.51", "1.0.70",
        rule=_ONE_ZERO,
        source=f"{_CLI} 1.0.51, 1.0.55, 1.0.58, 1.0.61, 1.0.70 (the same; warning 0.8 of it: changelog 1.0.51 "
               "'Increased auto-compact warning threshold from 60% to 80%')",
        trigger_fraction=0.92, fixed_window=200_000, warning_fraction=0.8,
    ),
    TriggerRule(
        "claude-code", "1.0.71", "2.1.1",
        rule="window - max output - 13,000: 155,000 at 200K and the default 32,000 (compared: the last "
             "response's prompt + output)",
        source=(
            f"{_CLI} 1.0.71, 1.0.72, 1.0.73, 1.0.77, 1.0.85, 1.0.100, 2.0.0, 2.0.74, 2.0.76, 2.1.0, 2.1.1 "
            "(effective window - 13000; warning and error 20000 below it); '/context' Autocompact buffer 45.0k "
            "(anthropics/claude-code#10266, #15435), 77.0k with CLAUDE_CODE_MAX_OUTPUT_TOKENS=64000 (#17660); "
            "measured: the six default-configuration 2.0.74-2.0.76 automatic compactions of ../shared/corpus "
            "all lie in (154,906, 155,199]"
        ),
        buffer=CLAUDE_CODE_BUFFER,
    ),
    TriggerRule(
        "claude-code", "2.1.2", "2.1.20",
        rule="window - max output - 13,000: 155,000 at 200K (compared: the last response's prompt + output "
             "plus characters / 4 of every message after it)",
        source=(
            f"{_CLI} 2.1.2, 2.1.5, 2.1.7, 2.1.8, 2.1.9, 2.1.19, 2.1.20 (the auto-compact count adds the "
            "estimate of the messages after the last response; 2.1.1 does not); #20760 ('Autocompact buffer: "
            "45.0k tokens' on 2.1.19)"
        ),
        buffer=CLAUDE_CODE_BUFFER, count="last-response+after",
    ),
    TriggerRule(
        "claude-code", "2.1.21", None,
        rule="window - min(max output, 20,000) - 13,000: 167,000 at 200K (compared as 2.1.2)",
        source=(
            f"{_CLI} 2.1.21, 2.1.50, 2.1.62, 2.1.75, 2.1.101 (Math.min(maxOutput, 20000)); changelog 2.1.21 "
            "('Fixed auto-compact triggering too early on models with large output token limits'); "
            "anthropics/claude-code#31806 (deobfuscated getAutoCompactThreshold), #23409 ('Autocompact buffer: "
            "33k'). Not modelled: the auto-compact window from settings or a server-side experiment (2.1.101)"
        ),
        reserve_cap=20_000, buffer=CLAUDE_CODE_BUFFER, count="last-response+after",
    ),
    TriggerRule(
        "codex", None, None,
        rule="model_auto_compact_token_limit, else 90% of the model's context window (244,800 for gpt-5*); "
             "compared: the last response's total plus the estimate of the encrypted reasoning before the last "
             "user message",
        source=(
            "openai/codex codex-rs/core/src/models_manager/model_family.rs (auto_compact_token_limit() = config "
            "override or context_window * 9 / 10; gpt-5.x and codex models: CONTEXT_WINDOW_272K; "
            "effective_context_window_percent 95); codex-rs/core/src/context_manager/history.rs "
            "(get_total_token_usage = last_token_usage.total_tokens + get_non_last_reasoning_items_tokens; "
            "estimate_reasoning_length = len * 3 / 4 - 650; approx_tokens_from_byte_count = ceil(bytes / 4)); "
            "codex.rs (token_limit_reached && needs_follow_up -> run_auto_compact); corpus 0.77.0: 244,800 in "
            "(240,221, 249,759]"
        ),
        window_fraction=0.9, count="last-response+reasoning",
    ),
)
# what a version the table does not cover is replayed with (its rows say it is unsourced)
DEFAULT_TRIGGER_RULES = {"claude-code": TRIGGER_RULES[-2], "codex": TRIGGER_RULES[-1]}

_WARNED_VERSIONS: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()


def _warn_unknown_version(client: str, version: str, rule: TriggerRule) -> None:
    """One warning per process and (client, version): a sweep warns once, not per replay."""
    with _WARNED_LOCK:
        if (client, version) in _WARNED_VERSIONS:
            return
        _WARNED_VERSIONS.add((client, version))
    logger.warning(
        "%s version %r has no sourced rule in opctx.lab.client_rules.TRIGGER_RULES: replayed with %s (%s), "
        "and fidelity tables count its compactions as unsourced; pass the client's settings "
        "(max_output_tokens, auto_compact_window, ...) or calibrate (opctx.lab.calibrate)",
        client, version, rule.label, rule.rule,
    )


def rule_for(client: str, version: str | None) -> tuple[TriggerRule, bool]:
    """The table row for ``client`` at ``version`` and whether a sourced row covers it.

    A version no row covers (Claude Code before 1.0.0, an unparsable string, no version)
    gets the client's default row with ``False``: it is replayed with it, and every table
    that reports the rule says it is not sourced for that version.
    """
    parsed = parse_version(version)
    for rule in TRIGGER_RULES:
        if rule.client == client and rule.covers(parsed):
            return rule, True
    if client == "codex":
        return DEFAULT_TRIGGER_RULES[client], parsed is not None or version is None
    return DEFAULT_TRIGGER_RULES[client], False


@dataclass(frozen=True)
class TriggerResolution:
    """A client's thresholds for one recording: absolute tokens of the figure it compares."""

    client: str
    version: str | None
    known: bool  # a sourced TRIGGER_RULES row covers the version
    rule: TriggerRule
    context_window: int
    output_reserve: int
    auto_tokens: int
    recommend_tokens: int
    emergency_tokens: int
    overridden_by: tuple[str, ...] = ()
    warning_tokens: int = 0
    auto_compact: bool = True

    @property
    def source(self) -> str:
        return self.rule.source if not self.overridden_by else f"parameters {', '.join(self.overridden_by)}"

    @property
    def rule_label(self) -> str:
        """The rule that ran, or why none is sourced (what the tables print)."""
        if self.known:
            return self.rule.label
        return f"no sourced rule for {self.client} {self.version!r} (replayed with {self.rule.label})"


def _codex_window(model: str | None, context_window: int) -> int:
    """The window Codex computes its limit from: the model's own if the replay runs at it."""
    name = (model or "").lower()
    best = max((p for p in CODEX_MODEL_WINDOWS if name.startswith(p)), key=len, default=None)
    family = CODEX_MODEL_WINDOWS.get(best) if best else None
    # a rollout reports 95% of the model's window; a replay at it or above (opctx's model table
    # gives the API's larger window) runs the model as Codex does; a smaller what-if window is its own
    if family and context_window >= family * CODEX_EFFECTIVE_WINDOW_PERCENT // 100 - 1:
        return family
    return context_window


def _claude_code_max_output(model: str | None) -> int:
    from opctx.context.tokens import model_info

    info = model_info(model) if model else None
    known = info.max_output if info is not None and info.known and info.family == "anthropic" else None
    return min(known, CLAUDE_CODE_DEFAULT_MAX_OUTPUT) if known else CLAUDE_CODE_DEFAULT_MAX_OUTPUT


def _check_settings(client: str, given: dict[str, Any]) -> None:
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{key} must be a positive number, got {value!r}")
    codex_only = {"auto_compact_token_limit", "trigger_window_fraction"}
    if client == "codex":
        foreign = sorted(set(given) - codex_only)
        if foreign:
            raise ValueError(f"{foreign} are Claude Code settings; the codex preset takes auto_compact_token_limit / "
                             "trigger_window_fraction")
        if given.get("trigger_window_fraction", 0) > 1:
            raise ValueError(f"trigger_window_fraction must be at most 1, got {given['trigger_window_fraction']!r}")
        return
    foreign = sorted(set(given) & codex_only)
    if foreign:
        raise ValueError(f"{foreign} are Codex settings; the claude-code preset takes trigger_before_window and "
                         "Claude Code's own settings")
    if given.get("autocompact_pct_override", 0) > 100:
        raise ValueError(f"autocompact_pct_override is a percentage (1-100), got {given['autocompact_pct_override']!r}")


def resolve_client_trigger(
    client: str,
    *,
    context_window: int,
    model: str | None = None,
    client_version: str | None = None,
    output_reserve: int = 1_024,
    auto_compact: bool | None = None,
    **settings: Any,
) -> TriggerResolution:
    """The thresholds of ``client`` for a recording's version, model and window.

    ``settings``: the client's own settings (``max_output_tokens``,
    ``auto_compact_window``, ``autocompact_pct_override``, ``auto_compact_token_limit``)
    and calibrated figures (``trigger_before_window``, ``trigger_window_fraction``);
    ``auto_compact=False``: the client never compacts by itself (``auto_tokens`` is
    ``NEVER``; the warning follows the effective window). ``output_reserve``: the Codex
    preset's budget reserve (Codex budgets against the whole window).

    >>> r = resolve_client_trigger("claude-code", context_window=200_000, client_version="2.0.76")
    >>> r.auto_tokens, r.warning_tokens, r.rule.label
    (155000, 135000, 'claude-code 1.0.71-2.1.1')
    >>> resolve_client_trigger("claude-code", context_window=200_000, client_version="2.1.19",
    ...                        auto_compact=False).warning_tokens
    148000
    """
    window = int(context_window)
    if window <= 0:
        raise ValueError(f"context_window must be positive, got {context_window!r}")
    rule, known = rule_for(client, client_version)
    if not known and client_version is not None:
        _warn_unknown_version(client, str(client_version), rule)
    given = {k: v for k, v in settings.items() if v is not None}
    allowed = {"max_output_tokens", "auto_compact_window", "autocompact_pct_override", "auto_compact_token_limit",
               "trigger_before_window", "trigger_window_fraction"}
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ValueError(f"unknown client setting(s) {unknown}")
    _check_settings(client, given)
    enabled = auto_compact is not False
    overridden = tuple(sorted([*given, *(["auto_compact"] if auto_compact is False else [])]))
    if client == "codex":
        base = _codex_window(model, window)
        fraction = given.get("trigger_window_fraction", rule.window_fraction)
        auto = int(given["auto_compact_token_limit"]) if "auto_compact_token_limit" in given else int(fraction * base)
        auto = auto if enabled else NEVER
        return TriggerResolution(
            client, client_version, known, rule, window, int(output_reserve),
            auto_tokens=auto, recommend_tokens=auto, emergency_tokens=max(auto, window),
            overridden_by=overridden, warning_tokens=auto, auto_compact=enabled,
        )
    return _claude_code_resolution(rule, known, client_version, window, model, given, enabled, overridden)


def _claude_code_resolution(rule: TriggerRule, known: bool, version: str | None, window: int, model: str | None,
                            given: dict[str, Any], enabled: bool, overridden: tuple[str, ...]) -> TriggerResolution:
    from opctx.context.budget import BudgetAllocator
    from opctx.context.tokens import real_context_window

    max_output = int(given["max_output_tokens"]) if "max_output_tokens" in given else _claude_code_max_output(model)
    reserve = max_output if rule.reserve_cap is None else min(max_output, rule.reserve_cap)
    real = real_context_window(model or None)
    if window < real:
        # a what-if window smaller than the model's: cap the reserve as opctx's budget does (25%)
        reserve = BudgetAllocator(output_reserve=reserve).reserve_for(window, model)
    reserve = min(reserve, window // 2)
    compact_window = min(window, int(given["auto_compact_window"])) if "auto_compact_window" in given else window
    if rule.trigger_fraction:
        # 1.0.x: a fraction of a constant window (less the reserve from 1.0.16); a smaller
        # what-if window takes the constant's place
        base = min(rule.fixed_window or compact_window, compact_window) if window >= real else compact_window
        effective = base - (reserve if rule.fixed_reserve else 0)
        auto = int(effective * rule.trigger_fraction)
    else:
        effective = compact_window - reserve
        auto = effective - rule.buffer
    if "trigger_before_window" in given:
        auto = compact_window - int(given["trigger_before_window"])
    if "autocompact_pct_override" in given:
        # the override is a share of the effective window and can only lower the trigger (#31806)
        auto = min(math.floor(effective * given["autocompact_pct_override"] / 100), auto)
    ceiling = auto if enabled else effective
    warning = int(ceiling * rule.warning_fraction) if rule.warning_fraction else ceiling - CLAUDE_CODE_WARNING_BUFFER
    blocking = window - reserve - CLAUDE_CODE_BLOCKING_BUFFER
    if not enabled:
        auto = NEVER
    return TriggerResolution(
        "claude-code", version, known, rule, window, reserve,
        auto_tokens=int(auto),
        recommend_tokens=int(min(auto, warning)),
        emergency_tokens=int(max(auto, blocking)),
        overridden_by=overridden, warning_tokens=int(warning), auto_compact=enabled,
    )


# -- the figure a client compares ------------------------------------------------------------------


def js_round(value: float) -> int:
    """``Math.round`` as the clients' JavaScript does it (halves up), not Python's banker's rounding.

    >>> js_round(2.5), round(2.5)
    (3, 2)
    """
    return math.floor(value + 0.5)


def _text_chars(content: Any) -> tuple[int, int]:
    """(characters of text, images) of a message content as the client's estimate counts it."""
    if isinstance(content, str):
        return len(content), 0
    chars = images = 0
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                chars += len(block)
            elif isinstance(block, dict):
                kind = block.get("type")
                if kind == "text":
                    chars += len(block.get("text") or "")
                elif kind == "image":
                    images += 1
                elif kind == "tool_result":
                    c, i = _text_chars(block.get("content"))
                    chars, images = chars + c, images + i
    return chars, images


def _after_tokens(msg: dict) -> int:
    """cli.js 2.1.2+ estimate of one message after the last response (what the model sees)."""
    if msg.get("display_only") or msg.get("role") not in ("user", "tool"):
        return 0
    content = msg.get("inline_output") if msg.get("inline_output") is not None else msg.get("content")
    chars, images = _text_chars(content)
    return js_round(chars / 4) + CLAUDE_CODE_IMAGE_TOKENS * images


def codex_reasoning_tokens(messages: Sequence[dict], end: int, start: int = 0) -> int:
    """Codex's estimate of the encrypted reasoning before the last user message in ``[start, end)``.

    ``ceil(sum(max(0, len * 3 // 4 - 650)) / 4)`` over the ``reasoning_encrypted`` items of
    the assistant messages before the last user message (codex-rs ``history.rs``).

    >>> msgs = [{"role": "assistant", "reasoning_encrypted": ["x" * 4000]}, {"role": "user", "content": "go"}]
    >>> codex_reasoning_tokens(msgs, 2)
    588
    """
    last_user = max((i for i in range(start, end) if messages[i].get("role") == "user"), default=None)
    if last_user is None:
        return 0
    total = 0
    for msg in messages[start:last_user]:
        for blob in msg.get("reasoning_encrypted") or ():
            if isinstance(blob, str):
                total += max(0, len(blob) * 3 // 4 - 650)
    return (total + 3) // 4


def extra_check_tokens(messages: Sequence[dict], count: str, start: int = 0) -> int:
    """What a client adds to the last response's prompt + output before it compares
    (``count``: ``CHECK_COUNTS``), over ``messages`` as they stand before the next request:
    the estimate of every message after the last response (Claude Code 2.1.2+), or of the
    encrypted reasoning before the last user message (Codex). A replay adds it to its own
    last-response figure to decide as the client does.
    """
    if count not in CHECK_COUNTS:
        raise ValueError(f"count must be one of {CHECK_COUNTS}, got {count!r}")
    if count == "last-response+after":
        last = max((j for j in range(start, len(messages)) if messages[j].get("role") == "assistant"),
                   default=start - 1)
        return sum(_after_tokens(m) for m in messages[last + 1:])
    if count == "last-response+reasoning":
        return codex_reasoning_tokens(messages, len(messages), start)
    return 0


def check_tokens(messages: Sequence[dict], index: int, count: str, *, start: int = 0, fmt: str = "",
                 model: str = "") -> int | None:
    """What the client compares before the request at ``index`` (``count``: ``CHECK_COUNTS``).

    The last response before ``index`` (since ``start``: the previous compaction) with a
    provider count, its prompt + output, plus the client's own estimate of what came after
    it (Claude Code 2.1.2+) or of the older encrypted reasoning (Codex): ``extra_check_tokens``.
    ``None`` when no response since ``start`` carries a count.
    """
    if count not in CHECK_COUNTS:
        raise ValueError(f"count must be one of {CHECK_COUNTS}, got {count!r}")
    for j in range(min(index, len(messages)) - 1, start - 1, -1):
        msg = messages[j]
        if msg.get("role") != "assistant":
            continue
        prompt = provider_prompt_tokens(msg, fmt, model)
        if prompt is None:
            continue
        total = prompt + int((msg.get("usage") or {}).get("output_tokens") or 0)
        if count == "last-response+after":
            total += sum(_after_tokens(m) for m in messages[j + 1:index])
        elif count == "last-response+reasoning":
            total += codex_reasoning_tokens(messages, index, start)
        return total
    return None
