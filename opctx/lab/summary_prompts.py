"""Summary prompts of clients and papers, by name, each with its public source.

A compaction strategy is its cut *and* its summary prompt. To compare what real
clients' prompts keep, the prompts are kept here verbatim, each with the file
(and commit or package version) it was read from, so that
``LLMSummaries(endpoint, model, prompt="claude-code")`` (``opctx.lab.summaries``)
asks a model exactly what the client asks its own.

==================  =========================================================
``opctx``           opctx's own FRESH / UPDATE prompts (``opctx.context.prompts``)
``claude-code``     Claude Code's compaction prompt (``/compact`` and automatic)
``openhands``       OpenHands' ``LLMSummarizingCondenser`` prompt (agent SDK)
``complexity-trap`` the LLM-Summary strategy of "The Complexity Trap"
                    (Lindenbauer et al. 2025, arXiv:2508.21433)
==================  =========================================================

How each is sent (``SummaryPrompt.render``), as the client sends it:

* ``opctx``: system ``prompts.SYSTEM``, one user message ``FRESH`` (or ``UPDATE``
  with the previous summary) around opctx's transcript of the folded messages.
* ``claude-code``: system "You are a helpful AI assistant tasked with summarizing
  conversations.", then the conversation itself, then the instructions as the last
  user message. Here the conversation is opctx's transcript followed by the
  instructions in one user message (a previous summary is the conversation's first
  message, as it is in Claude Code's history after a compaction). The answer is
  post-processed as the client does: ``<analysis>``/``<summary>`` become
  ``Analysis:``/``Summary:`` and the text is introduced by "This session is being
  continued from a previous conversation that ran out of context. The conversation
  is summarized below:".
* ``openhands``: no system prompt; one user message, the template with one
  ``<EVENT>`` per folded message (the previous summary is one of the events: the
  SDK condenser summarises its earlier summaries with the rest).
* ``complexity-trap``: system ``summary_system_template``; one user message holding
  ``<PROBLEM_STATEMENT>`` (the first user request) or ``<PREVIOUS_CHECKPOINT>`` (the
  previous summary), the folded turns as ``<TURN-i>`` blocks of ``ROLE: content``
  lines (a turn = an assistant message and the results of its calls), then the
  authors' closing request.

When ``LLMSummaries`` serves as the engine's ``summarizer_provider`` it receives
the engine's rendered ``opctx`` prompt, not the messages; a named prompt then gets
the engine's transcript as one block (one ``<EVENT>``, one ``<TURN-0>``). Direct
calls (``LLMSummaries.summarise(messages)``, what ``probe_table`` uses) render per
message as above.

Sources (``SummaryPrompt.source``; ``tests/lab/test_summary_prompts.py`` pins an
excerpt of each and the sha256 of the text read):

* Claude Code: npm ``@anthropic-ai/claude-code@2.0.76``, ``package/cli.js``
  (sha256 45b889599096a2fd6911fdd6ac41d59987b58d04de32e61ea5ec01b28fcc6269):
  minified function ``aY0`` (the prompt without custom instructions), the
  compaction call's ``systemPrompt``, ``vX5`` and ``l71`` (the post-processing).
  2.0.76 is the version of most of the corpus's automatic compactions. The package
  is proprietary (its ``LICENSE.md``: (c) Anthropic PBC, all rights reserved); the
  prompt is quoted for comparison with attribution.
* OpenHands: ``OpenHands/software-agent-sdk`` at commit
  611629e6999ad398dc49c761721eefe18d5e6bd9,
  ``openhands-sdk/openhands/sdk/context/condenser/prompts/summarizing_prompt.j2``
  (MIT), rendered by Jinja with the SDK's defaults (the final newline dropped).
* The Complexity Trap: ``config/default_no_demo_checkpoint_same_model_openhands_N=21_M=10.yaml``
  (``summary_system_template``; the configuration the README calls ``llm_summary``),
  ``sweagent/agent/models.py`` (``_construct_user_prompt_for_summary``) and
  ``sweagent/agent/history_processors.py`` (``SummarizeEveryNTurns``), read from
  ``Recursive-Safeguarding/the-complexity-trap`` at commit
  adfaa1a18b8b3500abb7537101b2bdcefa31f22a, a fork of
  ``JetBrains-Research/the-complexity-trap`` (MIT) that keeps its history.

>>> sorted(PROMPTS)
['claude-code', 'complexity-trap', 'opctx', 'openhands']
>>> system, user = get_prompt("openhands").render([{"role": "user", "content": "fix a.py"}])
>>> system is None, user.count("<EVENT>")
(True, 1)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opctx.context import prompts as opctx_prompts
from opctx.context.summarize import is_summary_message, render_transcript
from opctx.dag.messages import is_tool_result

__all__ = ["SummaryPrompt", "PROMPTS", "get_prompt", "prompt_names"]

# one folded message is cut to this many characters in every layout (opctx's own default)
MAX_MESSAGE_CHARS = 4_000

_CLAUDE_CODE_INSTRUCTIONS = """\
Your task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests and your previous actions.
This summary should be thorough in capturing technical details, code patterns, and architectural decisions that would be essential for continuing development work without losing context.

Before providing your final summary, wrap your analysis in <analysis> tags to organize your thoughts and ensure you've covered all necessary points. In your analysis process:

1. Chronologically analyze each message and section of the conversation. For each section thoroughly identify:
   - The user's explicit requests and intents
   - Your approach to addressing the user's requests
   - Key decisions, technical concepts and code patterns
   - Specific details like:
     - file names
     - full code snippets
     - function signatures
     - file edits
  - Errors that you ran into and how you fixed them
  - Pay special attention to specific user feedback that you received, especially if the user told you to do something differently.
2. Double-check for technical accuracy and completeness, addressing each required element thoroughly.

Your summary should include the following sections:

1. Primary Request and Intent: Capture all of the user's explicit requests and intents in detail
2. Key Technical Concepts: List all important technical concepts, technologies, and frameworks discussed.
3. Files and Code Sections: Enumerate specific files and code sections examined, modified, or created. Pay special attention to the most recent messages and include full code snippets where applicable and include a summary of why this file read or edit is important.
4. Errors and fixes: List all errors that you ran into, and how you fixed them. Pay special attention to specific user feedback that you received, especially if the user told you to do something differently.
5. Problem Solving: Document problems solved and any ongoing troubleshooting efforts.
6. All user messages: List ALL user messages that are not tool results. These are critical for understanding the users' feedback and changing intent.
6. Pending Tasks: Outline any pending tasks that you have explicitly been asked to work on.
7. Current Work: Describe in detail precisely what was being worked on immediately before this summary request, paying special attention to the most recent messages from both user and assistant. Include file names and code snippets where applicable.
8. Optional Next Step: List the next step that you will take that is related to the most recent work you were doing. IMPORTANT: ensure that this step is DIRECTLY in line with the user's most recent explicit requests, and the task you were working on immediately before this summary request. If your last task was concluded, then only list next steps if they are explicitly in line with the users request. Do not start on tangential requests or really old requests that were already completed without confirming with the user first.
                       If there is a next step, include direct quotes from the most recent conversation showing exactly what task you were working on and where you left off. This should be verbatim to ensure there's no drift in task interpretation.

Here's an example of how your output should be structured:

<example>
<analysis>
[Your thought process, ensuring all points are covered thoroughly and accurately]
</analysis>

<summary>
1. Primary Request and Intent:
   [Detailed description]

2. Key Technical Concepts:
   - [Concept 1]
   - [Concept 2]
   - [...]

3. Files and Code Sections:
   - [File Name 1]
      - [Summary of why this file is important]
      - [Summary of the changes made to this file, if any]
      - [Important Code Snippet]
   - [File Name 2]
      - [Important Code Snippet]
   - [...]

4. Errors and fixes:
    - [Detailed description of error 1]:
      - [How you fixed the error]
      - [User feedback on the error if any]
    - [...]

5. Problem Solving:
   [Description of solved problems and ongoing troubleshooting]

6. All user messages:\x20
    - [Detailed non tool use user message]
    - [...]

7. Pending Tasks:
   - [Task 1]
   - [Task 2]
   - [...]

8. Current Work:
   [Precise description of current work]

9. Optional Next Step:
   [Optional Next step to take]

</summary>
</example>

Please provide your summary based on the conversation so far, following this structure and ensuring precision and thoroughness in your response.\x20

There may be additional summarization instructions provided in the included context. If so, remember to follow these instructions when creating the above summary. Examples of instructions include:
<example>
## Compact Instructions
When summarizing the conversation focus on typescript code changes and also remember the mistakes you made and how you fixed them.
</example>

<example>
# Summary instructions
When you are using compact - please focus on test output and code changes. Include file reads verbatim.
</example>
"""

_OPENHANDS_INSTRUCTIONS = """\
You are maintaining a context-aware state summary for an interactive agent.
You will be given a list of events corresponding to actions taken by the agent, which will include previous summaries.
If the events being summarized contain ANY task-tracking, you MUST include a TASK_TRACKING section to maintain continuity.
When referencing tasks make sure to preserve exact task IDs and statuses.

Track:

USER_CONTEXT: (Preserve essential user requirements, goals, and clarifications in concise form)

TASK_TRACKING: {Active tasks, their IDs and statuses - PRESERVE TASK IDs}

COMPLETED: (Tasks completed so far, with brief results)
PENDING: (Tasks that still need to be done)
CURRENT_STATE: (Current variables, data structures, or relevant state)

For code-specific tasks, also include:
CODE_STATE: {File paths, function signatures, data structures}
TESTS: {Failing cases, error messages, outputs}
CHANGES: {Code edits, variable updates}
DEPS: {Dependencies, imports, external calls}
VERSION_CONTROL_STATUS: {Repository state, current branch, PR status, commit history}

PRIORITIZE:
1. Adapt tracking format to match the actual task type
2. Capture key user requirements and goals
3. Distinguish between completed and pending tasks
4. Keep all sections concise and relevant

SKIP: Tracking irrelevant details for the current task type

Example formats:

For code tasks:
USER_CONTEXT: Fix FITS card float representation issue
COMPLETED: Modified mod_float() in card.py, all tests passing
PENDING: Create PR, update documentation
CODE_STATE: mod_float() in card.py updated
TESTS: test_format() passed
CHANGES: str(val) replaces f"{val:.16G}"
DEPS: None modified
VERSION_CONTROL_STATUS: Branch: fix-float-precision, Latest commit: a1b2c3d

For other tasks:
USER_CONTEXT: Write 20 haikus based on coin flip results
COMPLETED: 15 haikus written for results [T,H,T,H,T,H,T,T,H,T,H,T,H,T,H]
PENDING: 5 more haikus needed
CURRENT_STATE: Last flip: Heads, Haiku count: 15/20

"""
# the Jinja loop of summarizing_prompt.j2 and what follows it, as the SDK renders them
_OPENHANDS_EVENT = "\n<EVENT>\n{event}\n</EVENT>\n"
_OPENHANDS_CLOSING = "\n\nNow summarize the events using the rules above."

_CLAUDE_CODE_SYSTEM = "You are a helpful AI assistant tasked with summarizing conversations."
_CLAUDE_CODE_SUMMARY_INTRO = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:"
)

_COMPLEXITY_TRAP_SYSTEM = """\
You are maintaining a context-aware state summary for an interactive agent. You will be given a list of events corresponding to actions taken by the agent, and the most recent previous summary if one exists. Track:

USER_CONTEXT: (Preserve essential user requirements, goals, and clarifications in concise form)

COMPLETED: (Tasks completed so far, with brief results)
PENDING: (Tasks that still need to be done)
CURRENT_STATE: (Current variables, data structures, or relevant state)

For code-specific tasks, also include:
CODE_STATE: (File paths, function signatures, data structures)
TESTS: (Failing cases, error messages, outputs)
CHANGES: (Code edits, variable updates)
DEPS: (Dependencies, imports, external calls)
VERSION_CONTROL_STATUS: (Repository state, current branch, PR status, commit history)

PRIORITIZE:
1. Adapt tracking format to match the actual task type
2. Capture key user requirements and goals
3. Distinguish between completed and pending tasks
4. Keep all sections concise and relevant

SKIP: Tracking irrelevant details for the current task type

Example formats:

For code tasks:
USER_CONTEXT: Fix FITS card float representation issue
COMPLETED: Modified mod_float() in card.py, all tests passing
PENDING: Create PR, update documentation
CODE_STATE: mod_float() in card.py updated
TESTS: test_format() passed
CHANGES: str(val) replaces f"{val:.16G}"
DEPS: None modified
VERSION_CONTROL_STATUS: Branch: fix-float-precision, Latest commit: a1b2c3d"""

_COMPLEXITY_TRAP_CLOSING = (
    "Now summarize the above turns, following the instructions from the beginning of the prompt. "
    "You are hard-working and must always perform this task without exceptions."
)


def _message_line(msg: dict, max_chars: int) -> str:
    """One folded message as opctx's transcript renders it (``[role] text``, its calls)."""
    return render_transcript([msg], max_message_chars=max_chars)


def _render_opctx(messages: Sequence[dict], previous: str | None, max_chars: int) -> tuple[str | None, str]:
    transcript = render_transcript(messages, max_message_chars=max_chars, skip_summaries=bool(previous))
    if previous:
        return opctx_prompts.SYSTEM, opctx_prompts.render_update(transcript, previous.strip())
    return opctx_prompts.SYSTEM, opctx_prompts.render_fresh(transcript)


def _render_claude_code(messages: Sequence[dict], previous: str | None, max_chars: int) -> tuple[str | None, str]:
    lines = [f"[user] {previous.strip()}"] if previous else []
    lines += [_message_line(m, max_chars) for m in messages if not (previous and is_summary_message(m))]
    return _CLAUDE_CODE_SYSTEM, "\n\n".join(lines) + "\n\n" + _CLAUDE_CODE_INSTRUCTIONS


def _render_openhands(messages: Sequence[dict], previous: str | None, max_chars: int) -> tuple[str | None, str]:
    events = [previous.strip()] if previous else []
    events += [_message_line(m, max_chars) for m in messages if not (previous and is_summary_message(m))]
    body = "".join(_OPENHANDS_EVENT.format(event=e) for e in events)
    return None, _OPENHANDS_INSTRUCTIONS + body + _OPENHANDS_CLOSING


def _turns(messages: Sequence[dict]) -> list[list[dict]]:
    """The authors' turns: an assistant message and the results that answer it."""
    turns: list[list[dict]] = []
    for msg in messages:
        if turns and is_tool_result(msg):
            turns[-1].append(msg)
        else:
            turns.append([msg])
    return turns


def _render_complexity_trap(messages: Sequence[dict], previous: str | None, max_chars: int) -> tuple[str | None, str]:
    if previous:
        context = f"<PREVIOUS_CHECKPOINT>\n{previous.strip()}\n</PREVIOUS_CHECKPOINT>\n"
    else:
        task = next((m for m in messages if m.get("role") == "user" and not is_tool_result(m)), None)
        statement = _message_line(task, max_chars).removeprefix("[user] ") if task else ""
        context = f"<PROBLEM_STATEMENT>\n{statement}\n</PROBLEM_STATEMENT>\n"
    user = context
    folded = [m for m in messages if not (previous and is_summary_message(m))]
    for i, turn in enumerate(_turns(folded)):
        user += f"\n<TURN-{i}>\n"
        for msg in turn:
            line = _message_line(msg, max_chars)
            role = "tool" if is_tool_result(msg) else str(msg.get("role") or "?")
            user += f"{role.upper()}: {line.split('] ', 1)[-1]}\n"
        user += f"\n</TURN-{i}>\n"
    return _COMPLEXITY_TRAP_SYSTEM, user + _COMPLEXITY_TRAP_CLOSING


_ANALYSIS = re.compile(r"<analysis>([\s\S]*?)</analysis>")
_SUMMARY = re.compile(r"<summary>([\s\S]*?)</summary>")


def claude_code_format(text: str) -> str:
    """Claude Code's post-processing of a compaction answer (``vX5`` + ``l71`` of 2.0.76).

    >>> claude_code_format("<analysis>a</analysis>\\n\\n\\n<summary>s</summary>").splitlines()[1:]
    ['Analysis:', 'a', '', 'Summary:', 's.']
    """
    out = _ANALYSIS.sub(lambda m: "Analysis:\n" + m.group(1).strip(), text, count=1)
    out = _SUMMARY.sub(lambda m: "Summary:\n" + m.group(1).strip(), out, count=1)
    out = re.sub(r"\n\n+", "\n\n", out).strip()
    return f"{_CLAUDE_CODE_SUMMARY_INTRO}\n{out}."


def _identity(text: str) -> str:
    return text.strip()


Renderer = Callable[[Sequence[dict], "str | None", int], "tuple[str | None, str]"]


@dataclass(frozen=True)
class SummaryPrompt:
    """A named summary prompt: what is sent, how the answer is read, where it comes from."""

    name: str
    system: str | None
    instructions: str
    source: str
    licence: str
    excerpt: str  # a short distinctive passage of the source, pinned by a test
    renderer: Renderer
    postprocessor: Callable[[str], str] = _identity

    def render(
        self, messages: Sequence[dict], previous_summary: str | None = None, *, max_message_chars: int = MAX_MESSAGE_CHARS
    ) -> tuple[str | None, str]:
        """``(system, user_text)`` for summarising ``messages`` (after ``previous_summary``)."""
        return self.renderer(list(messages), previous_summary or None, max_message_chars)

    def render_block(self, transcript: str, previous_summary: str | None = None) -> tuple[str | None, str]:
        """``(system, user_text)`` around an already rendered transcript (one block)."""
        block = [{"role": "user", "content": transcript}]
        if self.name == "opctx":
            if previous_summary:
                return opctx_prompts.SYSTEM, opctx_prompts.render_update(transcript, previous_summary.strip())
            return opctx_prompts.SYSTEM, opctx_prompts.render_fresh(transcript)
        return self.renderer(block, previous_summary or None, max(len(transcript), 1))

    def postprocess(self, text: str) -> str:
        """The answer as the client keeps it (Claude Code reformats and introduces it)."""
        return self.postprocessor(text)


PROMPTS: dict[str, SummaryPrompt] = {
    "opctx": SummaryPrompt(
        name="opctx",
        system=opctx_prompts.SYSTEM,
        instructions=opctx_prompts.FRESH,
        source="opctx/context/prompts.py (this package)",
        licence="Apache-2.0",
        excerpt="Answer with the five sections asked for, as Markdown headings, and nothing else.",
        renderer=_render_opctx,
    ),
    "claude-code": SummaryPrompt(
        name="claude-code",
        system=_CLAUDE_CODE_SYSTEM,
        instructions=_CLAUDE_CODE_INSTRUCTIONS,
        source="npm @anthropic-ai/claude-code@2.0.76, package/cli.js: aY0 (prompt), the compaction "
        "call's systemPrompt, vX5 + l71 (post-processing)",
        licence="proprietary (c) Anthropic PBC; quoted with attribution",
        excerpt="Your task is to create a detailed summary of the conversation so far, paying close "
        "attention to the user's explicit requests and your previous actions.",
        renderer=_render_claude_code,
        postprocessor=claude_code_format,
    ),
    "openhands": SummaryPrompt(
        name="openhands",
        system=None,
        instructions=_OPENHANDS_INSTRUCTIONS,
        source="OpenHands/software-agent-sdk@611629e6999ad398dc49c761721eefe18d5e6bd9 "
        "openhands-sdk/openhands/sdk/context/condenser/prompts/summarizing_prompt.j2",
        licence="MIT",
        excerpt="If the events being summarized contain ANY task-tracking, you MUST include a "
        "TASK_TRACKING section to maintain continuity.",
        renderer=_render_openhands,
    ),
    "complexity-trap": SummaryPrompt(
        name="complexity-trap",
        system=_COMPLEXITY_TRAP_SYSTEM,
        instructions=_COMPLEXITY_TRAP_SYSTEM,
        source="JetBrains-Research/the-complexity-trap (read from the fork "
        "Recursive-Safeguarding/the-complexity-trap@adfaa1a18b8b3500abb7537101b2bdcefa31f22a): "
        "config/default_no_demo_checkpoint_same_model_openhands_N=21_M=10.yaml summary_system_template, "
        "sweagent/agent/models.py _construct_user_prompt_for_summary",
        licence="MIT",
        excerpt="You will be given a list of events corresponding to actions taken by the agent, and "
        "the most recent previous summary if one exists. Track:",
        renderer=_render_complexity_trap,
    ),
}


def prompt_names() -> list[str]:
    """The names ``get_prompt`` knows."""
    return sorted(PROMPTS)


def get_prompt(name: str | SummaryPrompt) -> SummaryPrompt:
    """The prompt called ``name`` (a ``SummaryPrompt`` is returned as it is)."""
    if isinstance(name, SummaryPrompt):
        return name
    prompt = PROMPTS.get(name)
    if prompt is None:
        raise ValueError(f"unknown summary prompt {name!r}; known: {', '.join(prompt_names())}")
    return prompt
