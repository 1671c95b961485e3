"""What an image costs, and its pixel size read from the header of its base64 data.

Private to ``opctx.context.tokens``, which re-exports every public name.

Images are billed by the provider's rule (``image_tokens``: Anthropic ``w*h/750`` after
resizing, OpenAI 512-px tiles; ``IMAGE_TOKENS`` when the size is unknown); their
payloads are never tokenised as text. ``image_dimensions`` decodes only the first bytes
of PNG, GIF, WebP or JPEG data.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Literal

IMAGE_TOKENS = 1_600

ImageRule = Literal["pixels", "tiles"]

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
