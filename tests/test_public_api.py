"""The public surface: every name docs/design.md lists is importable from ``opctx``,
and the core stays light (no pandas / matplotlib / networkx / ipywidgets)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import opctx

SPEC_NAMES = """Call Graph GraphStore DagSession DagSessionManager DagSessionDB DagRuntime chat_turn
parse_tool_call render_dag_messages compute_reads fold_history agentic_function build_system_prompt
BudgetAllocator UsageTracker TurnAger ReferenceTracker Summarizer Persister ContextEngine
DefaultContextEngine register_engine get_engine resolve_engine_for TurnPrep CompactResult UsageState
BudgetAllocation ReferenceMap estimate_message_tokens estimate_history_tokens real_context_window
UserMessage ModelCall FunctionCall CompactionPolicy CompactRequest Decision DecisionKind""".split()


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_spec_name_is_exported(name):
    assert name in opctx.__all__
    assert getattr(opctx, name) is not None


def test_every_exported_name_resolves():
    for name in opctx.__all__:
        getattr(opctx, name)


def test_unknown_attribute_is_a_clear_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        opctx.nope  # noqa: B018


def test_core_does_not_import_the_heavy_toolkit():
    code = (
        "import sys, opctx\n"
        "import opctx.dag.store, opctx.dag.session_db, opctx.dag.chat, opctx.dag.agentic\n"
        "import opctx.context.engine, opctx.context.turn\n"
        "heavy = [m for m in ('pandas', 'matplotlib', 'networkx', 'ipywidgets', 'pyvis') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
