"""Cold cut decision: estimate every message, or read persisted counts, against LangChain v1.

A cut decided on a history just read from the database ("cold": no warm estimator
cache, no facts table) either runs the tokenizer over every message (``cold_cut``), or
reads the counts persisted per estimator identity (``cold_cut_persisted``:
``opctx.context.token_counts``). Beside them, in the same process and on the same
messages, LangChain v1's ``SummarizationMiddleware`` decision as its ``before_model``
makes it: ``count_tokens_approximately`` over the messages, the trigger check
(``_should_summarize``) and the cutoff (``_determine_cutoff_index``); ``langchain_trigger``
is the count and trigger check alone (the decision when nothing is summarised).
LangChain needs the ``bench`` extra (``pip install 'opctx[bench]'``).

The history: 10,000 messages (``--messages``) of the corpus (``OPCTX_CORPUS`` or
../shared/corpus), its sessions' active branches concatenated longest first (no corpus
session is that long; the corpus again after its end when it holds fewer: every
message gets a fresh id), else ``opctx.lab.synthetic_history.make_history``. It is written
into one session of a temporary database; counts are persisted once before timing.
Each measure is the median of ``--repeat`` interleaved runs (wall clock, with CPU time).

Run: ``.venv/bin/python benchmarks/cold_start.py --json``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.context._cut import find_cut_index  # noqa: E402
from opctx.context._cut_facts import MessageFacts  # noqa: E402
from opctx.context.token_counts import estimator_identity, persist_token_counts  # noqa: E402
from opctx.context.tokens import Estimator  # noqa: E402
from opctx.dag.messages import message_text  # noqa: E402
from opctx.dag.session_db import DagSessionDB  # noqa: E402

CORPUS = Path(os.environ.get("OPCTX_CORPUS", ROOT.parent / "shared" / "corpus"))
MODEL = "claude-sonnet-4-5"
WINDOW = 200_000


def corpus_messages(n: int, tmp: Path) -> list[dict] | None:
    """``n`` messages of the corpus: its sessions' branches, longest first."""
    if not (CORPUS / "manifest.json").is_file():
        return None
    from opctx.importers import import_paths

    logging.getLogger("opctx").setLevel(logging.ERROR)
    path = tmp / "corpus.db"
    report = import_paths([CORPUS], path, on_error="skip")
    out: list[dict] = []
    with DagSessionDB(str(path)) as db:
        branches = [db.get_branch(w["session_id"]) for w in report.written]
    branches = [b for b in sorted(branches, key=len, reverse=True) if b]
    while branches and len(out) < n:  # the whole corpus again when it holds fewer (new ids)
        for branch in branches:
            out.extend(branch)
            if len(out) >= n:
                break
    return out[:n] or None


def build_session(messages: list[dict], path: Path) -> tuple[DagSessionDB, str]:
    db = DagSessionDB(str(path))
    sid = db.create_session(session_id="cold", model=MODEL)
    rows = []
    for i, msg in enumerate(messages):
        row = {k: v for k, v in msg.items() if k not in ("parent_id", "id")}
        row["id"] = f"m{i:06d}"
        rows.append(row)
    db.append_messages(sid, rows)
    return db, sid


def langchain_messages(messages: list[dict]) -> list:
    """The same history as LangChain messages (text, tool calls and results)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out = []
    for i, msg in enumerate(messages):
        text = message_text(msg)
        role = msg.get("role")
        if role == "assistant":
            calls = [{"name": str(c.get("name") or "tool"), "args": c.get("arguments") if isinstance(
                c.get("arguments"), dict) else {"input": str(c.get("arguments") or "")}, "id": str(c.get("id") or i)}
                for c in msg.get("tool_calls") or () if isinstance(c, dict)]
            out.append(AIMessage(content=text, tool_calls=calls, id=f"m{i}"))
        elif role == "tool":
            out.append(ToolMessage(content=text, tool_call_id=str(msg.get("tool_call_id") or i), id=f"m{i}"))
        elif role == "system":
            out.append(SystemMessage(content=text, id=f"m{i}"))
        else:
            out.append(HumanMessage(content=text, id=f"m{i}"))
    return out


def middleware():
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    model = GenericFakeChatModel(messages=iter(()))
    # the window's trigger and keep, in tokens, as the opctx side decides them
    return SummarizationMiddleware(model=model, trigger=("tokens", int(WINDOW * 0.8)), keep=("tokens", 20_000))


def timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, result


def run(n: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        messages = corpus_messages(n, Path(tmp))
        source = "corpus" if messages else "synthetic"
        if not messages:
            from opctx.lab.synthetic_history import make_history

            messages = make_history(n, seed=11)
        db, sid = build_session(messages, Path(tmp) / "cold.db")
        persist_token_counts(db, sid, MODEL)
        identity = estimator_identity(None, MODEL)
        branch = db.get_branch(sid)
        lc = langchain_messages(branch)
        mw = middleware()

        def cold():
            est = Estimator()  # an empty cache: what a freshly started process has
            return find_cut_index(branch, WINDOW, facts=MessageFacts(lambda m: est.message_tokens(m, MODEL)))

        def persisted():
            est = Estimator()
            facts = MessageFacts(lambda m: est.message_tokens(m, MODEL))
            facts.seed(branch, db.token_counts(sid, identity))
            return find_cut_index(branch, WINDOW, facts=facts)

        def trigger():
            total = mw.token_counter(lc)
            return mw._should_summarize(lc, total)

        def decision():
            total = mw.token_counter(lc)
            return mw._determine_cutoff_index(lc) if mw._should_summarize(lc, total) else 0

        measures = {"load": lambda: db.get_branch(sid), "cold_cut": cold, "cold_cut_persisted": persisted,
                    "langchain_decision": decision, "langchain_trigger": trigger}
        walls: dict[str, list[float]] = {k: [] for k in measures}
        cpus: dict[str, list[float]] = {k: [] for k in measures}
        results: dict[str, object] = {}
        for _ in range(repeat):
            for name, fn in measures.items():
                wall, cpu, results[name] = timed(fn)
                walls[name].append(wall)
                cpus[name].append(cpu)
        assert results["cold_cut"] == results["cold_cut_persisted"], "persisted counts changed the cut"
        db.close()
    med = {k: statistics.median(v) for k, v in walls.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    from importlib import metadata

    return {
        "messages": len(branch), "source": source, "repeat": repeat, "estimator": identity,
        "cold_cut_ms": round(med["cold_cut"], 2),
        "cold_cut_persisted_ms": round(med["cold_cut_persisted"], 2),
        "langchain_decision_ms": round(med["langchain_decision"], 2),
        "langchain_trigger_ms": round(med["langchain_trigger"], 2),
        "load_ms": round(med["load"], 2),
        "ratio_persisted_vs_langchain": round(med["cold_cut_persisted"] / med["langchain_decision"], 3),
        "ratio_persisted_vs_langchain_trigger": round(med["cold_cut_persisted"] / med["langchain_trigger"], 3),
        "ratio_cold_vs_langchain": round(med["cold_cut"] / med["langchain_decision"], 3),
        "ratio_persisted_vs_langchain_cpu": round(cpu["cold_cut_persisted"] / cpu["langchain_decision"], 3),
        "cpu_ms": {k: round(v, 2) for k, v in cpu.items()},
        "langchain_cutoff": results["langchain_decision"], "opctx_cut": results["cold_cut"].index,
        "langchain": metadata.version("langchain"),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    out = run(args.messages, args.repeat)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for key, value in out.items():
        print(f"{key:<40} {value}")


if __name__ == "__main__":
    main()
