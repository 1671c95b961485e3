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

# The spec's regexes. The path regex starts a match only at the start of a run of its
# characters (look-behind): the matches are the same (a greedy match that fails at a run's
# start fails at every later start inside that run), but a long run without "/" is scanned
# once, not once per character. ``[0-9]{6,}`` is a subset of ``[a-f0-9]{6,}`` and folds
# into it; ``[a-f0-9]{6,}`` needs no look-behind (a run of six or more is taken whole at
# its start, a shorter run fails within five characters at each start).
_PATH = re.compile(r"(?<![A-Za-z0-9_./-])[A-Za-z0-9_./-]+/[A-Za-z0-9_./-]+")
_HEX_ID = re.compile(r"[a-f0-9]{6,}")
_BACKTICK = re.compile(r"`([^`\n]{3,40})`")
# [A-Z][A-Za-z0-9]{3,} restricted (by look-aheads, so the filter runs in C) to runs holding
# a lower-case letter and a second capital or a digit. Within one alphanumeric run only its
# first capital can start a match (the look-aheads only get harder further right, and a
# match runs to the end of the run), but this fast form retries every later capital, each
# scan running to the end of the trailing [A-Z0-9] stretch: quadratic in that stretch.
_CAMEL = re.compile(r"[A-Z](?=[A-Za-z0-9]*?[a-z])(?=[A-Za-z0-9]*?[A-Z0-9])[A-Za-z0-9]{3,}")
# The same matches, one attempt per run (look-behind + possessive skip to the run's first
# capital): linear, but about three times slower on ordinary text. Used for texts with a
# word of _LONG_WORD characters or more, where the fast form could go quadratic.
_CAMEL_LINEAR = re.compile(
    r"(?<![A-Za-z0-9])[a-z0-9]*+([A-Z](?=[A-Za-z0-9]*?[a-z])(?=[A-Za-z0-9]*?[A-Z0-9])[A-Za-z0-9]{3,})"
)
_LONG_WORD = 64

# lookup vocabulary: "words" are maximal runs of ASCII [A-Za-z0-9_]
_WORD = re.compile(r"[A-Za-z0-9_]+")
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_NON_WORD_TO_SPACE = str.maketrans({chr(i): " " for i in range(128) if chr(i) not in _WORD_CHARS})
# tier 2: a capital, its lower-case run and the next character, which is a capital or digit
_HUMP_START = re.compile(r"([A-Z][a-z]++)([A-Z0-9])[A-Za-z0-9]*")
_HUMP_KEYS = re.compile(r"([A-Z][a-z]++)(?=([A-Z0-9]))")
_HEX_FULL = re.compile(r"[a-f0-9]{6,}")
_WINDOW = 6

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


def _words(text: str) -> list[str]:
    """The maximal ASCII ``[A-Za-z0-9_]`` runs of ``text``, in order (C speed for ASCII)."""
    if text.isascii():
        return text.translate(_NON_WORD_TO_SPACE).split()
    return _WORD.findall(text)


class _Tokens:
    """One pass of the regexes over a text, used both to extract and to look up."""

    __slots__ = ("words", "paths", "hexes", "snippets", "camels")

    def __init__(self, text: str):
        self.words = words = _words(text)
        self.paths = _PATH.findall(text) if "/" in text else []
        self.hexes = _HEX_ID.findall(text)
        self.snippets = _BACKTICK.findall(text) if "`" in text else []
        long_word = bool(words) and max(map(len, words)) >= _LONG_WORD
        self.camels = [] if not words else (_CAMEL_LINEAR if long_word else _CAMEL).findall(text)


def _select(tok: _Tokens, limit: int) -> list[str]:
    """Filter, de-duplicate and cap the raw matches (module docstring, in priority order).

    Paths and ids skip the stop-word and cross-kind duplicate checks: no stop word holds a
    "/" or is a hex id with a digit (``tests/test_references.py`` checks), and a path
    (with "/") never equals an id (without).
    """
    out: list[str] = []
    # dict.fromkeys: de-duplicate in C, keep first-appearance order
    for s in dict.fromkeys(tok.paths):
        # >= 3 alphanumerics: every path character but _./- is one
        if len(s) >= 8 and len(s) - s.count("/") - s.count(".") - s.count("_") - s.count("-") >= 3:
            out.append(s)
            if len(out) >= limit:
                return out
    for s in dict.fromkeys(tok.hexes):
        if not s.isalpha():  # has a digit: "decade", "facade" are words
            out.append(s)
            if len(out) >= limit:
                return out
    seen = set(out)
    for candidates in (tok.snippets, tok.camels):
        for s in dict.fromkeys(candidates):
            if s in seen or s.lower() in STOP_WORDS or (candidates is tok.snippets and not s.strip()):
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
    return _select(_Tokens(text), limit)


# ------------------------------------------------------------------------------ anchors

# An anchor is a word (tiers 1 and 4), a (hump, next character) pair (tier 2), a
# six-character window (tier 3) or a single character (strings without an ASCII word).
# All live in one table: a window or a character that happens to equal a word only costs
# an extra ``s in text`` check, never a wrong citation.
Anchor = str | tuple[str, str]


def _anchor(s: str, rarity: Callable[[Anchor], int]) -> Anchor:
    """The key a string is filed under (module docstring, tiers 1-4).

    Tier 1 takes the longest interior word: a long word (``build_as_graph``) occurs in far
    fewer texts than a short one (``src``), so its bucket is touched less often.
    """
    words = _words(s)
    if not words:  # no ASCII word character: filed under its rarest character
        return min(sorted(set(s)), key=rarity)
    interior = words[1:] if s[0] in _WORD_CHARS else words
    if interior and s[-1] in _WORD_CHARS:
        interior = interior[:-1]
    if interior:  # tier 1
        return max(interior, key=len)
    hump = _HUMP_START.match(s)
    if hump and hump.end() >= 4:  # tier 2: the run is long enough to be a CamelCase match
        return (hump[1], hump[2])
    if _HEX_FULL.fullmatch(s) and not s.isalpha():  # tier 3: a hex id with a digit
        return s[-_WINDOW:]  # the last window: numbers that share a prefix differ at the end
    return max(words, key=len)  # tier 4: the longest (edge) word


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


class _Source:
    """A message holding distinctive strings; ``cited`` once a later message quoted one."""

    __slots__ = ("key", "tool_use_ids", "strings", "cited")

    def __init__(self, key: str, tool_use_ids: list[str], strings: list[str]):
        self.key = key
        self.tool_use_ids = tool_use_ids
        self.strings = strings
        self.cited = False


class ReferenceTracker:
    """Incremental ``ReferenceMap`` builder (module docstring). ``clock`` stamps the map."""

    # anchors are remembered per string: a string that recurs is filed again after every
    # citation. The memo is dropped past this many strings (it only saves work).
    _ANCHOR_MEMO_MAX = 500_000
    # strings of cited messages are left in the table (lazy deletion) until they are seen
    # again or the table is compacted, once they outnumber the live ones by this much
    _STALE_SLACK = 5_000

    def __init__(self, clock: Callable[[], float] = time.time, limit: int = MAX_DISTINCTIVE):
        self.clock = clock
        self.limit = limit
        self.reset()

    def reset(self) -> None:
        # anchor -> the filed strings; string -> the messages holding it (oldest first)
        self._table: dict[Anchor, set[str]] = {}
        self._holders: dict[str, list[_Source]] = {}
        self._anchor_memo: dict[str, Anchor] = {}
        self._has_char_anchors = False
        self._sources: list[_Source] = []  # every source since the last compaction
        self._refs = 0  # (string, source) pairs in _holders
        self._live_refs = 0  # of which held by uncited sources
        self._keys: list[str] = []
        self.map = ReferenceMap(last_built_at=self.clock())

    @property
    def message_count(self) -> int:
        return len(self._keys)

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
        keys = self._keys
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
        index = len(self._keys)
        key = _message_key(msg, index)
        self._keys.append(key)
        text = message_text(msg)
        if not text:
            return
        tok = _Tokens(text)
        if self._table:
            self._scan(text, tok)
        strings = _select(tok, self.limit)
        if not strings:
            return
        source = _Source(key, tool_result_ids(msg), strings)
        self._sources.append(source)
        self._refs += len(strings)
        self._live_refs += len(strings)
        holders_of = self._holders
        for s in strings:
            holders = holders_of.get(s)
            if holders is None:
                holders_of[s] = [source]
                self._file(s)
            else:
                holders.append(source)

    def _file(self, s: str) -> None:
        """Put ``s`` in the bucket of its anchor."""
        memo = self._anchor_memo
        anchor = memo.get(s)
        if anchor is None:
            if len(memo) >= self._ANCHOR_MEMO_MAX:
                memo.clear()
            anchor = memo[s] = _anchor(s, self._bucket_size)
        bucket = self._table.get(anchor)
        if bucket is None:
            self._table[anchor] = {s}
            if len(anchor) == 1 and anchor not in _WORD_CHARS:
                self._has_char_anchors = True
        else:
            bucket.add(s)

    def _bucket_size(self, anchor: Anchor) -> int:
        return len(self._table.get(anchor, ()))

    def _scan(self, text: str, tok: _Tokens) -> None:
        """Cite every uncited message with a string that occurs in ``text``."""
        table = self._table
        touched = table.keys() & tok.words
        if tok.camels:
            touched.update(table.keys() & _HUMP_KEYS.findall(" ".join(tok.camels)))
        if tok.hexes:
            windows = [run[i : i + _WINDOW] for run in tok.hexes if not run.isalpha() for i in range(len(run) - _WINDOW + 1)]
            touched.update(table.keys() & windows)
        if self._has_char_anchors:
            touched.update(table.keys() & set(text))
        hits: list[tuple[Anchor, str]] = []
        for anchor in touched:
            for s in table[anchor]:
                if s in text:
                    hits.append((anchor, s))
        if not hits:
            return
        found: dict[int, tuple[_Source, list[str]]] = {}
        for anchor, s in hits:
            bucket = table[anchor]
            bucket.discard(s)
            if not bucket:
                del table[anchor]
            holders = self._holders.pop(s)
            self._refs -= len(holders)
            for src in holders:
                if src.cited:  # a stale entry: cited earlier through another string
                    continue
                entry = found.get(id(src))
                if entry is None:
                    found[id(src)] = (src, [s])
                else:
                    entry[1].append(s)
        m = self.map
        for src, strings in found.values():
            # the early exit: a cited message is not checked again (its other strings stay
            # filed, stale, until they are seen again or the table is compacted)
            src.cited = True
            self._live_refs -= len(src.strings)
            m.cited_message_ids.add(src.key)
            m.cited_tool_use_ids.update(src.tool_use_ids)
            m.quoted_snippets_by_msg[src.key] = set(strings)
        if self._refs - self._live_refs > self._live_refs + self._STALE_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Drop the strings of cited messages: refile those of the uncited ones."""
        live = [src for src in self._sources if not src.cited]
        self._sources = live
        self._table = {}
        self._holders = holders_of = {}
        self._has_char_anchors = False
        for src in live:
            for s in src.strings:
                holders = holders_of.get(s)
                if holders is None:
                    holders_of[s] = [src]
                    self._file(s)
                else:
                    holders.append(src)
        self._refs = self._live_refs = sum(len(src.strings) for src in live)

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
