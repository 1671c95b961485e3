"""Which older messages are still referred to by later ones (spec §3.3).

A message *i* is **cited** when one of its distinctive strings occurs (as a substring) in
the text of a later message *j > i*. Aging never redacts a cited tool result, and the
summariser can tell which folded messages the tail still leans on.

Distinctive strings (``extract_distinctive``)
=============================================
Four regexes over ``message_text(msg)`` (content, text blocks, tool-call names and
arguments, tool_use inputs, tool_result contents), in this priority order:

==============  =================================  =======================================
kind            regex                              kept when
==============  =================================  =======================================
path            ``[A-Za-z0-9_./-]+/[A-Za-z0-9_./-]+``  length >= 8 and >= 3 alphanumerics
hex / number    ``[a-f0-9]{6,}`` | ``[0-9]{6,}``   has a digit (``decade``, ``facade`` are
                                                   words, not ids)
backtick        ``\\`([^\\`\\n]{3,40})\\```            3-40 characters, no backtick/newline
                                                   inside (the spec's ``.{3,40}`` would
                                                   run across two quoted spans)
CamelCase       ``[A-Z][A-Za-z0-9]{3,}``           has a lower-case letter *and* a second
                                                   capital or a digit: ``ParseConfig``,
                                                   ``Python3``; a capitalised English word
                                                   (``Running``) or an acronym (``HTTP``)
                                                   is not an identifier
==============  =================================  =======================================

Stop-words (``STOP_WORDS``, compared case-insensitively) are dropped: ``the``, ``and``,
``True``, ``False``, ``TextContent``, ``AssistantMessage``... Duplicates are dropped, and at
most ``MAX_DISTINCTIVE`` (32) are kept per message: paths first, then ids, backtick
snippets, CamelCase, each kind in order of first appearance.

Finding references without the quadratic scan
=============================================
The specification's scan checks every pair (i, j): O(n^2 * 32) substring searches.
``ReferenceTracker`` visits each message once and keeps an **anchor index** of the
distinctive strings of the messages not cited yet: ``anchor -> string -> [sources]``.
A new message's text is tokenised once (the four regexes, which also give its own
distinctive strings, and its ASCII alphanumeric words ``[A-Za-z0-9]+``); the anchors
that occur among its *lookup keys* give the candidate strings, and each candidate is
verified with ``s in text`` (C speed), so there are never false positives. The anchor of
a string is chosen by tier:

1. **An interior word** of ``s`` (a word bounded inside ``s`` by non-alphanumeric
   characters on both sides), or a pair of consecutive interior words when there are
   two or more (a pair is far more selective than ``src`` or ``main``); among several
   candidates, the one with the fewest strings filed under it, then the longest. Wherever ``s`` occurs, that word occurs as a *complete* word,
   because the characters around it belong to ``s`` (and two interior words occur as
   consecutive words). Lookup keys: the words of the new text and the pairs of
   consecutive words. **Exact.** (Most paths and multi-word snippets.)
2. **The first camel hump** of a CamelCase string with at least two humps
   (``Behavior`` for ``BehaviorMatch``), or the pair of its first two humps when it has
   three or more (``("Parse", "Config")`` for ``ParseConfigError``: the second hump is
   interior, so it is split the same way wherever the string occurs). Such a string can only occur inside a CamelCase
   match of the later text (the regex starts at every capital and runs to the end of the
   alphanumeric run, and the string itself satisfies its look-aheads), and the hump
   tokeniser splits that match at the same place (a capital followed by lower-case
   letters always starts a hump). Lookup keys: the humps of the new text's CamelCase
   matches (``TestBehaviorMatching`` -> ``Test``, ``Behavior``, ``Matching``). **Exact.**
3. **The string itself** for a hex id / number: it can only occur inside a maximal
   ``[a-f0-9]`` run of the later text, which the hex regex returns. Lookup keys: those
   runs plus their prefixes and suffixes of >= 6 characters (a short commit id inside a
   full one). *Misses* an id strictly inside a longer run on both sides.
4. **The longest word** of anything else (a one-word backtick snippet such as
   ``parse_config``, a two-word path with no interior word). Lookup key: the complete
   words of the new text. *Misses* the string when that word is glued to more letters in
   the later text (``parse_config`` inside ``parse_configuration``: ``config`` is the anchor).

A string with no ASCII alphanumeric at all (a Chinese backtick snippet) has no anchor and
is checked directly against every new message until it is found (exact; such strings
are few). Tiers 3 and 4 are the only approximations. On the real-transcript corpus the tracker and
``_quadratic_reference_scan`` (the specification's algorithm, kept for this purpose) cite
exactly the same messages in all 16 sessions with provider usage; the tests check
agreement on synthetic histories and on hand-made near misses.

When a message is cited, all of its strings leave the index (the specification's early
exit: a cited message is not checked again), and a string found in a new message cites
every uncited holder at once. So the index holds only strings that have not recurred,
and the per-message cost is one tokenising pass over its text plus the candidate checks:
about linear in its length.

``quoted_snippets_by_msg[id]`` holds the strings of message ``id`` found in the *first*
message that cited it (the citing check stops there, as in the specification).
``cited_tool_use_ids`` holds the tool_use ids answered by cited messages (``role="tool"``
messages and tool-result wrappers). Messages without an ``id`` are keyed ``"#<index>"``.

``add(message)`` updates the map incrementally; ``build(history)`` starts over;
``update(history)`` adds only what is new when ``history`` extends the messages already
seen (same ids in the same order), else rebuilds. Thread safety: one tracker per session;
the engine serialises ``prepare`` per session.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opctx.dag.messages import message_text, tool_result_ids

from .types import ReferenceMap

__all__ = [
    "MAX_DISTINCTIVE",
    "STOP_WORDS",
    "ReferenceTracker",
    "extract_distinctive",
    "build_reference_map",
    "_quadratic_reference_scan",
]

MAX_DISTINCTIVE = 32

# The spec's regexes, with a look-behind that starts a match only at the start of a run of
# its characters: the matches are the same (a greedy match that fails at a run's start
# fails at every later start inside that run), but a long run is scanned once, not once
# per character. ``[0-9]{6,}`` is a subset of ``[a-f0-9]{6,}`` and folds into it.
_PATH = re.compile(r"(?<![A-Za-z0-9_./-])[A-Za-z0-9_./-]+/[A-Za-z0-9_./-]+")
_HEX_ID = re.compile(r"(?<![a-f0-9])[a-f0-9]{6,}")
_BACKTICK = re.compile(r"`([^`\n]{3,40})`")
# [A-Z][A-Za-z0-9]{3,} restricted (by look-aheads, so the filter runs in C) to runs holding
# a lower-case letter and a second capital or a digit
_CAMEL = re.compile(r"[A-Z](?=[A-Za-z0-9]*?[a-z])(?=[A-Za-z0-9]*?[A-Z0-9])[A-Za-z0-9]{3,}")
_ALNUM = re.compile(r"[A-Za-z0-9]")
_DIGIT = re.compile(r"[0-9]")
_WORD = re.compile(r"[A-Za-z0-9]+")
_HEX_FULL = re.compile(r"[a-f0-9]{6,}")
# the first camel hump of a CamelCase string: a capital and its lower-case run
_FIRST_HUMP = re.compile(r"[A-Z][a-z]+")
# camel humps and letter/digit runs inside a word: "ParseConfig2Error" -> Parse|Config|2|Error
_HUMP = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_ASCII_SEPARATORS = str.maketrans({chr(i): " " for i in range(128) if not chr(i).isalnum()})

STOP_WORDS = frozenset(
    w.lower()
    for w in """
    the and for with that this from into then than when where which while what there their
    true false none null undefined nil self cls args kwargs return returns
    TextContent AssistantMessage UserMessage SystemMessage ToolMessage ToolResult ToolUse
    ToolCall FunctionCall ImageContent ContentBlock TextBlock
    TypeError ValueError KeyError IndexError AttributeError RuntimeError ImportError
    Exception Traceback Error Warning String Object Array Number Integer Boolean Optional
    Union Dict List Tuple Callable Iterable Sequence Mapping Any
    GitHub JavaScript TypeScript README TODO FIXME
    """.split()
)


def _keep_path(s: str) -> bool:
    return len(s) >= 8 and len(_ALNUM.findall(s)) >= 3


def _keep_hex(s: str) -> bool:
    return _DIGIT.search(s) is not None


def _keep_snippet(s: str) -> bool:
    return s.strip() != ""


def _always(s: str) -> bool:
    return True


@dataclass
class _Tokens:
    """The raw regex matches of one text, computed once, used to extract and to look up."""

    paths: list[str]
    hexes: list[str]
    snippets: list[str]
    camels: list[str]


def _tokens(text: str) -> _Tokens:
    return _Tokens(_PATH.findall(text), _HEX_ID.findall(text), _BACKTICK.findall(text), _CAMEL.findall(text))


def _select(tok: _Tokens, limit: int) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for candidates, keep in (
        (tok.paths, _keep_path),
        (tok.hexes, _keep_hex),
        (tok.snippets, _keep_snippet),
        (tok.camels, _always),
    ):
        # dict.fromkeys: de-duplicate in C, keep first-appearance order
        for s in dict.fromkeys(candidates):
            if s in seen or s.lower() in STOP_WORDS or not keep(s):
                continue
            seen.add(s)
            out.append(s)
            if len(out) >= limit:
                return out
    return out


def extract_distinctive(text: str, limit: int = MAX_DISTINCTIVE) -> list[str]:
    """The distinctive strings of ``text`` (module docstring), at most ``limit``."""
    if not text:
        return []
    return _select(_tokens(text), limit)


# ------------------------------------------------------------------------------ anchors


Anchor = str | tuple[str, str]


def _anchor(s: str, rarity: Callable[[Anchor], int] | None = None) -> Anchor | None:
    """The lookup key a string is filed under (module docstring, tiers 1-4).

    Tier 1 candidates are the pairs of consecutive interior words when there are two or
    more interior words (far more selective than one word), else the interior word. The
    candidate with the fewest strings already filed under it wins (``rarity``), then the
    longest: this spreads strings over many small buckets and keeps the candidate list
    of each lookup short.
    """
    words = list(_WORD.finditer(s))
    if not words:
        return None
    interior = [w.group(0) for w in words if w.start() > 0 and w.end() < len(s)]
    if interior:  # tier 1: exact
        candidates: list[Anchor] = list(zip(interior, interior[1:], strict=False)) or interior
        if rarity is None or len(candidates) == 1:
            return max(candidates, key=_anchor_length)
        return min(candidates, key=lambda a: (rarity(a), -_anchor_length(a)))
    if _CAMEL.fullmatch(s):
        hump = _FIRST_HUMP.match(s)
        if hump and hump.end() < len(s):  # tier 2: exact
            # with a third hump the second is interior too: the pair is far more selective
            humps = list(_HUMP.finditer(s, hump.end()))
            if len(humps) >= 2:
                return (hump.group(0), humps[0].group(0))
            return hump.group(0)
    if _HEX_FULL.fullmatch(s):  # tier 3: the string itself
        return s
    return max((w.group(0) for w in words), key=len)  # tier 4: longest edge word


def _anchor_length(anchor: Anchor) -> int:
    return len(anchor) if isinstance(anchor, str) else len(anchor[0]) + len(anchor[1])


def _words(text: str) -> list[str]:
    if text.isascii():
        return text.translate(_ASCII_SEPARATORS).split()
    return _WORD.findall(text)


def _lookup_keys(text: str, tok: _Tokens) -> set[Anchor]:
    """Every key under which a string occurring in ``text`` can be filed."""
    words = _words(text)
    keys: set[Anchor] = set(words)
    keys.update(zip(words, words[1:], strict=False))
    for camel in set(tok.camels):
        humps = _HUMP.findall(camel)
        keys.update(humps)
        keys.update(zip(humps, humps[1:], strict=False))
    for run in set(tok.hexes):
        # the run itself is a word or part of one; add its prefixes and suffixes (>= 6)
        n = len(run)
        if n > 6:
            keys.update([run[:k] for k in range(6, n)] + [run[k:] for k in range(1, n - 5)])
        keys.add(run)
    return keys


@dataclass
class _Source:
    key: str
    index: int
    tool_use_ids: list[str]
    strings: list[str]
    cited: bool = False


@dataclass
class _State:
    # anchor -> distinctive string -> the uncited messages holding it (oldest first)
    index: dict[Anchor, dict[str, list[_Source]]] = field(default_factory=dict)
    # strings with no ASCII word at all (e.g. a CJK backtick snippet): checked directly
    unanchored: dict[str, list[_Source]] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)


_MISSING: Any = object()


def _message_key(msg: Any, index: int) -> str:
    mid = msg.get("id") if isinstance(msg, dict) else getattr(msg, "id", None)
    return str(mid) if mid else f"#{index}"


def _as_dict(msg: Any) -> dict:
    if isinstance(msg, dict):
        return msg
    if hasattr(msg, "role") and hasattr(msg, "metadata"):
        from opctx.dag.messages import call_to_message

        return call_to_message(msg)
    raise TypeError(f"reference tracking needs message dicts, got {type(msg).__name__}")


class ReferenceTracker:
    """Incremental ``ReferenceMap`` builder (module docstring). ``clock`` stamps the map."""

    def __init__(self, clock: Callable[[], float] = time.time, limit: int = MAX_DISTINCTIVE):
        self.clock = clock
        self.limit = limit
        self.reset()

    def reset(self) -> None:
        self._state = _State()
        self._anchor_cache: dict[str, Anchor | None] = {}
        self.map = ReferenceMap(last_built_at=self.clock())

    @property
    def message_count(self) -> int:
        return len(self._state.keys)

    # ------------------------------------------------------------------ building
    def build(self, history: Iterable[Any]) -> ReferenceMap:
        """A fresh map for ``history``."""
        self.reset()
        for msg in history:
            self._add(msg)
        self.map.last_built_at = self.clock()
        return self.map

    def update(self, history: Sequence[Any]) -> ReferenceMap:
        """Add the new tail of ``history`` if it extends what was seen, else rebuild."""
        keys = self._state.keys
        n = len(keys)
        if n <= len(history) and all(_message_key(history[i], i) == keys[i] for i in (0, n - 1) if 0 <= i < n):
            # cheap prefix check on both ends; ids are unique per branch
            for msg in history[n:]:
                self._add(msg)
            self.map.last_built_at = self.clock()
            return self.map
        return self.build(history)

    def add(self, message: Any) -> ReferenceMap:
        """Fold one new message in (it may cite earlier ones)."""
        self._add(message)
        self.map.last_built_at = self.clock()
        return self.map

    def _add(self, message: Any) -> None:
        msg = _as_dict(message)
        state = self._state
        index = len(state.keys)
        key = _message_key(msg, index)
        state.keys.append(key)
        text = message_text(msg)
        if not text:
            return
        tok = _tokens(text)
        self._scan(text, tok)
        strings = _select(tok, self.limit)
        if not strings:
            return
        source = _Source(key, index, tool_result_ids(msg), strings)
        anchor_of = self._anchor_cache
        for s in strings:
            anchor = anchor_of.get(s, _MISSING)
            if anchor is _MISSING:
                if len(anchor_of) > 500_000:
                    anchor_of.clear()
                anchor = anchor_of[s] = _anchor(s, self._bucket_size)
            bucket = state.unanchored if anchor is None else state.index.setdefault(anchor, {})
            bucket.setdefault(s, []).append(source)

    def _bucket_size(self, anchor: Anchor) -> int:
        bucket = self._state.index.get(anchor)
        return len(bucket) if bucket else 0

    def _scan(self, text: str, tok: _Tokens) -> None:
        state = self._state
        index = state.index
        hits: list[tuple[dict[str, list[_Source]], str]] = []
        for anchor in index.keys() & _lookup_keys(text, tok):
            bucket = index[anchor]
            hits.extend((bucket, s) for s in [s for s in bucket if s in text])
        if state.unanchored:
            hits.extend((state.unanchored, s) for s in [s for s in state.unanchored if s in text])
        if not hits:
            return
        found: dict[int, tuple[_Source, list[str]]] = {}
        for bucket, s in hits:
            for src in bucket.get(s, ()):
                found.setdefault(id(src), (src, []))[1].append(s)
        for src, strings in found.values():
            self._cite(src, strings)

    def _cite(self, source: _Source, found: list[str]) -> None:
        """Mark ``source`` cited and take all its strings out of the index (early exit)."""
        source.cited = True
        m = self.map
        m.cited_message_ids.add(source.key)
        m.cited_tool_use_ids.update(source.tool_use_ids)
        m.quoted_snippets_by_msg[source.key] = set(found)
        state = self._state
        for s in source.strings:
            anchor = self._anchor_cache.get(s, _MISSING)
            if anchor is _MISSING:
                anchor = _anchor(s)
            bucket = state.unanchored if anchor is None else state.index.get(anchor)
            holders = bucket.get(s) if bucket is not None else None
            if holders is None:
                continue
            holders = [h for h in holders if h is not source]
            if holders:
                bucket[s] = holders
            else:
                del bucket[s]
                if anchor is not None and not bucket:
                    del state.index[anchor]

    # ------------------------------------------------------------------ queries
    def is_cited(self, msg_id: str | None = None, tool_use_id: str | None = None) -> bool:
        return self.map.is_cited(msg_id, tool_use_id)


def build_reference_map(history: Iterable[Any], clock: Callable[[], float] = time.time) -> ReferenceMap:
    """One-shot ``ReferenceTracker(clock).build(history)``."""
    return ReferenceTracker(clock).build(history)


def _quadratic_reference_scan(history: Sequence[Any], limit: int = MAX_DISTINCTIVE) -> ReferenceMap:
    """The specification's O(n^2) scan, kept as the reference for tests and benchmarks.

    For each pair i < j, message i is cited when one of its distinctive strings occurs in
    the text of message j; the first citing j wins and i is not checked again.
    """
    msgs = [_as_dict(m) for m in history]
    texts = [message_text(m) for m in msgs]
    strings = [extract_distinctive(t, limit) for t in texts]
    result = ReferenceMap(last_built_at=time.time())
    for i, own in enumerate(strings):
        if not own:
            continue
        for j in range(i + 1, len(msgs)):
            found = [s for s in own if s in texts[j]]
            if found:
                key = _message_key(msgs[i], i)
                result.cited_message_ids.add(key)
                result.cited_tool_use_ids.update(tool_result_ids(msgs[i]))
                result.quoted_snippets_by_msg[key] = set(found)
                break
    return result
