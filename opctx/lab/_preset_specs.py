"""The preset catalogue: every preset is a ``CompactionPolicy``, with where its numbers come from.

``PRESETS[name]`` is a :class:`PresetSpec`: a name, a description, the preset's
``policy`` (``opctx.context.policy``) and ``sources``: for every field the preset sets
differently from the default policy, where that number comes from (the default
policy's own sources are in its field metadata). A key of ``sources`` names the dotted
fields it covers (several may share one source); ``PresetSpec.source_of(name)`` looks a
field up, falling back to the field's own source. The presets' behaviour is described
in ``opctx.lab.presets``; building an engine from a spec is ``presets.build_engine``.

The fields a client preset leaves to its client hold ``"client"``
(``opctx.context.policy.FROM_CLIENT``): its thresholds (tokens before the window, per
client version and model: ``presets.TRIGGER_RULES``), Claude Code's output reserve and
its ager (microcompaction per version). ``build_engine`` resolves them for a window.
"""

from __future__ import annotations

from opctx.context.policy import FROM_CLIENT, policy_fields

from ._preset_base import REPLAY_POLICY, PresetSpec
from ._preset_base import REPLAY_SOURCE as _REPLAY_SOURCE
from ._strategy_specs import STRATEGY_PRESETS

__all__ = ["PresetSpec", "PRESETS", "ENGINE_SOURCES", "REPLAY_POLICY", "preset_names"]


def _claude_code() -> PresetSpec:
    policy = REPLAY_POLICY.replace(**{
        "client.name": "claude-code",
        "trigger.recommend_pct": FROM_CLIENT,
        "trigger.auto_pct": FROM_CLIENT,
        "trigger.emergency_pct": FROM_CLIENT,
        "budget.output_reserve": FROM_CLIENT,
        "cut.keep_ratio": 0.0,
        "cut.keep_min_tokens": 0,
        "cut.keep_max_tokens": 0,
        "cut.keep_min_messages": 0,
        "cut.protect_first_n": 0,
        "cut.protect_last_n": 0,
        "cut.fold_current_turn": True,
        "aging.kind": FROM_CLIENT,
        "aging.protect_first_n": 0,
        "client.post_compaction_tokens": 10_000,
    })
    return PresetSpec(
        name="claude-code",
        description="Claude Code-like: compact 13K tokens before the effective window, summarise everything "
                    "(current turn included), count the files it re-attaches.",
        policy=policy,
        sources={
            **_REPLAY_SOURCE,
            "client.name claude-code: thresholds and output reserve per client version and model (TRIGGER_RULES)": "opctx.lab.presets TRIGGER_RULES (a source per row)",
            "budget.output_reserve client: effective window = window - min(max output, 20000) (default rule; per client version: TRIGGER_RULES)": "Claude Code 2.1.21 changelog; anthropics/claude-code#31806 (deobfuscated threshold), #23409 ('Autocompact buffer: 33k')",
            "trigger.auto_pct client: auto-compact 13000 tokens before the effective window (~92-93% of 200K)": "docs/design.md (~92-93%); spec §4 trigger_pct row (Claude Code 93%); the 13000 constant: anthropics/claude-code#12004, #31806",
            "trigger.recommend_pct, trigger.emergency_pct client: 20000 / 3000 tokens before (warning / blocking)": "Claude Code 2.x thresholds as publicly reverse-engineered (#12004: 20000 warning/error buffers; 3000 manual-compact buffer) (assumed for the blocking tier)",
            "cut.keep_ratio 0, cut.keep_min_tokens 0, cut.keep_max_tokens 0, cut.keep_min_messages 0 (summarise everything)": "classic Claude Code auto-compact summarises the whole conversation (assumed; the spec's 8K/40K/5-message tail borrows the ideas of its newer tail-keeping compaction, not modelled here)",
            "cut.protect_first_n 0, cut.protect_last_n 0, aging.protect_first_n 0": "spec §3 and §4 comparison tables (Claude Code: no protect-first-N, no protect-last-N)",
            "client.post_compaction_tokens 10000 (what Claude Code re-attaches after a compaction: re-read files, task list; counted by replays after their own compactions)": "what: up to 5 recently read files, at most 5,000 tokens each, 50,000 in all, plus the todo list and plan (services/compact/compact.ts as read in zhanghandong.github.io/harness-engineering-from-cc-to-ai-coding ch. 10; decodeclaude.com/claude-code-compaction (v2.1.17); claude-code-explain.helmcode.com/context-compaction; rohitg00/pro-workflow skills/compact-guard); how much: measured, the median of the 6 automatic 2.0.74-2.0.76 compactions of ../shared/corpus whose next request was recorded (10,189 tokens: provider count - overhead - summary; benchmarks/fidelity.py --post), rounded; leave-one-session-out in docs/lab.md",
            "cut.fold_current_turn (the current turn is folded too: only the latest request stays, pinned after the summary)": "Claude Code's compaction replaces the whole conversation by its summary (anthropics/claude-code#4017, #6066; services/compact/compact.ts as read in 'Harness engineering from CC', ch. 10); measured: its first request after each 2.0.74-2.0.76 automatic compaction holds system, tools, summary and re-attached files only (benchmarks/fidelity.py --post)",
            "aging.kind client: per client version, 2.1.0+ microcompaction (opctx.lab.microcompact), known 2.0.x none, no version the spec's aging (numbers = spec §3.1)": "microcompaction: its module docstring (public reimplementations of cli.js 2.0.76; corpus boundary lines 2.1.9-2.1.19); 2.0.x: docs/lab.md 'Recorded aging' (the 2.1.x rule and the spec's aging both clear what 2.0.74's provider counts show kept); no version: spec §3 comparison table (Claude Code: aging, wall-clock and turn gates)",
        },
    )


def _hermes() -> PresetSpec:
    policy = REPLAY_POLICY.replace(**{
        "trigger.recommend_pct": 0.50,
        "trigger.auto_pct": 0.50,
        "trigger.emergency_pct": 0.95,
        "cut.keep_ratio": 0.10,
        "cut.keep_min_tokens": 0,
        "cut.keep_max_tokens": 1_000_000_000,
        "cut.keep_min_messages": 0,
        "cut.protect_first_n": 3,
        "cut.protect_last_n": 20,
        "aging.kind": "none",
    })
    return PresetSpec(
        name="hermes",
        description="Hermes Agent-like: compact at 50% of the budget, protect the first 3, tail ~10%.",
        policy=policy,
        sources={
            **_REPLAY_SOURCE,
            "trigger.auto_pct 0.50": "docs/design.md (trigger 0.50); spec §4 parameter table, trigger_pct row (Hermes 50%)",
            "cut.protect_first_n 3": "docs/design.md; spec §4 parameter table (Hermes: task + first reply + clarification)",
            "cut.protect_last_n 20": "spec §4 parameter table (protect_last_n 20 from Hermes); §4 comparison table (Hermes protects the last N)",
            "cut.keep_ratio 0.10 (tail = 10% of the window)": "docs/design.md (tail ~10%); spec §4 comparison table (Hermes: tail proportional to the window)",
            "no 8K/40K tail clamp (cut.keep_min_tokens 0, cut.keep_max_tokens 1e9 = unbounded)": "spec §4 comparison table (Hermes: no absolute tail bounds; the 8K/40K clamps are Claude Code's)",
            "no text-message gate (cut.keep_min_messages 0)": "spec §4 comparison table (Hermes: no text-block message gate)",
            "aging.kind none (aging off)": "spec §3 comparison table (Hermes: no tool-result aging)",
            "trigger.recommend_pct 0.50 = the trigger (no separate tier)": "spec §4 comparison table (two-tier trigger is OpenProgram's only)",
            "trigger.emergency_pct 0.95": "assumed (opctx's structural fallback tier; Hermes has none per the §4 table)",
        },
    )


def _codex() -> PresetSpec:
    policy = REPLAY_POLICY.replace(**{
        "client.name": "codex",
        "trigger.recommend_pct": FROM_CLIENT,
        "trigger.auto_pct": FROM_CLIENT,
        "trigger.emergency_pct": FROM_CLIENT,
        "budget.output_reserve": 1_024,
        "cut.keep_ratio": 0.0,
        "cut.keep_min_tokens": 20_000,
        "cut.keep_max_tokens": 20_000,
        "cut.keep_min_messages": 0,
        "cut.protect_first_n": 0,
        "cut.protect_last_n": 0,
        "aging.kind": "none",
    })
    return PresetSpec(
        name="codex",
        description="Codex CLI-like: compact at 90% of the window, keep ~20K tokens of recent conversation.",
        policy=policy,
        sources={
            **_REPLAY_SOURCE,
            "client.name codex, trigger.auto_pct client: auto-compact at 90% of the context window (model_auto_compact_token_limit, per model: TRIGGER_RULES)": "docs/design.md (Codex-like); openai/codex codex-rs/core/src/models_manager/model_family.rs (default_auto_compact_limit = context_window * 9 / 10)",
            "cut.keep_min_tokens = cut.keep_max_tokens 20000, cut.keep_ratio 0, cut.keep_min_messages 0": "docs/design.md (keep recent user messages up to 20000 tokens); approximated by a contiguous 20000-token tail",
            "cut.protect_first_n 0, cut.protect_last_n 0": "docs/design.md (Codex keeps recent messages only); no protected head or count assumed",
            "budget.output_reserve 1024 (budget against the whole window)": "assumed (Codex thresholds are fractions of the whole window)",
            "trigger.recommend_pct = the trigger, trigger.emergency_pct at 100% of the window, aging.kind none": "assumed (no structural tier, no tool-result aging documented)",
        },
    )


PRESETS: dict[str, PresetSpec] = {
    "default": PresetSpec(
        name="default",
        description="The specification's defaults (two-tier trigger, adaptive tail, aging).",
        policy=REPLAY_POLICY,
        sources=dict(_REPLAY_SOURCE),
    ),
    "claude-code": _claude_code(),
    "hermes": _hermes(),
    "codex": _codex(),
    "observation-masking": PresetSpec(
        name="observation-masking",
        description="Keep the last M=10 tool results, mask older ones with a placeholder, never summarise.",
        policy=REPLAY_POLICY.replace(**{
            "trigger.recommend_pct": None, "trigger.auto_pct": None, "trigger.emergency_pct": None,
            "aging.kind": "masking", "aging.keep_last": 10,
        }),
        sources={
            **_REPLAY_SOURCE,
            "aging.kind masking, aging.keep_last M = 10": "Lindenbauer et al. 2025, 'The Complexity Trap' (M=10 best); docs/design.md",
            "placeholder text": "assumed (says how many tokens were omitted)",
            "never summarise (trigger.recommend_pct, trigger.auto_pct, trigger.emergency_pct None)": "The Complexity Trap (observation masking alone)",
        },
    ),
    "none": PresetSpec(
        name="none",
        description="No aging, no compaction: the history as recorded.",
        policy=REPLAY_POLICY.replace(**{
            "trigger.recommend_pct": None, "trigger.auto_pct": None, "trigger.emergency_pct": None,
            "aging.kind": "none",
        }),
        sources={
            **_REPLAY_SOURCE,
            "everything off (trigger.recommend_pct, trigger.auto_pct, trigger.emergency_pct None, aging.kind none)": "baseline",
        },
    ),
    # the strategies published work compares (each with its source: _strategy_specs)
    **STRATEGY_PRESETS,
}


# Numbers every preset shares: the engine's guards, not a preset choice (their home: the
# policy's field metadata; listed here as the presets' docs have always listed them).
ENGINE_SOURCES: dict[str, str] = {
    f"{pf.name} {pf.default} ({pf.doc})": pf.source
    for pf in policy_fields()
    if pf.name in ("guard.min_saving", "guard.low_saving_streak", "guard.rearm_fraction", "cut.tail_budget_share")
}


def preset_names() -> list[str]:
    return list(PRESETS)
