"""Text the store can write: lone surrogates replaced with U+FFFD, and counted.

Why this exists: JSON may spell half of a surrogate pair on its own (``"\\ud83d"``, valid
JSON, common in transcripts cut in the middle of an emoji), and Python's decoder returns
it as a ``str`` holding a lone surrogate code point. Such a string has no UTF-8 encoding,
so SQLite (like any file, terminal or HTTP body) refuses it with ``UnicodeEncodeError``.
Rather than lose the message, the store replaces each lone surrogate with U+FFFD (the
replacement character, as a UTF-8 decoder does with a bad byte) and records how many it
replaced in the node's ``metadata["replaced_surrogates"]``. A high surrogate directly
followed by a low one is the character they spell together (``"\\ud83d\\ude00"`` -> 😀)
and is joined, not replaced.

The check is a single strict UTF-8 encode of the JSON text the store was about to write
(ASCII text: a flag), so text without surrogates (all normal text) costs one C-level pass.

>>> replace_lone_surrogates("bad \\ud83d here")
('bad \\ufffd here', 1)
>>> scrub({"text": ["\\udc00", "ok"]})
({'text': ['\\ufffd', 'ok']}, 1)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "REPLACED_SURROGATES_KEY",
    "has_surrogates",
    "replace_lone_surrogates",
    "scrub",
    "make_node_storable",
]

REPLACED_SURROGATES_KEY = "replaced_surrogates"


def has_surrogates(text: str) -> bool:
    """Does ``text`` hold a surrogate code point (which UTF-8 cannot encode)?

    Asked of every node's JSON as it is stored, so it is the cheapest exact test:
    ASCII text is answered by a flag, other text by a strict UTF-8 encode (which fails
    exactly on a surrogate), three times faster in C than a character-class search.
    """
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def replace_lone_surrogates(text: str) -> tuple[str, int]:
    """``(text with each lone surrogate replaced by U+FFFD, how many were replaced)``."""
    if not has_surrogates(text):
        return text, 0
    # UTF-16 round trip: pairs decode to their character, lone halves to U+FFFD
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed, fixed.count("\ufffd") - text.count("\ufffd")


def scrub(value: Any) -> tuple[Any, int]:
    """``value`` with surrogates fixed in every string (dict keys too), and the count.

    Containers are rebuilt only where something changed; other values pass through.
    """
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if isinstance(value, dict):
        pairs = [(scrub(k), scrub(v)) for k, v in value.items()]
        if all(k2 is k and v2 is v for ((k2, _), (v2, _)), (k, v) in zip(pairs, value.items(), strict=True)):
            return value, 0
        return {k2: v2 for (k2, _), (v2, _) in pairs}, sum(a + b for (_, a), (_, b) in pairs)
    if isinstance(value, (list, tuple)):
        items = [scrub(v) for v in value]
        if all(v2 is v for (v2, _), v in zip(items, value, strict=True)):
            return value, 0
        return type(value)(v2 for v2, _ in items), sum(n for _, n in items)
    return value, 0


def make_node_storable(node: Any, serialised: str) -> bool:
    """Fix a ``Call`` whose ``serialised`` JSON holds surrogates; True when it changed.

    The node's ``name``, ``input``, ``output``, ``reads`` and ``metadata`` are fixed in
    place (so the stored node, its search text and the caller's object agree) and
    ``metadata["replaced_surrogates"]`` adds up the replacements.
    """
    if not has_surrogates(serialised):
        return False
    total = 0
    for field in ("name", "input", "output", "reads", "metadata"):
        fixed, n = scrub(getattr(node, field))
        if fixed is not getattr(node, field):
            setattr(node, field, fixed)
        total += n
    if total:
        node.metadata[REPLACED_SURROGATES_KEY] = node.metadata.get(REPLACED_SURROGATES_KEY, 0) + total
    return True
