"""Which recorded user messages are environment output, by each agent's own markers.

Agents that talk to the model without native tool calls send what the environment
answered (a command's output, an error) as a *user* message. Masking and aging act on
observations, so the importers mark those user nodes ``metadata.is_observation = True``
(a message dict has ``is_observation: true``), and demonstrations ``metadata.is_demo =
True``, so a strategy can exclude them. Tool results (``code`` nodes) are observations by
their role and are not marked. The rules are the agents' own, never a guess from text:

SWE-agent ``.traj`` (``observation_marks_swe_agent``)
    1.x histories carry ``message_type``: an observation is an entry with
    ``message_type == "observation"`` that is not ``is_demo``; the first one is the
    instance template (the task), which SWE-agent's own ``LastNObservations`` never
    elides ("We never remove the first observation, as it is the instance template":
    ``sweagent/agent/history_processors.py``, SWE-agent at
    3ea751c087f32b16e039a2233dd6eefecef325d5). 0.x histories have no ``message_type``:
    there SWE-agent's ``last_n_history`` (tag v0.7.0, same file) takes every ``user``
    entry that is not ``is_demo``, the first being the instance. Demonstrations:
    ``is_demo: true`` or ``message_type == "demonstration"`` (``agents.py``,
    ``add_demonstrations_to_history``).
mini-swe-agent (``observation_marks_mini_swe_agent``)
    The message list is the system message, the task (the instance template, "the
    second message overall"), then for each step the model's reply and the user
    message(s) the agent adds in answer to it: the rendered command output, a format
    error, a timeout (``agents/default.py``: ``run``, ``get_observation``, and the
    ``NonTerminatingException`` handler, mini-swe-agent v1.x; in 2.x the same
    messages carry ``extra.returncode`` / ``extra.interrupt_type``). So every user
    message after the first is an observation.
OpenHands events
    An observation OpenHands shows as a user message already has
    ``metadata.observation`` (its kind); it gets ``is_observation`` too
    (``opctx.importers.openhands``). Completion logs in their function-calling form send
    observations as ``tool`` messages (code nodes); the prompt-formatted form has no
    marker of its own, so nothing is marked there.

>>> observation_marks_mini_swe_agent([{"role": "system"}, {"role": "user"}, {"role": "assistant"},
...                                   {"role": "user"}])
{3: {'is_observation': True}}
"""

from __future__ import annotations

from typing import Any

__all__ = ["observation_marks_swe_agent", "observation_marks_mini_swe_agent"]

_OBSERVATION = {"is_observation": True}


def observation_marks_swe_agent(history: list[Any]) -> dict[int, dict]:
    """Metadata per history index: ``is_observation`` / ``is_demo`` (see the module docstring).

    >>> observation_marks_swe_agent([
    ...     {"role": "system", "message_type": "system_prompt"},
    ...     {"role": "user", "message_type": "demonstration", "is_demo": True},
    ...     {"role": "user", "message_type": "observation"},   # the instance template
    ...     {"role": "assistant", "message_type": "action"},
    ...     {"role": "user", "message_type": "observation"}])
    {1: {'is_demo': True}, 4: {'is_observation': True}}
    """
    typed = any(isinstance(m, dict) and "message_type" in m for m in history)
    marks: dict[int, dict] = {}
    seen_instance = False
    for i, m in enumerate(history):
        if not isinstance(m, dict):
            continue
        if m.get("is_demo") is True or m.get("message_type") == "demonstration":
            marks[i] = {"is_demo": True}
            continue
        observed = m.get("message_type") == "observation" if typed else m.get("role") == "user"
        if not observed:
            continue
        if seen_instance and m.get("role") == "user":
            marks[i] = dict(_OBSERVATION)
        seen_instance = True
    return marks


def observation_marks_mini_swe_agent(messages: list[Any]) -> dict[int, dict]:
    """``is_observation`` for every user message after the first (the task)."""
    marks: dict[int, dict] = {}
    seen_task = False
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            if seen_task:
                marks[i] = dict(_OBSERVATION)
            seen_task = True
    return marks
