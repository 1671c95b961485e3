"""orjson where it is installed, with the standard library's exact results.

Parsing a recording's lines and encoding each stored node's JSON are most of an
import's CPU time beyond the SQL; orjson does both several times faster than the
``json`` module. It is a core dependency, imported here and nowhere else; where it
cannot be imported, ``loads_plain`` and ``dumps_plain`` are None and the callers use
``json`` alone.

Neither changes a result. Where orjson and ``json`` differ, the value goes to ``json``:

* ``loads_plain(data, max_depth)`` raises ``ValueError`` where ``json`` might answer
  otherwise: orjson refuses ``NaN``/``Infinity``, numbers beyond a float, lone
  surrogates and invalid UTF-8 (which the callers read their own way), and it turns an
  integer beyond 64 bits into a float, so a float that large in its result is refused
  too; and where containers nest deeper than ``max_depth``.
* ``dumps_plain(value)`` encodes as ``json.dumps(value, ensure_ascii=False,
  separators=(",", ":"), allow_nan=False)`` would, or returns None: only exact ``dict``
  (str keys), ``list``, ``tuple``, ``str``, ``int``, ``bool``, ``None`` and the floats
  both write alike. orjson writes ``NaN`` as ``null``, ``1e-05`` as ``0.00001`` and
  ``1e-07`` as ``1e-7``, and it encodes enums, UUIDs, dataclasses and datetimes that
  ``json`` refuses. tests/dag/test_fastjson.py compares both ways on arbitrary values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a core dependency
    orjson = None

# orjson's own nesting limit when encoding; deeper (or circular) values go to ``json``
_MAX_DEPTH = 254
# below this orjson writes some floats otherwise (0.00001, 1e-7 for 1e-05, 1e-07); such
# floats are rare in a recording, and all of them go to ``json``
_SMALL = 1e-4
# an integer of 64 bits is below this; orjson makes a float of one beyond
_BIG = 2.0 ** 63


def _plain_for_dumps(value: Any) -> bool:
    """Does orjson encode ``value`` byte for byte as ``json`` does (or refuse it)?

    Level by level over the containers, one type test per value: strings are not
    read (orjson refuses lone surrogates itself, and a non-str key).
    """
    level = [value]
    for _ in range(_MAX_DEPTH):
        nxt: list[Any] = []
        for item in level:
            t = type(item)
            if t is dict:
                nxt.extend(item.values())
            elif t is list or t is tuple:
                nxt.extend(item)
            elif t is float:
                if not math.isfinite(item) or (item and -_SMALL < item < _SMALL):
                    return False
            elif t is not str and t is not int and t is not bool and item is not None:
                return False
        if not nxt:
            return True
        level = nxt
    return False  # deeper than orjson encodes, or circular


def _loads(data: bytes | str, max_depth: int) -> Any:
    value = orjson.loads(data)
    # one walk, level by level over the containers: an integer orjson made a float of,
    # and containers nested deeper than ``max_depth`` (the caller's limit, not orjson's)
    level = [value]
    depth = 0
    while level:
        depth += 1
        nxt: list[Any] = []
        for item in level:
            t = type(item)
            if t is dict or t is list:
                if depth > max_depth:
                    raise ValueError(f"nesting deeper than {max_depth} levels")
                nxt.extend(item.values() if t is dict else item)
            elif t is float and not -_BIG < item < _BIG:
                raise ValueError("an integer beyond 64 bits")
        level = nxt
    return value


def _dumps(value: Any) -> str | None:
    if not _plain_for_dumps(value):
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # a lone surrogate, a non-str key, an integer beyond 64 bits
        return None


loads_plain: Callable[[bytes | str, int], Any] | None = _loads if orjson is not None else None
dumps_plain: Callable[[Any], str | None] | None = _dumps if orjson is not None else None
