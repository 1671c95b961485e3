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
``ReferenceTracker`` visits each message once and keeps a table of the distinctive
strings of the messages not cited yet. When a message is cited, all of its strings leave
the table (the specification's early exit: a cited message is not checked again), so the
table holds only strings that have not recurred (2,400 after 10,000 synthetic messages).
There are two implementations of that table; both never cite falsely.

**The compiled core** (``_refscan.c``, built by ``setup.py``; used by default, exact). Every
distinctive string has three characters or more. Each is filed under one of its
three-character windows, its *anchor*; the scan of a new text computes the window at each
position, and a window that anchors a string has that string compared in place. So every
occurrence is found, as in the quadratic scan (the tests compare the whole map, cited ids,
tool ids and snippets, on synthetic histories, random text of mixed widths and the real
corpus). A string is anchored at its window seen least often so far in all the texts
(not under ``src`` or ``the`` when it has a rarer window), which keeps comparisons to
about 60 per message. Extraction is compiled too: one branch-free pass over the code points replaces
the four regexes (equal results, checked by property tests against ``_extract_python``).

**The pure-Python fallback** (``compiled=False``, or where no C compiler was available at
install time). Each string is filed under one **anchor**: a short key that is certain
to be among the *lookup keys* of any later text in which the string occurs. A new text is
tokenised once (the regexes above, which also give its own distinctive strings, plus its
words); the anchors among its lookup keys give the candidate strings, and each candidate
is verified with ``s in text``. "Words" are maximal runs of ASCII ``[A-Za-z0-9_]``. The
anchor of a string is chosen by tier:

1. **An interior word** of ``s`` (bounded inside ``s`` by non-word characters on both
   sides; a snake_case word is preferred, then the longest). Wherever ``s`` occurs, that
   word occurs as a *complete* word, because the characters around it belong to ``s``.
   Lookup keys: the words of the new text. When ``s`` has no interior word but holds a
   snake_case part between two underscores, the anchor is that part, the underscore and
   the next character (``list_r`` for ``one_list_request``); lookup keys: the same
   pattern at every underscore of the new text. **Exact.**
2. **The first camel hump** of a string that starts with a capital, lower-case letters
   and a capital or digit, with the next hump when a third follows (``("Parse",
   "Config")`` for ``ParseConfigError``), else with the next character (``("Behavior",
   "M")`` for ``BehaviorMatch``). Such a string can only occur inside a CamelCase match of
   the later text (the regex starts at the first capital of every alphanumeric run and
   runs to its end, and the string satisfies its look-aheads), where a capital followed
   by lower-case letters always starts a hump. Lookup keys: each hump of the new text's
   CamelCase matches with the next hump and with the next character. **Exact.**
3. **A six-character window** (the last) of a hex id with a digit: it occurs inside a
   maximal ``[a-f0-9]`` run of the later text, which the hex regex returns. Lookup keys:
   every six-character window of those runs. **Exact** (a short commit id anywhere inside
   a full one is found).
4. **The longest word** of anything else (a one-word backtick snippet such as
   ``parse_config``, ``HTTPServer``). Lookup key: the complete words of the new text.
   *Misses* the string when that word is glued to more word characters in the later text
   (``parse_config`` inside ``parse_configuration``). The fallback's only approximation:
   on the real-transcript corpus (all sessions with provider usage, concatenated, 2,364
   messages) it cites 1,416 of the scan's 1,418 messages.

A string with no ASCII word character at all (a Chinese backtick snippet) is filed under
its rarest character, looked up in the set of the new text's characters (exact).

Adversarial text
================
Every step is linear in the text, in both implementations. The spec's CamelCase regex
retries every capital of a run and scans to the run's end each time: quadratic on a long
run of capitals ("T" * 8,000 took 0.9 s); the fallback uses an equivalent
one-attempt-per-run form for a text with a word of 64 characters or more, and takes the
windows of a hex run as its lookup keys, not its prefixes and suffixes (which were
quadratic). Two messages of 200,000 characters each of capitals, hex, a single word, a
path or a CamelCase word take 2-10 ms compiled, 0.02-0.22 s in Python
(``tests/test_references.py`` runs them; ``benchmarks/references.py`` times them).

Cost
====
Measured with ``benchmarks/references.py`` on ``make_history`` (580 text characters per
message, 5.8 MB of text for 10,000) on the shared 2-core machine, medians of 5 (two runs):

=======================  ===============  ===========  ===============
messages                 compiled         pure Python  quadratic scan
=======================  ===============  ===========  ===============
1,000                    0.027-0.033 s    0.22 s       0.42-0.48 s
3,000                    0.077-0.10 s     0.69-0.70 s  2.35-2.5 s
10,000                   0.32-0.36 s      2.2 s        (not run)
real corpus, 2,364       0.09-0.11 s      0.85-0.87 s  0.56-0.64 s
incremental ``add``      0.026-0.028 ms   0.15 ms
=======================  ===============  ===========  ===============

The compiled build of 10,000 messages splits into assembling the texts (0.05-0.07 s), the
core (0.14-0.17 s: extraction, window scan, filing, citing) and the Python around it
(0.11-0.14 s: message keys, tool ids, the map). Its cost per 1,000 messages is flat
(0.027-0.035 s).
The fallback spends about 0.7 s of its 2.2 s in the tokenising regex passes, each near
the floor of CPython's ``re`` over 5.8 MB, and the rest in Python bookkeeping: that is
why the table moved to C rather than to a cleverer index in Python.

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

import operator
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opctx.dag.messages import message_text, tool_result_ids

from .types import ReferenceMap

try:  # the compiled core (setup.py builds it where a C compiler is available)
    from . import _refscan
except ImportError:  # pragma: no cover - exercised by installs without a compiler
    _refscan = None

#: True when the compiled core is importable; ``ReferenceTracker`` uses it by default.
HAVE_COMPILED_CORE = _refscan is not None

__all__ = [
    "HAVE_COMPILED_CORE",
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
# camel humps: "ParseHTTPConfig2" -> Parse|HTTP|Config|2 (each hump is scanned once from
# the hump before it: linear)
_HUMP = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_HUMP_PAIRS = re.compile(r"([A-Z][a-z]++)(?=([A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+))")
# tier 1 inside a snake_case word: an alphanumeric part between two underscores, the
# second underscore and the next character ("one_list_request" -> "list_r")
_SNAKE_KEYS = re.compile(r"_(?=([A-Za-z0-9]+_[A-Za-z0-9]))")
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
    if limit <= 0:
        return out
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
    """The distinctive strings of ``text`` (module docstring), at most ``limit``.

    >>> extract_distinctive("see ParseConfig and `load_settings` in src/app/config.py at 4f3a9c2e")
    ['src/app/config.py', '4f3a9c2e', 'load_settings', 'ParseConfig']
    """
    if not text or limit <= 0:
        return []
    if _refscan is not None:
        return _refscan.extract(text, limit, STOP_WORDS)
    return _select(_Tokens(text), limit)


def _extract_python(text: str, limit: int = MAX_DISTINCTIVE) -> list[str]:
    """``extract_distinctive`` with the regexes: the reference the compiled core is tested against."""
    if not text or limit <= 0:
        return []
    return _select(_Tokens(text), limit)


# ------------------------------------------------------------------------------ anchors

# An anchor is a word (tiers 1 and 4), a (hump, next character) pair (tier 2), a
# six-character window (tier 3) or a single character (strings without an ASCII word).
# All live in one table: a window or a character that happens to equal a word only costs
# an extra ``s in text`` check, never a wrong citation.
Anchor = str | tuple[str, str]


def _interior(s: str, words: list[str]) -> list[str]:
    """The words of ``s`` (in order) minus those touching its ends."""
    interior = words[1:] if s[0] in _WORD_CHARS else words
    if interior and s[-1] in _WORD_CHARS:
        interior = interior[:-1]
    return interior


def _hump_keys(camels: list[str]) -> set[tuple[str, str]]:
    """Tier 2 lookup keys: each hump with the next hump, and with the next character."""
    pairs = _HUMP_PAIRS.findall(" ".join(camels))
    return set(pairs).union([(first, second[0]) for first, second in pairs])


def _anchor(s: str, rarity: Callable[[Anchor], int]) -> Anchor:
    """The key a string is filed under (module docstring, tiers 1-4).

    Tier 1 takes the longest interior word: a long word (``build_as_graph``) occurs in far
    fewer texts than a short one (``src``), so its bucket is touched less often.
    """
    if s.isalnum() and s.isascii():
        # one alphanumeric word (every id, every CamelCase string): no interior word and no
        # "_", so tiers 2-4 decide; skips splitting the string into words
        return _single_word_anchor(s)
    words = _words(s)
    if not words:  # no ASCII word character: filed under its rarest character
        return min(sorted(set(s)), key=rarity)
    interior = _interior(s, words)
    if interior:  # tier 1: a snake_case word if any (rarer than a directory name), longest
        return max([w for w in interior if "_" in w] or interior, key=len)
    if "_" in s:  # tier 1 inside a snake_case word: "one_list_request" -> "list_r"
        inner = _SNAKE_KEYS.findall(s)
        if inner:
            return max(inner, key=len)
    return _single_word_anchor(s, words)


def _single_word_anchor(s: str, words: list[str] | None = None) -> Anchor:
    """Tiers 2-4 for a string without an interior word (``words``: its words if known)."""
    hump = _HUMP_START.match(s)
    if hump and hump.end() >= 4:  # tier 2: the run is long enough to be a CamelCase match
        second = _HUMP.match(s, len(hump[1]))
        if second.end() < len(s):  # the second hump is interior: the pair is exact
            return (hump[1], second[0])
        return (hump[1], hump[2])
    if _HEX_FULL.fullmatch(s) and not s.isalpha():  # tier 3: a hex id with a digit
        return s[-_WINDOW:]  # the last window: numbers that share a prefix differ at the end
    if words is None:
        return s
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
    """A message holding distinctive strings, not cited yet."""

    __slots__ = ("key", "tool_use_ids", "strings")

    def __init__(self, key: str, tool_use_ids: list[str], strings: list[str]):
        self.key = key
        self.tool_use_ids = tool_use_ids
        self.strings = strings


class ReferenceTracker:
    """Incremental ``ReferenceMap`` builder (module docstring). ``clock`` stamps the map.

    ``compiled``: use the compiled core (exact, fast); ``None`` (the default) uses it when
    it is built, ``False`` forces the pure-Python path, ``True`` requires the core.
    """

    # anchors are remembered per string: most strings recur, and are filed again after
    # each citation. The memo is dropped past this many strings (it only saves work).
    _ANCHOR_MEMO_MAX = 500_000

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        limit: int = MAX_DISTINCTIVE,
        compiled: bool | None = None,
    ):
        if compiled and _refscan is None:
            raise RuntimeError("the compiled reference core is not built (no C compiler at install time?)")
        self.clock = clock
        self.limit = limit
        self.compiled = _refscan is not None if compiled is None else compiled
        self.reset()

    def reset(self) -> None:
        # compiled core: the table of uncited strings lives in C; the messages are kept to
        # name the tool_use ids of the ones it reports cited
        self._core = _refscan.Scanner(self.limit, STOP_WORDS) if self.compiled else None
        self._messages: list[dict] = []
        # anchor -> the strings filed under it
        self._table: dict[Anchor, set[str]] = {}
        # string -> (its anchor, the uncited messages holding it, oldest first)
        self._filed: dict[str, tuple[Anchor, list[_Source]]] = {}
        self._anchor_memo: dict[str, Anchor] = {}
        self._has_char_anchors = False
        self._keys: list[str] = []
        self._seen: list[Any] = []  # the messages as given, for update's prefix check
        self.map = ReferenceMap(last_built_at=self.clock())

    # The compiled table cannot be pickled; it is rebuilt from the messages on unpickling
    # (where the core is not built, the pure-Python tables are built instead).
    def __getstate__(self) -> dict:
        return {**self.__dict__, "_core": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if not self.compiled:
            return
        if _refscan is None:
            stamp = self.map.last_built_at
            self.compiled = False
            self.build(self._messages)
            self.map.last_built_at = stamp
            return
        self._core = _refscan.Scanner(self.limit, STOP_WORDS)
        for msg in self._messages:
            self._core.add(message_text(msg))

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
        seen = self._seen
        n = len(seen)
        # C-speed prefix checks: the same objects, else equal copies (the branch re-read
        # from the store); a message edited under its id is a different history
        if n <= len(history) and (all(map(operator.is_, history, seen)) or list(history[:n]) == seen):
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
        self._seen.append(message)
        index = len(self._keys)
        key = _message_key(msg, index)
        self._keys.append(key)
        text = message_text(msg)
        if self._core is not None:
            self._messages.append(msg)
            for cited, found in self._core.add(text):
                self._cite_compiled(cited, found)
            return
        if not text:
            return
        tok = _Tokens(text)
        if self._filed:
            self._scan(text, tok)
        strings = _select(tok, self.limit)
        if not strings:
            return
        source = _Source(key, tool_result_ids(msg), strings)
        filed = self._filed
        memo = self._anchor_memo
        table = self._table
        for s in strings:
            entry = filed.get(s)
            if entry is not None:
                entry[1].append(source)
                continue
            anchor = memo.get(s)
            if anchor is None:
                anchor = self._new_anchor(s)
            filed[s] = (anchor, [source])
            bucket = table.get(anchor)
            if bucket is None:
                table[anchor] = {s}
            else:
                bucket.add(s)

    def _cite_compiled(self, index: int, found: list[str]) -> None:
        m = self.map
        key = self._keys[index]
        m.cited_message_ids.add(key)
        tool_use_ids = tool_result_ids(self._messages[index])
        if tool_use_ids:
            m.cited_tool_use_ids.update(tool_use_ids)
        m.quoted_snippets_by_msg[key] = set(found)

    def _new_anchor(self, s: str) -> Anchor:
        memo = self._anchor_memo
        if len(memo) >= self._ANCHOR_MEMO_MAX:
            memo.clear()
        anchor = memo[s] = _anchor(s, self._bucket_size)
        if len(anchor) == 1 and anchor not in _WORD_CHARS:
            self._has_char_anchors = True
        return anchor

    def _bucket_size(self, anchor: Anchor) -> int:
        return len(self._table.get(anchor, ()))

    def _scan(self, text: str, tok: _Tokens) -> None:
        """Cite every uncited message with a string that occurs in ``text``."""
        table = self._table
        anchors = table.keys()
        touched = anchors & tok.words
        if "_" in text:
            touched.update(anchors & _SNAKE_KEYS.findall(text))
        if tok.camels:
            touched.update(anchors & _hump_keys(tok.camels))
        if tok.hexes:
            windows = [run[i : i + _WINDOW] for run in tok.hexes if not run.isalpha() for i in range(len(run) - _WINDOW + 1)]
            touched.update(anchors & windows)
        if self._has_char_anchors:
            touched.update(anchors & set(text))
        if not touched:
            return
        hits = [s for anchor in touched for s in table[anchor] if s in text]
        if not hits:
            return
        found: dict[int, tuple[_Source, list[str]]] = {}
        filed = self._filed
        for s in hits:
            for src in filed[s][1]:
                entry = found.get(id(src))
                if entry is None:
                    found[id(src)] = (src, [s])
                else:
                    entry[1].append(s)
        for src, strings in found.values():
            self._cite(src, strings)

    def _cite(self, source: _Source, found: list[str]) -> None:
        """Mark ``source`` cited and take all its strings out of the table (early exit)."""
        m = self.map
        m.cited_message_ids.add(source.key)
        if source.tool_use_ids:
            m.cited_tool_use_ids.update(source.tool_use_ids)
        m.quoted_snippets_by_msg[source.key] = set(found)
        filed = self._filed
        table = self._table
        for s in source.strings:
            # every string of an uncited source is filed, with the source among its holders
            anchor, holders = filed[s]
            if len(holders) > 1:
                holders.remove(source)
                continue
            del filed[s]
            bucket = table[anchor]
            if len(bucket) == 1:
                del table[anchor]
            else:
                bucket.discard(s)

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
