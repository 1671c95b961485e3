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
about the cut, ``fold_current_turn`` (False; "Folding the current turn" in ``_cut.py``); and
``post_compaction_tokens`` (0): what a client adds to its context after each
compaction that no history holds (Claude Code re-reads recently read files and
its task list). The engine does not invent content for it; ``opctx.lab.replay``
counts it as unseen overhead after each of its own compactions, until the next.

Where to cut
============
:func:`find_cut_index` lives in ``_cut.py``, whose docstring has the design: the six
steps over a table of per-message facts, the bounded floor, the snap order, pinning the
latest request, folding the current turn, thinking units and the speed of a warm table.

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
    :func:`find_cut_index`, :func:`keep_budget`, :func:`counted_cut` (a "keep" by count).
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
from ._cut import counted_cut, find_cut_index, keep_budget
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
    "counted_cut",
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
