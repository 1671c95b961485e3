"""opctx.lab: the research layer - frames, replays, presets, metrics, sweeps, scenarios.

=================  ==========================================================
``frames``         pandas DataFrames over opctx databases (sessions, nodes,
                   edges, turns, compactions, recorded aging), lazy SQL projections
``history``        a session's recorded stream with compactions expanded
``replay``         step a recorded history through a context engine
``presets``        named strategies (default, claude-code, hermes, codex,
                   observation-masking, none), each number with its source
``metrics``        tokens, savings, cost, prefix cache, tool pairs, reference loss
``prices``         list prices per model (litellm's map, dated), tiers, cache rates
``costs``          a run's cost request by request: tiers, cache expiry, summaries
``literature``     a paper's token and cost comparison replayed on trajectories
``fidelity``       recorded compactions vs where the presets compact
``calibrate``      fit a client preset's trigger to recorded compactions
``microcompact``   Claude Code's clearing of old tool results, as a rule and an ager
``aging_fidelity`` recorded microcompactions vs where the model clears, which results
``sweep``          many sessions x many configurations, serially or on a dask cluster
``scenarios``      seeded synthetic coding sessions with planted identifiers
``probes``         which facts a continuation needs survive a compaction:
                   retention probes per family, ``probe_table`` over strategies
``summaries``      real LLM summaries through an OpenAI-compatible endpoint,
                   cached in SQLite; ``summary_prompts`` the clients' prompts
``judge``          an optional LLM judge (Factory's six dimensions)
``local_llm``      the embedded SmolLM2-135M model on llama.cpp's server
=================  ==========================================================

Names resolve lazily (``replay`` imports the engine, ``frames`` imports
pandas), so ``import opctx.lab`` is cheap. The two functions named like their
modules are imported from the module: ``from opctx.lab.replay import replay``,
``from opctx.lab.sweep import sweep`` (a package attribute cannot be both the
submodule and the function; ``opctx.lab.calibrate`` is the exception: that module
is callable as its function). See docs/lab.md.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "sessions_df": "frames",
    "nodes_df": "frames",
    "edges_df": "frames",
    "turns_df": "frames",
    "compactions_df": "frames",
    "recorded_aging_df": "frames",
    "SessionSpec": "history",
    "RecordedHistory": "history",
    "RecordedCompaction": "history",
    "load_history": "history",
    "ReplayResult": "replay",
    "ReplayCompaction": "replay",
    "ReplayClock": "replay",
    "PRESETS": "presets",
    "build_engine": "presets",
    "preset_names": "presets",
    "ObservationMasker": "presets",
    "summarize": "metrics",
    "step_metrics": "metrics",
    "turn_metrics": "metrics",
    "reference_losses": "metrics",
    "identifiers": "metrics",
    "tool_pair_breaks": "metrics",
    "PriceTable": "prices",
    "ModelPrice": "prices",
    "price_for": "prices",
    "PRICE_MODELS": "prices",
    "price_requests": "costs",
    "compare_costs": "literature",
    "PAPER_TABLE1": "literature",
    "RequestTokens": "costs",
    "CachePolicy": "costs",
    "fidelity_table": "fidelity",
    "fidelity_summary": "fidelity",
    "aging_fidelity_table": "aging_fidelity",
    "aging_fidelity_summary": "aging_fidelity",
    "recorded_microcompactions": "aging_fidelity",
    "simulate_microcompaction": "aging_fidelity",
    "MicrocompactRule": "microcompact",
    "ClaudeCodeMicrocompactor": "microcompact",
    "calibrate": "calibrate",
    "CalibratedPreset": "calibrate",
    "loso_fidelity_table": "calibrate",
    "expand_grid": "sweep",
    "generate_session": "scenarios",
    "write_scenarios": "scenarios",
    "load_scenario": "scenarios",
    "build_scenario_sessions": "scenarios",
    "make_history": "synthetic_history",
    "open_database": "sources",
    "default_database": "sources",
    "probe_table": "probes",
    "extract_probes": "probes",
    "score_probes": "probes",
    "ProbeEvaluation": "probes",
    "LLMSummaries": "summaries",
    "SummaryCache": "summaries",
    "SummaryRecord": "summaries",
    "LLMJudge": "judge",
    "LocalModelServer": "local_llm",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'opctx.lab' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
