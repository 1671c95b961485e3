"""The strategies published work compares, as presets: each a ``CompactionPolicy`` with its source.

Every number below was read from the public source named beside it (paper section,
documentation page, or a file at a commit); ``docs/lab.md`` ("Strategies of the
literature") has the same table, and ``tests/lab/test_strategies.py`` pins each value to
its source. Where opctx's layout cannot do exactly what the source does, the preset's
``sources`` say what differs.

Strategies that summarise with an LLM use the structural summary in replays unless a
summary source is given (``replay(..., summaries=<provider>)``); ``ReplayResult.summaries``
says which was used.

``complexity-trap-masking``
    Lindenbauer et al. 2025, "The Complexity Trap" (arXiv 2508.21433), §3.1 and App. C.1:
    keep the last M = 10 observations, replace older ones by ``"Old environment output:
    ({n} lines omitted)"`` (``LastNObservations`` in SWE-agent's
    ``sweagent/agent/history_processors.py``; JetBrains-Research/the-complexity-trap at
    bf15b5fb, config ``default_no_demo_N=1_M=10.yaml``: no demonstrations, ``polling`` 1).
``complexity-trap-summary``
    The same paper's LLM-Summary: summarise when the turns since the last summary reach
    N + M = 21 + 10 = 31, fold the oldest N = 21 and keep the last M = 10; the first two
    history items (system prompt, problem statement) are never summarised
    (``SummarizeEveryNTurns``, same file; config
    ``default_no_demo_checkpoint_same_model_openhands_N=21_M=10.yaml``). Its summary prompt
    is ``opctx.lab.summary_prompts`` ``"complexity-trap"``.
``anthropic-clear-tool-uses``
    Anthropic context editing, ``clear_tool_uses_20250919`` with the API's defaults
    (platform.claude.com/docs/en/build-with-claude/context-editing, "Configuration options
    for tool result clearing"): trigger 100,000 input tokens, keep 3 tool uses,
    ``clear_at_least`` none, ``exclude_tools`` none, ``clear_tool_inputs`` false. The
    server's placeholder text is not published: opctx's own is used.
``anthropic-clear-thinking``
    Anthropic context editing, ``clear_thinking_20251015`` with ``keep: {type:
    "thinking_turns", value: 1}`` (platform.claude.com/docs/en/build-with-claude/
    context-editing, "Thinking block clearing"): the thinking of the last assistant turn
    kept, older thinking blocks cleared, nothing else (``aging.keep_thinking_turns`` 1,
    ``aging.kind`` none, never compacts). 1 is the value the page names as the API's
    default ("equivalent to keep: {type: 'thinking_turns', value: 1}"); ``"all"`` keeps
    everything. Turns are counted as ``thinking_retention`` counts them (a tool loop is one
    turn); savings are counted only for thinking the replayed model would hold
    (``opctx.context.thinking_clearing``).
``openhands-llm-summarizing``
    OpenHands SDK ``LLMSummarizingCondenser`` (OpenHands/software-agent-sdk at 611629e6,
    ``openhands-sdk/openhands/sdk/context/condenser/llm_summarizing_condenser.py``):
    ``max_size`` 240 events (condense when the view holds more), ``keep_first`` 2, keep
    ``max_size // 2 - keep_first - 1`` = 117 events of tail; the hard trigger at the
    model's input limit (``max_tokens`` None), past which the tail is cut down further until
    the request would be half that limit (``_get_forgotten_events``, ``Reason.TOKENS``:
    ``cut.overflow_keep_share`` 0.5). Events are counted as messages.
``openhands-observation-masking``
    OpenHands (V0) ``ObservationMaskingCondenser`` with its config default
    ``attention_window`` 100 (OpenHands/OpenHands at d6fab190,
    ``openhands/core/config/condenser_config.py``): observations older than the last 100
    events become ``<MASKED>``. opctx keeps the last 50 observations: one observation per
    action, so 100 events hold 50.
``openhands-amortized-forgetting``
    ``AmortizedForgettingCondenser``, config defaults ``max_size`` 100, ``keep_first`` 1:
    when the view holds more than 100 events keep the first and the last
    ``max_size // 2 - keep_first`` = 49, forget the rest without a summary.
``openhands-recent-events``
    ``RecentEventsCondenser``, config defaults ``keep_first`` 1, ``max_events`` 100: every
    step the first event and the last ``max_events - keep_first`` = 99. It returns a
    view and writes nothing, so it is a view here too (``aging.kind`` ``recent-events``,
    ``opctx.context.recent``), never a compaction.

Both V0 forgetting presets also keep the task: V0's ``ConversationMemory.process_events``
(same commit, ``openhands/memory/conversation_memory.py``) puts the initial user message
back after the system message when a condenser left it out
(``_ensure_initial_user_message``), so in a history that opens with a system message the
head reaches the first user request (``cut.keep_initial_request``).
``langchain-summarization``
    LangChain v1 ``SummarizationMiddleware`` (PyPI langchain 1.5.2,
    ``langchain/agents/middleware/summarization.py``): ``keep=("messages", 20)``; the
    token trigger counts the agent's messages (``before_model``:
    ``token_counter(state["messages"])``), not the system prompt or tool schemas
    (``trigger.tokens_of`` ``history``); its
    default ``trigger=None`` never summarises, so the trigger is the documentation's
    example ``("tokens", 4000)`` (docs.langchain.com, "Short-term memory" /
    "Context engineering", langchain-ai/docs#1550). The summary replaces everything before
    the kept messages.
``langchain-clear-tool-uses``
    LangChain v1 ``ContextEditingMiddleware`` with its default ``ClearToolUsesEdit``
    (``context_editing.py``, same wheel): trigger 100,000 tokens, keep 3, ``clear_at_least``
    0, ``clear_tool_inputs`` False, ``exclude_tools`` (), placeholder ``"[cleared]"``.
"""

from __future__ import annotations

from ._preset_base import REPLAY_POLICY, REPLAY_SOURCE, PresetSpec

__all__ = ["STRATEGY_PRESETS", "STRATEGY_SOURCES"]

_NEVER = {"trigger.recommend_pct": None, "trigger.auto_pct": None, "trigger.emergency_pct": None}
# a compaction keeps what the "keep" field says, nothing more: no spec floors or gates
_COUNTED_CUT = {"cut.keep_min_messages": 0, "cut.protect_last_n": 0, "cut.protect_first_n": 0}
# the sources compare strategies without opctx's anti-thrash guard
_NO_GUARD = {"guard.enabled": False}

_CT = "JetBrains-Research/the-complexity-trap at bf15b5fb7d279679035a007ac9a81084d6b9a89a"
_CT_HISTORY = f"{_CT}, sweagent/agent/history_processors.py"
_ANTHROPIC = ("platform.claude.com/docs/en/build-with-claude/context-editing, 'Configuration options for "
              "tool result clearing' (clear_tool_uses_20250919, beta context-management-2025-06-27)")
_ANTHROPIC_THINKING = ("platform.claude.com/docs/en/build-with-claude/context-editing, 'Thinking block "
                       "clearing' (clear_thinking_20251015, keep {type: thinking_turns, value: 1}, beta "
                       "context-management-2025-06-27)")
_OH_SDK = ("OpenHands/software-agent-sdk at 611629e6999ad398dc49c761721eefe18d5e6bd9, openhands-sdk/openhands/"
           "sdk/context/condenser/llm_summarizing_condenser.py")
_OH_V0 = ("OpenHands/OpenHands at d6fab190bfb55f07cc380993b45ec4f781706a92, openhands/core/config/"
          "condenser_config.py (config defaults) and openhands/memory/condenser/impl/")
# what V0 sends after any condenser: its conversation memory puts the initial user message back
_OH_V0_TASK = ("OpenHands/OpenHands at d6fab190bfb55f07cc380993b45ec4f781706a92, openhands/memory/"
               "conversation_memory.py (process_events: _ensure_system_message, _ensure_initial_user_message)")
_OH_V0_TASK_KEY = ("cut.keep_initial_request True (the view always holds the system message and the initial "
                   "user message, whatever keep_first left)")
_LC = "PyPI langchain==1.5.2, langchain/agents/middleware/"

#: where each strategy comes from (the docs/lab.md table reads this)
STRATEGY_SOURCES: dict[str, str] = {
    "complexity-trap-masking": f"Lindenbauer et al. 2025 (arXiv 2508.21433) §3.1, App. C.1; {_CT_HISTORY} (LastNObservations)",
    "complexity-trap-summary": f"Lindenbauer et al. 2025 §3.1, App. B; {_CT_HISTORY} (SummarizeEveryNTurns)",
    "anthropic-clear-tool-uses": _ANTHROPIC,
    "anthropic-clear-thinking": _ANTHROPIC_THINKING,
    "openhands-llm-summarizing": _OH_SDK,
    "openhands-observation-masking": f"{_OH_V0}observation_masking_condenser.py",
    "openhands-amortized-forgetting": f"{_OH_V0}amortized_forgetting_condenser.py",
    "openhands-recent-events": f"{_OH_V0}recent_events_condenser.py",
    "langchain-summarization": f"{_LC}summarization.py; docs.langchain.com short-term memory (trigger example)",
    "langchain-clear-tool-uses": f"{_LC}context_editing.py",
}


def _spec(name: str, description: str, changes: dict, sources: dict[str, str]) -> PresetSpec:
    never = {
        f"{', '.join(n for n in _NEVER if changes.get(n, 0) is None)} None (no share-of-budget trigger)":
            "the source has none" if any(changes.get(n, 0) is None for n in _NEVER) else "",
        "aging.kind none (no ager besides the strategy)" if changes.get("aging.kind", "none") == "none" else
        f"aging.kind {changes['aging.kind']} (the strategy's own ager, no other)": "the source has none",
        "cut.keep_min_messages 0, cut.protect_last_n 0, cut.protect_first_n 0 unless set (the count keep "
        "decides the tail, opctx.context.summarize counted_cut)": "the source keeps exactly its count"
        if "cut.keep_min_messages" in changes else "",
        "guard.enabled False": "the source has no anti-thrash guard" if "guard.enabled" in changes else "",
    }
    return PresetSpec(name, description, REPLAY_POLICY.replace(**changes),
                      {**REPLAY_SOURCE, **{k: v for k, v in never.items() if v}, **sources})


def _complexity_trap() -> list[PresetSpec]:
    masking = _spec(
        "complexity-trap-masking",
        "The Complexity Trap's observation masking: keep the last M=10 observations, mask older ones.",
        {**_NEVER, "aging.kind": "masking", "aging.keep_last": 10, "aging.drop_demos": True,
         "aging.placeholder": "Old environment output: ({lines} lines omitted)"},
        {
            "aging.kind masking, aging.keep_last M = 10": f"paper §3.1, App. C.1 (M=10 best); {_CT}, config/default_no_demo_N=1_M=10.yaml (last_n_observations, n: 10)",
            "aging.placeholder 'Old environment output: ({lines} lines omitted)'": f"{_CT_HISTORY}, LastNObservations (the paper's §3.1 shows an example only)",
            "aging.drop_demos (configs without demonstrations)": f"{_CT}, config/default_no_demo_*.yaml; paper §3.2",
            "never summarise (trigger.recommend_pct, trigger.auto_pct, trigger.emergency_pct None)": "paper §3.1 (masking alone); polling 1 (not set in the config)",
        },
    )
    summary = _spec(
        "complexity-trap-summary",
        "The Complexity Trap's LLM-Summary: at N+M=31 turns since the last summary, summarise N=21, keep M=10.",
        {**_NEVER, **_COUNTED_CUT, **_NO_GUARD, "aging.kind": "none", "trigger.turns": 21 + 10,
         "cut.keep_turns": 10, "cut.protect_first_n": 2},
        {
            "trigger.turns N + M = 31": f"paper §3.1 ('when the accumulated turns since the last summary reach N+M'), App. B; {_CT_HISTORY} (SummarizeEveryNTurns: n 21, keep_last_m_turns 10)",
            "cut.keep_turns M = 10": f"{_CT}, config/default_no_demo_checkpoint_same_model_openhands_N=21_M=10.yaml",
            "cut.protect_first_n 2 (system prompt and problem statement)": f"{_CT_HISTORY} (history[:2] is never summarised)",
            "cut.keep_min_messages 0, cut.protect_last_n 0, guard.enabled False": "the source keeps exactly M turns and has no guard",
            "aging.kind none, trigger.recommend_pct, trigger.auto_pct, trigger.emergency_pct None": "the source summarises on the turn count only",
        },
    )
    return [masking, summary]


def _clear_tool_uses() -> list[PresetSpec]:
    anthropic = _spec(
        "anthropic-clear-tool-uses",
        "Anthropic context editing clear_tool_uses_20250919 with the API's defaults.",
        {**_NEVER, "aging.kind": "clear-tool-uses", "aging.trigger_tokens": 100_000, "aging.keep_last": 3,
         "aging.clear_at_least": 0, "aging.exclude_tools": (), "aging.clear_inputs": False},
        {
            "aging.trigger_tokens 100000, aging.keep_last 3 (tool uses), aging.clear_at_least 0 (None), aging.exclude_tools (), aging.clear_inputs False": _ANTHROPIC,
            "aging.placeholder (the server's text is not published: opctx's own)": "assumed",
            "trigger counted on the history (the API counts the whole request)": "assumed (an approximation)",
        },
    )
    langchain = _spec(
        "langchain-clear-tool-uses",
        "LangChain v1 ContextEditingMiddleware with its default ClearToolUsesEdit.",
        {**_NEVER, "aging.kind": "clear-tool-uses", "aging.trigger_tokens": 100_000, "aging.keep_last": 3,
         "aging.clear_at_least": 0, "aging.exclude_tools": (), "aging.clear_inputs": False,
         "aging.placeholder": "[cleared]"},
        {
            "aging.trigger_tokens 100000, aging.keep_last 3, aging.clear_at_least 0, aging.exclude_tools (), aging.clear_inputs False, aging.placeholder '[cleared]'": f"{_LC}context_editing.py (ClearToolUsesEdit defaults, DEFAULT_TOOL_PLACEHOLDER)",
        },
    )
    return [anthropic, langchain]


def _clear_thinking() -> PresetSpec:
    return _spec(
        "anthropic-clear-thinking",
        "Anthropic context editing clear_thinking_20251015: keep the last assistant turn's thinking, clear older thinking.",
        {**_NEVER, "aging.kind": "none", "aging.keep_thinking_turns": 1},
        {
            "aging.keep_thinking_turns 1 (keep {type: thinking_turns, value: 1}; the page's default)": _ANTHROPIC_THINKING,
            "turns counted as thinking_retention counts them (a tool loop is one turn, the running turn the "
            "last; a turn without thinking counts)": "assumed (the server's count is not published)",
        },
    )


def _openhands() -> list[PresetSpec]:
    max_size, keep_first = 240, 2
    llm = _spec(
        "openhands-llm-summarizing",
        "OpenHands SDK LLMSummarizingCondenser: past 240 events, summarise all but the first 2 and the last 117.",
        {**_COUNTED_CUT, **_NO_GUARD, "trigger.recommend_pct": None, "trigger.auto_pct": 1.0,
         "trigger.emergency_pct": None, "aging.kind": "none", "trigger.messages": max_size + 1,
         "cut.protect_first_n": keep_first, "cut.keep_messages": max_size // 2 - keep_first - 1,
         "cut.overflow_keep_share": 0.5},
        {
            "trigger.messages 241 (len(view) > max_size 240), cut.protect_first_n keep_first 2, cut.keep_messages max_size // 2 - keep_first - 1 = 117": _OH_SDK,
            "trigger.auto_pct 1.0 (max_tokens None: the model's input limit)": _OH_SDK,
            "cut.overflow_keep_share 0.5 (past the token limit: tokens_to_reduce = total_tokens - max_tokens // 2, the stricter of the two tails)": f"{_OH_SDK} (_get_forgotten_events, Reason.TOKENS)",
            "events counted as messages; guard.enabled False (minimum_progress 0.1 is of events, not modelled)": "assumed (an approximation)",
        },
    )
    attention_window = 100
    masking = _spec(
        "openhands-observation-masking",
        "OpenHands ObservationMaskingCondenser (attention_window 100 events = the last 50 observations), '<MASKED>'.",
        {**_NEVER, "aging.kind": "masking", "aging.keep_last": attention_window // 2, "aging.placeholder": "<MASKED>"},
        {
            "aging.keep_last attention_window 100 // 2 (one observation per action)": f"{_OH_V0} (ObservationMaskingCondenserConfig attention_window 100); the halving assumed",
            "aging.placeholder '<MASKED>'": f"{_OH_V0}observation_masking_condenser.py",
        },
    )
    forgetting_size, forgetting_first = 100, 1
    amortized = _spec(
        "openhands-amortized-forgetting",
        "OpenHands AmortizedForgettingCondenser: past 100 events keep the first and the last 49, no summary.",
        {**_NEVER, **_COUNTED_CUT, **_NO_GUARD, "aging.kind": "none", "summary.source": "forget",
         "trigger.messages": forgetting_size + 1, "cut.protect_first_n": forgetting_first,
         "cut.keep_messages": forgetting_size // 2 - forgetting_first, "cut.keep_initial_request": True},
        {
            "trigger.messages 101 (max_size 100), cut.protect_first_n keep_first 1, cut.keep_messages max_size // 2 - keep_first = 49": f"{_OH_V0} (AmortizedForgettingCondenserConfig)",
            _OH_V0_TASK_KEY: _OH_V0_TASK,
            "summary.source forget (no summary; opctx leaves a one-line marker)": f"{_OH_V0}amortized_forgetting_condenser.py",
            "guard.enabled False": "the source has no anti-thrash guard",
        },
    )
    max_events, recent_first = 100, 1
    recent = _spec(
        "openhands-recent-events",
        "OpenHands RecentEventsCondenser: every step the first event and the last 99 (a view; nothing stored).",
        {**_NEVER, "aging.kind": "recent-events", "aging.protect_first_n": recent_first,
         "aging.keep_last": max_events - recent_first, "cut.keep_initial_request": True},
        {
            "aging.kind recent-events (condense returns a View every step: nothing is persisted, no compaction)": f"{_OH_V0}recent_events_condenser.py",
            "aging.protect_first_n keep_first 1, aging.keep_last max_events - keep_first = 99": f"{_OH_V0} (RecentEventsCondenserConfig)",
            _OH_V0_TASK_KEY: _OH_V0_TASK,
            "tool results whose call the view left out are left out too": f"{_OH_V0_TASK.split(' (')[0]} (_filter_unmatched_tool_calls)",
            "a history shorter than max_events is sent whole (the source's slices repeat its first event there)":
                "OpenHands/OpenHands at d6fab190, tests/unit/memory/condenser/test_condenser.py (test_recent_events_condenser: "
                "'equivalent to a NoOpCondenser'); the repeat is not reproduced (assumed unintended)",
            "events counted as messages": "assumed (an approximation)",
        },
    )
    return [llm, masking, amortized, recent]


def _langchain_summarization() -> PresetSpec:
    return _spec(
        "langchain-summarization",
        "LangChain v1 SummarizationMiddleware: keep the last 20 messages, trigger at 4,000 tokens (docs example).",
        {**_NEVER, **_COUNTED_CUT, **_NO_GUARD, "aging.kind": "none", "trigger.tokens": 4_000,
         "trigger.tokens_of": "history", "cut.keep_messages": 20},
        {
            "cut.keep_messages 20 (keep=('messages', 20))": f"{_LC}summarization.py (_DEFAULT_MESSAGES_TO_KEEP)",
            "trigger.tokens 4000 (the default trigger None never summarises)": "docs.langchain.com, Short-term memory / Context engineering: SummarizationMiddleware(trigger=('tokens', 4000), keep=('messages', 20)) (langchain-ai/docs#1550)",
            "trigger.tokens_of history (before_model counts state['messages'] with token_counter: no system prompt, no tool schemas)": f"{_LC}summarization.py (SummarizationMiddleware.before_model)",
            "the history counted by opctx's estimate (LangChain's default token_counter is count_tokens_approximately)": "assumed (an approximation)",
            "cut.protect_first_n 0 (everything before the kept messages is summarised)": f"{_LC}summarization.py",
            "a system message recorded in the history is folded too (LangChain keeps its system prompt outside the messages)": "assumed (an approximation)",
            "guard.enabled False": "the source has no anti-thrash guard",
        },
    )


STRATEGY_PRESETS: dict[str, PresetSpec] = {
    spec.name: spec
    for spec in (*_complexity_trap(), *_clear_tool_uses(), _clear_thinking(), *_openhands(),
                 _langchain_summarization())
}
