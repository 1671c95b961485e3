"""Strategy presets: named compaction policies, each number with its source.

Every preset *is* a ``CompactionPolicy`` (``opctx.context.policy``;
``PRESETS[name].policy``) plus the components it names (the ager of its
``aging.kind``, its client's rules). ``build_engine(preset_or_policy, ...)`` builds a
``DefaultContextEngine`` from one: a preset name, a ``PresetSpec`` or any
``CompactionPolicy``, with parameters on top (below). ``register_presets()``, run
when this module is imported, files one engine per preset in the engine registry
(``opctx.context.engine.register_engine``); those use the wall clock and no database.
Replays build *fresh* engines with ``build_engine(name, session_db=..., clock=...,
context_window=..., ...)`` so that every replay has its own state, its own in-memory
database and the recording's clock.

Where a number comes from: the default policy's numbers carry their sources in the
policy's field metadata; each preset names a source for every field it sets
differently (``PRESETS[name].sources``, ``PresetSpec.source_of``); "assumed" marks the
numbers nobody published. The engine's own guards, shared by every preset
(``guard.min_saving``, ``guard.rearm_fraction``, ``cut.tail_budget_share``), are listed
in ``ENGINE_SOURCES``.

Percentages are of opctx's *input budget* (``context_window - output_reserve``,
``BudgetAllocation.input_used_pct``), so presets that are known as "N tokens
before the window" leave their thresholds (and Claude Code its output reserve) to
the client (``"client"`` in the policy) and ``build_engine`` converts the client's
token figures to shares of the input budget for the replay's window
(``resolve_policy``, ``thresholds_for``): ``engine.policy`` holds the numbers used.

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
    Implemented as an ager (``aging.kind = "masking"``: ``opctx.context.masking``)
    in a policy whose thresholds are ``None`` (never).
``none``
    No aging, no compaction: the recorded history as it is (thresholds
    ``None``, ``aging.kind = "none"``). The baseline of every "tokens saved".
The strategies of the literature
    ``complexity-trap-masking``, ``complexity-trap-summary``, ``anthropic-clear-tool-uses``,
    ``langchain-clear-tool-uses``, ``anthropic-clear-thinking``, ``openhands-llm-summarizing``,
    ``openhands-observation-masking``, ``openhands-amortized-forgetting``,
    ``openhands-recent-events``, ``langchain-summarization``: each described, with its
    public source, in ``opctx.lab._strategy_specs`` (and docs/lab.md).

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

Parameters (``build_engine(name, **params)``, ``replay(..., **params)``, ``sweep``
grids) set policy fields by their dotted names (``**{"cut.keep_ratio": 0.2}``) or by
their older flat names (``keep_ratio``, ``auto_compact_pct`` / ``trigger_pct``,
``aging_min_tokens``, ``output_reserve``, ``keep_last``, ``client_version`` and the
client settings above: each field's ``legacy`` names). Thresholds a parameter set does
not name give way to the trigger it names (``CompactionPolicy.with_params``). Two
switches are not fields: ``aging`` (bool: ``False`` runs without an ager, ``True``
gives a preset without one the specification's aging; the masking and ``none``
presets ignore it) and ``microcompact`` (``claude-code``: ``True`` / ``False`` /
``None`` = per version, or a ``MicrocompactRule`` component). An unknown parameter is
a ``ValueError`` naming it.
"""
from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opctx.context.budget import BudgetAllocator
from opctx.context.engine import DefaultContextEngine, register_engine
from opctx.context.masking import MASK_PLACEHOLDER, ObservationMasker
from opctx.context.persistence import Persister
from opctx.context.policy import FROM_CLIENT, CompactionPolicy, policy_fields
from opctx.context.summarize import Summarizer, SummarizerConfig
from opctx.context.types import ReferenceMap
from opctx.context.usage import UsageTracker

from ._preset_specs import ENGINE_SOURCES, PRESETS, REPLAY_POLICY, PresetSpec, preset_names

# claude-code: Claude Code's own clearing of old tool results (microcompaction)
from .history import parse_version
from .microcompact import ClaudeCodeMicrocompactor, MicrocompactRule, microcompactor_for

__all__ = [
    "PresetSpec",
    "PRESETS",
    "REPLAY_POLICY",
    "preset_names",
    "build_engine",
    "preset_policy",
    "resolve_policy",
    "register_presets",
    "thresholds_for",
    "ObservationMasker",
    "MASK_PLACEHOLDER",
    "ENGINE_SOURCES",
    "TriggerRule",
    "TriggerResolution",
    "TRIGGER_RULES",
    "CLIENT_PARAMETERS",
    "resolve_trigger",
    "parse_version",
    "OwnConfiguration",
    "own_configuration",
]

logger = logging.getLogger(__name__)

INF = math.inf

# the client presets' own settings (module docstring, "Client versions"), by their flat
# names; client_version is accepted by every preset so that one call can replay a
# recording under several (their home: the policy's client part)
CLIENT_PARAMETERS = {
    pf.legacy[0]: pf.doc for pf in policy_fields() if pf.name.startswith("client.") and pf.legacy
    and pf.name != "client.post_compaction_tokens"
}
_CLIENT_SETTINGS = {pf.legacy[0]: pf.name for pf in policy_fields()
                    if pf.legacy and pf.legacy[0] in CLIENT_PARAMETERS and pf.name != "client.version"}

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
    if spec.kind in ("masking", "view", "none"):
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
    return {}


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



# -- from a preset (or any policy) to an engine ---------------------------------------------


def _spec_of(preset: str | PresetSpec | CompactionPolicy, name: str | None = None) -> PresetSpec:
    """The ``PresetSpec`` of a preset name, a spec, or a bare policy (named ``name``)."""
    if isinstance(preset, PresetSpec):
        return preset
    if isinstance(preset, CompactionPolicy):
        return PresetSpec(name or "custom", "a policy given as such", preset)
    spec = PRESETS.get(preset) if isinstance(preset, str) else None
    if spec is None:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    return spec


def preset_policy(preset: str | PresetSpec | CompactionPolicy, params: Mapping[str, Any] | None = None) -> CompactionPolicy:
    """The policy of ``preset`` with ``params`` applied (module docstring, "Parameters"),
    before its client's rules are resolved for a window (``resolve_policy``).

    >>> p = preset_policy("default", {"keep_ratio": 0.2, "trigger.auto_pct": 0.6})
    >>> p.cut.keep_ratio, p.trigger.recommend_pct, p.trigger.auto_pct
    (0.2, 0.6, 0.6)
    >>> preset_policy("hermes", {"aging": True}).aging.kind
    'turns'
    """
    spec = _spec_of(preset)
    params = dict(params or {})
    policy = spec.policy
    aging = params.pop("aging", None)
    microcompact = params.pop("microcompact", None)
    if aging is not None and spec.kind == "default":
        # False: no ager; True: a preset without one gets the specification's aging
        if not aging:
            policy = policy.replace(**{"aging.kind": "none"})
        elif policy.aging.kind == "none":
            policy = policy.replace(**{"aging.kind": "turns"})
    if microcompact is not None and policy.aging.kind == FROM_CLIENT:
        # Claude Code's clearing whatever the version (True, or a rule), or never (False)
        policy = policy.replace(**{"aging.kind": "turns" if microcompact is False else "microcompact"})
    if not params:
        return policy
    try:
        return policy.with_params(params)
    except ValueError as exc:
        if "unknown policy field" in str(exc):
            raise ValueError(
                f"unknown preset parameter: {exc}; also accepted: aging, microcompact"
            ) from None
        raise


@dataclass(frozen=True)
class _Resolved:
    """What ``resolve_policy`` gives ``build_engine``: the policy with numbers, and the
    components the client's rules chose."""

    policy: CompactionPolicy
    budget: BudgetAllocator
    ager: Any  # Claude Code's clearing, when the client's rules chose it (else the engine builds it)
    resolution: TriggerResolution | None


def resolve_policy(
    preset: str | PresetSpec | CompactionPolicy,
    *,
    context_window: int,
    model: str | None = None,
    microcompact: bool | MicrocompactRule | None = None,
) -> CompactionPolicy:
    """The policy an engine of ``preset`` runs with at ``context_window`` for ``model``: every
    ``"client"`` field replaced by the client's number for the policy's ``client.version``
    (thresholds as shares of the input budget, Claude Code's output reserve, its ager).

    >>> p = resolve_policy("claude-code", context_window=200_000, model="claude-sonnet-4-5")
    >>> round(p.trigger.auto_pct, 4), p.budget.output_reserve, p.aging.kind
    (0.9278, 20000, 'turns')
    """
    spec = _spec_of(preset)
    return _resolve(spec, spec.policy, int(context_window), model, microcompact).policy


def _resolve(
    spec: PresetSpec, policy: CompactionPolicy, window: int, model: str | None, microcompact: Any
) -> _Resolved:
    """``resolve_policy``, with the budget allocator and the client's ager it built."""
    client = policy.client
    resolution = None
    if client.name is not None:
        settings = {flat: policy.get(dotted) for flat, dotted in _CLIENT_SETTINGS.items()}
        rules_spec = PresetSpec(spec.name, spec.description, policy, spec.sources)
        resolution = resolve_trigger(
            rules_spec, context_window=window, model=model, client_version=client.version,
            **{k: v for k, v in settings.items() if v is not None},
        )
    changes: dict[str, Any] = {}
    reserve = policy.budget.output_reserve
    if reserve == FROM_CLIENT:
        reserve = changes["budget.output_reserve"] = resolution.output_reserve  # type: ignore[union-attr]
    budget = BudgetAllocator(output_reserve=reserve, reserve_policy=policy.budget.reserve_policy)  # type: ignore[arg-type]
    changes.update(_client_thresholds(spec, policy, window, budget, model, resolution))
    ager = None
    kind = policy.aging.kind
    if kind == FROM_CLIENT:
        # Claude Code's clearing for the recording's version: microcompaction as its cli.js
        # does it (1.0.59-2.1.62, opctx.lab.microcompact); a known client outside those versions
        # never ran the spec's turn-based aging; no version: the spec's aging
        ager = microcompactor_for(client.version, None, window, auto_compact=client.auto_compact)
        kind = "microcompact" if ager is not None else ("none" if client.version is not None else "turns")
    elif kind == "microcompact":
        ager = microcompactor_for(client.version, microcompact if microcompact is not None else True, window,
                                  auto_compact=client.auto_compact)
    if kind != policy.aging.kind:
        changes["aging.kind"] = kind
    return _Resolved(policy.replace(**changes), budget, ager, resolution)


def _client_thresholds(
    spec: PresetSpec, policy: CompactionPolicy, window: int, budget: BudgetAllocator, model: str | None,
    resolution: TriggerResolution | None,
) -> dict[str, float]:
    """The thresholds the client decides, as shares of the input budget at ``window``; those
    it decides give way to the trigger when it is set (``recommend`` no higher, ``emergency``
    no lower)."""
    trigger = policy.trigger
    names = {"trigger.recommend_pct": "recommend_pct", "trigger.auto_pct": "auto_compact_pct",
             "trigger.emergency_pct": "emergency_pct"}
    decides = [n for n in names if policy.get(n) == FROM_CLIENT]
    if not decides:
        return {}
    input_budget = max(1, window - budget.reserve_for(window, model))
    rules_spec = PresetSpec(spec.name, spec.description, policy, spec.sources)
    shares = thresholds_for(rules_spec, window, input_budget, resolution)
    out = {n: shares[names[n]] for n in decides}
    auto = out.get("trigger.auto_pct", trigger.auto_pct)
    if "trigger.recommend_pct" in out and isinstance(auto, float):
        out["trigger.recommend_pct"] = min(out["trigger.recommend_pct"], auto)
    if "trigger.emergency_pct" in out and isinstance(auto, float):
        out["trigger.emergency_pct"] = max(out["trigger.emergency_pct"], auto)
    return out


def build_engine(
    preset: str | PresetSpec | CompactionPolicy,
    *,
    session_db: Any = None,
    clock: Callable[[], float] = time.time,
    context_window: int | None = None,
    model: str | None = None,
    summarizer_provider: Callable[..., Any] | None = None,
    name: str | None = None,
    **params: Any,
) -> DefaultContextEngine:
    """A fresh engine of ``preset`` (a name, a ``PresetSpec`` or a ``CompactionPolicy``),
    with ``params`` on top (module docstring, "Parameters"); ``engine.policy`` is the
    policy it runs with, resolved for the window and model."""
    spec = _spec_of(preset, name)
    microcompact = params.get("microcompact")
    policy = preset_policy(spec, params)
    if context_window is not None:
        policy = policy.replace(**{"budget.context_window": context_window})
    window = policy.budget.context_window
    if window is None:
        from opctx.context.tokens import real_context_window

        window = real_context_window(model)
    resolved = _resolve(spec, policy, window, model, microcompact)
    policy, ager = resolved.policy, resolved.ager
    # a compaction's own summary call is made with the replay's model
    summarizer = Summarizer(summarizer_provider, model=model, config=SummarizerConfig.from_policy(policy))
    engine = DefaultContextEngine(
        policy=policy,
        usage_tracker=UsageTracker(session_db, clock=clock),
        budget_allocator=resolved.budget,
        ager=ager,
        summarizer=summarizer,
        persister=Persister(session_db, clock=clock),
        session_db=session_db,
        clock=clock,
        name=name or spec.name,
        # only an ager that may read the reference map (TurnAger) needs the real tracker
        references=None if policy.aging.kind == "turns" else _NoReferences(clock),
    )
    if isinstance(engine.ager, ClaudeCodeMicrocompactor):  # it counts as the engine does
        engine.ager.estimate = functools.partial(engine.estimator.message_tokens, model=model)
    return engine


@dataclass(frozen=True)
class OwnConfiguration:
    """The preset and window a recording ran with, and a sentence saying where each came from."""

    preset: str
    context_window: int
    says: str


def own_configuration(history: Any) -> OwnConfiguration:
    """The recording's own configuration: its client's preset at the window it ran with.

    What a researcher compares against first is what the agent really did, so a tool
    that opens on a session opens here rather than on a what-if: the preset of the
    client that recorded the session (``RecordedHistory.client``: ``claude-code``,
    ``codex``), else ``default``; the window the recording reports (Codex's
    ``model_context_window``), else the model's real window (``real_context_window``),
    which is the window ``replay`` picks when given none.

    >>> from opctx.lab.history import RecordedHistory
    >>> h = RecordedHistory.from_messages(
    ...     [{"role": "user", "content": "hi"},
    ...      {"role": "assistant", "content": "hello", "model": "claude-sonnet-4-5"}])
    >>> own = own_configuration(h)
    >>> own.preset, own.context_window
    ('default', 200000)
    >>> own.says
    "preset 'default' (the recording names no client preset) at window 200,000 (the model's window, claude-sonnet-4-5)"
    """
    from opctx.context.tokens import real_context_window

    from .history import as_history

    history = as_history(history)
    client = history.client
    if client in PRESETS:
        version = f" {history.client_version}" if history.client_version else ""
        preset, why_preset = client, f"the recording's client, {client}{version}"
    else:
        preset, why_preset = "default", "the recording names no client preset"
    if history.context_window:
        window, why_window = int(history.context_window), "the window the recording reports"
    else:
        window = int(real_context_window(history.model or None))
        why_window = f"the model's window, {history.model}" if history.model else "no model named: the default window"
    return OwnConfiguration(preset, window,
                            f"preset {preset!r} ({why_preset}) at window {window:,} ({why_window})")


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


register_presets()
