"""Strategy presets: named context-engine configurations, each number with its source.

Every preset is a ``DefaultContextEngine`` configuration (or, for observation
masking, the same engine with a different "ager" component), registered in the
engine registry under its name (``opctx.context.engine.register_engine``) by
``register_presets()``, which runs when this module is imported. The registry
copies use the wall clock and no database; replays build *fresh* engines with
``build_engine(name, session_db=..., clock=..., context_window=..., ...)`` so
that every replay has its own state, its own in-memory database and the
recording's clock.

Where a number comes from is written next to it in ``PRESETS[name].sources``;
"assumed" marks the numbers nobody published. The engine's own guards, shared by
every preset (``min_saving``, ``rearm_fraction``, ``tail_budget_share``), are
sourced once in ``ENGINE_SOURCES``.

Percentages are of opctx's *input budget* (``context_window - output_reserve``,
``BudgetAllocation.input_used_pct``), so presets that are known as "N tokens
before the window" set their own output reserve and convert the token figure to
a percentage for the replay's window (``thresholds_for``).

``default``
    The specification's defaults (spec §4 table, §3.1, §2.3; docs/design.md):
    recommend 0.70, auto 0.80, emergency 0.95; tail ``clamp(10% of window, 8K,
    40K)`` with at least 5 text messages; ``protect_first_n`` 3, ``protect_last_n``
    20; aging with its spec defaults (4 turns, 60 s, 800 tokens, first 2 kept);
    output reserve ``min(model max output or 16,384, 25% of window)``.
``claude-code``
    Claude Code-like, its trigger resolved per client version (see "Client
    versions" below). Default (no version, or 2.1.21 and later): effective
    window = window - min(max output, 20,000); auto-compact when 13,000 tokens
    are left of it (167,000 at 200K: ~92-93% of the input budget, the figure
    docs/design.md gives), warn at 20,000 left, block at 3,000 left;
    the whole conversation is summarised, the running turn included
    (``fold_current_turn``: the kept tail is empty and only the latest user
    request stays, pinned after the summary, an opctx invariant; keep tokens 0,
    keep messages 0, protect_first_n 0, protect_last_n 0); what Claude Code
    re-attaches after a compaction (recently read files, its task list; no
    transcript holds them) is ``post_compaction_tokens`` 10,000, which replays
    count after their own compactions (measured on the corpus; sources in
    ``PRESETS["claude-code"].sources``). Tool-result aging per client version:
    2.1.0 and later Claude Code's own microcompaction (``opctx.lab.microcompact``),
    a known client before 2.1.0 none (its clearing wrote no line and its rule is
    not known; docs/lab.md "Recorded aging"), no version the spec's aging without
    a protected head.
``hermes``
    Hermes Agent-like (docs/design.md, spec §4 parameter and comparison tables):
    auto-compact at 0.50, ``protect_first_n`` 3, tail 10% of the window with no
    absolute bounds and no text-message gate (the §4 comparison table gives
    Hermes neither; the 8K/40K clamps are Claude Code's), ``protect_last_n`` 20;
    no tool-result aging (§3 comparison table); recommend = trigger (the
    two-tier trigger is OpenProgram's); emergency 0.95 (assumed). On small
    windows the 20 protected messages can be as large as the trigger: the
    engine then cannot compact below it, disables auto-compaction and re-arms
    later - a property of the strategy that the replay reports (one warning,
    ``compactions_failed`` / ``auto_compaction_disabled`` in the metrics).
``codex``
    Codex CLI-like (docs/design.md): auto-compact at ``model_auto_compact_token_limit``,
    by default 90% of the model's context window (the 272,000-token window of
    the gpt-5 family gives 244,800; Codex reports 95% of it, 258,400, as
    ``model_context_window``, which is the window a replay of a rollout runs at),
    keep recent user messages up to 20,000 tokens. Codex budgets against the
    whole window, so the output reserve is opctx's minimum (1,024) and the
    threshold becomes ``limit / input_budget``; emergency at the full
    window (assumed: Codex has no structural tier). Approximation: Codex keeps
    only *user* messages (up to 20K tokens) around its summary; opctx's layout
    keeps a contiguous tail, here of 20,000 tokens with no message minimum and no
    protected head. No aging (assumed).
``observation-masking``
    "The Complexity Trap" (Lindenbauer et al., 2025): keep the last M tool
    results verbatim, replace older ones by a placeholder, never summarise; M =
    10 performed best there. The placeholder says how many tokens were omitted.
    Implemented as an ager component (``ObservationMasker``) on a
    ``DefaultContextEngine`` whose compaction thresholds are infinite.
``none``
    No aging, no compaction: the recorded history as it is (thresholds
    infinite). The baseline of every "tokens saved".

Client versions
---------------
The client presets resolve their trigger from the client version and model of
the recording (``resolve_trigger``; ``TRIGGER_RULES`` is the table of version
ranges, each row with its source):

* Claude Code 2.0.0-2.1.20: the output reserve was the model's whole max output
  (Claude Code's default 32,000), so ``window - 32,000 - 13,000``: 155,000 at
  200K ("Autocompact buffer: 45.0k tokens" in ``/context``; 77.0k with
  ``CLAUDE_CODE_MAX_OUTPUT_TOKENS=64000``). Measured on the corpus: the six
  2.0.74-2.0.76 automatic compactions of the default configuration are all
  consistent with 155,000 and with nothing else outside (154,906, 155,199].
* Claude Code 2.1.21 and later ("Fixed auto-compact triggering too early on
  models with large output token limits"): ``window - min(max output, 20,000) -
  13,000``, 167,000 at 200K ("Autocompact buffer: 33k").
* Codex: ``model_auto_compact_token_limit``, else 90% of the model's window.

The model's max output is opctx's table value, at most Claude Code's default 32,000 (so a model
with a smaller max output, claude-3-5-sonnet's 8,192, reserves that); a what-if window smaller
than the model's own caps the reserve as opctx's budget does (25% of the window), so that small
windows keep room to work in.

Versions the table does not cover (older Claude Code, unparsable strings) use the
default rule (the 2.1.21 one for Claude Code) and say so once per process and
version (``logging`` warning); no version at all (a plain message list) uses the
default silently. The client's own settings are parameters:
``max_output_tokens`` (``CLAUDE_CODE_MAX_OUTPUT_TOKENS``),
``auto_compact_window`` (``CLAUDE_CODE_AUTO_COMPACT_WINDOW``: the window the
trigger is computed from, at most the real one), ``autocompact_pct_override``
(``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``: a percentage of the effective window that
can only lower the trigger), ``auto_compact_token_limit`` (Codex's
``model_auto_compact_token_limit``); and calibrated figures
(``opctx.lab.calibrate``): ``trigger_before_window`` (tokens before the window)
and ``trigger_window_fraction`` (a fraction of the window). ``client_version``
names the version; replays of other presets accept and ignore it.

Parameters a replay may override (``replay(..., **params)``): the engine's
``recommend_pct``, ``auto_compact_pct`` (alias ``trigger_pct``),
``emergency_pct``, ``tail_budget_share``, ``min_saving``; every
``SummarizerConfig`` field (``keep_ratio``, ``protect_first_n`` ...); the
aging switches ``aging`` (bool) and ``aging_<field>`` for ``TurnAger`` fields;
``output_reserve`` and ``reserve_policy`` of the budget; ``keep_last`` (M) of
observation masking; the client parameters above. An unknown parameter is a
``ValueError`` naming it.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from opctx.context.budget import BudgetAllocator
from opctx.context.engine import (
    AUTO_COMPACT_PCT,
    EMERGENCY_PCT,
    RECOMMEND_PCT,
    ContextEngine,
    DefaultContextEngine,
    register_engine,
)
from opctx.context.persistence import Persister
from opctx.context.summarize import Summarizer, SummarizerConfig
from opctx.context.types import AgingReport, ReferenceMap
from opctx.context.usage import UsageTracker
from opctx.dag.messages import is_tool_result

# claude-code: Claude Code's own clearing of old tool results (microcompaction)
from .history import parse_version
from .microcompact import ClaudeCodeMicrocompactor, microcompactor_for

__all__ = [
    "PresetSpec",
    "PRESETS",
    "preset_names",
    "build_engine",
    "register_presets",
    "thresholds_for",
    "ObservationMasker",
    "EngineDriver",
    "instantiate",
    "MASK_PLACEHOLDER",
    "ENGINE_SOURCES",
    "TriggerRule",
    "TriggerResolution",
    "TRIGGER_RULES",
    "CLIENT_PARAMETERS",
    "resolve_trigger",
    "parse_version",
]

logger = logging.getLogger(__name__)

INF = math.inf
MASK_PLACEHOLDER = "[Old tool result omitted to save context ({tokens} tokens)]"

_CONFIG_FIELDS = {f.name for f in fields(SummarizerConfig)}
_ENGINE_FIELDS = {"recommend_pct", "auto_compact_pct", "emergency_pct", "tail_budget_share", "min_saving", "rearm_fraction"}
_BUDGET_FIELDS = {"output_reserve", "reserve_policy"}
_OTHER_FIELDS = {"aging", "keep_last", "trigger_pct"}
# the client presets' own settings (module docstring, "Client versions"); client_version is
# accepted by every preset so that one call can replay a recording under several
CLIENT_PARAMETERS = {
    "client_version": "the recording's client version (a TRIGGER_RULES row)",
    "auto_compact": "Claude Code's autoCompactEnabled (False: the client never compacts by itself)",
    "max_output_tokens": "Claude Code's CLAUDE_CODE_MAX_OUTPUT_TOKENS",
    "auto_compact_window": "Claude Code's CLAUDE_CODE_AUTO_COMPACT_WINDOW (tokens)",
    "autocompact_pct_override": "Claude Code's CLAUDE_AUTOCOMPACT_PCT_OVERRIDE (percent, only lowers)",
    "auto_compact_token_limit": "Codex's model_auto_compact_token_limit (tokens)",
    "trigger_before_window": "a calibrated trigger: tokens before the window",
    "trigger_window_fraction": "a calibrated trigger: a fraction of the window",
}


@dataclass(frozen=True)
class PresetSpec:
    """A named strategy: parameters and where each comes from."""

    name: str
    description: str
    params: dict[str, Any]
    sources: dict[str, str]
    kind: str = "default"  # "default" | "masking" | "none"
    token_thresholds: dict[str, int] = field(default_factory=dict)  # tokens left before the effective window
    client: str | None = None  # the client whose trigger table applies (TRIGGER_RULES)


PRESETS: dict[str, PresetSpec] = {
    "default": PresetSpec(
        name="default",
        description="The specification's defaults (two-tier trigger, adaptive tail, aging).",
        params={},
        sources={
            "recommend_pct 0.70 / auto_compact_pct 0.80 / emergency_pct 0.95": "spec §4 parameter table, §4.1; docs/design.md (EMERGENCY_PCT 0.95)",
            "keep_ratio 0.10, keep_min_tokens 8000, keep_max_tokens 40000, keep_min_messages 5": "spec §4 parameter table",
            "protect_first_n 3, protect_last_n 20": "spec §4 parameter table (from Hermes)",
            "aging 4 turns / 60 s / 800 tokens / first 2": "spec §3.1-3.2",
            "output reserve min(max output or 16384, 25% of window), never below 1024": "docs/design.md (budget)",
        },
    ),
    "claude-code": PresetSpec(
        name="claude-code",
        description="Claude Code-like: compact 13K tokens before the effective window, summarise everything "
                    "(current turn included), count the files it re-attaches.",
        params={
            "output_reserve": 20_000,
            "keep_ratio": 0.0,
            "keep_min_tokens": 0,
            "keep_max_tokens": 0,
            "keep_min_messages": 0,
            "protect_first_n": 0,
            "protect_last_n": 0,
            "aging_protect_first_n": 0,
            "fold_current_turn": True,
            "post_compaction_tokens": 10_000,
        },
        token_thresholds={"recommend": 20_000, "auto": 13_000, "emergency": 3_000},
        client="claude-code",
        sources={
            "output_reserve 20000: effective window = window - min(max output, 20000) (default rule; per client version: TRIGGER_RULES)": "Claude Code 2.1.21 changelog; anthropics/claude-code#31806 (deobfuscated threshold), #23409 ('Autocompact buffer: 33k')",
            "auto-compact 13000 tokens before the effective window (~92-93% of 200K)": "docs/design.md (~92-93%); spec §4 trigger_pct row (Claude Code 93%); the 13000 constant: anthropics/claude-code#12004, #31806",
            "recommend 20000 / emergency 3000 tokens before (warning / blocking)": "Claude Code 2.x thresholds as publicly reverse-engineered (#12004: 20000 warning/error buffers; 3000 manual-compact buffer) (assumed for the blocking tier)",
            "keep_ratio 0, keep_min_tokens 0, keep_max_tokens 0, keep_min_messages 0 (summarise everything)": "classic Claude Code auto-compact summarises the whole conversation (assumed; the spec's 8K/40K/5-message tail borrows the ideas of its newer tail-keeping compaction, not modelled here)",
            "protect_first_n 0, protect_last_n 0, aging_protect_first_n 0": "spec §3 and §4 comparison tables (Claude Code: no protect-first-N, no protect-last-N)",
"post_compaction_tokens 10000 (what Claude Code re-attaches after a compaction: re-read files, task list; counted by replays after their own compactions)": "what: up to 5 recently read files, at most 5,000 tokens each, 50,000 in all, plus the todo list and plan (services/compact/compact.ts as read in zhanghandong.github.io/harness-engineering-from-cc-to-ai-coding ch. 10; decodeclaude.com/claude-code-compaction (v2.1.17); claude-code-explain.helmcode.com/context-compaction; rohitg00/pro-workflow skills/compact-guard); how much: measured, the median of the 6 automatic 2.0.74-2.0.76 compactions of ../shared/corpus whose next request was recorded (10,189 tokens: provider count - overhead - summary; benchmarks/fidelity.py --post), rounded; leave-one-session-out in docs/lab.md",
                        "fold_current_turn (the current turn is folded too: only the latest request stays, pinned after the summary)": "Claude Code's compaction replaces the whole conversation by its summary (anthropics/claude-code#4017, #6066; services/compact/compact.ts as read in 'Harness engineering from CC', ch. 10); measured: its first request after each 2.0.74-2.0.76 automatic compaction holds system, tools, summary and re-attached files only (benchmarks/fidelity.py --post)",
            "aging per client version: 2.1.0+ microcompaction (opctx.lab.microcompact), known 2.0.x none, no version the spec's aging (numbers = spec §3.1)": "microcompaction: its module docstring (public reimplementations of cli.js 2.0.76; corpus boundary lines 2.1.9-2.1.19); 2.0.x: docs/lab.md 'Recorded aging' (the 2.1.x rule and the spec's aging both clear what 2.0.74's provider counts show kept); no version: spec §3 comparison table (Claude Code: aging, wall-clock and turn gates)",
        },
    ),
    "hermes": PresetSpec(
        name="hermes",
        description="Hermes Agent-like: compact at 50% of the budget, protect the first 3, tail ~10%.",
        params={
            "auto_compact_pct": 0.50,
            "recommend_pct": 0.50,
            "emergency_pct": 0.95,
            "keep_ratio": 0.10,
            "keep_min_tokens": 0,
            "keep_max_tokens": 1_000_000_000,
            "keep_min_messages": 0,
            "protect_first_n": 3,
            "protect_last_n": 20,
            "aging": False,
        },
        sources={
            "auto_compact_pct 0.50": "docs/design.md (trigger 0.50); spec §4 parameter table, trigger_pct row (Hermes 50%)",
            "protect_first_n 3": "docs/design.md; spec §4 parameter table (Hermes: task + first reply + clarification)",
            "protect_last_n 20": "spec §4 parameter table (protect_last_n 20 from Hermes); §4 comparison table (Hermes protects the last N)",
            "keep_ratio 0.10 (tail = 10% of the window)": "docs/design.md (tail ~10%); spec §4 comparison table (Hermes: tail proportional to the window)",
            "no 8K/40K tail clamp (keep_min_tokens 0, keep_max_tokens 1e9 = unbounded)": "spec §4 comparison table (Hermes: no absolute tail bounds; the 8K/40K clamps are Claude Code's)",
            "no text-message gate (keep_min_messages 0)": "spec §4 comparison table (Hermes: no text-block message gate)",
            "aging off": "spec §3 comparison table (Hermes: no tool-result aging)",
            "recommend_pct 0.50 = the trigger (no separate tier)": "spec §4 comparison table (two-tier trigger is OpenProgram's only)",
            "emergency_pct 0.95": "assumed (opctx's structural fallback tier; Hermes has none per the §4 table)",
        },
    ),
    "codex": PresetSpec(
        name="codex",
        description="Codex CLI-like: compact at 90% of the window, keep ~20K tokens of recent conversation.",
        params={
            "output_reserve": 1_024,
            "keep_ratio": 0.0,
            "keep_min_tokens": 20_000,
            "keep_max_tokens": 20_000,
            "keep_min_messages": 0,
            "protect_first_n": 0,
            "protect_last_n": 0,
            "aging": False,
        },
        client="codex",
        sources={
            "auto-compact at 90% of the context window (model_auto_compact_token_limit, per model: TRIGGER_RULES)": "docs/design.md (Codex-like); openai/codex codex-rs/core/src/models_manager/model_family.rs (default_auto_compact_limit = context_window * 9 / 10)",
            "keep_min_tokens = keep_max_tokens 20000, keep_ratio 0, keep_min_messages 0": "docs/design.md (keep recent user messages up to 20000 tokens); approximated by a contiguous 20000-token tail",
            "protect_first_n 0, protect_last_n 0": "docs/design.md (Codex keeps recent messages only); no protected head or count assumed",
            "output_reserve 1024 (budget against the whole window)": "assumed (Codex thresholds are fractions of the whole window)",
            "emergency at 100% of the window, aging off": "assumed (no structural tier, no tool-result aging documented)",
        },
    ),
    "observation-masking": PresetSpec(
        name="observation-masking",
        description="Keep the last M=10 tool results, mask older ones with a placeholder, never summarise.",
        params={"keep_last": 10},
        kind="masking",
        sources={
            "keep_last M = 10": "Lindenbauer et al. 2025, 'The Complexity Trap' (M=10 best); docs/design.md",
            "placeholder text": "assumed (says how many tokens were omitted)",
            "never summarise": "The Complexity Trap (observation masking alone)",
        },
    ),
    "none": PresetSpec(
        name="none",
        description="No aging, no compaction: the history as recorded.",
        params={},
        kind="none",
        sources={"everything off": "baseline"},
    ),
}


# Numbers every preset shares: the engine's guards (opctx.context.engine), not a preset choice.
ENGINE_SOURCES: dict[str, str] = {
    "min_saving 0.10 (two compactions in a row under 10% disable auto-compaction)": "docs/design.md (compaction must not loop)",
    "rearm_fraction 0.25 (re-arm after the history grows by 25% of the input budget)": "assumed (opctx: the guard must not latch off forever, docs/design.md peer pitfalls)",
    "tail_budget_share 0.5 (the kept tail is at most half the room)": "spec §4 min_prompt_ratio / small-window cap (OpenClaw); the 0.5 assumed",
}


def preset_names() -> list[str]:
    return list(PRESETS)


# -- client versions: the trigger table ---------------------------------------------------------
# The rules live in opctx.lab.client_rules (one home: the microcompaction model and the fidelity
# tables read them too); the presets resolve them for their own client.
from .client_rules import (  # noqa: E402
    TRIGGER_RULES,
    TriggerResolution,
    TriggerRule,
    resolve_client_trigger,
)


def resolve_trigger(
    preset: str | PresetSpec,
    *,
    context_window: int,
    model: str | None = None,
    client_version: str | None = None,
    max_output_tokens: int | None = None,
    auto_compact_window: int | None = None,
    autocompact_pct_override: float | None = None,
    auto_compact_token_limit: int | None = None,
    trigger_before_window: int | None = None,
    trigger_window_fraction: float | None = None,
    auto_compact: bool | None = None,
) -> TriggerResolution:
    """The trigger of a client preset for a recording's client version, model and window.

    The rule of the version (``opctx.lab.client_rules``, each row with its source) with
    the client's settings given; ``auto_compact=False`` models a client whose automatic
    compaction is off (it never fires; microcompaction then warns from the effective
    window).

    >>> r = resolve_trigger("claude-code", context_window=200_000, client_version="2.0.76")
    >>> r.auto_tokens, r.rule.label
    (155000, 'claude-code 1.0.71-2.1.1')
    >>> resolve_trigger("claude-code", context_window=200_000, client_version="2.1.30").auto_tokens
    167000
    >>> resolve_trigger("codex", context_window=258_400, model="gpt-5.2-codex").auto_tokens
    244800
    """
    spec = PRESETS[preset] if isinstance(preset, str) else preset
    if spec.client is None:
        raise ValueError(f"preset {spec.name!r} has no client trigger table")
    return resolve_client_trigger(
        spec.client, context_window=context_window, model=model, client_version=client_version,
        output_reserve=int(spec.params.get("output_reserve", 1_024)), auto_compact=auto_compact,
        max_output_tokens=max_output_tokens, auto_compact_window=auto_compact_window,
        autocompact_pct_override=autocompact_pct_override, auto_compact_token_limit=auto_compact_token_limit,
        trigger_before_window=trigger_before_window, trigger_window_fraction=trigger_window_fraction,
    )


def thresholds_for(
    spec: PresetSpec, context_window: int, input_budget: int, resolution: TriggerResolution | None = None
) -> dict[str, float]:
    """Thresholds of ``spec`` for a window: token figures become fractions of the input budget.

    Client presets use ``resolution`` (default: ``resolve_trigger`` with no version, i.e.
    the default rule of their client).
    """
    if spec.kind in ("masking", "none"):
        return {"recommend_pct": INF, "auto_compact_pct": INF, "emergency_pct": INF}
    if spec.client is not None:
        res = resolution or resolve_trigger(spec, context_window=context_window)
        out = {
            "recommend_pct": max(0.05, res.recommend_tokens / input_budget),
            "auto_compact_pct": max(0.05, res.auto_tokens / input_budget),
            "emergency_pct": max(0.05, res.emergency_tokens / input_budget),
        }
        out["auto_compact_pct"] = max(out["auto_compact_pct"], out["recommend_pct"])
        out["emergency_pct"] = max(out["emergency_pct"], out["auto_compact_pct"])
        return out
    if spec.token_thresholds:

        out = {}
        names = {"recommend": "recommend_pct", "auto": "auto_compact_pct", "emergency": "emergency_pct"}
        for key, left in spec.token_thresholds.items():
            out[names[key]] = max(0.05, 1.0 - left / input_budget)
        out["auto_compact_pct"] = max(out["auto_compact_pct"], out["recommend_pct"])
        out["emergency_pct"] = max(out["emergency_pct"], out["auto_compact_pct"])
        return out
    return {}


class ObservationMasker:
    """An ager component: keep the last ``keep_last`` tool results, mask the older ones.

    ``age(history, references) -> (aged, AgingReport)`` like ``TurnAger``. A masked
    message is a copy whose result text is ``MASK_PLACEHOLDER``; copies are cached
    per message id so that a message masked once is the same object in every later
    request (prefix-cache comparisons and the engine's per-message caches rely on
    it). Work per call is proportional to the messages appended since the last
    call (the positions of tool results are kept), plus one list copy.
    """

    def __init__(self, keep_last: int = 10, *, estimate: Callable[[dict], int] | None = None):
        if not isinstance(keep_last, int) or keep_last < 0:
            raise ValueError(f"keep_last must be an int >= 0, got {keep_last!r}")
        self.keep_last = keep_last
        self._estimate = estimate
        self._masked: dict[str, tuple[dict, int]] = {}
        self._positions: list[int] = []
        self._scanned = 0
        self._anchor: tuple[int, Any] | None = None  # (len, last message object) last seen
        self._aged: list[dict] = []
        self._n_masked = 0
        self._freed = 0
        self._ids: list[Any] = []
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> ObservationMasker:
        # the same settings, nothing seen yet (a lock cannot be copied, nor need be)
        return ObservationMasker(self.keep_last, estimate=self._estimate)

    def _tokens(self, msg: dict) -> int:
        if self._estimate is not None:
            return int(self._estimate(msg))
        from opctx.context.tokens import estimate_message_tokens

        return estimate_message_tokens(msg)

    def _mask(self, msg: dict) -> tuple[dict, int]:
        key = msg.get("id")
        hit = self._masked.get(key) if key else None
        if hit is not None:
            return hit
        before = self._tokens(msg)
        masked = copy.copy(msg)
        text = MASK_PLACEHOLDER.format(tokens=before)
        if msg.get("role") == "tool":
            masked["content"] = text
        extra = msg.get("extra")
        if isinstance(extra, dict) and isinstance(extra.get("blocks"), list):
            new_blocks = []
            for b in extra["blocks"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    b = {**b, "content": text, "_redacted": True}
                new_blocks.append(b)
            masked["extra"] = {**extra, "blocks": new_blocks}
        elif isinstance(msg.get("content"), list):
            masked["content"] = [
                {**b, "content": text, "_redacted": True} if isinstance(b, dict) and b.get("type") == "tool_result" else b
                for b in msg["content"]
            ]
        masked["_masked"] = True
        freed = max(0, before - self._tokens(masked))
        result = (masked, freed)
        if key:
            self._masked[key] = result
        return result

    def age(self, history: Sequence[dict], references: ReferenceMap | None = None) -> tuple[list[dict], AgingReport]:
        with self._lock:
            n = len(history)
            anchor = self._anchor
            if anchor is None or anchor[0] > n or (anchor[0] and history[anchor[0] - 1] is not anchor[1]):
                # not an extension of the history seen last time: start over
                self._positions, self._scanned, self._aged = [], 0, []
                self._n_masked, self._freed, self._ids = 0, 0, []
            self._aged.extend(history[self._scanned:n])
            for i in range(self._scanned, n):
                if is_tool_result(history[i]):
                    self._positions.append(i)
            self._scanned = n
            self._anchor = (n, history[-1] if n else None)
            # positions that fell out of the window since the last call get masked, once
            n_old = max(0, len(self._positions) - self.keep_last)
            for i in self._positions[self._n_masked:n_old]:
                masked, freed = self._mask(history[i])
                self._aged[i] = masked
                self._freed += freed
                self._ids.append(history[i].get("id"))
            self._n_masked = max(self._n_masked, n_old)
            report = AgingReport(redacted=self._n_masked, tokens_freed=self._freed, redacted_ids=list(self._ids))
            return list(self._aged), report


class _NoReferences:
    """Stands in for the engine's ``ReferenceTracker`` when nothing reads references.

    ``DefaultContextEngine.prepare`` hands the reference map to the ager and to
    nothing else, so an engine without an ager (``none``, ``hermes``,
    ``codex``, ``aging=False``) or with ``ObservationMasker`` (which keeps the
    last M results whatever is cited) gets identical results from an empty map,
    without scanning every message of every request for identifiers - about a
    third of a replay's time in a sweep.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock

    def update(self, history: Sequence[Any]) -> ReferenceMap:
        return ReferenceMap(last_built_at=self.clock())

    build = update


def _split_params(params: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
    engine_kw: dict[str, Any] = {}
    config_kw: dict[str, Any] = {}
    aging_kw: dict[str, Any] = {}
    budget_kw: dict[str, Any] = {}
    other: dict[str, Any] = {}
    unknown = []
    for key, value in params.items():
        if key == "trigger_pct":
            engine_kw["auto_compact_pct"] = value
        elif key in _ENGINE_FIELDS:
            engine_kw[key] = value
        elif key in _CONFIG_FIELDS:
            config_kw[key] = value
        elif key.startswith("aging_"):
            aging_kw[key[len("aging_"):]] = value
        elif key in _BUDGET_FIELDS:
            budget_kw[key] = value
        elif key in _OTHER_FIELDS:
            other[key] = value
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(
            f"unknown preset parameter(s) {sorted(unknown)}; known: engine {sorted(_ENGINE_FIELDS | {'trigger_pct'})}, "
            f"SummarizerConfig fields, aging_<TurnAger field>, {sorted(_BUDGET_FIELDS)}, aging, keep_last"
        )
    return engine_kw, config_kw, aging_kw, budget_kw, other


def _make_ager(clock: Callable[[], float], aging_kw: dict[str, Any]) -> Any:
    try:
        from opctx.context.aging import TurnAger
    except ImportError:  # pragma: no cover - aging ships with opctx; say so loudly if it does not
        logger.warning("opctx.context.aging is not importable: presets run without tool-result aging")
        return None
    return TurnAger(clock=clock, **aging_kw)


def build_engine(
    name: str,
    *,
    session_db: Any = None,
    clock: Callable[[], float] = time.time,
    context_window: int | None = None,
    model: str | None = None,
    summarizer_provider: Callable[..., Any] | None = None,
    **params: Any,
) -> DefaultContextEngine:
    """A fresh engine configured as preset ``name`` (``params`` override; see the module docstring)."""
    spec = PRESETS.get(name)
    if spec is None:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    client_kw = {k: params.pop(k) for k in list(params) if k in CLIENT_PARAMETERS}
    client_version = client_kw.pop("client_version", None)
    # claude-code: Claude Code's own clearing of old tool results (opctx.lab.microcompact)
    microcompact = params.pop("microcompact", None)
    if client_kw and spec.client is None:
        raise ValueError(f"{sorted(client_kw)} apply to the client presets (claude-code, codex), not {name!r}")
    window = context_window
    if window is None:
        from opctx.context.tokens import real_context_window

        window = real_context_window(model)
    resolution = None
    if spec.client is not None:
        resolution = resolve_trigger(spec, context_window=window, model=model, client_version=client_version, **client_kw)
    merged = {**spec.params, **params}
    if resolution is not None and "output_reserve" not in params:
        # the client's own reserve for this version and model (the budget the engine reports)
        merged["output_reserve"] = resolution.output_reserve
    engine_kw, config_kw, aging_kw, budget_kw, other = _split_params(merged)
    budget = BudgetAllocator(**budget_kw)
    input_budget = max(1, window - budget.reserve_for(window, model))
    thresholds = thresholds_for(spec, window, input_budget, resolution)
    explicit = set(engine_kw)
    for key, value in thresholds.items():
        engine_kw.setdefault(key, value)
    # thresholds not set explicitly give way to those that are (recommend <= auto <= emergency)
    auto = engine_kw.get("auto_compact_pct", AUTO_COMPACT_PCT)
    if "recommend_pct" not in explicit:
        engine_kw["recommend_pct"] = min(engine_kw.get("recommend_pct", RECOMMEND_PCT), auto)
    if "emergency_pct" not in explicit:
        engine_kw["emergency_pct"] = max(engine_kw.get("emergency_pct", EMERGENCY_PCT), auto)
    # the summariser's copy of the thresholds must stay within [0, 1]; the engine's are authoritative
    cfg_defaults = {
        k: min(1.0, engine_kw[e]) for k, e in (("recommend_pct", "recommend_pct"), ("trigger_pct", "auto_compact_pct"), ("emergency_pct", "emergency_pct"))
        if e in engine_kw
    }
    config = SummarizerConfig(**{**cfg_defaults, **config_kw, "timeout": config_kw.get("timeout")})
    # a compaction's own summary call is made with the replay's model
    summarizer = Summarizer(summarizer_provider, model=model, config=config)
    ager: Any = None
    aging = other.get("aging", True)
    if spec.kind == "masking":
        ager = ObservationMasker(int(other.get("keep_last", 10)))
    elif spec.kind == "none":
        aging = False
    elif aging:
        ager = _make_ager(clock, aging_kw)
    if spec.client == "claude-code" and aging:
        clearing = microcompactor_for(client_version, microcompact, window)
        if clearing is not None:
            ager = clearing
        elif client_version is not None and microcompact is None:
            # a known client from before microcompaction was recorded (< 2.1.0): Claude Code
            # never ran the spec's turn-based aging, and where the 2.1.x rule would clear,
            # the provider's counts of 2.0.74 show nothing cleared (docs/lab.md, "Recorded aging")
            ager = None
    engine = DefaultContextEngine(
        usage_tracker=UsageTracker(session_db, clock=clock),
        budget_allocator=budget,
        ager=ager,
        summarizer=summarizer,
        persister=Persister(session_db, clock=clock),
        session_db=session_db,
        context_window=context_window,
        clock=clock,
        config=config,
        name=name,
        aging=bool(ager is not None),
        # only an ager that may read the reference map (TurnAger) needs the real tracker
        references=None if ager is not None and not isinstance(ager, (ObservationMasker, ClaudeCodeMicrocompactor))
        else _NoReferences(clock),
        **engine_kw,
    )
    if isinstance(ager, ObservationMasker):
        ager._estimate = engine.estimator.message_tokens
    elif isinstance(ager, ClaudeCodeMicrocompactor):  # it counts as the engine does
        ager.estimate = functools.partial(engine.estimator.message_tokens, model=model)
    return engine


def register_presets(replace: bool = True) -> list[str]:
    """Register one engine per preset (wall clock, no database) in the engine registry.

    ``default`` is left to ``opctx.context.engine.default_engine`` (the same
    configuration); the others are filed under their names.
    """
    names = []
    for name in PRESETS:
        if name == "default":
            continue
        try:
            engine = build_engine(name)
        except Exception:
            # importing the lab must not fail because one preset cannot be built; the
            # failure is logged here and raised again by every build_engine(name)
            logger.exception("preset %r could not be built and is not registered", name)
            continue
        register_engine(engine, replace=replace)
        names.append(name)
    return names


# -- what replay needs from an engine ---------------------------------------------------------


def instantiate(
    engine_or_preset: Any,
    *,
    session_db: Any,
    clock: Callable[[], float],
    context_window: int,
    model: str,
    summarizer_provider: Callable[..., Any] | None,
    **params: Any,
) -> tuple[str, ContextEngine, dict[str, Any]]:
    """``(label, engine, effective params)`` for a replay; see ``replay``'s docstring."""
    if isinstance(engine_or_preset, str):
        engine = build_engine(
            engine_or_preset, session_db=session_db, clock=clock, context_window=context_window,
            model=model, summarizer_provider=summarizer_provider, **params,
        )
        return engine_or_preset, engine, {**PRESETS[engine_or_preset].params}
    if isinstance(engine_or_preset, DefaultContextEngine):
        if params:
            raise ValueError("parameters apply to presets only; configure the engine instance itself")
        return engine_or_preset.name, _replay_clone(engine_or_preset, session_db, clock, context_window), {}
    if isinstance(engine_or_preset, ContextEngine):
        raise TypeError(
            f"cannot replay through a {type(engine_or_preset).__name__} instance: its database and "
            "clock are its own; pass a factory f(session_db=, clock=, context_window=, model=, "
            "summarizer_provider=) -> ContextEngine instead"
        )
    if callable(engine_or_preset):
        engine = engine_or_preset(
            session_db=session_db, clock=clock, context_window=context_window, model=model,
            summarizer_provider=summarizer_provider, **params,
        )
        if not isinstance(engine, ContextEngine):
            raise TypeError(f"the engine factory returned a {type(engine).__name__}, not a ContextEngine")
        return getattr(engine, "name", "custom"), engine, dict(params)
    raise TypeError(f"engine_or_preset must be a preset name, a factory or an engine, got {type(engine_or_preset).__name__}")


def _replay_clone(engine: DefaultContextEngine, session_db: Any, clock: Callable[[], float], window: int) -> DefaultContextEngine:
    """A shallow copy of a configured engine that writes to the replay's database and clock."""
    clone = copy.copy(engine)
    clone.session_db = session_db
    clone.clock = clock
    clone.persister = Persister(session_db, clock=clock)
    clone.usage_tracker = UsageTracker(session_db, clock=clock, estimator=engine.estimator)
    if engine.ager is not None:
        clone.ager = copy.deepcopy(engine.ager)
        if hasattr(clone.ager, "clock"):
            clone.ager.clock = clock
    if clone.context_window is None:
        clone.context_window = window
    clone._sessions = {}
    clone._lock = threading.RLock()
    return clone


class EngineDriver:
    """The calls a replay makes on an engine, in one place."""

    def __init__(self, engine: ContextEngine, db: Any, session_id: str, model: str, window: int, *,
                 agent: Any = None, system_prompt: str = "", tools: list[dict] | None = None):
        self.engine = engine
        self.db = db
        self.session_id = session_id
        self.model = model or None
        self.window = window
        self.agent = agent if agent is not None else (system_prompt or None)
        self.tools = list(tools) if tools else None
        self.events: list[dict] = []
        self._pending: list[dict] = []
        engine.on_session_start(session_id)

    def _on_event(self, name: str, payload: dict) -> None:
        if name == "compaction_finished" and payload.get("disabled_auto"):
            self.events.append({"event": "auto_compaction_disabled", "error": payload.get("error")})

    def fixed_tokens(self, estimator: Any) -> int:
        model = self.model or None
        text = self.system_prompt_text()
        system = estimator.message_tokens({"role": "system", "content": text}, model) if text else 0
        tools = estimator.tools_tokens(self.tools, model) if self.tools else 0
        return system + tools

    def system_prompt_text(self) -> str:
        fn = getattr(self.engine, "system_prompt_for", None)
        if fn is not None:
            return fn(self.agent) or ""
        return self.agent if isinstance(self.agent, str) else ""

    @property
    def estimator(self) -> Any:
        return getattr(self.engine, "estimator", None)

    def prepare(self, active: list[dict]) -> Any:
        return self.engine.prepare(self.agent, self.session_id, active, self.model, self.tools)

    def decide(self, prep: Any) -> str:
        path = list(getattr(prep, "decision_path", ()) or ())
        last = path[-1] if path else ""
        if last == "emergency" and self.engine.should_auto_compact(prep):
            return "emergency"
        if self.engine.should_auto_compact(prep):
            return "auto"
        if self.engine.should_recommend(prep):
            return "recommend"
        return "none"

    def compact(self, *, reason: str, force_structural: bool = False) -> Any:
        self.flush()
        if reason == "recorded":
            return self.engine.compact(
                self.agent, self.session_id, self.model, on_event=self._on_event,
                user_initiated=True, **self._compact_kw(reason="manual", trigger="recorded"),
            )
        return self.engine.compact(
            self.agent, self.session_id, self.model, on_event=self._on_event,
            user_initiated=False, **self._compact_kw(reason="auto", trigger=reason),
        )

    def _compact_kw(self, **kw: Any) -> dict[str, Any]:
        if isinstance(self.engine, DefaultContextEngine):
            return {"tools": self.tools, **kw}
        return {}

    def branch(self) -> list[dict]:
        self.flush()
        return self.db.get_branch(self.session_id)

    def append(self, msg: dict, parent: str | None, now: float, index: int = 0) -> dict:
        """Add a recorded message to the session (buffered; see ``flush``).

        A message without an id gets ``replay_<index>`` (deterministic).
        """
        stored = dict(msg)
        if not stored.get("id"):
            stored["id"] = f"replay_{index:06d}"
        stored["parent_id"] = parent
        if stored.get("timestamp") is None:
            stored["timestamp"] = now
        self._pending.append(stored)
        return stored

    def flush(self) -> None:
        """Write buffered messages in one transaction.

        The engine reads the database only in ``compact``, so the replay keeps
        the active history in memory and writes it just before a compaction:
        one ``append_messages`` transaction instead of one per message.
        """
        if self._pending:
            # the replay's database keeps recorded ids on this path (opctx.lab.replay._ReplaySessionDB)
            append = getattr(self.db, "append_recorded", self.db.append_messages)
            append(self.session_id, self._pending)
            self._pending = []

    def after_turn(self, usage: dict, prep: Any) -> None:
        prompt = (
            int(usage.get("input_tokens") or 0)
            + int(usage.get("cache_read_tokens") or 0)
            + int(usage.get("cache_write_tokens") or 0)
        )
        # opctx usage shape: input_tokens is the whole prompt (opctx.context.usage.normalise_usage)
        normalised = {
            "input_tokens": prompt,
            "output_tokens": int(usage.get("output_tokens") or 0),
            "cache_read_tokens": int(usage.get("cache_read_tokens") or 0),
            "cache_write_tokens": int(usage.get("cache_write_tokens") or 0),
        }
        self.engine.after_turn(self.session_id, normalised, prep)

    @staticmethod
    def tokens(prep: Any) -> int:
        return int(prep.budget.input_used)

    @staticmethod
    def budget_pct(prep: Any) -> float:
        return float(prep.budget_pct)

    @staticmethod
    def input_budget(prep: Any) -> int:
        return int(prep.budget.input_budget)

    @staticmethod
    def redacted(prep: Any) -> int:
        return int(getattr(prep, "tool_results_redacted", 0) or 0)

    @staticmethod
    def context(prep: Any) -> list[dict]:
        return list(prep.history_dicts)

    def summary_meta(self, comp: Any) -> dict[str, Any]:
        sid = getattr(comp, "summary_id", None)
        if not sid:
            return {}
        self.flush()
        msg = self.db.get_message(self.session_id, sid)
        meta = (msg or {}).get("compaction")
        return meta if isinstance(meta, dict) else {}

    def close(self) -> None:
        try:
            self.engine.on_session_end(self.session_id)
        finally:
            close = getattr(self.db, "close", None)
            if callable(close):
                close()


register_presets()
