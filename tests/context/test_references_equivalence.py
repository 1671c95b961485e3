"""The compiled core, the pure-Python path and the specification's quadratic scan agree exactly.

Differential property tests over random and adversarial text: mixed scripts and string
widths (ASCII, Latin-1, CJK, emoji), full-width letters, hex ids, long words, paths,
CamelCase, capitals, snake_case, stop-words in other cases (``\\u212awargs`` lowers to
``kwargs``), repeated windows, empty texts, huge messages, lone surrogates, U+10FFFF and
NULs. For every history the whole observable state must be the same: the ``ReferenceMap``
(cited message ids, tool_use ids, quoted snippets), the strings each message still has on
file, the extraction, and the same after incremental ``add`` / ``update`` and a pickle
round trip. The pure-Python path also runs with its word-substring cache forced on
(``_Cached``: key words dropped and filed again keep their holders) and forgotten every
few words (``_Churning``), so every branch of that cache is compared.
The compiled side is skipped (with the reason) where the core did not build; under CI=1
``tests/context/test_references.py`` fails instead.
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opctx.context import references
from opctx.context.references import (
    HAVE_COMPILED_CORE,
    STOP_WORDS,
    ReferenceTracker,
    _extract_python,
    _quadratic_reference_scan,
    extract_distinctive,
)

pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")


class _Cached(ReferenceTracker):
    """The pure-Python path with its word cache on from the first key word."""

    _DIRECT_KEYS = 0


class _Churning(ReferenceTracker):
    """The pure-Python path with its word cache always on, dropped past three words or 20 characters."""

    _DIRECT_KEYS = 0
    _KNOWN_WORDS_MAX = 3
    _KNOWN_CHARS_MAX = 20


def _trackers(limit: int) -> dict[str, ReferenceTracker]:
    out = {
        "python": ReferenceTracker(compiled=False, limit=limit),
        "python, cached": _Cached(compiled=False, limit=limit),
        "python, churning cache": _Churning(compiled=False, limit=limit),
    }
    if HAVE_COMPILED_CORE:
        out["compiled"] = ReferenceTracker(compiled=True, limit=limit)
    return out


def _map(m) -> tuple:
    return m.cited_message_ids, m.cited_tool_use_ids, m.quoted_snippets_by_msg


# ------------------------------------------------------------------ strategies

_PIECES = [
    "src/app/main.py", "/home/me/src/app/main.py:12", "a/b", "ab/cd/ef", "request/response", "request/responses",
    "4f3a9c2e", "4f3a9c2e8b1d77aa00", "00114f3a9c2e", "1700000123", "decade", "abcdef", "123456",
    "ParseConfig", "ParseConfigError", "MyParseConfigErrors", "BehaviorMatch", "TestBehaviorMatching",
    "HTTPServer", "HTTPServers", "XMLHttpRequest", "Python3", "Python34", "UserId", "invitedUserIds",
    "`parse_config`", "parse_configuration", "`pytest`", "xpytestx", "`abc`", "abcd", "`ab cd`", "xab cdx",
    "`a b`", "__init__", "`__init__`", "one_list_request", "return_one_list_request", "`load the config`",
    "`配置文件`", "请检查配置文件是否正确", "配置", "`W × H`", "W × H!", "İstanbul", "ＦｕｌｌＷｉｄｔｈ",
    "TTTTTTTT", "T1T1T1T1", "`the`", "`kwargs`", "`\u212awargs`", "True", "TextContent", "`   `",
    "abcabcabcabc", "aaaaaaa", "\x00", "\ud800", "\udfff", "\U0010ffff", "😀", "`", "``", "\n", "/", "_", "-", ".",
]  # fmt: skip
_CODE = "aAbBfFgGzZ09_./-`\n \t()é配😀\x00\ud800"
_ANY = st.characters(exclude_categories=())  # every code point: surrogates, NUL, unassigned

_piece = st.one_of(
    st.sampled_from(_PIECES),
    st.text(alphabet=_CODE, max_size=24),
    st.text(alphabet=_ANY, max_size=12),
    # long words and runs: the CamelCase and hex scans, anchors far from the start
    st.builds(lambda p, n: p * n, st.sampled_from(["T", "T1", "a1", "x", "Ab", "ab/", "ab_", "`", "配", "abc"]), st.integers(1, 300)),
)
_text = st.one_of(
    st.just(""),
    st.builds(lambda pieces, sep: sep.join(pieces), st.lists(_piece, max_size=10), st.sampled_from(["", "", " ", "/", "`", "\n", "_", "配"])),
)
_message = st.fixed_dictionaries(
    {"content": _text},
    optional={"id": st.sampled_from(["a", "b", "c", "#1", "#2"]), "tool_use_id": st.sampled_from(["t1", "t2", "t3"])},
)


def _history(messages: list[dict]) -> list[dict]:
    """Plain messages and tool-result wrappers; repeated and missing ids on purpose."""
    out = []
    for m in messages:
        msg = {"role": "user", "content": m["content"]}
        if "id" in m:
            msg["id"] = m["id"]
        if "tool_use_id" in m:
            msg["content"] = ""
            msg["extra"] = {"blocks": [{"type": "tool_result", "tool_use_id": m["tool_use_id"], "content": m["content"]}]}
        out.append(msg)
    return out


_histories = st.lists(_message, min_size=1, max_size=12).map(_history)
_limits = st.sampled_from([32, 32, 1, 3, 100])
_settings = settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------ properties


def test_the_compiled_core_is_among_the_compared():
    if not HAVE_COMPILED_CORE:
        pytest.skip("compiled core not built: only the pure-Python path is compared with the quadratic scan here")
    assert "compiled" in _trackers(32)


@_settings
@given(_histories, _limits)
def test_every_tracker_equals_the_quadratic_scan(history, limit):
    expected = _map(_quadratic_reference_scan(history, limit))
    held = {}
    for name, tracker in _trackers(limit).items():
        assert _map(tracker.build(history)) == expected, name
        assert tracker.message_count == len(history)
        held[name] = tracker._uncited_strings()
    # the strings still on file (uncited messages' holders) are the same everywhere
    first = next(iter(held.values()))
    assert all(h == first for h in held.values()), held


@_settings
@given(_histories, _limits, st.data())
def test_incremental_and_pickled_trackers_equal_a_build(history, limit, data):
    expected = _map(_quadratic_reference_scan(history, limit))
    for name, tracker in _trackers(limit).items():
        cut = data.draw(st.integers(0, len(history)), label=f"{name}: pickled after")
        tracker.update(history[:cut])
        tracker = pickle.loads(pickle.dumps(tracker))
        for i in range(cut, len(history)):
            if data.draw(st.booleans(), label="add (else update)"):
                tracker.add(history[i])
            else:
                tracker.update(history[: i + 1])
        assert _map(tracker.map) == expected, name
        fresh = type(tracker)(compiled=tracker.compiled, limit=limit)
        fresh.build(history)
        assert tracker._uncited_strings() == fresh._uncited_strings(), name


@_settings
@given(_text, st.integers(-1, 70))
def test_extraction_is_the_same_everywhere(text, limit):
    expected = _extract_python(text, limit)
    if HAVE_COMPILED_CORE:
        assert references._refscan.extract(text, limit, STOP_WORDS) == expected
    if limit == 32:
        assert extract_distinctive(text) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["T", "a1", "x", "Ab", "ab/", "`", "配", "parse_config", "4f3a9c2e", "\ud800"]), st.integers(20_000, 100_000), _text)
def test_huge_messages(unit, repeat, other):
    # one huge run glued to ordinary text, then cited from inside a longer run
    huge = unit * repeat
    history = _history([{"content": other + huge}, {"content": "x" + huge[: len(huge) // 2] + other}, {"content": huge + huge}])
    expected = _map(_quadratic_reference_scan(history))
    for name, tracker in _trackers(32).items():
        assert _map(tracker.build(history)) == expected, name
