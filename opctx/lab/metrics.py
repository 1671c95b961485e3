"""Metrics of a replay: tokens, savings, compactions, cost, prefix cache, integrity, references.

Two levels:

* **pure functions over message lists** - ``identifiers``, ``tool_pair_breaks``,
  ``common_prefix_length``, ``reference_losses_from`` - usable on any list of
  per-step request message lists, whatever produced them;
* **functions over a** ``ReplayResult`` (``opctx.lab.replay``) - ``step_metrics``
  (one row per request), ``turn_metrics`` (one row per user turn),
  ``reference_losses`` and ``summarize`` (one flat dict per replay, the row a
  sweep writes).

Definitions (where the task or the specification leaves room)
-------------------------------------------------------------
input tokens
    The estimated prompt of each request (system prompt + tools + history as the
    engine prepared it, after aging/masking), ``steps_df.tokens``; in a replay fed
    the provider's counts (``replay_mode`` "provider usage", the default where the
    recording has them) the count fed for it: the estimate plus the unseen overhead
    measured against the recording. Totals, the
    peak and per-turn sums come from it. ``tokens_none`` is what the same
    estimator gives for the unmodified recorded history at that step (the
    ``none`` preset), so "tokens saved vs none" needs no second replay.
compression ratio
    Per compaction ``tokens_before / tokens_after`` (request estimates on both
    sides of the compaction); the replay's figure is the mean over compactions.
cost
    Request by request with ``opctx.lab.costs.price_requests`` (``opctx.lab._replay_costs``):
    each request at the rates of its size tier; its prompt split into the prefix it
    shares with the previous request (a cache *read* while the cache lives: expiry from
    the recorded request times where the recording has them, else the stated
    assumption, ``cache_assumption``) and the rest (a cache *write*). The summariser's
    calls are counted in ``cost`` and shown apart (``summary_calls_cost``). A model with
    no price gives NaN and one warning, never a default; ``price_source`` says where
    each price came from. Output tokens are the recorded assistant message's
    ``usage.output_tokens`` when present, else the estimate of that message; they are
    identical across strategies.
prefix-cache invalidation
    Tokens of the previous request that are no longer a prefix of the next:
    ``previous_tokens - common_prefix_tokens``, with the common prefix compared
    message by message (a message changed anywhere breaks the prefix at that
    message; finer, byte-level matching would need the provider's serialisation).
    The system prompt and tools are a shared constant prefix and are counted as
    kept.
tool-pair integrity
    In every request: a tool result whose call is not earlier in the same
    request (orphan), a tool call (not in the request's last message) whose
    result is missing, or a result separated from its call by another message
    (display-only lines are not sent and separate nothing). ``broken_pairs`` counts them over all requests;
    ``broken_pairs_introduced`` subtracts the count of the recording replayed
    unchanged (a real transcript can hold an interrupted call), and must be 0.
reference loss
    An *identifier* is a distinctive token: a path (``a/b.py``), a hex id (8+
    hex digits with a digit and a letter) or a long number (6+ digits), a
    CamelCase symbol with two humps or a digit (``FooBar``, ``Foo2``; this also
    catches error classes like ``ValueError``), a snake_case name of 8+
    characters, or a backticked span of 3-40 characters. This is
    ``references.extract_distinctive`` made stricter and uncapped: the spec's
    extractor keeps 32 per message (a file read would lose most of its paths) and
    takes any capitalised word (``Python``, ``The``), which would make every
    folded English sentence a "loss". A *use* is an identifier in a user or
    assistant message (text or tool-call arguments) that occurred in an earlier
    message (its *sources*); tool results are sources, never uses: they are the
    environment speaking. A use at stream index ``j`` is evaluated in the first
    request at or after ``j``, restricted to the messages that come from before
    ``j`` (plus summaries and other synthetic messages). It is a **loss** when
    no source is still there verbatim and neither a modified source (aged or
    masked) nor any summary still contains the identifier. ``reason`` is
    ``"masked"`` when a source is present but no longer contains it, else
    ``"folded"``.
estimator error
    On steps where the replayed context still equals the recording
    (``diverged == False``) and the recording has provider usage:
    ``(estimate - provider) / provider``. The recording's system prompt and
    tool schemas are usually not in the transcript, so a negative bias is
    expected unless ``system_prompt`` / ``tools`` were passed to the replay.
"""

from __future__ import annotations

import bisect
import math
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from opctx.context.provider_messages import is_display_only
from opctx.dag.messages import is_tool_result, message_text, tool_result_ids, tool_use_ids

from ._replay_costs import replay_costs
from .feasibility import PROVIDER_USAGE
from .history import RecordedHistory
from .prices import COST_NOTE, PriceTable

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "identifiers",
    "tool_pair_breaks",
    "common_prefix_length",
    "broken_pairs_per_step",
    "reference_losses_from",
    "reference_losses",
    "step_metrics",
    "turn_metrics",
    "cost_per_step",
    "estimator_error",
    "summarize",
    "guard_counts",
    "Replayed",
    "METRIC_COLUMNS",
]

# What each key of ``summarize`` means (a sweep's metric columns; docs/lab.md's table of a
# sweep's columns is built from this). A cost column says its unit: ``prices.COST_NOTE``.
METRIC_COLUMNS: dict[str, str] = {
    "steps": "requests replayed (one per recorded assistant message)",
    "turns": "user turns replayed",
    "input_tokens_total": "estimated prompt tokens summed over the requests (opctx.lab.metrics: 'input tokens')",
    "input_tokens_peak": "the largest request's estimated prompt, tokens",
    "input_tokens_mean": "the mean request's estimated prompt, tokens",
    "tokens_none_total": "the same sum for the unmodified history (the none preset), tokens",
    "tokens_saved": "tokens_none_total - input_tokens_total",
    "tokens_saved_pct": "tokens_saved / tokens_none_total (a share, 0..1)",
    "compactions": "compactions the engine made",
    "compression_ratio_mean": "mean over compactions of tokens_before / tokens_after (NaN: none)",
    "structural_fallbacks": "compactions summarised structurally (no model call, or the model failed)",
    "summary_calls": "summariser calls really made (0 for structural and recorded summaries)",
    "summary_input_tokens": "prompt tokens of those calls, as the summariser reported them",
    "summary_output_tokens": "output tokens of those calls, as the summariser reported them",
    "redacted_total": "messages aged or masked in one request, at most (a message stays redacted in later requests)",
    "max_budget_pct": "the highest share of the input budget a request used",
    "over_window_steps": "requests whose estimated prompt exceeded the window",
    "cost": f"cache-aware cost of the replay's requests (opctx.lab.metrics: 'cost'); {COST_NOTE}",
    "cost_none": f"the same for the unmodified history (the none preset); {COST_NOTE}",
    "agent_calls_cost": f"the agent's requests' share of cost; {COST_NOTE}",
    "summary_calls_cost": f"the summariser's calls' share of cost (see summary_calls_basis); {COST_NOTE}",
    "summary_calls_priced": "summariser calls priced (one per compaction that wrote a summary)",
    "summary_calls_input_tokens": "prompt tokens of the priced summariser calls",
    "summary_calls_basis": "measured (the summariser's reported usage) or modelled (what the compaction folded)",
    "cache_read_tokens": "prompt tokens read from the provider's prefix cache, summed",
    "cache_write_tokens": "prompt tokens written to the provider's prefix cache, summed",
    "price_source": "where the price came from (the table and its date), or why there is none",
    "cache_assumption": "the cache timing used: recorded request times, or the stated assumption",
    "prefix_invalidated_tokens": "tokens of a previous request that are no longer a prefix of the next, summed",
    "prefix_invalidations": "requests that invalidated part of the previous prefix",
    "broken_pairs": "tool calls and results separated or orphaned, summed over the requests",
    "broken_pairs_introduced": "broken_pairs beyond those already in the recording (must be 0)",
    "estimator_steps": "requests where the estimate can be checked (not diverged, provider usage recorded)",
    "estimator_mean_rel_error": "mean (estimate - provider) / provider on those requests (NaN: none)",
    "estimator_mean_abs_rel_error": "mean abs(estimate - provider) / provider on those requests (NaN: none)",
    "compactions_failed": "compaction attempts that made no progress (the engine's guard)",
    "auto_compaction_disabled": "times the guard disabled auto-compaction",
    "strategy_idle": "1 when a masking or clearing strategy found nothing to act on in the session",
    "reference_losses": "uses of an identifier whose sources are gone from the request (opctx.lab.metrics: 'reference loss')",
    "reference_losses_folded": "reference_losses whose sources were folded into a summary",
    "reference_losses_masked": "reference_losses whose sources were aged or masked",
    "identifiers_lost": "distinct identifiers among reference_losses",
}


class Replayed(Protocol):
    """What the metrics read of a replay: ``opctx.lab.replay.ReplayResult`` is one.

    A protocol, not the class, so that this module does not import the result's (whose
    ``metrics()`` is this module's ``summarize``): imports point one way.
    """

    history: RecordedHistory
    steps_df: Any
    compactions: Sequence[Any]
    events: list[dict]
    context_window: int
    model: str

    @property
    def stream(self) -> list[dict]: ...

    @property
    def stream_texts(self) -> list[str]: ...

    @property
    def stream_identifiers(self) -> list[list[str]]: ...

    def context(self, step: int) -> list[dict]: ...

    def origin_of(self, msg: dict) -> int | None: ...


def guard_counts(events: Sequence[dict]) -> dict[str, int]:
    """``compactions_failed`` / ``auto_compaction_disabled`` / ``strategy_idle`` (a masking or
    clearing strategy that found nothing to act on) counted from a replay's events."""
    return {
        "compactions_failed": sum(1 for e in events if e.get("event") == "compaction_failed"),
        "auto_compaction_disabled": sum(1 for e in events if e.get("event") == "auto_compaction_disabled"),
        "strategy_idle": sum(1 for e in events if e.get("event") == "strategy_idle"),
    }



def common_prefix_length(previous: Sequence[dict], current: Sequence[dict]) -> int:
    """How many leading messages ``current`` shares unchanged with ``previous``.

    Identity is checked first (a replay shares unchanged dicts between steps),
    then equality of role, id and text.
    """
    n = min(len(previous), len(current))
    # C-speed identity pass first: a replay shares unchanged dicts between steps
    same = list(map(operator.is_, previous[:n], current[:n]))
    i = same.index(False) if False in same else n
    while i < n:
        a, b = previous[i], current[i]
        if a is not b and not _same_message(a, b):
            break
        i += 1
    return i


def _same_message(a: dict, b: dict) -> bool:
    return (
        a.get("role") == b.get("role")
        and a.get("id") == b.get("id")
        and a.get("content") == b.get("content")
        and a.get("extra") == b.get("extra")
        and a.get("tool_calls") == b.get("tool_calls")
    )

# -- identifiers ---------------------------------------------------------------

_PATH = re.compile(r"(?<![\w/.-])(?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]*[A-Za-z0-9_]")
_HEX = re.compile(r"(?<![A-Za-z0-9_])[0-9a-fA-F]{8,}(?![A-Za-z0-9_])")
_NUM = re.compile(r"(?<![\w.])[0-9]{6,}(?![\w.])")
_CAMEL = re.compile(r"(?<![A-Za-z0-9_])[A-Z][a-z0-9]+(?:[A-Z0-9][A-Za-z0-9]*)+(?![A-Za-z0-9_])")
_SNAKE = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?![A-Za-z0-9_])")
_BACKTICK = re.compile(r"`([^`\n]{3,40})`")
_STOP = frozenset(
    {
        "JavaScript", "TypeScript", "GitHub", "GitLab", "OpenAI", "ChatGPT", "PostgreSQL",
        "MySQL", "SQLite", "MacOS", "iOS", "YouTube", "LinkedIn", "PowerShell", "NumPy",
        "FastAPI", "OAuth", "WebSocket", "JSON", "HTML", "True", "False", "None",
        "TextContent", "AssistantMessage", "UserMessage", "ToolResult", "ToolUse",
        "http://", "https://",
    }
)


def identifiers(text: str) -> list[str]:
    """The distinctive identifiers of ``text`` (see the module docstring), in first-seen order."""
    if not text:
        return []
    found: dict[str, None] = {}

    def add(token: str) -> None:
        token = token.strip().rstrip(".,:;")
        if token and token not in _STOP:
            found.setdefault(token, None)

    spans = []
    for m in _PATH.finditer(text):
        token = m.group(0)
        if len(token) >= 8 and not token.startswith(("http:", "https:")) and "//" not in token:
            add(token)
        spans.append(m.span())
    if spans:
        # a path's parts are not identifiers of their own (one loss, not three)
        pieces, last = [], 0
        for a, b in spans:
            pieces.append(text[last:a])
            pieces.append(" " * (b - a))
            last = b
        pieces.append(text[last:])
        text = "".join(pieces)
    for m in _HEX.finditer(text):
        token = m.group(0)
        if any(c.isdigit() for c in token) and any(c.isalpha() for c in token):
            add(token)
    for m in _NUM.finditer(text):
        add(m.group(0))
    for m in _CAMEL.finditer(text):
        add(m.group(0))
    for m in _SNAKE.finditer(text):
        if len(m.group(0)) >= 8:
            add(m.group(0))
    for m in _BACKTICK.finditer(text):
        add(m.group(1))
    return list(found)


def _use_text(msg: dict) -> str:
    """What a user/assistant message says (text + tool-call arguments)."""
    return message_text(msg)


# -- tool pairs ------------------------------------------------------------------


def tool_pair_breaks(messages: Sequence[dict]) -> list[dict[str, Any]]:
    """Broken tool pairs of one request: ``[{"kind", "tool_call_id", "index"}]``.

    ``kind`` is ``"orphan_result"`` (a result whose call is not earlier in the
    request), ``"missing_result"`` (a call, outside the request's last message,
    with no result after it) or ``"separated_result"`` (a result whose call is
    earlier, but with another message in between: providers want the results of a
    call right after it, before any other message). Display-only lines are not
    sent (``opctx.context.provider_messages``), so they separate nothing.

    >>> call = {"role": "assistant", "tool_calls": [{"id": "c1", "name": "ls", "arguments": {}}]}
    >>> result = {"role": "tool", "tool_call_id": "c1", "content": "a.py"}
    >>> tool_pair_breaks([call, {"role": "system", "content": "hook", "display_only": True}, result])
    []
    >>> tool_pair_breaks([call, {"role": "user", "content": "hurry"}, result])
    [{'kind': 'separated_result', 'tool_call_id': 'c1', 'index': 2}]
    """
    breaks: list[dict[str, Any]] = []
    open_calls: dict[str, int] = {}
    answered: set[str] = set()
    group: int | None = None  # the call message whose results may still follow
    last = len(messages) - 1
    for i, msg in enumerate(messages):
        calls, results, kind = _pair_facts(msg)
        if kind == _NOT_SENT:
            continue
        for rid in results:
            if rid in open_calls:
                answered.add(rid)
                if open_calls[rid] != group:
                    breaks.append({"kind": "separated_result", "tool_call_id": rid, "index": i})
            else:
                breaks.append({"kind": "orphan_result", "tool_call_id": rid, "index": i})
        if kind != _RESULT:
            group = i if calls else None
        for cid in calls:
            open_calls[cid] = i
            answered.discard(cid)
    for cid, i in open_calls.items():
        if cid not in answered and i != last:
            breaks.append({"kind": "missing_result", "tool_call_id": cid, "index": i})
    breaks.sort(key=lambda b: (b["index"], b["kind"], b["tool_call_id"]))
    return breaks


# what a message is for tool pairing: a tool result (keeps its call's results together),
# a line never sent (display-only: invisible to pairing), or anything else (ends them)
_RESULT, _NOT_SENT, _OTHER = 0, 1, 2


def _pair_facts(msg: dict) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    """``(call ids, result ids, kind)`` of one message, by the rules of ``tool_pair_breaks``."""
    if is_display_only(msg):
        return (), (), _NOT_SENT
    result = is_tool_result(msg) and msg.get("role") != "assistant"
    calls = () if result else tuple(tool_use_ids(msg))
    return calls, tuple(tool_result_ids(msg)), _RESULT if result else _OTHER


# -- prefix cache: common_prefix_length lives in _replay_result (the replay uses it too)


# -- reference loss -----------------------------------------------------------------


def reference_losses_from(
    stream: Sequence[dict],
    requests: Sequence[tuple[int, Sequence[dict]]],
    origin_of: Callable[[dict], int | None],
    *,
    stream_texts: Sequence[str] | None = None,
    stream_identifiers: Sequence[Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """Reference losses of a replay given as plain data.

    ``stream``: the recorded messages in order. ``requests``: ``(stream_index,
    messages)`` per step, where ``stream_index`` is the index of the message the
    request produced (everything before it was available) and ``messages`` the
    request as sent. ``origin_of(msg)``: the stream index a request message comes
    from, or ``None`` for synthetic messages (summaries, placeholders).

    Returns one dict per loss: ``identifier, use_index, use_id, use_role, step,
    request_index, source_indices, reason``. ``stream_texts`` and
    ``stream_identifiers`` may pass precomputed per-message texts / identifiers
    (a sweep replays one history many times).
    """
    texts = list(stream_texts) if stream_texts is not None else [message_text(m) for m in stream]
    request_points = [r[0] for r in requests]
    if any(b < a for a, b in zip(request_points, request_points[1:], strict=False)):
        raise ValueError("requests must be ordered by stream index")
    first_seen: dict[str, list[int]] = {}
    losses: list[dict[str, Any]] = []
    # request messages are mostly the same dicts from request to request: their text once
    text_cache: dict[int, tuple[dict, str]] = {}

    def text_of(msg: dict) -> str:
        hit = text_cache.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        text = message_text(msg)
        text_cache[id(msg)] = (msg, text)
        return text

    # the view of the request last looked at: origin -> messages, synthetic messages.
    # Uses arrive in request order and consecutive requests share most of their
    # messages, so the view is moved from one request to the next by undoing the
    # old request's messages after the common prefix and adding the new one's
    # (masking changes one message near the end, an append adds a few): about
    # linear over a replay instead of one full rebuild per request.
    view_k = -1
    view_msgs: Sequence[dict] = ()
    by_origin: dict[int, list[dict]] = {}
    synthetic: list[dict] = []

    def request_view(k: int) -> tuple[dict[int, list[dict]], list[dict]]:
        nonlocal view_k, view_msgs
        if k != view_k:
            msgs = requests[k][1]
            p = common_prefix_length(view_msgs, msgs)
            for msg in view_msgs[p:]:
                origin = origin_of(msg)
                bucket = synthetic if origin is None else by_origin[origin]
                for i in range(len(bucket) - 1, -1, -1):
                    if bucket[i] is msg:
                        del bucket[i]
                        break
                if origin is not None and not bucket:
                    del by_origin[origin]
            for msg in msgs[p:]:
                origin = origin_of(msg)
                if origin is None:
                    synthetic.append(msg)
                else:
                    by_origin.setdefault(origin, []).append(msg)
            view_k, view_msgs = k, msgs
        return by_origin, synthetic

    for j, msg in enumerate(stream):
        idents = stream_identifiers[j] if stream_identifiers is not None else identifiers(texts[j])
        role = msg.get("role")
        is_use = role in ("user", "assistant") and not is_tool_result(msg)
        if is_use and idents:
            k = bisect.bisect_left(request_points, j)
            if k < len(requests):
                by_origin, synthetic = request_view(k)
                for ident in idents:
                    sources = first_seen.get(ident)
                    if not sources:
                        continue
                    reason = _loss_reason(ident, sources, by_origin, synthetic, text_of)
                    if reason is not None:
                        losses.append({
                            "identifier": ident, "use_index": j, "use_id": msg.get("id"), "use_role": role,
                            "step": k, "request_index": request_points[k], "source_indices": list(sources),
                            "reason": reason,
                        })
        for ident in idents:
            first_seen.setdefault(ident, []).append(j)
    return losses


def _loss_reason(
    ident: str,
    sources: list[int],
    by_origin: dict[int, list[dict]],
    synthetic: list[dict],
    text_of: Callable[[dict], str] = message_text,
) -> str | None:
    modified_present = False
    for s in sources:
        for msg in by_origin.get(s, ()):
            if ident in text_of(msg):
                return None
            modified_present = True
    for msg in synthetic:
        if ident in text_of(msg):
            return None
    return "masked" if modified_present else "folded"


def reference_losses(result: Replayed) -> pd.DataFrame:
    """Reference losses of a replay as a DataFrame (see ``reference_losses_from``)."""
    import pandas as pd

    requests = [(int(idx), result.context(step)) for step, idx in enumerate(result.steps_df["stream_index"])]
    rows = reference_losses_from(
        result.stream, requests, result.origin_of,
        stream_texts=result.stream_texts, stream_identifiers=result.stream_identifiers,
    )
    columns = ["identifier", "use_index", "use_id", "use_role", "step", "request_index", "source_indices", "reason"]
    df = pd.DataFrame(rows, columns=columns)
    df["reason"] = df["reason"].astype(pd.CategoricalDtype(["folded", "masked"]))
    return df


# -- cost --------------------------------------------------------------------------


_COST_COLUMNS = ["cache_read_tokens", "cache_write_tokens", "output_tokens", "cost", "cost_none"]


def _cost_columns(result: Replayed, prices: Any, cache: Any = None) -> dict[str, list]:
    """The agent's per-step cost columns (``opctx.lab._replay_costs``; summariser calls apart)."""
    costs = replay_costs(result, prices, cache)
    agent = [r for r in costs.strategy.records if r.kind == "agent"]
    return {
        "cache_read_tokens": [r.cache_read_tokens for r in agent],
        "cache_write_tokens": [r.cache_write_tokens for r in agent],
        "output_tokens": [r.output_tokens for r in agent],
        "cost": [r.cost + r.keep_warm_cost for r in agent],
        "cost_none": [r.cost + r.keep_warm_cost for r in costs.none.records],
    }


def cost_per_step(result: Replayed, prices: Any = None, cache: Any = None) -> pd.DataFrame:
    """Per step: ``cache_read_tokens``, ``cache_write_tokens``, ``output_tokens``, ``cost``.

    See the module docstring ("cost"). ``cost_none`` is the same for the
    unmodified history (the ``none`` preset), for savings in dollars. The
    summariser's calls are not steps: ``summarize``'s ``summary_calls_cost``.
    """
    import pandas as pd

    return pd.DataFrame(_cost_columns(result, prices, cache), index=result.steps_df.index, columns=_COST_COLUMNS)


# -- estimator error --------------------------------------------------------------------


def _fed(df: Any) -> bool:
    """Whether a replay's ``tokens`` are the provider's counts fed back (its ``replay_mode``):
    then they equal the recorded counts by construction and measure no estimator."""
    return "replay_mode" in df and len(df) > 0 and df["replay_mode"].iloc[0] == PROVIDER_USAGE


def estimator_error(result: Replayed) -> pd.DataFrame:
    """Steps with provider usage where the replay still equals the recording.

    Columns: ``step, estimated, provider, error, rel_error``. Empty for a replay fed the
    provider's counts (its requests are those counts): replay with ``feed_usage=False``.
    """
    import pandas as pd

    df = result.steps_df
    mask = df["provider_input_tokens"].notna() & ~df["diverged"] & (not _fed(df))
    sub = df.loc[mask, ["step", "tokens", "provider_input_tokens"]]
    out = pd.DataFrame(
        {
            "step": sub["step"].to_numpy(),
            "estimated": sub["tokens"].to_numpy(),
            "provider": sub["provider_input_tokens"].astype("float64").to_numpy(),
        }
    )
    out["error"] = out["estimated"] - out["provider"]
    out["rel_error"] = out["error"] / out["provider"].where(out["provider"] > 0)
    return out


# -- per step, per turn, per replay ---------------------------------------------------------


def broken_pairs_per_step(requests: Iterable[Sequence[dict]]) -> list[int]:
    """``len(tool_pair_breaks(r))`` for each request, incrementally.

    Consecutive requests of a replay mostly extend the previous one; then only
    the appended messages are examined. The call/result ids of a message are
    cached by message id (aging and masking change content, never tool ids).
    """
    counts: list[int] = []
    facts: dict[Any, tuple[tuple[str, ...], tuple[str, ...], int]] = {}
    prev_ids: list[Any] = []
    state: _PairState | None = None
    for request in requests:
        ids = [m.get("id") or id(m) for m in request]
        for key, msg in zip(ids, request, strict=True):
            if key not in facts:
                facts[key] = _pair_facts(msg)
        if state is not None and len(ids) >= len(prev_ids) and ids[: len(prev_ids)] == prev_ids:
            state.extend(ids[len(prev_ids):], facts)
        else:
            state = _PairState()
            state.extend(ids, facts)
        counts.append(state.count(len(ids)))
        prev_ids = ids
    return counts


class _PairState:
    """Running tool-pair bookkeeping of one request (same rules as ``tool_pair_breaks``)."""

    def __init__(self) -> None:
        self.position = 0
        self.orphans = 0
        self.separated = 0
        self.group: int | None = None
        self.calls: dict[str, int] = {}
        self.answered: set[str] = set()

    def extend(self, keys: Sequence[Any], facts: dict[Any, tuple[tuple[str, ...], tuple[str, ...], int]]) -> None:
        for key in keys:
            calls, results, kind = facts[key]
            if kind != _NOT_SENT:
                for rid in results:
                    if rid in self.calls:
                        self.answered.add(rid)
                        if self.calls[rid] != self.group:
                            self.separated += 1
                    else:
                        self.orphans += 1
                if kind != _RESULT:
                    self.group = self.position if calls else None
                for cid in calls:
                    self.calls[cid] = self.position
                    self.answered.discard(cid)
            self.position += 1

    def count(self, length: int) -> int:
        last = length - 1
        return self.orphans + self.separated + sum(
            1 for cid, i in self.calls.items() if i != last and cid not in self.answered
        )


def step_metrics(result: Replayed, prices: PriceTable | None = None) -> pd.DataFrame:
    """``steps_df`` plus cost columns, saved tokens and broken tool pairs per step."""
    df = result.steps_df.copy()
    df = df.join(cost_per_step(result, prices).drop(columns=["output_tokens"]))
    df["broken_pairs"] = broken_pairs_per_step(result.context(k) for k in range(len(df)))
    stream = result.stream
    df["broken_pairs_none"] = broken_pairs_per_step(
        stream[: int(i)] for i in df["stream_index"]
    )
    df["saved_tokens"] = df["tokens_none"] - df["tokens"]
    return df


def turn_metrics(result: Replayed, prices: PriceTable | None = None) -> pd.DataFrame:
    """One row per user turn: requests, input tokens (sum, peak), savings, cost, compactions."""
    df = step_metrics(result, prices)
    grouped = df.groupby("turn", sort=True, observed=True)
    out = grouped.agg(
        requests=("step", "size"),
        input_tokens=("tokens", "sum"),
        peak_tokens=("tokens", "max"),
        tokens_none=("tokens_none", "sum"),
        compactions=("compacted", "sum"),
        cost=("cost", "sum"),
        invalidated_tokens=("prefix_invalidated_tokens", "sum"),
    )
    out["saved_tokens"] = out["tokens_none"] - out["input_tokens"]
    return out.reset_index()


def _summariser_totals(result: Replayed) -> dict[str, int]:
    made = [vars(c) if hasattr(c, "__dict__") else {} for c in result.compactions]
    made += [e for e in result.events if e.get("event") == "compaction_failed"]
    return {f"summary_{k}": sum(int(d.get(f"summary_{k}", 0) or 0) for d in made)
            for k in ("calls", "input_tokens", "output_tokens")}


def _broken_pair_totals(result: Replayed, df: Any) -> tuple[float, float]:
    """``(broken_pairs, broken_pairs_introduced)`` over the requests; NaN without contexts."""
    import numpy as np

    if getattr(result, "contexts", []) is None:
        return math.nan, math.nan
    broken = np.asarray(broken_pairs_per_step(result.context(k) for k in range(len(df))), dtype="int64")
    stream = result.stream
    indices = tuple(df["stream_index"].tolist())
    # the recording's own broken pairs: the same for every replay of this history
    broken_none = np.asarray(
        result.history.derived(
            ("broken_pairs_none", indices), lambda: broken_pairs_per_step(stream[:i] for i in indices)
        ),
        dtype="int64",
    )
    return int(broken.sum()), int(np.clip(broken - broken_none, 0, None).sum())


def summarize(
    result: Replayed,
    prices: Any = None,
    *,
    reference_loss: bool = True,
    cache: Any = None,
    warn: bool = True,
) -> dict[str, Any]:
    """One flat dict of the replay's metrics (what ``sweep`` writes per configuration).

    Computed on plain columns (no intermediate DataFrames): a sweep calls it once
    per (session, configuration), thousands of times. ``prices``: a ``PriceTable``,
    a ``ModelPrice`` or a ``PRICE_MODELS`` name; ``cache``: a ``CachePolicy`` (default:
    recorded times where the recording has them, else always warm); ``warn=False``
    leaves the warning about unpriced models to the caller (``costs.warn_unpriced``).
    A replay run with ``keep_contexts=False`` has no request lists: the figures that
    read them (``broken_pairs*``) are NaN, and ``reference_loss=True`` raises.
    """
    import numpy as np

    df = result.steps_df
    n = len(df)
    tokens = df["tokens"].to_numpy(dtype="int64")
    none = df["tokens_none"].to_numpy(dtype="int64")
    costs = replay_costs(result, prices, cache, warn=warn).figures()
    invalidated = df["prefix_invalidated_tokens"].to_numpy(dtype="int64")
    stream = result.stream
    broken, broken_introduced = _broken_pair_totals(result, df)
    ratios = [c.tokens_before / c.tokens_after for c in result.compactions if c.tokens_after and c.tokens_before]
    provider = df["provider_input_tokens"].to_numpy(dtype="float64", na_value=np.nan)
    # the estimator's error needs the estimate: a fed replay's requests are the provider's counts
    usable = ~np.isnan(provider) & ~df["diverged"].to_numpy(dtype=bool) & (provider > 0) & (not _fed(df))
    rel = (tokens[usable] - provider[usable]) / provider[usable]
    tokens_total = int(tokens.sum())
    none_total = int(none.sum())
    out: dict[str, Any] = {
        "steps": n,
        "turns": int(df["turn"].nunique()) if n else 0,
        "input_tokens_total": tokens_total,
        "input_tokens_peak": int(tokens.max()) if n else 0,
        "input_tokens_mean": float(tokens.mean()) if n else 0.0,
        "tokens_none_total": none_total,
        "tokens_saved": none_total - tokens_total,
        "tokens_saved_pct": (none_total - tokens_total) / none_total if none_total else 0.0,
        "compactions": len(result.compactions),
        "compression_ratio_mean": float(sum(ratios) / len(ratios)) if ratios else math.nan,
        "structural_fallbacks": sum(1 for c in result.compactions if c.fell_back_to_structural),
        # the summariser's own calls (ReplayCompaction.summary_*, and a compaction that
        # summarised then made no progress: its compaction_failed event; 0 for structural)
        **_summariser_totals(result),
                # messages redacted in a request, at most: aging keeps a message redacted in every later
        # request, so a sum over requests would count one redaction once per request
        "redacted_total": int(df["redacted"].max()) if n else 0,
        "max_budget_pct": float(df["budget_pct"].max()) if n else 0.0,
        "over_window_steps": int((tokens > result.context_window).sum()),
        **costs,
        "prefix_invalidated_tokens": int(invalidated.sum()),
        "prefix_invalidations": int((invalidated > 0).sum()),
        "broken_pairs": broken,
        "broken_pairs_introduced": broken_introduced,
        "estimator_steps": int(usable.sum()),
        "estimator_mean_rel_error": float(rel.mean()) if rel.size else math.nan,
        "estimator_mean_abs_rel_error": float(np.abs(rel).mean()) if rel.size else math.nan,
    }
    # the engine's anti-thrash guard at work (opctx.lab.replay: "the engine's notes")
    out.update(guard_counts(result.events))
    if reference_loss:
        requests = [(int(idx), result.context(step)) for step, idx in enumerate(df["stream_index"].tolist())]
        losses = reference_losses_from(
            stream, requests, result.origin_of,
            stream_texts=result.stream_texts, stream_identifiers=result.stream_identifiers,
        )
        out["reference_losses"] = len(losses)
        out["reference_losses_folded"] = sum(1 for x in losses if x["reason"] == "folded")
        out["reference_losses_masked"] = sum(1 for x in losses if x["reason"] == "masked")
        out["identifiers_lost"] = len({x["identifier"] for x in losses})
    return out
