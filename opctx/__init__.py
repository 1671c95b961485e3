"""opctx: context management for LLM agents, and a research toolkit around it.

Three layers, imports pointing only downward (docs/ARCHITECTURE.md):

* ``opctx.dag`` - the substrate: one node type ``Call`` in a flat DAG (edges
  caller / predecessor / reads, time by ``seq``), stored in SQLite with FTS5;
  sessions, the legacy message-tree adapter, providers, the runtime, the chat
  loop and ``@agentic_function``.
* ``opctx.context`` - the orchestration: system prompt, token estimates and
  budgets, usage, tool-result aging with reference tracking, summarisation with
  a structural fallback, compaction persisted by re-parenting, ``ContextEngine``.
* ``opctx.importers``, ``opctx.lab``, ``opctx.viz``, ``opctx.widgets`` - the
  research toolkit: recorded transcripts in, DataFrames, replays, sweeps, graphs,
  plots and widgets out.

Every public name is importable from here. Names resolve lazily so that
``import opctx`` stays cheap and never imports pandas or matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {}


def _export(module: str, *names: str) -> None:
    for name in names:
        _EXPORTS[name] = module


_export(
    "opctx.dag.nodes",
    "Call", "Graph", "UserMessage", "ModelCall", "FunctionCall", "new_id",
    "last_user_message", "linear_back_to", "branch_terminals", "branch_internal",
    "fold_history", "compute_reads",
)
_export("opctx.dag.messages", "message_to_call", "call_to_message")
_export("opctx.dag.store", "GraphStore", "StoreError", "SearchHit", "search_across_sessions")
_export("opctx.dag.session", "DagSession", "DagSessionManager", "SessionMeta")
_export("opctx.dag.session_db", "DagSessionDB", "SessionDB", "HeadMoved")
_export("opctx.dag.memory_db", "MemorySessionDB")
_export(
    "opctx.dag.providers",
    "Reply", "Usage", "ToolCall", "ScriptedProvider", "ReplayProvider",
    "OpenAICompatProvider", "ProviderError", "ProviderHTTPError", "ProviderTimeoutError",
)
_export("opctx.dag.render", "render_dag_messages")
_export("opctx.dag.runtime", "DagRuntime")
_export("opctx.dag.chat", "chat_turn", "parse_tool_call", "ChatResult")
_export("opctx.dag.agentic", "agentic_function", "Runtime", "use_store")
_export(
    "opctx.context.types",
    "UsageState", "BudgetAllocation", "ReferenceMap", "TurnPrep", "CompactResult",
    "AgingReport", "CutPoint", "SummaryResult", "Decision", "DecisionKind", "CompactRequest",
)
_export("opctx.context.policy", "CompactionPolicy")
_export(
    "opctx.context.tokens",
    "estimate_message_tokens", "estimate_history_tokens", "real_context_window",
    "register_model",
)
_export("opctx.context.budget", "BudgetAllocator")
_export("opctx.context.usage", "UsageTracker")
_export("opctx.context.references", "ReferenceTracker")
_export("opctx.context.aging", "TurnAger")
_export(
    "opctx.context.system_prompt", "build_system_prompt", "build_system_prompt_report",
    "PromptReport", "AgentSpec",
)
_export("opctx.context.fit", "fit_request", "ContextOverflowError")
_export("opctx.context.summarize", "Summarizer", "find_cut_index")
_export("opctx.context.persistence", "Persister")
_export(
    "opctx.context.engine",
    "ContextEngine", "DefaultContextEngine", "register_engine", "get_engine",
    "resolve_engine_for", "default_engine",
)
_export("opctx.context.turn", "process_user_turn", "trigger_compaction")
_export("opctx.context.provider_messages", "to_provider_messages")
_export("opctx.context.anthropic_messages", "to_anthropic_request", "thinking_retention")
_export(
    "opctx.importers",
    "import_path", "import_paths", "parse_path", "detect", "export_openai", "export_jsonl",
    "TranscriptError", "UnknownFormatError",
)

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'opctx' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
