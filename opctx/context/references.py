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
A string has one holder: a later message holding it too contains it, so it cites the
first holder before filing its own strings. There are two implementations of that table,
and both are exact: for any input they give the quadratic scan's map (cited ids, tool ids,
snippets), and each other's strings on file, through ``build``, ``add``, ``update`` and a
pickle round trip (``tests/context/test_references_equivalence.py`` compares all three over random
and adversarial text, ``tests/context/test_references.py`` on synthetic histories and the real
corpus). Where a message id repeats, the map keeps the snippets of the highest-index cited
message holding it, as the scan does.

**The compiled core** (``_refscan.c``, built by ``setup.py``; used by default). Every
distinctive string has three characters or more. Each is filed under one of its
three-character windows, its *anchor*; the scan of a new text computes the window at each
position, and a window that anchors a string has that string compared in place. So every
occurrence is found. A string is anchored at its window seen least often so far in all the
texts (not under ``src`` or ``the`` when it has a rarer window), which keeps comparisons to
about 60 per message. Extraction is compiled too: one branch-free pass over the code points
replaces the four regexes (equal results, checked by property tests against
``_extract_python``). ``tests/context/test_refscan_sanitizers.py`` runs it under AddressSanitizer
and UndefinedBehaviorSanitizer.

**The pure-Python path** (``compiled=False``, or where no C compiler was available at
install time). A new text is tokenised once: the regexes above (which also give its own
distinctive strings) and its *words*, the maximal runs of ASCII ``[A-Za-z0-9_]``. Each
string is filed in one of three tables under a key that any later text containing the
string is certain to yield from those tokens; the strings under the keys a text yields are
candidates, each verified with ``s in text``.

1. **Token table**: a key that is one of the later text's tokens.

   * An *interior word* of ``s``, bounded inside ``s`` by non-word characters on both
     sides (a snake_case word preferred, then the longest): wherever ``s`` occurs, that
     word is a complete word of the text, because the characters around it belong to
     ``s``. Tokens: the text's words.
   * Else a snake_case part between two underscores, the second underscore and the next
     character (``list_r`` for ``one_list_request``). Tokens: the same at every
     underscore of the text.
   * Else, for a string that starts with a capital, lower-case letters and a capital or
     digit, its first camel hump with the next hump when a third follows (``("Parse",
     "Config")`` for ``ParseConfigError``), else with the next character (``("Behavior",
     "M")`` for ``BehaviorMatch``). Such a string only occurs inside a CamelCase match of
     the later text (the regex starts at the first capital of every alphanumeric run and
     runs to its end, and the string satisfies its look-aheads), where a capital followed
     by lower-case letters always starts a hump. Tokens: each hump of the text's
     CamelCase matches with the next hump and with the next character.
   * Else, for a hex id with a digit, its last six characters: it occurs inside a maximal
     ``[a-f0-9]`` run of the later text, which the hex regex returns. Tokens: every
     six-character window of those runs (a short commit id inside a full one is found).

2. **Word-substring table**: any other string with an ASCII word of three characters or
   more (``parse_config``, ``HTTPServer``, ``request/response``: words that touch the
   string's ends) is filed under its longest word, its *key word*. A later text holding
   the string has a word holding the key word, maybe glued to more word characters
   (``parse_config`` inside ``parse_configuration``). With up to ``_DIRECT_KEYS`` (24) key
   words on file each is looked for in the text. Past that the table remembers every
   distinct word of the texts with the key words inside it (found through one
   three-character gram of each key word) and indexes the known words by their grams, so
   a word seen before costs a set lookup and a new key word finds the known words holding
   it. A key word dropped (its string cited) stays listed by those words, so filing it
   again (a string that recurs) only checks the words met since. The remembered words
   are a cache, dropped past 200,000 words or 4,000,000 characters.
3. **Character table**: a string with no such word (``配置文件``, ``ab cd``) is filed under
   its character with the fewest strings on file (not an ASCII letter, digit or white
   space when it has another): a text containing the string contains that character.

Adversarial text
================
Every step is linear in the text, in both implementations. The spec's CamelCase regex
retries every capital of a run and scans to the run's end each time: quadratic on a long
run of capitals ("T" * 8,000 took 0.9 s); the pure-Python path uses an equivalent
one-attempt-per-run form for a text with a word of 64 characters or more, and takes the
windows of a hex run as its tokens, not its prefixes and suffixes (which were quadratic).
Two messages of 200,000 characters each of capitals, hex, a single word, a path or a
CamelCase word take 1-20 ms compiled, 0.01-0.44 s in Python (``tests/context/test_references.py``
runs them; ``benchmarks/references.py`` times them). A snippet that recurs in every
message beside 50 new words holding it (each message cites the previous one, the
word-substring table files the key word again each time) costs the same per message at
1,000 and 4,000 messages: 0.35-0.45 s of CPU per 1,000 in Python, 0.008-0.013 s compiled.

Cost
====
Measured with ``benchmarks/references.py`` on ``make_history`` (580 text characters per
message, 5.8 MB of text for 10,000) and on the real corpus (every session with provider
usage, concatenated), two runs interleaved with runs of the previous version, on the
shared 2-core machine under a load average of 7-12: CPU time, the steadier figure there
(wall times were 2-4 times longer), medians of 5:

=============================  ==============  ===========  ================
messages                       compiled        pure Python  quadratic (wall)
=============================  ==============  ===========  ================
1,000                          0.014-0.017 s   0.11-0.14 s  0.72-1.05 s
3,000                          0.051-0.059 s   0.36-0.46 s  4.6-5.1 s
10,000                         0.17-0.21 s     1.34-1.46 s  (not run)
real corpus, 5,019 (2,815 ch)  0.17-0.24 s     1.52-2.09 s  6.2-8.8 s
incremental ``add`` (wall)     0.010-0.012 ms  0.06 ms
=============================  ==============  ===========  ================

The compiled build of 10,000 messages splits into assembling the texts (0.03-0.05 s), the
core (0.10-0.11 s: extraction, window scan, filing, citing) and the Python around it
(0.02-0.08 s: message keys, tool ids, the map); its cost per 1,000 messages is flat
(0.014-0.021 s). The pure-Python path spends about 0.4 s of its 1.3-1.5 s in the
tokenising regex passes, each near the floor of CPython's ``re`` over 5.8 MB, and the
rest in Python bookkeeping: that is why the table moved to C rather than to a cleverer
index in Python.

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
_DIGITS = "0123456789"

# lookup vocabulary: "words" are maximal runs of ASCII [A-Za-z0-9_]
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_NON_WORD_TO_SPACE = str.maketrans({chr(i): " " for i in range(128) if chr(i) not in _WORD_CHARS})
_NON_WORD_BYTES_TO_SPACE = bytes(b if chr(b) in _WORD_CHARS else 32 for b in range(256))
# token anchor of CamelCase: a capital, its lower-case run and the next character, which is
# a capital or digit
_HUMP_START = re.compile(r"([A-Z][a-z]++)([A-Z0-9])[A-Za-z0-9]*")
# camel humps: "ParseHTTPConfig2" -> Parse|HTTP|Config|2 (each hump is scanned once from
# the hump before it: linear)
_HUMP = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_HUMP_PAIRS = re.compile(r"([A-Z][a-z]++)(?=([A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+))")
# token anchor inside a snake_case word: an alphanumeric part between two underscores, the
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
    """The maximal ASCII ``[A-Za-z0-9_]`` runs of ``text``, in order (C speed throughout)."""
    if text.isascii():
        return text.translate(_NON_WORD_TO_SPACE).split()
    # every other character (lone surrogates too) becomes "?", a separator like the rest
    return text.encode("ascii", "replace").translate(_NON_WORD_BYTES_TO_SPACE).decode("ascii").split()


class _Tokens:
    """One pass of the regexes over a text, used both to extract and to look up."""

    __slots__ = ("words", "paths", "hexes", "snippets", "camels")

    def __init__(self, text: str):
        self.words = words = _words(text)
        self.paths = _PATH.findall(text) if "/" in text else []
        # an id needs a digit (a run of hex letters is looked at for nothing else)
        self.hexes = _HEX_ID.findall(text) if any(map(text.__contains__, _DIGITS)) else []
        self.snippets = _BACKTICK.findall(text) if "`" in text else []
        long_word = bool(words) and max(map(len, words)) >= _LONG_WORD
        self.camels = [] if not words else (_CAMEL_LINEAR if long_word else _CAMEL).findall(text)


def _select(tok: _Tokens, limit: int) -> list[str]:
    """Filter, de-duplicate and cap the raw matches (module docstring, in priority order).

    Paths and ids skip the stop-word and cross-kind duplicate checks: no stop word holds a
    "/" or is a hex id with a digit (``tests/context/test_references.py`` checks), and a path
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
    if _refscan is not None and text and limit > 0:
        return _refscan.extract(text, limit, STOP_WORDS)
    return _extract_python(text, limit)


def _extract_python(text: str, limit: int = MAX_DISTINCTIVE) -> list[str]:
    """``extract_distinctive`` with the regexes: the reference the compiled core is tested against."""
    if not text or limit <= 0:
        return []
    return _select(_Tokens(text), limit)


# ------------------------------------------------------------------------------ anchors

# Where the pure-Python path files a string (module docstring): under a token of any text
# holding it, under a word of its own that any such text has inside one of its words, or
# under one of its characters.
_TOKEN, _WITHIN, _CHAR = 0, 1, 2

# A token anchor is a word, a snake_case part ("list_r"), a (hump, next hump or character)
# pair or a six-character hex window; all live in one table: a window that happens to
# equal a word only costs an extra ``s in text`` check, never a wrong citation.
Anchor = str | tuple[str, str]

_GRAM = 3  # every key word of the word-substring table has at least this many characters


def _interior(s: str, words: list[str]) -> list[str]:
    """The words of ``s`` (in order) minus those touching its ends."""
    interior = words[1:] if s[0] in _WORD_CHARS else words
    if interior and s[-1] in _WORD_CHARS:
        interior = interior[:-1]
    return interior


def _hump_keys(camels: list[str]) -> set[tuple[str, str]]:
    """Token lookup keys of CamelCase: each hump with the next hump, and with the next character."""
    pairs = _HUMP_PAIRS.findall(" ".join(camels))
    return set(pairs).union([(first, second[0]) for first, second in pairs])


def _grams(word: str) -> set[str]:
    return {word[i : i + _GRAM] for i in range(len(word) - _GRAM + 1)}


def _char_rank(c: str) -> int:
    """How common a character is in texts (ASCII letters and digits, then white space, are
    the worst keys of the character table: nearly every text holds them)."""
    if c.isascii() and c.isspace():
        return 2
    return 1 if c.isascii() and c.isalnum() else 0


def _anchor(s: str, char_rarity: Callable[[str], int]) -> tuple[int, Anchor]:
    """``(table, key)`` a string is filed under (module docstring).

    A token anchor takes the longest interior word: a long word (``build_as_graph``) occurs
    in far fewer texts than a short one (``src``), so its bucket is touched less often.
    """
    if s.isalnum() and s.isascii():
        # one alphanumeric word (every id, every CamelCase string): no interior word and no
        # "_"; skips splitting the string into words
        return _edge_word_anchor(s, [s], char_rarity)
    words = _words(s)
    if words:
        interior = _interior(s, words)
        if interior:  # a snake_case word if any (rarer than a directory name), longest
            return _TOKEN, max([w for w in interior if "_" in w] or interior, key=len)
        if "_" in s:  # inside a snake_case word: "one_list_request" -> "list_r"
            inner = _SNAKE_KEYS.findall(s)
            if inner:
                return _TOKEN, max(inner, key=len)
        return _edge_word_anchor(s, words, char_rarity)
    return _CHAR, _rarest_char(s, char_rarity)


def _edge_word_anchor(s: str, words: list[str], char_rarity: Callable[[str], int]) -> tuple[int, Anchor]:
    """The anchor of a string whose words all touch its ends (one word, or two)."""
    hump = _HUMP_START.match(s)
    if hump and hump.end() >= 4:  # the run is long enough to be a CamelCase match
        second = _HUMP.match(s, len(hump[1]))
        if second.end() < len(s):  # the second hump is interior: the pair is exact
            return _TOKEN, (hump[1], second[0])
        return _TOKEN, (hump[1], hump[2])
    if _HEX_FULL.fullmatch(s) and not s.isalpha():  # a hex id with a digit
        return _TOKEN, s[-_WINDOW:]  # the last window: numbers that share a prefix differ at the end
    key = max(words, key=len)
    if len(key) >= _GRAM:  # any text holding s has a word holding key
        return _WITHIN, key
    return _CHAR, _rarest_char(s, char_rarity)


def _rarest_char(s: str, char_rarity: Callable[[str], int]) -> str:
    return min(sorted(set(s)), key=lambda c: (_char_rank(c), char_rarity(c)))


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

    __slots__ = ("index", "key", "tool_use_ids", "strings")

    def __init__(self, index: int, key: str, tool_use_ids: list[str], strings: list[str]):
        self.index = index
        self.key = key
        self.tool_use_ids = tool_use_ids
        self.strings = strings


class ReferenceTracker:
    """Incremental ``ReferenceMap`` builder (module docstring). ``clock`` stamps the map.

    ``compiled``: use the compiled core; ``None`` (the default) uses it when it is built,
    ``False`` forces the pure-Python path, ``True`` requires the core. Both give the same map.
    """

    # anchors are remembered per string: most strings recur, and are filed again after
    # each citation. The memo is dropped past this many strings (it only saves work).
    _ANCHOR_MEMO_MAX = 500_000
    # the word-substring table checks up to this many key words against each text
    # directly; past it, it remembers the text words it has seen and the key words each
    # holds (a cache, dropped past _KNOWN_WORDS_MAX words of _KNOWN_CHARS_MAX characters
    # in all, or below _DIRECT_KEYS / 2 key words)
    _DIRECT_KEYS = 24
    _KNOWN_WORDS_MAX = 200_000
    _KNOWN_CHARS_MAX = 4_000_000

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
        # pure-Python tables (module docstring): token anchor -> strings; key word -> strings
        # and one three-character gram of each key word -> key words; character -> strings
        self._tokens: dict[Anchor, set[str]] = {}
        self._within: dict[str, set[str]] = {}
        self._within_grams: dict[str, set[str]] = {}
        self._gram_of: dict[str, str] = {}
        self._chars: dict[str, set[str]] = {}
        self._word_cache = False
        self._forget_words()
        # string -> (its table, its anchor, the uncited message holding it). One holder: a
        # later message holding the string too contains it, so it cites the first holder
        # before filing its own strings.
        self._filed: dict[str, tuple[int, Anchor, _Source]] = {}
        self._anchor_memo: dict[str, tuple[int, Anchor]] = {}
        self._keys: list[str] = []
        self._seen: list[Any] = []  # the messages as given, for update's prefix check
        # message key -> index of the message whose snippets the map holds: with repeated
        # ids the highest index wins, as in the quadratic scan
        self._snippets_from: dict[str, int] = {}
        self.map = ReferenceMap(last_built_at=self.clock())

    def _forget_words(self) -> None:
        """Drop the text words the word-substring table has seen (a cache: nothing is lost)."""
        self._known_words: set[str] = set()
        self._known_chars = 0  # in the known words with grams on file
        self._word_log: list[str] = []  # the known words with grams on file, in order
        self._word_grams: dict[str, list[str]] = {}  # gram -> the known words holding it
        # known word -> the key words inside it (filed then; some may have been dropped since)
        self._word_keys: dict[str, set[str]] = {}
        self._dropped: dict[str, int] = {}  # a key word dropped -> len(_word_log) then

    # The compiled table cannot be pickled; it is rebuilt from the messages on unpickling
    # (where the core is not built, the pure-Python tables are built instead). The seen
    # words of the word-substring table are left out.
    def __getstate__(self) -> dict:
        state = {**self.__dict__, "_core": None}
        for name in ("_known_words", "_known_chars", "_word_log", "_word_grams", "_word_keys", "_dropped"):
            del state[name]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._forget_words()
        if not self.compiled:
            return
        if _refscan is None:
            stamp = self.map.last_built_at
            self.compiled = False
            seen = self._seen
            self.build(seen)
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
                self._cite(cited, self._keys[cited], tool_result_ids(self._messages[cited]), found)
            return
        if not text:
            return
        tok = _Tokens(text)
        if self._filed:
            self._scan(text, tok)
        strings = _select(tok, self.limit)
        if strings:
            self._file(_Source(index, key, tool_result_ids(msg), strings))

    def _file(self, source: _Source) -> None:
        filed = self._filed
        memo = self._anchor_memo
        for s in source.strings:
            anchor = memo.get(s)
            if anchor is None:
                if len(memo) >= self._ANCHOR_MEMO_MAX:
                    memo.clear()
                anchor = memo[s] = _anchor(s, self._char_rarity)
            table, key = anchor
            filed[s] = (table, key, source)
            if table == _TOKEN:
                bucket = self._tokens.get(key)
                if bucket is None:
                    self._tokens[key] = {s}
                else:
                    bucket.add(s)
            elif table == _WITHIN:
                bucket = self._within.get(key)
                if bucket is None:
                    self._within[key] = {s}
                    self._file_key_word(key)
                else:
                    bucket.add(s)
            else:
                self._chars.setdefault(key, set()).add(s)

    def _file_key_word(self, key: str) -> None:
        """A new key word: index it by one of its grams, find the known words holding it."""
        if not self._word_cache:
            if len(self._within) <= self._DIRECT_KEYS:
                return
            self._word_cache = True  # every key word is filed; every word is new
            self._forget_words()
            for k in self._within:
                self._index_key_word(k)
            return
        gram = self._index_key_word(key)
        words = self._word_grams.get(gram, ())
        dropped_at = self._dropped.pop(key, None)
        if dropped_at is not None and len(self._word_log) - dropped_at < len(words):
            # filed again (a recurring string): the words that held it still list it, only
            # the words met since it was dropped are left to check
            words = self._word_log[dropped_at:]
        word_keys = self._word_keys
        for word in words:
            if key in word:
                keys = word_keys.get(word)
                if keys is None:
                    word_keys[word] = {key}
                else:
                    keys.add(key)

    def _index_key_word(self, key: str) -> str:
        word_grams = self._word_grams
        # the gram fewest known words hold: those are the ones checked for it
        gram = self._gram_of[key] = min(sorted(_grams(key)), key=lambda g: len(word_grams.get(g, ())))
        self._within_grams.setdefault(gram, set()).add(key)
        return gram

    def _drop_key_word(self, key: str) -> None:
        if not self._word_cache:
            return
        # the known words holding it keep listing it (a lookup checks the key is on file):
        # a string that recurs files it again without touching them
        _discard(self._within_grams, self._gram_of.pop(key), key)
        if len(self._dropped) > self._KNOWN_WORDS_MAX:
            self._dropped.clear()
        self._dropped[key] = len(self._word_log)
        if len(self._within) < self._DIRECT_KEYS // 2:
            self._word_cache = False
            self._within_grams.clear()
            self._gram_of.clear()
            self._forget_words()

    def _char_rarity(self, c: str) -> int:
        return len(self._chars.get(c, ()))

    def _scan(self, text: str, tok: _Tokens) -> None:
        """Cite every uncited message with a string that occurs in ``text``."""
        hits: list[str] = []
        table = self._tokens
        if table:
            anchors = table.keys()
            touched = anchors & tok.words
            if "_" in text:
                touched.update(anchors & _SNAKE_KEYS.findall(text))
            if tok.camels:
                touched.update(anchors & _hump_keys(tok.camels))
            if tok.hexes:
                windows = [run[i : i + _WINDOW] for run in tok.hexes if not run.isalpha() for i in range(len(run) - _WINDOW + 1)]
                touched.update(anchors & windows)
            hits = [s for anchor in touched for s in table[anchor] if s in text]
        if self._within:
            within = self._within
            hits += [s for key in self._key_words_in(text, tok.words) for s in within[key] if s in text]
        if self._chars:
            chars = self._chars
            # a few characters: each found in the text at C speed; many: the text's set
            present = [c for c in chars if c in text] if len(chars) <= 32 else chars.keys() & set(text)
            hits += [s for c in present for s in chars[c] if s in text]
        if not hits:
            return
        found: dict[int, tuple[_Source, list[str]]] = {}
        filed = self._filed
        for s in hits:
            src = filed[s][2]
            entry = found.get(src.index)
            if entry is None:
                found[src.index] = (src, [s])
            else:
                entry[1].append(s)
        for src, strings in found.values():
            self._cite(src.index, src.key, src.tool_use_ids, strings)
            self._unfile(src)

    def _key_words_in(self, text: str, text_words: list[str]) -> Iterable[str]:
        """The key words of the word-substring table that some word of the text holds.

        A few key words: those the text contains. Else a word seen for the first time has
        its grams indexed and is matched against the grams of the key words (then ``key in
        word``); a word seen before has its key words on file (``_file_key_word`` adds a new
        key word to the known words holding it).
        """
        if not self._word_cache:
            return [k for k in self._within if k in text]
        words = set(text_words)
        known = self._known_words
        if len(known) > self._KNOWN_WORDS_MAX or self._known_chars > self._KNOWN_CHARS_MAX:
            self._forget_words()
            known = self._known_words
        new = words - known
        if new:
            known |= new
            key_grams = self._within_grams
            word_grams = self._word_grams
            word_keys = self._word_keys
            for word in new:
                if len(word) < _GRAM:
                    continue
                self._known_chars += len(word)
                self._word_log.append(word)
                grams = _grams(word)
                for g in grams:
                    holders = word_grams.get(g)
                    if holders is None:
                        word_grams[g] = [word]
                    else:
                        holders.append(word)
                inside = [k for g in key_grams.keys() & grams for k in key_grams[g] if k in word]
                if inside:
                    word_keys[word] = set(inside)
        word_keys = self._word_keys
        return {k for word in word_keys.keys() & words for k in word_keys[word]} & self._within.keys()

    def _cite(self, index: int, key: str, tool_use_ids: list[str], found: list[str]) -> None:
        """Record message ``index`` (``key``) as cited, with the strings ``found`` in the citing text."""
        m = self.map
        m.cited_message_ids.add(key)
        if tool_use_ids:
            m.cited_tool_use_ids.update(tool_use_ids)
        # the quadratic scan visits sources in order: with a repeated key the highest index
        # wins, whichever citing text came first
        if self._snippets_from.get(key, -1) < index:
            self._snippets_from[key] = index
            m.quoted_snippets_by_msg[key] = set(found)

    def _unfile(self, source: _Source) -> None:
        """Take all the strings of a cited message out of the tables (the early exit)."""
        filed = self._filed
        for s in source.strings:
            table, key, _ = filed.pop(s)
            if table == _TOKEN:
                _discard(self._tokens, key, s)
            elif table == _WITHIN:
                if _discard(self._within, key, s):
                    self._drop_key_word(key)
            else:
                _discard(self._chars, key, s)

    def _uncited_strings(self) -> list[list[str]]:
        """The strings each message still has on file, in extraction order ([] once cited)."""
        if self._core is not None:
            return [self._core.strings(i) for i in range(self.message_count)]
        held: list[list[str]] = [[] for _ in range(self.message_count)]
        for _, _, source in self._filed.values():
            held[source.index] = list(source.strings)
        return held

    # ------------------------------------------------------------------ queries
    def is_cited(self, msg_id: str | None = None, tool_use_id: str | None = None) -> bool:
        return self.map.is_cited(msg_id, tool_use_id)


def _discard(table: dict, key: Any, value: Any) -> bool:
    """Remove ``value`` from ``table[key]``, and the key when its set empties (then True)."""
    bucket = table[key]
    if len(bucket) == 1:
        del table[key]
        return True
    bucket.discard(value)
    return False


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
