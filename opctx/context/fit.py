"""Fit a request into the context window: the last step before a provider call.

Compaction folds old turns and aging clears old tool results, but neither can shrink
a part of the request that is by itself larger than the window: a user message
pasted from a log file, one tool result of several megabytes, a system prompt built
from a huge workspace file, or a tail that compaction must keep. Sent as it is, such
a request is rejected by the provider (or, worse, silently cut by it).
:func:`fit_request` is the final step of ``DefaultContextEngine.prepare`` (and of
``process_user_turn`` for an engine that does not fit its own requests):

* the request is measured as it will be sent: the system prompt, the tool schemas
  and the provider messages, with the engine's estimator and the call's model;
* when it fits the input budget (the window minus the output reserve) nothing
  changes, and nothing is copied;
* otherwise its oversized parts are truncated, evenly from the largest down (a
  "water level": every part above a common size ``C`` is cut to ``C``, the smaller
  ones are left whole, and ``C`` is the largest size for which the request fits).
  A truncated text keeps its head (three fifths) and its tail with a marker
  between them, ``[... N tokens truncated to fit the context window ...]``: the
  start of a log or file says what it is, its end holds the error or the result.
  The parts are the system prompt, each message's text, the text parts of a
  multi-part content, and the strings of tool-call arguments wherever they are
  nested (an object's values, a list of edits as in Claude Code's ``MultiEdit``, an
  array, a bare JSON string: each string is cut on its own, so the keys, the lists
  and the JSON stay whole and valid, and the marker inside each cut string says
  what was cut; arguments that are not JSON are cut as text); in an Anthropic
  request (``anthropic_messages``) also each ``tool_result``'s content and the
  strings of each ``tool_use`` input, at any depth, never a thinking block (its
  signature);
* what cannot be truncated (the tool schemas, each message's fixed overhead, images,
  the markers themselves) may still exceed the budget: then the request does not
  fit, and :attr:`FittedRequest.overflow` says why. ``process_user_turn`` compacts
  once more and, if that does not help, raises :class:`ContextOverflowError`
  before calling the provider.

Only the request is changed: the messages are copies, the store keeps the originals.

A session that stays over its window (nothing compacts) would be fitted again on every
request. The engine keeps a session's cuts instead (:class:`CarriedCuts`): the same cut
strings are sent while the request fits with them, and a fresh fit goes a share of the
budget below it (``budget.fit_headroom``), so that the next requests fit too. A fresh fit
costs about the size of what it cuts, not of the history: floors are worked out only for
the units the water level reaches (``_Floors``), and the cuts of a text are counted from
its pre-tokeniser pieces, exactly, without encoding each cut (``_cut_counts``).

Example::

    >>> from opctx.context.tokens import Estimator
    >>> est = Estimator("heuristic")
    >>> log = "\\n".join(f"line {i}: all good" for i in range(5000))
    >>> fitted = fit_request("", [{"role": "user", "content": log}], None, 300, estimator=est)
    >>> fitted.fits, fitted.truncated, fitted.tokens <= 300
    (True, 1, True)
    >>> text = fitted.messages[0]["content"]
    >>> text.startswith("line 0: all good"), text.endswith("line 4999: all good")
    (True, True)
    >>> "tokens truncated to fit the context window ...]" in text
    True
"""

from __future__ import annotations

import bisect
import copy
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._cut_counts import KnownCuts, json_string, known_cuts, remember_rebuilt
from .tokens import Estimator, default_estimator

__all__ = [
    "CarriedCuts",
    "ContextOverflowError",
    "FittedRequest",
    "TRUNCATION_MARKER",
    "fit_request",
    "truncate_text",
]

TRUNCATION_MARKER = "[... {n} tokens truncated to fit the context window ...]"
_HEAD_SHARE = 0.6  # of the kept text; the rest is the tail
_ATTEMPTS = 8  # estimates are not additive: shrink, measure, shrink a little more


class ContextOverflowError(Exception):
    """The request cannot fit the model's input budget even with every oversized part
    truncated (tool schemas or the fixed cost of many messages alone are too large).
    Raised before the provider is called; nothing was sent."""


@dataclass
class FittedRequest:
    """What :func:`fit_request` made of a request."""

    system_prompt: str
    messages: list[dict]
    tokens: int  # estimate of system prompt + tool schemas + messages, as fitted
    budget: int  # the input budget it was fitted to
    truncated: int = 0  # parts (the system prompt, messages) that were truncated
    overflow: str | None = None  # why it does not fit even truncated; None when it fits

    @property
    def fits(self) -> bool:
        return self.overflow is None


class CarriedCuts:
    """The cuts one session's requests were last fitted with, kept across its requests.

    Fitted afresh every time, a session that stays over its window is cut again on every
    request, each time to a slightly lower water level: the same twenty or thirty largest
    texts get new cuts, so the request's prefix changes at every turn (no prompt cache
    survives it), and the fit costs as much as the texts it cuts, per request. Carried,
    a text is cut once and sent as it was while the request fits with the cuts already
    made; when it does not, the request is fitted afresh, to ``headroom`` (a share of the
    budget) below the budget where the texts allow, so that the next requests fit with
    those cuts for a while. This is what clients do with a long tool output: they cut it
    once, when it is made, and send the cut from then on.

    A cut is kept for the very message object it was made on (an assembly hands back the
    same dict for a message that did not change, ``provider_messages``) and for a system
    prompt equal to the one cut. Not thread-safe: one per session, under its lock."""

    __slots__ = ("headroom", "_system", "_units")

    def __init__(self, headroom: float = 0.0):
        if not 0.0 <= headroom <= 1.0:
            raise ValueError(f"headroom must be a share of the budget in [0, 1], got {headroom!r}")
        self.headroom = headroom
        self._system: tuple[str, str, int] | None = None  # (as given, as sent, its size)
        self._units: dict[int, tuple[dict, Any, int]] = {}  # id(message) -> (message, as sent, its size)

    def __len__(self) -> int:
        return len(self._units) + (self._system is not None)

    def clear(self) -> None:
        self._system, self._units = None, {}

    def remember(self, units: Sequence[Any], fitted: FittedRequest, sizes: Sequence[int]) -> None:
        """Keep the cuts of a request fitted afresh (none when it does not fit)."""
        self.clear()
        if not fitted.fits or not fitted.truncated:
            return
        if fitted.system_prompt is not units[0]:
            self._system = (units[0], fitted.system_prompt, sizes[0])
        for message, sent, n in zip(units[1:], fitted.messages, sizes[1:], strict=True):
            if sent is not message:
                self._units[id(message)] = (message, sent, n)

    def apply(self, units: Sequence[Any], sizes: Sequence[int], tools: int, budget: int) -> FittedRequest | None:
        """The request with the cuts kept, when it fits ``budget`` with them; else None."""
        if not len(self):
            return None
        system, total, truncated = units[0], tools, 0
        if self._system is not None and self._system[0] == system:
            system, size = self._system[1], self._system[2]
            truncated += 1
        else:
            size = sizes[0]
        total += size
        messages, kept = list(units[1:]), {}
        for i, (message, n) in enumerate(zip(units[1:], sizes[1:], strict=True)):
            hit = self._units.get(id(message))
            if hit is not None and hit[0] is message:
                messages[i], n = hit[1], hit[2]
                kept[id(message)] = hit
            total += n
        truncated += len(kept)
        if not truncated or total > budget:
            return None
        self._units = kept  # a message no longer sent is let go
        if system is units[0]:
            self._system = None
        return FittedRequest(system, messages, total, budget, truncated)


def truncate_text(text: str, target: int, count: Callable[[str], int], *, known: KnownCuts | None = None) -> str:
    """``text`` cut to at most ``target`` tokens (by ``count``): its head and tail around
    a marker naming how many tokens were left out; the marker alone when even a few
    characters of each end do not fit. Returned unchanged when it already fits.

    ``known``: ``text``'s pieces, when ``count`` counts with the estimator they belong to:
    the cuts are then counted from them (exactly; ``_cut_counts``) instead of encoded."""
    total = count(text)
    if total <= target:
        return text
    marker_cost = count(TRUNCATION_MARKER.format(n=total)) + 1
    keep_chars = int((target - marker_cost) * len(text) / max(total, 1))
    for _ in range(_ATTEMPTS):
        if keep_chars <= 0:
            break
        head = text[: int(keep_chars * _HEAD_SHARE)]
        tail = text[len(text) - (keep_chars - len(head)) :] if keep_chars > len(head) else ""
        if known is not None:
            known.remember(head, tail)
        removed = max(1, total - count(head) - count(tail))
        out = "\n".join(p for p in (head, TRUNCATION_MARKER.format(n=removed), tail) if p)
        if known is not None:
            known.remember(out)
        used = count(out)
        if used <= target:
            return out
        keep_chars = int(keep_chars * min(0.9, target / used))
    return TRUNCATION_MARKER.format(n=total)


def _water_level(sizes: Sequence[int], floors: Sequence[int], room: int) -> int | None:
    """The largest ``C`` with ``sum(max(min(size, C), floor)) <= room``; None when even
    the floors do not fit.

    Sought by bisection; a unit no larger than ``C`` adds its size whatever ``C`` is, so
    with the units sorted largest first each step sums only those above ``C`` (a few in
    a long history) and takes the rest from a running total."""
    if sum(floors) > room:
        return None
    order = sorted(range(len(sizes)), key=sizes.__getitem__, reverse=True)
    smaller_first = [sizes[i] for i in reversed(order)]
    above = [floors[i] for i in order]
    rest = [0]  # rest[j]: the sizes of all but the j largest units
    for size in smaller_first:
        rest.append(rest[-1] + size)
    rest.reverse()
    lo, hi = 0, max(sizes, default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        t = len(smaller_first) - bisect.bisect_right(smaller_first, mid)  # units over ``mid``
        if rest[t] + sum(f if f > mid else mid for f in above[:t]) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


class _Floors:
    """Each unit's floor (its size with every text cut down to a marker), worked out only
    for the units the water level reaches.

    A unit no larger than the level is sent whole whatever its floor: only the largest
    units need one, and working out a floor parses and counts the unit's texts (for a
    session that stays over its window, every request of a long history would pay that).
    Floors are computed largest unit first; a unit not yet computed is taken as unable to
    shrink (its floor its size), which can only lower the level. Once the level found
    that way is at least the size of every unit not computed, it is the level with all
    floors known: above it, the two ways of counting agree, and they agree on the largest
    level that fits. Otherwise more floors are computed (twice as many) and the level is
    sought again."""

    def __init__(self, units: Sequence[Any], sizes: Sequence[int], count: Callable[[str], int]):
        self.units, self.sizes, self.count = units, sizes, count
        self.order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
        self.values = list(sizes)  # a unit's floor, or its size while not computed
        self.parts: dict[int, _Part] = {}
        self.done = 0  # floors computed: those of ``order[:done]``

    def _compute(self, upto: int) -> None:
        for i in self.order[self.done : upto]:
            part = self.parts[i] = _Part(self.units[i])
            if part.texts:
                texts_t, markers = _text_sizes(part, self.count)
                s = self.sizes[i]
                self.values[i] = min(s, max(0, s - sum(texts_t)) + sum(markers))
        self.done = max(self.done, upto)

    def level(self, room: int) -> int | None:
        """:func:`_water_level` of the units with all their floors (None when the floors
        alone do not fit)."""
        n = len(self.order)
        while True:
            level = _water_level(self.sizes, self.values, room)
            if self.done == n or (level is not None and level >= self.sizes[self.order[self.done]]):
                return level
            self._compute(min(n, max(8, 2 * self.done)))


_ARGS = object()  # in a text's place: what follows is a path inside JSON-text arguments


def _json_strings(value: Any) -> list[tuple[tuple, str]]:
    """``(path, text)`` of every non-empty string inside a JSON value (object values and
    array items at any depth, or the value itself), without recursion."""
    out: list[tuple[tuple, str]] = []
    stack: list[tuple[tuple, Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if item:
                out.append((path, item))
        elif isinstance(item, dict):
            stack.extend(((*path, k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(item))))
    return out


def _set_in(value: Any, path: tuple, new: Any) -> Any:
    """``value`` with the item at ``path`` replaced by ``new`` (in place; the root when empty)."""
    if not path:
        return new
    target = value
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return value


class _Part:
    """The truncatable texts of one unit of the request (the system prompt, or one
    provider message) and how to put shortened texts back, on a copy.

    Tool-call arguments are cut string by string wherever the strings are nested (an
    object's values, a list of edits, an array, a bare JSON string), so the keys, the
    lists and the JSON itself stay whole and valid; only arguments that are not JSON at
    all are cut as plain text."""

    def __init__(self, unit: Any):
        self.unit = unit
        self.texts: list[str] = []
        self.in_json: list[bool] = []  # a value inside JSON arguments: counted as encoded
        self._places: list[tuple] = []
        if isinstance(unit, str):
            self._add(unit, ())
            return
        content = unit.get("content")
        if isinstance(content, str):
            self._add(content, ("content",))
        elif isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, str):
                    self._add(part, ("content", j))
                elif isinstance(part, dict) and isinstance(part.get("text"), str):
                    self._add(part["text"], ("content", j, "text"))
                elif isinstance(part, dict):
                    self._add_block(part, ("content", j))
        for k, call in enumerate(unit.get("tool_calls") or ()):
            if not isinstance(call, dict):
                continue
            fn = call.get("function")
            holder, base = (fn, ("tool_calls", k, "function")) if isinstance(fn, dict) else (call, ("tool_calls", k))
            args = holder.get("arguments")
            if not isinstance(args, str):
                continue
            try:
                parsed = json.loads(args)
            except ValueError:
                self._add(args, (*base, "arguments"))  # not JSON: plain text
                continue
            for path, text in _json_strings(parsed):
                self._add(text, (*base, "arguments", _ARGS, *path), in_json=True)

    def _add_block(self, block: dict, place: tuple) -> None:
        """The texts of an Anthropic ``tool_result`` (its content) or ``tool_use`` block (the
        strings of its input, at any depth). Thinking blocks are never cut: the API checks
        their signature, so they are part of the unit's fixed cost."""
        kind = block.get("type")
        if kind == "tool_result":
            inner = block.get("content")
            if isinstance(inner, str):
                self._add(inner, (*place, "content"))
            elif isinstance(inner, list):
                for k, sub in enumerate(inner):
                    if isinstance(sub, dict) and isinstance(sub.get("text"), str):
                        self._add(sub["text"], (*place, "content", k, "text"))
        elif kind == "tool_use" and isinstance(block.get("input"), (dict, list)):
            for path, text in _json_strings(block["input"]):
                self._add(text, (*place, "input", *path), in_json=True)

    def _add(self, text: str, place: tuple, *, in_json: bool = False) -> None:
        if text:
            self.texts.append(text)
            self.in_json.append(in_json)
            self._places.append(place)

    def counters(self, count: Callable[[str], int]) -> list[Callable[[str], int]]:
        """How to count each text as the estimate sees it (a JSON value with its escapes)."""
        encoded = lambda text: count(json_string(text))  # noqa: E731
        return [encoded if in_json else count for in_json in self.in_json]

    def rebuilt(self, texts: list[str]) -> Any:
        """The unit with ``texts`` in place of its own (a copy; JSON arguments re-encoded)."""
        if isinstance(self.unit, str):
            return texts[0]
        out = copy.deepcopy(self.unit)
        arguments: dict[int, list] = {}  # id(holder) -> [holder, parsed arguments]
        for place, old, new in zip(self._places, self.texts, texts, strict=True):
            if new is old:
                continue
            if _ARGS in place:  # one string inside JSON-text arguments
                at = place.index(_ARGS)
                holder = _get(out, place[: at - 1])
                entry = arguments.setdefault(id(holder), [holder, json.loads(holder["arguments"])])
                entry[1] = _set_in(entry[1], place[at + 1:], new)
            else:
                _set_in(out, place, new)
        for holder, parsed in arguments.values():
            holder["arguments"] = json.dumps(parsed, ensure_ascii=False)
        return out


def _get(value: Any, path: tuple) -> Any:
    for step in path:
        value = value[step]
    return value


def fit_request(
    system_prompt: str,
    messages: Sequence[dict],
    tools: Sequence[dict] | None,
    budget: int,
    *,
    model: str | None = None,
    estimator: Estimator | None = None,
    system_tokens: int | None = None,
    tools_tokens: int | None = None,
    message_tokens: Sequence[int] | None = None,
    carried: CarriedCuts | None = None,
) -> FittedRequest:
    """Fit ``system_prompt`` + ``tools`` + ``messages`` (provider messages) into ``budget``
    tokens by truncating the oversized parts (module docstring).

    ``system_tokens`` / ``tools_tokens`` / ``message_tokens`` (one per message) are the
    estimates when the caller already has them; they must be what ``estimator`` says.
    ``carried``: the cuts one session's earlier requests were sent with (:class:`CarriedCuts`),
    kept while the request fits with them, and updated in place.
    """
    est = estimator or default_estimator()
    count = lambda text: est.text_tokens(text, model)  # noqa: E731

    def size(unit: Any) -> int:
        if isinstance(unit, str):
            return est.message_tokens({"role": "system", "content": unit}, model) if unit else 0
        return est.message_tokens(unit, model)

    messages = list(messages)
    tools_t = tools_tokens if tools_tokens is not None else (est.tools_tokens(list(tools), model) if tools else 0)
    units: list[Any] = [system_prompt, *messages]
    sizes = [
        system_tokens if system_tokens is not None else size(system_prompt),
        *(message_tokens if message_tokens is not None else map(size, messages)),
    ]
    total = tools_t + sum(sizes)
    if total <= budget:
        if carried is not None:
            carried.clear()
        return FittedRequest(system_prompt, messages, total, budget)
    if carried is not None:
        kept = carried.apply(units, sizes, tools_t, budget)
        if kept is not None:
            return kept
    floors = _Floors(units, sizes, count)
    known = lambda text, in_json: known_cuts(text, est, model, in_json)  # noqa: E731
    rebuilt = lambda old, new: remember_rebuilt(old, new, est, model)  # noqa: E731
    room = budget - tools_t
    if floors.level(room) is None:
        if carried is not None:
            carried.clear()
        return FittedRequest(
            system_prompt, messages, total, budget,
            overflow=_overflow(budget, tools_t, sum(floors.values), len(messages)),
        )
    shrink = lambda i, target: _shrink(floors.parts[i], target, size, count, known, rebuilt)  # noqa: E731
    headroom = int(budget * carried.headroom) if carried is not None else 0
    fitted = None
    if headroom:  # below the budget where the floors allow (else it overflows: fitted to the budget)
        fitted, fitted_sizes = _fit_units(units, sizes, floors, tools_t, budget - headroom, shrink, size)
        fitted.budget = budget
    if fitted is None or not fitted.fits:
        fitted, fitted_sizes = _fit_units(units, sizes, floors, tools_t, budget, shrink, size)
    if carried is not None:
        carried.remember(units, fitted, fitted_sizes)
    return fitted


def _fit_units(
    units: list[Any], sizes: list[int], floors: _Floors, tools_t: int, budget: int,
    shrink: Callable[[int, int], Any], size: Callable[[Any], int],
) -> tuple[FittedRequest, list[int]]:
    """The units cut by water level until they fit ``budget``, and their sizes as cut (or,
    when the attempts run out, the request as it came with its overflow)."""
    room = budget - tools_t
    total = tools_t + sum(sizes)
    slack = 0
    truncated = 0
    for _ in range(_ATTEMPTS):
        level = floors.level(room - slack)
        if level is None:
            break
        fitted_units, fitted_sizes, truncated = list(units), list(sizes), 0
        for i, s in enumerate(sizes):
            if s > level and floors.parts[i].texts:
                fitted_units[i] = shrink(i, max(level, floors.values[i]))
                fitted_sizes[i] = size(fitted_units[i])
                truncated += 1
        total = tools_t + sum(fitted_sizes)
        if total <= budget:
            return FittedRequest(fitted_units[0], fitted_units[1:], total, budget, truncated), fitted_sizes
        slack += total - budget
    return FittedRequest(
        units[0], units[1:], total, budget, truncated,
        overflow=_overflow(budget, tools_t, total - tools_t, len(units) - 1),
    ), sizes


def _shrink(
    part: _Part, target: int, size: Callable[[Any], int], count: Callable[[str], int],
    known: Callable[[str, bool], KnownCuts | None] = lambda text, in_json: None,
    rebuilt: Callable[[Any, Any], None] = lambda old, new: None,
) -> Any:
    """``part``'s unit with its texts cut (largest first, by water level) so that the
    unit's estimate is at most ``target`` where the markers allow. ``known``: a text's
    pieces (``truncate_text``); ``rebuilt``: told each rebuilt unit before it is measured
    (``_cut_counts.remember_rebuilt``)."""
    counters = part.counters(count)
    texts_t, floors = _text_sizes(part, count)
    fixed = max(0, size(part.unit) - sum(texts_t))
    slack = 0
    best = part.unit
    for _ in range(_ATTEMPTS):
        level = _water_level(texts_t, floors, target - fixed - slack)
        if level is None:
            level = 0  # markers only: as small as this unit gets
        texts = [
            truncate_text(t, max(level, f), counter, known=known(t, in_json)) if n > level else t
            for t, n, f, counter, in_json in zip(part.texts, texts_t, floors, counters, part.in_json, strict=True)
        ]
        best = part.rebuilt(texts)
        rebuilt(part.unit, best)
        used = size(best)
        if used <= target or level == 0:
            return best
        slack += used - target
    return best


def _text_sizes(part: _Part, count: Callable[[str], int]) -> tuple[list[int], list[int]]:
    """Each text's tokens, and what it costs cut down to a marker (its floor)."""
    sizes, floors = [], []
    for text, counter in zip(part.texts, part.counters(count), strict=True):
        n = counter(text)
        sizes.append(n)
        floors.append(min(n, counter(TRUNCATION_MARKER.format(n=n)) + 1))
    return sizes, floors


def _overflow(budget: int, tools: int, least: int, messages: int) -> str:
    return (
        f"the request cannot fit the input budget of {budget} tokens (the window minus the "
        f"output reserve): the tool schemas take {tools} tokens and the system prompt and "
        f"{messages} messages need at least {least} more even with every oversized part "
        "truncated; compact the session, send fewer tools, or use a model with a larger window"
    )
