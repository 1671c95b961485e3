"""An optional LLM judge of post-compaction contexts, through the summaries' endpoint and cache.

Deterministic probes (``opctx.lab.probes``) are the default metric: they need no model
and every score is traceable. Factory's evaluation ("Evaluating Context Compression for
AI Agents", factory.ai/news/evaluating-compression, Dec 16 2025; summarised at
docs.factory.ai/guides/power-user/evaluating-context-compression) grades with an LLM judge
on six dimensions, 0 to 5 each: accuracy, context awareness, artifact trail,
completeness, continuity and instruction following (``DIMENSIONS``). ``LLMJudge`` asks a
model the same six questions about one context, given the probes of the cut as the facts
that matter, in opctx's own words (Factory's rubric text is not reproduced).

It is off by default: ``probe_table(..., judge=LLMJudge(summaries))`` adds the columns
``judge_<dimension>`` and ``judge_error``. The judge uses the endpoint, model, settings
and cache of the ``LLMSummaries`` it is given (a request keyed as ``"judge"``), so a
re-run is answered from the cache. The context is rendered line by line and cut to
``max_context_chars`` (its beginning and its end, with a marker), because a kept-whole
history does not fit a judge's window. An answer that is not the JSON asked for is a
recorded failure (``NaN`` scores and ``judge_error``), never an exception.

>>> from opctx.dag.providers import ScriptedProvider
>>> from opctx.lab.summaries import LLMSummaries
>>> llm = LLMSummaries(ScriptedProvider(['{"accuracy": 4, "context_awareness": 3, "artifact_trail": 2, '
...     '"completeness": 3, "continuity": 5, "instruction_following": 4}']), "judge-model", cache=":memory:")
>>> v = LLMJudge(llm).judge([], [{"role": "user", "content": "edited calc.py"}])
>>> v.scores["continuity"], v.error
(5.0, None)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._probe_extract import Probe, context_lines

__all__ = ["DIMENSIONS", "LLMJudge", "JudgeVerdict"]

# Factory's six dimensions, each scored 0-5 (factory.ai/news/evaluating-compression)
DIMENSIONS = (
    "accuracy",
    "context_awareness",
    "artifact_trail",
    "completeness",
    "continuity",
    "instruction_following",
)

_SYSTEM = """\
You review the context an AI coding agent will continue from after part of its history \
was compacted. You are given facts from the earlier history that a continuation needs, \
and the context itself. Judge only what the context states; the facts are the reference.

Score each dimension from 0 (absent or wrong) to 5 (fully and exactly present):
- accuracy: what the context states about the earlier work is correct and precise;
- context_awareness: the current state of the task and of the workspace is clear;
- artifact_trail: which files were read, created or changed, and how, can be told;
- completeness: the facts listed are covered, none missing;
- continuity: the agent could take the next step without re-reading or asking again;
- instruction_following: the user's constraints and requests are kept.

Answer with one JSON object and nothing else, for example:
{"accuracy": 3, "context_awareness": 4, "artifact_trail": 2, "completeness": 3, \
"continuity": 4, "instruction_following": 5}"""


@dataclass
class JudgeVerdict:
    """The judge's scores for one context (``None`` where it gave none), and its failure."""

    scores: dict[str, float | None] = field(default_factory=dict)
    error: str | None = None
    record: Any = None

    def columns(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"judge_{d}": (math.nan if self.scores.get(d) is None else self.scores[d])
                               for d in DIMENSIONS}
        out["judge_error"] = self.error
        return out


def _render(context: Sequence[dict], limit: int) -> str:
    lines = []
    for msg in context:
        body = "\n".join(context_lines(msg))
        lines.append(f"[{msg.get('role') or '?'}] {body}")
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters left out ...]\n{text[-half:]}"


_JSON = re.compile(r"\{.*?\}", re.S)


def parse_scores(text: str) -> dict[str, float | None]:
    """The six scores in a judge's answer (the first JSON object; values clamped to 0-5)."""
    for m in _JSON.finditer(text or ""):
        try:
            data = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(data, dict) and any(d in data for d in DIMENSIONS):
            out: dict[str, float | None] = {}
            for d in DIMENSIONS:
                v = data.get(d)
                out[d] = min(5.0, max(0.0, float(v))) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
            return out
    raise ValueError(f"no JSON object with the scores in the answer: {(text or '')[:120]!r}")


class LLMJudge:
    """Factory-style 0-5 scores of a context, through an ``LLMSummaries``' endpoint and cache."""

    def __init__(self, summaries: Any, *, max_context_chars: int = 24_000, max_facts: int = 60) -> None:
        self.summaries = summaries
        self.max_context_chars = max_context_chars
        self.max_facts = max_facts

    def request(self, probes: Sequence[Probe], context: Sequence[dict]) -> tuple[str, str]:
        facts = "\n".join(f"- {p.family}: {p.text}" for p in list(probes)[: self.max_facts]) or "(none extracted)"
        user = f"<facts>\n{facts}\n</facts>\n\n<context>\n{_render(context, self.max_context_chars)}\n</context>"
        return _SYSTEM, user

    def judge(self, probes: Sequence[Probe], context: Sequence[dict]) -> JudgeVerdict:
        system, user = self.request(probes, context)
        record = self.summaries.complete(system, user, purpose="judge")
        if not record.ok:
            return JudgeVerdict({d: None for d in DIMENSIONS}, record.error, record)
        try:
            return JudgeVerdict(parse_scores(record.text), None, record)
        except ValueError as exc:
            return JudgeVerdict({d: None for d in DIMENSIONS}, f"ValueError: {exc}", record)
