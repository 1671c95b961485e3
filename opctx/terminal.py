"""Transcript text made safe to print on a terminal: one function for every field.

Recorded transcripts carry whatever the agent's tools printed, and ids, model names
and tool names come from the same untrusted files. An ESC (``\\x1b``) or CSI
(``\\x9b``) in any of them would let a recording move the cursor, rewrite earlier
output or retitle the window when ``opctx`` prints it, and a newline inside a
session id would forge a line of output. ``printable(value)`` shows every such
character as an escape instead, so what is printed is what was recorded, visibly:

* C0 controls (``\\x00``-``\\x1f``, tab and newline included: a field is one line),
  DEL and the C1 controls (``\\x80``-``\\x9f``) as ``\\xNN``;
* the Unicode line and paragraph separators, the bidirectional embedding, override
  and isolate marks (which can make text display in another order than it reads)
  and lone surrogates (which no terminal encoding can carry) as ``\\uNNNN``.

Everything else, CJK and emoji included, is left as it is. Callers that want
whitespace folded (a message shown on one line) fold it first, then call this.
``printable_json(obj)`` is ``json.dumps`` for the terminal: JSON already escapes C0
controls, and the same characters as above become ``\\uNNNN`` escapes, so the output
stays valid JSON that decodes to exactly what was stored.

>>> printable("ok\\x1b[2Jgone")
'ok\\\\x1b[2Jgone'
>>> printable("line\\nforged")
'line\\\\nforged'
>>> printable("上下文 ✓")
'上下文 ✓'
>>> print(printable_json({"id": "a\x9b31m"}, indent=1))
{
 "id": "a\\u009b31m"
}
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["printable", "printable_json", "printable_json_text"]

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# in JSON text every C0 character is structural whitespace (json escapes them in strings)
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: Any) -> str:
    """``value`` as text (``str()`` of a non-string, ``""`` for ``None``) with every
    control, separator, bidi mark and lone surrogate shown as an escape."""
    text = "" if value is None else value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, text)


def printable_json(obj: Any, **dumps_kwargs: Any) -> str:
    """``json.dumps(obj, ensure_ascii=False, **dumps_kwargs)`` with the characters
    ``printable`` escapes written as ``\\uNNNN`` (inside JSON strings, where alone they
    can occur): valid JSON, safe on a terminal, decoding to the original values."""
    return printable_json_text(json.dumps(obj, ensure_ascii=False, **dumps_kwargs))


def printable_json_text(text: str) -> str:
    """``printable_json`` for JSON text made elsewhere (e.g. a JSON Lines export)."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
