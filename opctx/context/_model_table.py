"""The model table: windows, output caps and families.

Private to ``opctx.context.tokens``, which re-exports every public name.

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
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

# The public module's logger name, so log filters set on ``opctx.context.tokens`` keep working.
logger = logging.getLogger("opctx.context.tokens")

DEFAULT_CONTEXT_WINDOW = 128_000
# What the budget reserves for output when the model's cap is unknown (spec §2.3 default).
DEFAULT_MAX_OUTPUT = 16_384


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
