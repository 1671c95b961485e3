"""The steps of ``DefaultContextEngine.compact``, each on its own: measure the branch,
plan the cut, predict the tokens after (the whole run is tested in test_engine.py)."""

from __future__ import annotations

import threading

import pytest
from _compaction_fixtures import assistant, tool_turn, user

from opctx.context.engine import DefaultContextEngine
from opctx.context.summarize import Summarizer
from opctx.context.tokens import Estimator
from opctx.context.types import AgingReport, SummaryResult
from opctx.dag.session_db import DagSessionDB

HEURISTIC = Estimator("heuristic")
SYSTEM = "You are a careful test agent."


class PassThroughAger:
    """Ages nothing: hands the history back as given."""

    def age(self, history, references):
        return history, AgingReport()


class UncopyableAger(PassThroughAger):
    """The same, holding a lock: ``copy.deepcopy`` of it fails."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


@pytest.fixture
def db() -> DagSessionDB:
    return DagSessionDB(":memory:")


def session(db: DagSessionDB, turns: int = 14, tool_size: int = 400) -> str:
    msgs = [user("small model task"), assistant("ok"), user("details")]
    for _ in range(turns):
        msgs += tool_turn(tool_size=tool_size)
    sid = db.create_session(title="steps")
    db.append_messages(sid, [{k: v for k, v in m.items() if k != "id"} for m in msgs])
    return sid


def engine(db: DagSessionDB, **kw) -> DefaultContextEngine:
    kw.setdefault("aging", False)
    return DefaultContextEngine(
        session_db=db, context_window=8_000, estimator=HEURISTIC,
        summarizer=Summarizer(None), **kw,
    )


def measure(eng: DefaultContextEngine, db: DagSessionDB, sid: str):
    return eng._measure_branch(eng._state(sid), db, sid, SYSTEM, None, None)


def test_measure_branch_counts_what_prepare_counts(db: DagSessionDB) -> None:
    sid = session(db)
    eng = engine(db)
    prep = eng.prepare(SYSTEM, sid, db.get_branch(sid), None, None)
    branch = measure(eng, db, sid)
    assert branch.history == db.get_branch(sid)
    assert branch.tokens_before == (
        prep.budget.system_prompt + prep.budget.tools_schema + prep.budget.history
    )
    assert branch.pct == pytest.approx(prep.budget_pct)


@pytest.mark.parametrize("share", [0.25, 0.5, 1.0])
def test_plan_cut_caps_the_tail_at_its_share_of_the_room(db: DagSessionDB, share: float) -> None:
    sid = session(db)
    eng = engine(db, tail_budget_share=share)
    branch = measure(eng, db, sid)
    room = branch.budget.input_budget - branch.system_tokens - branch.tools_tokens
    cut = eng._plan_cut(branch, None)
    assert cut.ok
    cap = max(1, int(room * share))
    assert f"2:capped by max_tail_tokens={cap}" in cut.steps
    assert branch.table.tail_tokens(cut.index) <= cap
    # an explicit keep_recent_tokens is the caller's figure: no cap from the share
    assert not any("max_tail_tokens" in step for step in eng._plan_cut(branch, 500).steps)


def test_predicted_tokens_after_without_a_copyable_ager_match_a_copied_one(
    db: DagSessionDB,
) -> None:
    # the fallback (each kept message as aged now) and the copied ager agree when
    # aging changes nothing
    sid = session(db)
    summary = SummaryResult(text="## User intent\nsmall model task", summarised_count=0)
    figures = []
    for ager in (PassThroughAger(), UncopyableAger()):
        eng = engine(db, ager=ager, aging=True)
        branch = measure(eng, db, sid)
        cut = eng._plan_cut(branch, None)
        copied = eng._predicted_aged_tokens(eng._state(sid), branch.history, None)
        assert (copied is None) == isinstance(ager, UncopyableAger)
        figures.append(eng._predict_tokens_after(eng._state(sid), branch, cut, summary, None))
    assert figures[0] == figures[1]
    assert figures[0][0] < measure(engine(db), db, sid).tokens_before
