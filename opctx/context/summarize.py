"""Where to cut, and what to write in place of what is cut (spec §4.1-§4.6).

Two pieces live here:

* :func:`find_cut_index` decides which messages of the active branch are folded
  into a summary and which are kept verbatim.
* :class:`Summarizer` turns the folded messages into a summary: an LLM summary
  (FRESH, or UPDATE chained on the previous summary, ``prompts.py``), or, on any
  failure, a deterministic *structural* summary that accounts for every folded
  message: one line each, the oldest collapsed into one counted line past the
  summary's budget.

Parameters (``SummarizerConfig``, spec §4 table)
================================================
``trigger_pct`` 0.80, ``emergency_pct`` 0.95, ``recommend_pct`` 0.70,
``keep_min_tokens`` 8,000, ``keep_max_tokens`` 40,000, ``keep_ratio`` 0.10,
``keep_min_messages`` 5, ``protect_first_n`` 3, ``protect_last_n`` 20,
``min_prompt_budget`` 8,000, ``min_prompt_ratio`` 0.25. Additions, all about the
summary *call*: ``max_message_chars`` (how much of one folded message goes into
the summary prompt), ``structural_head_chars`` (60, §4.5), ``summary_output_tokens``
(what the engine reserves for the summary reply), ``timeout`` (seconds); and one
about the cut, ``fold_current_turn`` (False; "Folding the current turn" below); and
``post_compaction_tokens`` (0): what a client adds to its context after each
compaction that no history holds (Claude Code re-reads recently read files and
its task list). The engine does not invent content for it; ``opctx.lab.replay``
counts it as unseen overhead after each of its own compactions, until the next.

The cut (§4.2, with the invariants of docs/design.md)
=====================================================
The six steps of the specification, over a precomputed table of per-message
facts (tokens, "has a text block", "is a user request", tool-call ids,
tool-result ids):

1. ``desired = clamp(window * keep_ratio, keep_min_tokens, keep_max_tokens)``.
2. ``min_prompt = min(min_prompt_budget, window * min_prompt_ratio)``;
   ``max_safe = window - min_prompt``; ``effective = min(desired, max_safe)``.
   ``keep_recent_tokens=N`` (§4.3) replaces steps 1-2 by ``effective = N``.
   ``max_tail_tokens`` (an addition the engine uses) caps ``effective`` further:
   on an 8K window the specification's own table keeps 6K of a 6K input budget,
   so a compaction could never fold anything and would loop (the OpenClaw
   pitfall). The engine passes half the input budget; the cap is recorded in
   ``CutPoint.steps``.
3. Walk back from the end accumulating tokens and text-block messages; the
   cut is the *last* index where both gates hold (``tokens >= effective`` and
   ``text messages >= keep_min_messages``). Suffix sums are monotone, so this is
   a bisection over prefix sums kept by a :class:`FactsTable`. When the text
   gate cannot be met within the ceiling (below) the token gate alone decides
   and the step says "text gate relaxed": an autonomous run of tool calls with
   empty assistant text would otherwise keep everything and never compact. If
   even the token gate never closes, everything after the head fits the keep
   budget: ``ok=False``, nothing to fold.
4. ``protect_last_n`` is a floor of the tail: the cut is no later than
   ``len - protect_last_n``. It is *bounded*: the floor never forces more tail
   tokens than the ceiling (``min(max_safe, max_tail_tokens)``, or ``N`` with an
   override), because twenty messages of 6K-token tool output do not fit a 32K
   window and a floor that makes compaction useless is worse than no floor.
5. The cut is no earlier than the protected head. The head is
   ``protect_first_n`` messages, extended forward until it does not split a tool
   call from its results. (Computed first: every other step needs it.)
6. Snap. The specification snaps *forward* to a user message; the public
   reference code let that carry the cut past ``len - protect_last_n`` and past
   the latest user message (a defect of the reference code: docs/design.md). Here, in order of preference:
   (a) forward to the first user request in ``[cut, min(floor, latest user
   request)]``; (b) *backward* to the nearest earlier user request, if the tail
   then still fits the ceiling; (c) the nearest boundary that keeps tool groups
   whole (forward within the same bound, else backward within the ceiling): the
   tail then starts mid-turn, after a complete tool exchange; (c') inside a
   thinking unit larger than the ceiling, its first tool group pinned ("Thinking
   units" below); (d) the earlier
   user request even over the ceiling; (e) any boundary after the head that keeps
   tool groups whole, backward from the cut first, else forward past the floor (up
   to the latest request): when the final tool group alone exceeds the ceiling, or
   one straddles the floor, no boundary fits the ceiling, and declining would leave
   the agent to overflow; the tail keeps the oversized group and the rest is
   folded. **Pinning** (an addition): when the latest user request lies between
   the head and the cut (the first message after the head included), snapping
   back to it keeps everything after it. In an autonomous run (one request, hundreds of tool
   calls: most Claude Code and Codex sessions) that folds next to nothing, and
   compaction stops for lack of progress. So if (b) would fold less than half of
   what cutting at the nearest tool-group boundary folds, the cut stays there and
   the request is *pinned*: kept verbatim, as a copy, right after the summary
   (``CutPoint.pinned``). The request is still on the new branch, word for word,
   which is what the design's "latest user request in the kept tail" protects; Codex
   keeps recent user messages after its summary the same way. A cut that folds nothing returns
   ``CutPoint(ok=False, reason=...)``. The forward snap of (a) may give back the
   one assistant message in front of the user request that the gates counted;
   that is the specification's behaviour and is kept.

Folding the current turn (an addition)
======================================
``fold_current_turn=True`` replaces steps 3-6: everything after the protected head
is folded except the latest user request, which is pinned after the summary, and the
kept tail is empty (``CutPoint.index == len(messages)``). The running tool loop is
folded whole (calls, results and thinking together), so no pair and no unit is
split. This is the layout of a client that summarises the whole conversation and
continues from the summary (Claude Code: its first request after a compaction holds
the system prompt, tools, summary and re-attached files only); the pinned request
keeps the design's "latest user request present". When a tool exchange runs across
the request, or nothing but it would be folded, the ordinary steps decide.

Thinking units (issue 14, items 6 and 9)
========================================
An assistant message with thinking blocks, the tool results and the tool calls that
continue its loop, up to the first other message, is one *unit* (``_cut_facts``;
Anthropic rejects a running tool loop whose first assistant message lost its
thinking). The cut keeps units whole: the kept tail starts where a unit starts or
outside any (``FactsTable.tail_may_start``), and step 5 extends the protected head to
the end of the unit it ends in, so the fold never begins inside the head's unit.

One exception, documented here and recorded in ``CutPoint.steps``: a unit larger than
the ceiling (one turn that thought once, then a tool loop far past every budget).
Keeping it whole keeps everything and folding it whole drops the running loop, so
the cut goes inside it, at a tool-group boundary, and the unit's *first tool group*
(the message carrying the thinking block, with its results) is kept: in the head when
the head already holds it (step 5 then stops after that group instead of extending
over the unit: "over the ceiling"), else pinned after the summary with the latest
request (step 6 (c'), ``CutPoint.pinned``). The Anthropic request built after such a
compaction opens the unfinished loop with its thinking block, and every
``tool_result`` still follows its ``tool_use`` (tests/context/test_cut_units.py).

A boundary ``b`` is *valid* when no tool result at ``>= b`` answers a call at
``< b``. It is maintained per boundary as messages are appended: each result is
paired with the most recent earlier call carrying its id (ids are reused by some
providers), and every pair forbids the boundaries between them. A result whose
call does not exist is an orphan already; it forbids nothing. Parallel tool
calls are one assistant message with several ids; its results all pair with it,
so the group is never split. The latest user request (``role == "user"`` and not
a tool-result wrapper) is always at or after the cut, unless it is inside the
protected head, which is kept verbatim anyway.

Speed: per-message facts come from a :class:`MessageFacts` cache keyed by
``(id, role, content length)`` and checked against the message it was computed
from (so a node updated under its id is recomputed), and its
:meth:`MessageFacts.table` extends the previous table when the history only grew
(same objects, or equal copies). With a
warm table ``find_cut_index`` on 10,000 messages is two bisections and a few
short loops, well under a millisecond (``benchmarks/engine.py``).

The summary (§4.4-§4.6)
=======================
``Summarizer.summarise(messages, previous_summary=None, cancel_event=None,
timeout=None)``: UPDATE when a previous summary is given, else FRESH. The folded
messages are rendered one per line as ``[role] text`` (tool calls as
``name(arguments)``, results as ``[tool name] ...``), each cut to
``max_message_chars`` with a marker saying how much was left out. If the whole
transcript is larger than ``max_prompt_tokens``, the *oldest* messages are
rendered as structural one-liners instead, so that nothing is dropped silently.
A previous summary node inside the folded range is not repeated when its text
is passed as ``previous_summary``.

Fallback: any exception from the provider, an empty reply, a timeout, a
cancellation (``cancel_event`` is checked before the call, while waiting for it,
and after it), or no provider at all gives the structural summary with
``fell_back_to_structural=True`` and ``error="Type: message"``. The structural
summary keeps the previous summary at the top and lists the folded messages one
per line as ``[role] first 60 characters``: tool calls as ``[assistant] ->
name(args)``, tool results as ``[tool name]`` (``[tool name error]`` for failures),
empty messages as ``(empty)``. It is bounded by ``summary_output_tokens`` (the
budget an LLM summary gets): over it, the previous summary is clipped to a third of
the bound and the *oldest* folded messages are collapsed into one line that counts
them by role and names their first and last ids, so no message goes unmentioned and
chained structural summaries do not grow without end. With a timeout or a cancel event the provider runs in a
daemon worker thread; a call that outlives its timeout is abandoned, not killed
(Python cannot kill a thread); its late answer is ignored.

Layout (private modules, public names re-exported here)
=======================================================

``summarize.py``
    :class:`Summarizer` (the call, its timeout and cancellation, the fallback).
``_summary_config.py``
    :class:`SummarizerConfig`.
``_cut.py``
    :func:`find_cut_index`, :func:`keep_budget`.
``_cut_facts.py``
    :class:`MessageFacts`, :class:`FactsTable`.
``_transcript.py``
    :func:`render_transcript` (the prompt text), :class:`PromptTooLarge`.
``_structural.py``
    :func:`structural_summary`, :func:`structural_line`, :func:`is_summary_message`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import prompts
from ._cut import find_cut_index, keep_budget
from ._cut_facts import Estimate, FactsTable, MessageFacts, _default_estimate
from ._structural import (
    _default_text_tokens,
    is_summary_message,
    structural_line,
    structural_summary,
)
from ._summary_config import SummarizerConfig
from ._transcript import PromptTooLarge, render_transcript
from .types import SummaryResult

__all__ = [
    "SummarizerConfig",
    "MessageFacts",
    "FactsTable",
    "keep_budget",
    "find_cut_index",
    "Summarizer",
    "SummaryCancelled",
    "SummaryTimeout",
    "render_transcript",
    "structural_summary",
    "structural_line",
    "PromptTooLarge",
    "is_summary_message",
]


class SummaryCancelled(Exception):
    """The summary call was cancelled through ``cancel_event``."""


class SummaryTimeout(Exception):
    """The summary call did not answer within its timeout."""


ProviderCallable = Callable[..., Any]


class Summarizer:
    """LLM summary with a structural fallback (§4.4-§4.6).

    ``provider_call(messages, model, system, tools) -> Reply | str`` (the
    ``opctx.dag.providers.ProviderCall`` shape). ``None`` means: always
    structural (``fell_back_to_structural=True``, ``error`` says why).
    """

    def __init__(
        self,
        provider_call: ProviderCallable | None = None,
        model: str | None = None,
        config: SummarizerConfig | None = None,
        *,
        count_tokens: Callable[[str], int] | None = None,
    ):
        self.provider_call = provider_call
        self.model = model
        self.config = config or SummarizerConfig()
        self.count_tokens = count_tokens or _default_text_tokens

    def build_prompt(
        self,
        messages: Sequence[dict],
        previous_summary: str | None = None,
        *,
        max_prompt_tokens: int | None = None,
    ) -> str:
        """The FRESH or UPDATE prompt for ``messages`` (raises ``PromptTooLarge``)."""
        budget = None
        if max_prompt_tokens is not None:
            fixed = self.count_tokens(prompts.SYSTEM) + self.count_tokens(
                prompts.render_update("", previous_summary)
                if previous_summary
                else prompts.render_fresh("")
            )
            budget = max_prompt_tokens - fixed
            if budget <= 0:
                raise PromptTooLarge(
                    f"the summary prompt template alone needs {fixed} tokens; the call allows {max_prompt_tokens}"
                )
        transcript = render_transcript(
            messages,
            max_message_chars=self.config.max_message_chars,
            max_tokens=budget,
            count_tokens=self.count_tokens,
            skip_summaries=bool(previous_summary),
            head_chars=self.config.structural_head_chars,
        )
        if previous_summary:
            return prompts.render_update(transcript, previous_summary.strip())
        return prompts.render_fresh(transcript)

    def structural(
        self,
        messages: Sequence[dict],
        previous_summary: str | None = None,
        error: str | None = None,
    ) -> str:
        return structural_summary(
            messages,
            previous_summary,
            head_chars=self.config.structural_head_chars,
            error=error,
            max_tokens=self.config.summary_output_tokens or None,
            count_tokens=self.count_tokens,
        )

    def summarise(
        self,
        messages_to_fold: Sequence[dict],
        previous_summary: str | None = None,
        cancel_event: threading.Event | None = None,
        timeout: float | None = None,
        *,
        max_prompt_tokens: int | None = None,
        force_structural: str | None = None,
        estimate: Estimate | None = None,
    ) -> SummaryResult:
        """Summarise the folded messages. Never raises for provider trouble.

        ``force_structural``: a reason to skip the LLM (the engine's emergency path);
        it becomes ``error``. ``timeout`` defaults to ``config.timeout``.
        """
        messages = list(messages_to_fold)
        est = estimate or _default_estimate
        summarised_tokens = sum(int(est(m)) for m in messages)
        prompt = ""
        error: str | None = None
        text: str | None = None
        try:
            if force_structural:
                raise _Forced(force_structural)
            if self.provider_call is None:
                raise _Forced("NoProvider: no summariser provider configured")
            prompt = self.build_prompt(
                messages, previous_summary, max_prompt_tokens=max_prompt_tokens
            )
            text = self._call(
                prompt, cancel_event, self.config.timeout if timeout is None else timeout
            )
            if not text or not text.strip():
                raise ValueError("the provider returned an empty summary")
            text = text.strip()
        except _Forced as exc:
            error = str(exc)
        except Exception as exc:  # any provider failure becomes the structural fallback (§4.5)
            error = f"{type(exc).__name__}: {exc}"
        if error is not None:
            return SummaryResult(
                text=self.structural(messages, previous_summary, error),
                fell_back_to_structural=True,
                error=error,
                used_previous_summary=bool(previous_summary),
                prompt=prompt,
                summarised_count=len(messages),
                summarised_tokens=summarised_tokens,
            )
        return SummaryResult(
            text=text or "",
            fell_back_to_structural=False,
            error=None,
            used_previous_summary=bool(previous_summary),
            prompt=prompt,
            summarised_count=len(messages),
            summarised_tokens=summarised_tokens,
        )

    # -- the call
    def _invoke(self, prompt: str) -> str:
        reply = self.provider_call(
            [{"role": "user", "content": prompt}], self.model or "", prompts.SYSTEM, None
        )
        if isinstance(reply, str):
            return reply
        text = getattr(reply, "text", None)
        if text is None and isinstance(reply, dict):
            text = reply.get("text") or reply.get("content")
        if text is None:
            raise TypeError(
                f"the provider returned a {type(reply).__name__}, expected a Reply or str"
            )
        return str(text)

    def _call(
        self, prompt: str, cancel_event: threading.Event | None, timeout: float | None
    ) -> str:
        if cancel_event is not None and cancel_event.is_set():
            raise SummaryCancelled("cancelled before the summary call")
        if cancel_event is None and timeout is None:
            return self._invoke(prompt)
        box: dict[str, Any] = {}
        done = threading.Event()

        def worker() -> None:
            try:
                box["text"] = self._invoke(prompt)
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=worker, name="opctx-summary", daemon=True).start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done.is_set():
            if cancel_event is not None and cancel_event.is_set():
                raise SummaryCancelled("cancelled during the summary call")
            wait = 0.05
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SummaryTimeout(f"no summary within {timeout:g}s")
                wait = min(wait, remaining)
            done.wait(wait)
        if cancel_event is not None and cancel_event.is_set():
            raise SummaryCancelled("cancelled after the summary call returned")
        if "error" in box:
            raise box["error"]
        return box["text"]


class _Forced(Exception):
    """Internal: skip the LLM on purpose."""
