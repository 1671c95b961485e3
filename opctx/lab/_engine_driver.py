"""What a replay needs from an engine: the engine itself, and the calls it makes on it.

``instantiate`` turns what ``replay`` was given (a preset name, a ``PresetSpec``, a
``CompactionPolicy``, an engine factory, or a configured ``DefaultContextEngine``) into
``(label, engine, parameters)`` on the replay's own database and clock;
:class:`EngineDriver` holds the replay's session and makes every call on the engine
(prepare, the decision, compact, after_turn), so that ``opctx.lab.replay`` reads as
its steps.
"""

from __future__ import annotations

import copy
import inspect
import threading
from collections.abc import Callable
from typing import Any

from opctx.context.engine import ContextEngine, DefaultContextEngine
from opctx.context.persistence import Persister
from opctx.context.policy import CompactionPolicy
from opctx.context.types import CompactRequest, DecisionKind
from opctx.context.usage import UsageTracker

from .presets import PRESETS, PresetSpec, build_engine

__all__ = ["instantiate", "EngineDriver"]


def instantiate(
    engine_or_preset: Any,
    *,
    session_db: Any,
    clock: Callable[[], float],
    context_window: int,
    model: str,
    summarizer_provider: Callable[..., Any] | None,
    **params: Any,
) -> tuple[str, ContextEngine, dict[str, Any]]:
    """``(label, engine, effective params)`` for a replay; see ``replay``'s docstring."""
    if isinstance(engine_or_preset, str | PresetSpec | CompactionPolicy):
        engine = build_engine(
            engine_or_preset, session_db=session_db, clock=clock, context_window=context_window,
            model=model, summarizer_provider=summarizer_provider, **params,
        )
        spec = PRESETS[engine_or_preset] if isinstance(engine_or_preset, str) else engine_or_preset
        return engine.name, engine, dict(spec.params) if isinstance(spec, PresetSpec) else {}
    if isinstance(engine_or_preset, DefaultContextEngine):
        if params:
            raise ValueError("parameters apply to presets only; configure the engine instance itself")
        return engine_or_preset.name, _replay_clone(engine_or_preset, session_db, clock, context_window), {}
    if isinstance(engine_or_preset, ContextEngine):
        raise TypeError(
            f"cannot replay through a {type(engine_or_preset).__name__} instance: its database and "
            "clock are its own; pass a factory f(session_db=, clock=, context_window=, model=, "
            "summarizer_provider=) -> ContextEngine instead"
        )
    if callable(engine_or_preset):
        engine = engine_or_preset(
            session_db=session_db, clock=clock, context_window=context_window, model=model,
            summarizer_provider=summarizer_provider, **params,
        )
        if not isinstance(engine, ContextEngine):
            raise TypeError(f"the engine factory returned a {type(engine).__name__}, not a ContextEngine")
        return getattr(engine, "name", "custom"), engine, dict(params)
    raise TypeError(
        "engine_or_preset must be a preset name, a PresetSpec, a CompactionPolicy, a factory or an engine, "
        f"got {type(engine_or_preset).__name__}"
    )


def _replay_clone(engine: DefaultContextEngine, session_db: Any, clock: Callable[[], float], window: int) -> DefaultContextEngine:
    """A shallow copy of a configured engine that writes to the replay's database and clock."""
    clone = copy.copy(engine)
    clone.session_db = session_db
    clone.clock = clock
    clone.persister = Persister(session_db, clock=clock)
    clone.usage_tracker = UsageTracker(session_db, clock=clock, estimator=engine.estimator)
    if getattr(engine, "thinking_clearer", None) is not None:  # its record (acted) is the replay's
        clone.thinking_clearer = copy.deepcopy(engine.thinking_clearer)
    if engine.ager is not None:
        clone.ager = copy.deepcopy(engine.ager)
        if hasattr(clone.ager, "clock"):
            clone.ager.clock = clock
    if clone.context_window is None:
        clone.policy = clone.policy.replace(**{"budget.context_window": window})
    clone._sessions = {}
    clone._lock = threading.RLock()
    return clone


def _takes_keyword(fn: Any, name: str) -> bool:
    """Whether ``fn`` accepts the keyword ``name``, by name or in ``**kwargs`` (an engine of
    the user's may not)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class EngineDriver:
    """The calls a replay makes on an engine, in one place."""

    def __init__(self, engine: ContextEngine, db: Any, session_id: str, model: str, window: int, *,
                 agent: Any = None, system_prompt: str = "", tools: list[dict] | None = None):
        self.engine = engine
        self.db = db
        self.session_id = session_id
        self.model = model or None
        self.window = window
        self.agent = agent if agent is not None else (system_prompt or None)
        self.tools = list(tools) if tools else None
        self.events: list[dict] = []
        self._pending: list[dict] = []
        self._figures_only = {"assemble": False} if _takes_keyword(engine.prepare, "assemble") else {}
        engine.on_session_start(session_id)

    def _on_event(self, name: str, payload: dict) -> None:
        if name == "compaction_finished" and payload.get("disabled_auto"):
            self.events.append({"event": "auto_compaction_disabled", "error": payload.get("error")})

    def fixed_tokens(self, estimator: Any) -> int:
        model = self.model or None
        text = self.system_prompt_text()
        system = estimator.message_tokens({"role": "system", "content": text}, model) if text else 0
        tools = estimator.tools_tokens(self.tools, model) if self.tools else 0
        return system + tools

    def system_prompt_text(self) -> str:
        fn = getattr(self.engine, "system_prompt_for", None)
        if fn is not None:
            return fn(self.agent) or ""
        return self.agent if isinstance(self.agent, str) else ""

    @property
    def estimator(self) -> Any:
        return getattr(self.engine, "estimator", None)

    def prepare(self, active: list[dict]) -> Any:
        """The engine's figures and decision for ``active``. A replay sends nothing, so an
        engine that can skip assembling and fitting the request does (``assemble=False``):
        over its window, fitting is most of what a request costs, and none of what a replay
        reads."""
        return self.engine.prepare(self.agent, self.session_id, active, self.model, self.tools, **self._figures_only)

    def decide(self, prep: Any) -> str:
        """The replay's decision word for ``prep``: ``emergency``, ``auto``, ``recommend`` or
        ``none``, from the engine's own checks and the typed ``prep.decision``."""
        if self.engine.should_auto_compact(prep):
            decision = getattr(prep, "decision", None)
            emergency = decision is not None and decision.kind is DecisionKind.EMERGENCY
            return "emergency" if emergency else "auto"
        if self.engine.should_recommend(prep):
            return "recommend"
        return "none"

    def compact(self, *, reason: str, force_structural: bool = False) -> Any:
        self.flush()
        recorded = reason == "recorded"
        return self.engine.compact(CompactRequest(
            self.session_id, agent=self.agent, model=self.model, on_event=self._on_event,
            user_initiated=recorded, reason="manual" if recorded else "auto", trigger=reason,
            tools=self.tools,
        ))


    def branch(self) -> list[dict]:
        self.flush()
        return self.db.get_branch(self.session_id)

    def append(self, msg: dict, parent: str | None, now: float, index: int = 0) -> dict:
        """Add a recorded message to the session (buffered; see ``flush``).

        A message without an id gets ``replay_<index>`` (deterministic).
        """
        stored = dict(msg)
        if not stored.get("id"):
            stored["id"] = f"replay_{index:06d}"
        stored["parent_id"] = parent
        if stored.get("timestamp") is None:
            stored["timestamp"] = now
        self._pending.append(stored)
        return stored

    def flush(self) -> None:
        """Write buffered messages in one transaction.

        The engine reads the database only in ``compact``, so the replay keeps
        the active history in memory and writes it just before a compaction:
        one ``append_messages`` transaction instead of one per message.
        """
        if self._pending:
            # the replay's database keeps recorded ids on this path (opctx.lab._replay_db._ReplaySessionDB)
            append = getattr(self.db, "append_recorded", self.db.append_messages)
            append(self.session_id, self._pending)
            self._pending = []

    def after_turn(self, usage: dict, prep: Any) -> None:
        prompt = (
            int(usage.get("input_tokens") or 0)
            + int(usage.get("cache_read_tokens") or 0)
            + int(usage.get("cache_write_tokens") or 0)
        )
        # opctx usage shape: input_tokens is the whole prompt (opctx.context.usage.normalise_usage)
        normalised = {
            "input_tokens": prompt,
            "output_tokens": int(usage.get("output_tokens") or 0),
            "cache_read_tokens": int(usage.get("cache_read_tokens") or 0),
            "cache_write_tokens": int(usage.get("cache_write_tokens") or 0),
        }
        self.engine.after_turn(self.session_id, normalised, prep)

    @staticmethod
    def tokens(prep: Any) -> int:
        return int(prep.budget.input_used)

    @staticmethod
    def budget_pct(prep: Any) -> float:
        return float(prep.budget_pct)

    @staticmethod
    def input_budget(prep: Any) -> int:
        return int(prep.budget.input_budget)

    @staticmethod
    def redacted(prep: Any) -> int:
        return int(getattr(prep, "tool_results_redacted", 0) or 0)

    @staticmethod
    def context(prep: Any) -> list[dict]:
        return list(prep.history_dicts)

    def summary_meta(self, comp: Any) -> dict[str, Any]:
        sid = getattr(comp, "summary_id", None)
        if not sid:
            return {}
        self.flush()
        msg = self.db.get_message(self.session_id, sid)
        meta = (msg or {}).get("compaction")
        return meta if isinstance(meta, dict) else {}

    def close(self) -> None:
        try:
            self.engine.on_session_end(self.session_id)
        finally:
            close = getattr(self.db, "close", None)
            if callable(close):
                close()

