"""How one request's context window is split (spec §2.3).

``BudgetAllocator.allocate(context_window, system_prompt, history, tools, model=None)``
returns a ``BudgetAllocation`` (``opctx.context.types``) with all nine figures:

====================  =====================================================================
context_window        the model's total window (``real_context_window(model)`` when ``None``)
system_prompt         tokens of the system prompt (``estimate_message_tokens`` of a system message)
history               tokens of the history (``estimate_history_tokens``)
tools_schema          ``json.dumps(tools)`` tokens + 5 per tool (``estimate_tools_tokens``)
output_reserve        what is kept free for the answer (policy below)
input_used            system_prompt + history + tools_schema
input_budget          context_window - output_reserve
input_used_pct        input_used / input_budget (the spec's definition; may exceed 1.0)
headroom              input_budget - input_used (negative when over budget)
====================  =====================================================================

``system_prompt``, ``history`` and ``tools`` may also be given as already-counted ints,
so a caller holding a better figure (the hybrid estimate of ``UsageTracker``) can pass it.

Output reserve (docs/design.md, "Tokens and the budget")
========================================================
The specification's "default 16384, at least 25% of the window" breaks at both ends when
read literally: an 8K model would reserve more than its window (an infinite compaction
loop, a real OpenClaw bug) and a 1M model would hold 250K back. Two policies:

* ``"cap"`` (default): ``base = output_reserve`` if given, else the model's max output when
  the table knows it, else 16,384; ``reserve = min(base, 25% of window)``, never below
  ``min_reserve`` (1,024). For a tiny window where 1,024 would be more than half of it, the
  reserve is half the window, so the input budget is always positive.
* ``"floor"``: the literal reading, ``reserve = max(base, 25% of window)``, capped so the
  input budget never drops below ``min(8000, 25% of window)``.

Window table (no model, base 16,384)::

    window      cap      floor
    8,192       2,048    6,144
    32,768      8,192    16,384
    65,536      16,384   16,384
    200,000     16,384   50,000
    272,000     16,384   68,000
    1,000,000   16,384   250,000
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from .policy import RESERVE_POLICIES, BudgetPolicy
from .tokens import (
    DEFAULT_MAX_OUTPUT,
    Estimator,
    default_estimator,
    model_info,
)
from .types import BudgetAllocation

__all__ = [
    "BudgetAllocator",
    "ReservePolicy",
    "RESERVE_FRACTION",
    "MIN_OUTPUT_RESERVE",
    "FLOOR_MIN_INPUT",
]

ReservePolicy = Literal["cap", "floor"]
_POLICIES = RESERVE_POLICIES

RESERVE_FRACTION = 0.25
MIN_OUTPUT_RESERVE = 1_024
FLOOR_MIN_INPUT = 8_000


class BudgetAllocator:
    """Split a context window into system / history / tools / output (§2.3).

    ``output_reserve``: the base reserve; ``None`` means "the model's max output when known,
    else 16,384". ``reserve_policy``: ``"cap"`` or ``"floor"`` (module docstring).
    """

    def __init__(
        self,
        output_reserve: int | None = None,
        reserve_policy: ReservePolicy = BudgetPolicy.reserve_policy,  # type: ignore[assignment]
        *,
        reserve_fraction: float = RESERVE_FRACTION,
        min_reserve: int = MIN_OUTPUT_RESERVE,
        estimator: Estimator | None = None,
    ):
        if reserve_policy not in _POLICIES:
            raise ValueError(f"unknown reserve_policy {reserve_policy!r}: expected 'cap' or 'floor'")
        if output_reserve is not None and (not isinstance(output_reserve, int) or output_reserve <= 0):
            raise ValueError(f"output_reserve must be a positive int or None, got {output_reserve!r}")
        if not 0 < reserve_fraction < 1:
            raise ValueError(f"reserve_fraction must be between 0 and 1, got {reserve_fraction!r}")
        if min_reserve < 0:
            raise ValueError(f"min_reserve must be >= 0, got {min_reserve!r}")
        self.output_reserve = output_reserve
        self.reserve_policy: ReservePolicy = reserve_policy
        self.reserve_fraction = reserve_fraction
        self.min_reserve = min_reserve
        self.estimator = estimator or default_estimator()

    # ------------------------------------------------------------------ reserve
    def base_reserve(self, model: str | None = None) -> int:
        """The reserve before the window rules: configured, else model max output, else 16,384."""
        if self.output_reserve is not None:
            return self.output_reserve
        info = model_info(model)
        return info.max_output if info.max_output else DEFAULT_MAX_OUTPUT

    def reserve_for(self, context_window: int, model: str | None = None) -> int:
        """The output reserve for ``context_window`` under this allocator's policy."""
        _check_window(context_window)
        base = self.base_reserve(model)
        fraction = math.floor(context_window * self.reserve_fraction)
        if self.reserve_policy == "cap":
            reserve = max(min(base, fraction), self.min_reserve)
            # a window so small that the floor would eat it: keep half for input
            return min(reserve, context_window // 2)
        # the input floor is the design's fixed min(8000, 25% of window), whatever the
        # reserve fraction; and at least one token, so input_used_pct is always defined
        min_input = max(1, min(FLOOR_MIN_INPUT, math.floor(context_window * 0.25)))
        return max(0, min(max(base, fraction), context_window - min_input))

    # ------------------------------------------------------------------ allocate
    def allocate(
        self,
        context_window: int | None,
        system_prompt: str | int | None,
        history: Sequence[Any] | int | None,
        tools: Sequence[dict] | int | None = None,
        model: str | None = None,
    ) -> BudgetAllocation:
        """The nine-figure split of one request (see the module docstring)."""
        if context_window is None:
            context_window = model_info(model).context_window
        _check_window(context_window)
        system_tokens = self._system_tokens(system_prompt, model)
        history_tokens = self._history_tokens(history, model)
        tools_tokens = self._tools_tokens(tools, model)
        reserve = self.reserve_for(context_window, model)
        input_used = system_tokens + history_tokens + tools_tokens
        input_budget = context_window - reserve
        return BudgetAllocation(
            context_window=context_window,
            system_prompt=system_tokens,
            history=history_tokens,
            tools_schema=tools_tokens,
            output_reserve=reserve,
            input_used=input_used,
            input_budget=input_budget,
            input_used_pct=input_used / input_budget,
            headroom=input_budget - input_used,
        )

    def _system_tokens(self, system_prompt: str | int | None, model: str | None) -> int:
        if system_prompt is None or system_prompt == "":
            return 0
        if isinstance(system_prompt, bool):
            raise TypeError("system_prompt must be a str or a token count, got bool")
        if isinstance(system_prompt, int):
            return _non_negative("system_prompt", system_prompt)
        if not isinstance(system_prompt, str):
            raise TypeError(f"system_prompt must be a str or a token count, got {type(system_prompt).__name__}")
        return self.estimator.message_tokens({"role": "system", "content": system_prompt}, model)

    def _history_tokens(self, history: Sequence[Any] | int | None, model: str | None) -> int:
        if history is None:
            return 0
        if isinstance(history, bool):
            raise TypeError("history must be a list of messages or a token count, got bool")
        if isinstance(history, int):
            return _non_negative("history", history)
        if isinstance(history, str | bytes | dict):
            raise TypeError(f"history must be a list of messages or a token count, got {type(history).__name__}")
        return self.estimator.history_tokens(history, model)

    def _tools_tokens(self, tools: Sequence[dict] | int | None, model: str | None) -> int:
        if tools is None:
            return 0
        if isinstance(tools, bool):
            raise TypeError("tools must be a list of tool schemas or a token count, got bool")
        if isinstance(tools, int):
            return _non_negative("tools", tools)
        if isinstance(tools, str | bytes | dict):
            # one schema passed bare would be counted by its keys: say so instead
            raise TypeError(f"tools must be a list of tool schemas or a token count, got {type(tools).__name__}")
        return self.estimator.tools_tokens(list(tools), model)


def _check_window(context_window: Any) -> None:
    if isinstance(context_window, bool) or not isinstance(context_window, int) or context_window <= 0:
        raise ValueError(f"context_window must be a positive int, got {context_window!r}")


def _non_negative(name: str, value: int) -> int:
    if value < 0:
        raise ValueError(f"{name} token count must be >= 0, got {value}")
    return value
