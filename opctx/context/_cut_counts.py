"""Exact token counts of a text's cuts without re-encoding them: what keeps ``fit_request``
linear when a request stays over the window for hundreds of requests.

Private to ``opctx.context.fit``. When nothing compacts (preset ``none``, or a client
whose compaction is off) every request past the window truncates the same oversized
messages again, each to a slightly lower water level, and :func:`~.fit.truncate_text`
measures each candidate cut (its head ``text[:k]``, its tail ``text[a:]`` and the two
joined around the marker) with the tokenizer: per request, a few times the whole
window's worth of text is encoded.

A tiktoken count is the sum, over the pieces the encoding's pre-tokeniser regex finds,
of the byte-pair tokens of each piece (``CoreBPE.encode_ordinary``: the regex, then
``encode_single_piece`` per piece); a text over ``ENCODE_CHUNK_CHARS`` is counted chunk
by chunk (``chunk_bounds``). A cut is the text with one stretch replaced (by the marker,
or by nothing), so its pieces are mostly the text's, and its count is worked out from
the text's pieces, split once per text (an LRU of texts):

* once a piece of the cut ends where a piece of the text ends (at the same characters),
  the next pieces are the text's for as long as the characters are the same: the regex
  reads no character before where it starts a match (the patterns have no look-behind),
  and it reads at most a few characters past a match. So the cut's pieces are the text's
  up to a boundary ``b`` at least ``_MARGIN`` characters before the stretch (or the chunk)
  ends, where a blank starts a piece and a non-blank ends the piece before: every
  alternative of the pattern reads a run of one class of characters (letters, digits,
  punctuation, blanks) and at most a character past it, so no match before ``b`` can
  see past it. Those pieces are counted by the text's prefix sums;
* from ``b`` (or from a chunk's start) the cut's own pieces are matched one by one until
  one ends where a piece of the text ends, past the replaced stretch; then the text's
  prefix sums again; at the end of a chunk that is not the end of the text, the last
  characters are matched one by one.

The same holds for a message rebuilt with a text cut (:func:`remember_rebuilt`): the
segments the estimate counts (a JSON document of tool arguments with one value cut, a
tool result) keep a head and a tail of the segments they replace, and are counted from
those.

The chunks of a cut are found on the cut itself (``chunk_bounds``), each counted as
above, as ``bpe_token_count`` counts them. The counts are placed in the estimator's
cache (``Estimator.remember_count``), where the measure that follows finds them: the
figures are those of encoding each cut, only cheaper. A profile that counts CJK
characters and line-number prefixes apart (``Estimator.text_count``) gets those parts
too (``remember_text_count``), worked out from where the text has them and a search of
the cut's changed stretch only: searching every cut whole again cost as much as
counting it. A text whose pieces do not sum to
tiktoken's own count of it (a pattern the ``regex`` module would read otherwise), or
that holds a piece too long to split cheaply, is left to the tokenizer.
"""

from __future__ import annotations

import bisect
import functools
import json
import threading
from collections import OrderedDict
from typing import Any

from ._family_profiles import _NUMBERED_LINE, TextCount
from ._heuristic import _CJK
from ._tiktoken_offline import chunk_bounds
from .tokens import _MIN_CACHED_CHARS, ENCODE_CHUNK_CHARS, Estimator, get_encoding

_MARGIN = 64  # characters between a safe boundary and where the copied characters end
_MAX_TEXTS = 256
_MAX_TEXT_CHARS = 64_000_000  # of the texts split and kept (their pieces take as much again)
_MAX_PIECE_CHARS = 4_096  # a longer piece (a blob): byte-pair merging it is slow; left to the tokenizer
_MAX_PIECES = 200_000
_BLANKS = frozenset(" \n")
_MAX_KEPT_JSON = 200_000


class _Encoding:
    """One tiktoken encoding: its pre-tokeniser compiled with ``regex``, piece counts cached."""

    def __init__(self, enc: Any):
        import regex

        self.enc = enc
        self.pattern = regex.compile(enc._pat_str)
        self.pieces: dict[str, int] = {}

    def piece(self, text: str) -> int:
        n = self.pieces.get(text)
        if n is None:
            n = len(self.enc._encode_single_piece(text))
            if len(self.pieces) >= _MAX_PIECES:
                self.pieces.clear()
            self.pieces[text] = n
        return n

    def encoded(self, text: str) -> int:
        return len(self.enc.encode_ordinary(text))

    def scan(self, text: str) -> tuple[list[int], list[int]] | None:
        """Piece boundaries of ``text`` (its end included) and the tokens before each; None
        when a piece is too long to split cheaply."""
        bounds, before, total = [0], [0], 0
        for m in self.pattern.finditer(text):
            if m.end() - m.start() > _MAX_PIECE_CHARS:
                return None
            total += self.piece(m.group())
            bounds.append(m.end())
            before.append(total)
        return bounds, before


_ENCODINGS: dict[str, _Encoding | None] = {}
_TEXTS: OrderedDict[tuple[str, str], CutCounts | None] = OrderedDict()
_TEXTS_CHARS = [0]
_LOCK = threading.Lock()


def _encoding(counter: str) -> _Encoding | None:
    if counter not in _ENCODINGS:
        enc = get_encoding(counter) if counter != "heuristic" else None
        try:
            _ENCODINGS[counter] = _Encoding(enc) if enc is not None else None
        except (ImportError, AttributeError):  # no regex module, or another tiktoken
            _ENCODINGS[counter] = None
    return _ENCODINGS[counter]


class CutCounts:
    """The pieces of one text, and the exact raw counts of its cuts."""

    def __init__(self, text: str, enc: _Encoding, counter: str):
        self.text, self.enc, self.counter = text, enc, counter
        scanned = enc.scan(text)
        self.valid = scanned is not None
        self.bounds, self.before = scanned or ([0], [0])
        n = len(text)
        # boundaries (indices into ``bounds``) a run of pieces can be taken up to: a blank
        # starts the piece there, a non-blank ends the piece before (module docstring)
        self.safe = [
            i for i, b in enumerate(self.bounds) if 0 < b < n and text[b] in _BLANKS and not text[b - 1].isspace()
        ]
        self.safe_at = [self.bounds[i] for i in self.safe]
        self.valid = self.valid and self.before[-1] == enc.encoded(text)

    @functools.cached_property
    def cjk_at(self) -> list[int]:
        """Where the text's CJK characters are (a profile that counts them apart)."""
        return [] if self.text.isascii() else [m.start() for m in _CJK.finditer(self.text)]

    @functools.cached_property
    def numbered_at(self) -> list[int]:
        """Where the text's line-number prefixes (``   12→``) start."""
        return [m.start() for m in _NUMBERED_LINE.finditer(self.text)] if "\u2192" in self.text else []

    @functools.cached_property
    def without_cjk(self) -> str:
        return _CJK.sub("", self.text) if self.cjk_at else self.text

    def split_count(self, s: str, k: int, cut: int, tokens: int) -> TextCount | None:
        """What ``Estimator.text_count`` counts of ``s`` (laid out as for :meth:`count`,
        ``tokens`` of it), from the text's CJK characters and line-number prefixes: only
        the stretch between the copied head and tail is searched, widened to whole lines
        (a prefix is matched at a line's start and ends before its newline, so the lines
        outside the stretch hold the text's prefixes). None when the count without CJK is
        left to the tokenizer."""
        n, m = len(self.text), len(s)
        tail_at, shift = m - cut, n - m  # s[x] is text[x + shift] from tail_at on
        middle = s[k:tail_at]
        cjk_at = self.cjk_at
        head_cjk = bisect.bisect_left(cjk_at, k)
        tail_cjk = len(cjk_at) - bisect.bisect_left(cjk_at, n - cut)
        middle_cjk = 0 if middle.isascii() else len(_CJK.findall(middle))
        cjk = head_cjk + middle_cjk + tail_cjk
        non_cjk: int | None = tokens
        if cjk:
            of_stripped = cut_counts(self.without_cjk, self.counter) if cjk_at else self
            k2, cut2 = k - head_cjk, cut - tail_cjk
            stripped = self.without_cjk
            s2 = stripped[:k2] + _CJK.sub("", middle) + (stripped[len(stripped) - cut2:] if cut2 else "")
            non_cjk = of_stripped.count(s2, k2, cut2) if of_stripped is not None else None
            if non_cjk is None:
                return None
        numbered = 0
        if "\u2192" in s:
            a = s.rfind("\n", 0, k) + 1
            b = s.find("\n", tail_at)
            b = m if b < 0 else b + 1
            at = self.numbered_at
            numbered = (
                bisect.bisect_left(at, a)
                + len(_NUMBERED_LINE.findall(s, a, b))
                + len(at) - bisect.bisect_left(at, b + shift if b < m else n)
            )
        return TextCount(tokens, non_cjk, cjk, numbered)

    def _boundary(self, r: int) -> int | None:
        """The index in ``bounds`` of position ``r`` of the text, when a piece ends there."""
        i = bisect.bisect_left(self.bounds, r)
        return i if i < len(self.bounds) and self.bounds[i] == r else None

    def count(self, s: str, k: int, cut: int) -> int | None:
        """Tokens of ``s`` = ``text[:k]`` + a middle + the last ``cut`` characters of the
        text, counted as ``bpe_token_count`` counts it (chunk by chunk); None when the
        pattern does not read it as expected (left to the tokenizer)."""
        total = 0
        for start, end in chunk_bounds(s) if len(s) > ENCODE_CHUNK_CHARS else [(0, len(s))]:
            tokens = self._chunk(s, start, end, k, cut)
            if tokens is None:
                return None
            total += tokens
        return total

    def _chunk(self, s: str, start: int, end: int, k: int, cut: int) -> int | None:
        """Tokens of ``s[start:end]`` encoded alone (module docstring)."""
        text, bounds, before = self.text, self.bounds, self.before
        n, tail_at = len(text), len(s) - cut  # the copied tail: s[tail_at:] is text[n - cut:]
        chunk = s[start:end] if start or end < len(s) else s
        pattern, piece, known = self.enc.pattern, self.enc.piece, self.enc.pieces
        total, pos = 0, 0  # pos: in ``chunk``
        settled = None  # the copied stretch ("head" or "tail") where no jump is left to make
        while pos < len(chunk):
            x = start + pos  # in ``s``
            if x < k:
                region, shift, stretch_end = "head", 0, min(k, end)
            elif cut and x >= tail_at:
                region, shift, stretch_end = "tail", n - cut - tail_at, end
            else:
                region = None
            if region is not None and region != settled:
                i = self._boundary(x + shift)
                if i is not None:
                    if region == "tail" and end == len(s):
                        return total + before[-1] - before[i]  # the same characters to the end of both
                    j = bisect.bisect_right(self.safe_at, stretch_end + shift - _MARGIN) - 1
                    if j >= 0 and self.safe_at[j] > x + shift:
                        b = self.safe[j]
                        total += before[b] - before[i]
                        pos = bounds[b] - shift - start
                        continue
                    settled = region  # further on, the safe boundaries are only fewer
            m = pattern.match(chunk, pos)
            if m is None or m.end() == pos:
                return None
            g = m.group()
            tokens = known.get(g)
            total += tokens if tokens is not None else piece(g)
            pos = m.end()
        return total


class KnownCuts:
    """One text's cuts as its estimator counts them, placed in the estimator's cache before
    they are measured (``remember``).

    ``in_json``: the text is a string inside tool-call arguments, counted as its JSON
    encoding (``json.dumps``: escaping is per character, so the encoding of a cut is the
    encoding's head and tail around the encoded middle). A cut is placed from what it
    shares with its reference, found by comparing the two (:func:`_place`): nothing about
    where the cut lies is taken on trust, and a cut that shares little is left to the
    tokenizer."""

    def __init__(self, text: str, estimator: Estimator, counter: str, in_json: bool, split: bool):
        self.estimator, self.counter, self.in_json = estimator, counter, in_json
        self.split = split  # the profile counts CJK and line-number prefixes apart
        self.ref = json_string(text) if in_json else text

    def remember(self, *cuts: str) -> None:
        """Counts of ``cuts`` (the text's head, its tail, or the two around the marker), as
        the estimator counts them."""
        for s in cuts:
            if not s:
                continue
            if self.in_json:
                s = json_string(s)
            if not self.estimator.has_count(s, self.counter, self.split):  # else counted by a replay before
                _place(self.ref, s, self.estimator, self.counter, self.split)


def json_string(text: str) -> str:
    """A string as it stands in JSON arguments, as the estimate counts it (a request's
    texts are encoded again for every measure of their unit and every cut: the encodings
    of texts up to ``_MAX_KEPT_JSON`` characters are kept)."""
    return _json_kept(text) if len(text) <= _MAX_KEPT_JSON else json.dumps(text, ensure_ascii=False)


@functools.lru_cache(maxsize=128)
def _json_kept(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def known_cuts(text: str, estimator: Estimator, model: str | None, in_json: bool = False) -> KnownCuts | None:
    """:class:`KnownCuts` of ``text`` for ``estimator`` and ``model``, or None when its cuts
    are left to the tokenizer (a heuristic counter, a short text)."""
    if len(text) <= ENCODE_CHUNK_CHARS // 4:
        return None  # a short text encodes faster than it splits
    counter, profile = estimator.profile(model)
    with _LOCK:
        enc = _encoding(counter)
    return KnownCuts(text, estimator, counter, in_json, profile.splits_text) if enc is not None else None


def cut_counts(text: str, counter: str) -> CutCounts | None:
    """The pieces of ``text`` under ``counter`` (an LRU of texts), or None when they do not
    add up to tiktoken's count (left to the tokenizer)."""
    key = (counter, text)
    with _LOCK:
        if key in _TEXTS:
            _TEXTS.move_to_end(key)
            return _TEXTS[key]
        enc = _encoding(counter)
    cuts = CutCounts(text, enc, counter) if enc is not None else None
    if cuts is not None and not cuts.valid:
        cuts = None
    with _LOCK:
        if key not in _TEXTS:
            _TEXTS[key] = cuts
            _TEXTS_CHARS[0] += len(text)
        while len(_TEXTS) > _MAX_TEXTS or _TEXTS_CHARS[0] > _MAX_TEXT_CHARS:
            (_, old), _ = _TEXTS.popitem(last=False)
            _TEXTS_CHARS[0] -= len(old)
    return cuts


def remember_rebuilt(old: Any, new: Any, estimator: Estimator, model: str | None) -> None:
    """Counts of the text segments of ``new``, a message rebuilt from ``old`` with some of
    its texts cut, placed in the estimator's cache before the message is measured.

    A segment is what the estimate counts (``message_parts``): a cut text is one, but so is
    a JSON document of tool arguments or a ``tool_use`` input with one value cut, which is
    a new string as long as the rest of the document. A segment that changed keeps a head
    and a tail of the segment it replaces, so it is counted from that segment's pieces
    (:func:`_place`)."""
    if isinstance(old, str) or isinstance(new, str):
        return  # a system prompt: its one text is the cut itself, counted already
    from ._message_parts import message_parts

    counter, profile = estimator.profile(model)
    with _LOCK:
        if _encoding(counter) is None:
            return
    before, after = message_parts(old).segments, message_parts(new).segments
    if len(before) != len(after):
        return
    for (_, a), (_, b) in zip(before, after, strict=True):
        if a is b or len(b) <= ENCODE_CHUNK_CHARS // 4 or estimator.has_count(b, counter, profile.splits_text) or a == b:
            continue  # short, or counted already (the same text, or by a replay before this one)
        _place(a, b, estimator, counter, profile.splits_text)


def _place(ref: str, s: str, estimator: Estimator, counter: str, split: bool) -> None:
    """Place the counts of ``s`` when it shares a head and a tail with ``ref`` (their
    common prefix and suffix): its tokens, and with ``split`` everything
    ``Estimator.text_count`` counts of it (:meth:`CutCounts.split_count`)."""
    if len(s) < _MIN_CACHED_CHARS:
        return  # the estimator keeps no count of it
    k = _common_prefix(ref, s)
    cut = min(_common_suffix(ref, s), len(ref) - k, len(s) - k)
    if k + cut < len(s) // 2:
        return  # little in common: encoding it costs no more
    cuts = cut_counts(ref, counter)
    tokens = cuts.count(s, k, cut) if cuts is not None else None
    if tokens is None:
        return
    estimator.remember_count(s, counter, tokens)
    if split and not s.isascii():
        counts = cuts.split_count(s, k, cut, tokens)
        if counts is not None:
            estimator.remember_text_count(s, counter, counts)


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix (a bisection of slice comparisons, done in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: str, b: str) -> int:
    """Length of the longest common suffix."""
    na, nb = len(a), len(b)
    lo, hi = 0, min(na, nb)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[na - mid : na - lo] == b[nb - mid : nb - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo
