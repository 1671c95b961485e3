"""ReferenceTracker (spec §3.3): distinctive strings, citation, agreement with the O(n^2) scan.

Tracker tests run on both cores, the compiled one and the pure-Python path: both cite what
the quadratic scan cites, with the same snippets (``test_references_equivalence.py`` checks
it over random and adversarial text).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context import references
from opctx.context.references import (
    _CAMEL,
    _CAMEL_LINEAR,
    _CHAR,
    _HEX_ID,
    _TOKEN,
    _WITHIN,
    HAVE_COMPILED_CORE,
    MAX_DISTINCTIVE,
    STOP_WORDS,
    ReferenceTracker,
    _anchor,
    _extract_python,
    _quadratic_reference_scan,
    build_reference_map,
    extract_distinctive,
)
from opctx.dag.messages import message_to_call
from opctx.lab.synthetic_history import make_history

needs_core = pytest.mark.skipif(not HAVE_COMPILED_CORE, reason="compiled core not built")


@pytest.fixture(params=["compiled", "python"])
def core(request) -> str:
    if request.param == "compiled" and not HAVE_COMPILED_CORE:
        pytest.skip("compiled core not built")
    return request.param


def _tracker(core: str, **kwargs) -> ReferenceTracker:
    return ReferenceTracker(compiled=core == "compiled", **kwargs)


def test_compiled_core_is_built_in_ci():
    # setup.py marks the extension optional so installs without a compiler still work;
    # CI has one, and a silent fallback there would hide a broken build
    if os.environ.get("CI") and not HAVE_COMPILED_CORE:
        pytest.fail("opctx.context._refscan did not build")
    assert ReferenceTracker().compiled == HAVE_COMPILED_CORE
    with pytest.raises(RuntimeError) if not HAVE_COMPILED_CORE else contextlib.nullcontext():
        ReferenceTracker(compiled=True)


def _msg(i: int, text: str, role: str = "assistant") -> dict:
    return {"id": f"m{i}", "role": role, "content": text}


def _tool_result(i: int, tool_use_id: str, text: str) -> dict:
    return {
        "id": f"m{i}",
        "role": "user",
        "content": "",
        "extra": {"blocks": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": text}]},
    }


# ---------------------------------------------------------------- extraction


def test_each_kind_is_extracted_in_priority_order():
    text = "see ParseConfig and `load_settings` in src/app/config.py at commit 4f3a9c2e"
    assert extract_distinctive(text) == ["src/app/config.py", "4f3a9c2e", "load_settings", "ParseConfig"]


def test_filters():
    # short path, hex word without digit, capitalised English word, acronym, stop-words
    text = "a/b ok decade facade Running HTTP `the` True TextContent AssistantMessage"
    assert extract_distinctive(text) == []
    assert extract_distinctive("id 123456 and abcdef1") == ["123456", "abcdef1"]
    assert extract_distinctive("Python3 and HTTPServer") == ["Python3", "HTTPServer"]


def test_backtick_does_not_span_two_quoted_spans():
    assert extract_distinctive("use `foo_a` then `bar_b` now") == ["foo_a", "bar_b"]


def test_at_most_32_and_deduplicated():
    paths = " ".join(f"src/module_{i}/file.py" for i in range(50))
    out = extract_distinctive(paths + " " + paths)
    assert len(out) == MAX_DISTINCTIVE and len(set(out)) == MAX_DISTINCTIVE
    assert out[0] == "src/module_0/file.py"


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=500))
def test_extraction_is_bounded_and_each_string_is_in_the_text(text):
    out = extract_distinctive(text)
    assert len(out) <= MAX_DISTINCTIVE and len(set(out)) == len(out)
    assert all(s in text for s in out)


# code-like text: every class the scans tell apart, plus non-ASCII of 1, 2 and 4 bytes
_CODE_ALPHABET = "aAbBfFgGzZ09_./-`\n \t()é配😀"


@needs_core
@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=_CODE_ALPHABET, max_size=300), st.integers(min_value=-1, max_value=40))
def test_compiled_extraction_equals_the_regexes(text, limit):
    assert references._refscan.extract(text, limit, STOP_WORDS) == _extract_python(text, limit)


@needs_core
@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400))
def test_compiled_extraction_equals_the_regexes_on_any_text(text):
    assert references._refscan.extract(text, MAX_DISTINCTIVE, STOP_WORDS) == _extract_python(text)


@needs_core
@pytest.mark.parametrize("limit", [63, 64, 65, 1000, 10**9])
def test_compiled_extraction_with_a_large_limit(limit):
    # past 64 strings the compiled selection switches from in-place comparisons to a set
    words = [f"src/m{i % 150}/f.py 1a2b3c{i % 90:02d} `snip {i % 70}` Parse{i % 80}Config" for i in range(400)]
    text = " ".join(words)
    out = references._refscan.extract(text, limit, STOP_WORDS)
    assert out == _extract_python(text, limit)
    assert len(out) == min(limit, 150 + 90 + 70 + 80)


@needs_core
def test_compiled_extraction_equals_the_regexes_on_synthetic_text():
    for m in make_history(400, seed=5):
        text = references.message_text(m)
        assert references._refscan.extract(text, MAX_DISTINCTIVE, STOP_WORDS) == _extract_python(text)


# ---------------------------------------------------------------- citation


def test_tool_result_cited_by_later_message(core):
    history = [
        _msg(0, "please look at the repo", "user"),
        {"id": "m1", "role": "assistant", "content": "", "tool_calls": [{"id": "t1", "name": "ls", "arguments": {"path": "."}}]},
        _tool_result(2, "t1", "src/opctx/engine.py\nsrc/opctx/budget.py"),
        _tool_result(3, "t2", "nothing interesting here at all"),
        _msg(4, "The engine lives in src/opctx/engine.py, I will edit it."),
    ]
    refs = _tracker(core).build(history)
    assert "m2" in refs.cited_message_ids
    assert refs.is_cited(tool_use_id="t1") and not refs.is_cited(tool_use_id="t2")
    assert refs.quoted_snippets_by_msg["m2"] == {"src/opctx/engine.py"}
    assert "m3" not in refs.cited_message_ids


def test_direction_matters_earlier_mention_does_not_cite(core):
    history = [_msg(0, "I will check src/opctx/engine.py"), _msg(1, "src/opctx/engine.py contents...")]
    refs = _tracker(core).build(history)
    # m1 repeats m0's path: m0 is cited, m1 (the last message) is not
    assert refs.cited_message_ids == {"m0"}


def test_string_held_by_several_sources_cites_all(core):
    history = [_msg(0, "first src/a/b/c.py"), _msg(1, "again src/a/b/c.py"), _msg(2, "finally src/a/b/c.py")]
    assert _tracker(core).build(history).cited_message_ids == {"m0", "m1"}
    assert _quadratic_reference_scan(history).cited_message_ids == {"m0", "m1"}


@pytest.mark.parametrize(
    ("source", "later"),
    [
        ("see BehaviorMatch", "class TestBehaviorMatching:"),  # hump pair: camel inside a longer camel
        ("const UserId = 1", "invitedUserIds = useMemo()"),  # hump and next character
        ("file src/app/main.py", "/home/me/repo/src/app/main.py:12"),  # interior word: path inside a path
        ("commit 4f3a9c2", "merged 4f3a9c2e8b1d77aa00"),  # hex window: short id prefix of a full one
        ("commit 4f3a9c2", "merged 00114f3a9c2e8b1d77aa"),  # hex window: strictly inside a longer run
        ("call `one_list_request` now", "def return_one_list_request(self):"),  # snake_case part
        ("raise ParseConfigError", "class MyParseConfigErrors(Exception):"),  # hump pair
        ("`load the config` once", "we load the config twice"),  # interior word between spaces
        ("`配置文件` 已更新", "请检查配置文件是否正确"),  # no ASCII word: direct check
    ],
)
def test_embedded_occurrences_are_found(core, source, later):
    history = [_msg(0, source), _msg(1, later)]
    quadratic = _quadratic_reference_scan(history)
    assert quadratic.cited_message_ids == {"m0"}, "fixture must be a real citation"
    assert _tracker(core).build(history).cited_message_ids == {"m0"}


@pytest.mark.parametrize(
    ("string", "anchor"),
    [
        ("ParseConfigError", (_TOKEN, ("Parse", "Config"))),  # the second hump is interior
        ("BehaviorMatch", (_TOKEN, ("Behavior", "M"))),  # hump and next character
        ("Python3", (_TOKEN, ("Python", "3"))),
        ("4f3a9c2e", (_TOKEN, "3a9c2e")),  # a hex id: its last window
        ("src/app/load_config.py", (_TOKEN, "load_config")),  # the snake_case interior word
        ("one_list_request", (_TOKEN, "list_r")),  # inside a snake_case word
        ("load the config", (_TOKEN, "the")),  # the longest interior word
        ("HTTPServer", (_WITHIN, "HTTPServer")),  # a text holding it has a word holding it
        ("parse_config", (_WITHIN, "parse_config")),
        ("request/response", (_WITHIN, "response")),  # two edge words: the longer
        ("ab cd", (_CHAR, "a")),  # edge words too short: a character, not the space
        ("配置文件", (_CHAR, "件")),  # no ASCII word
    ],
)
def test_anchors(string, anchor):
    # single alphanumeric words take a shortcut past the word split: same anchors
    assert _anchor(string, lambda c: 0) == anchor


def test_stop_words_never_hold_a_slash_or_a_hex_id():
    # _select relies on it to skip the stop-word check for paths and ids
    assert not any("/" in w or (_HEX_ID.fullmatch(w) and not w.isalpha()) for w in STOP_WORDS)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aZT1b_ /", max_size=80))
def test_linear_camel_regex_matches_the_spec_regex(text):
    # the one-attempt-per-run form used for long words gives the same matches
    assert _CAMEL_LINEAR.findall(text) == _CAMEL.findall(text)


_PATHOLOGICAL = {
    "capitals": "T" * 200_000,
    "capitals and digits": "T1" * 100_000,
    "hex": "a1" * 100_000,
    "one long word": "x" * 200_000,
    "long path": "ab/" * 70_000,
    "long snake_case word": "ab_" * 70_000,
    "long CamelCase word": "Ab" * 100_000,
    "backticks": "`" * 200_000,
}


@pytest.mark.parametrize("name", sorted(_PATHOLOGICAL))
def test_pathological_text_is_handled_in_linear_time(core, name):
    # each took minutes with a quadratic step (a CamelCase retry per capital, the prefixes
    # and suffixes of a hex run); linear now, so the suite stays fast
    text = _PATHOLOGICAL[name]
    strings = extract_distinctive(text)
    # worked out from the spec's regexes: the whole run is a path, an id, a CamelCase word;
    # the others hold no path, no id with a digit, no snippet, no lower-case CamelCase
    whole_run = name in ("hex", "long path", "long CamelCase word")
    assert strings == ([text] if whole_run else [])
    tracker = _tracker(core)
    tracker.add(_msg(0, text))
    tracker.add(_msg(1, "and again: " + text))
    assert tracker.map.cited_message_ids == ({"m0"} if strings else set())


@pytest.mark.parametrize(
    ("source", "later"),
    [
        ("`abc`", "abcd"),  # a one-word snippet glued to more letters
        ("call `parse_config` first", "parse_configuration() failed"),
        ("HTTPServer", "HTTPServers"),
        ("`ab cd`", "xab cdx"),  # two short edge words
        ("see request/response", "the request/responses"),  # two edge words, one glued
    ],
)
def test_strings_glued_inside_longer_words_are_found(core, source, later):
    # the pure-Python path used to file these under their longest word and look it up
    # among the later text's whole words: it missed them (the compiled core did not)
    history = [_msg(0, source), _msg(1, later)]
    assert _quadratic_reference_scan(history).cited_message_ids == {"m0"}
    _assert_same_as_quadratic(_tracker(core).build(history), _quadratic_reference_scan(history))


@pytest.mark.parametrize(
    "texts",
    [
        ["`aaa`", "`bbb`", "bbb aaa"],  # both cited by one text, the later-filed one found first
        ["`aaa`", "`bbb`", "bbb", "aaa"],  # the later message cited first
    ],
)
def test_repeated_ids_keep_the_snippets_of_the_last_cited_message(core, texts):
    # two messages share the id "a": the quadratic scan visits sources in order, so the
    # snippets of the higher index win; the trackers used to keep those of the last citation
    history = [dict(_msg(i, t), id="a" if i < 2 else f"x{i}") for i, t in enumerate(texts)]
    slow = _quadratic_reference_scan(history)
    assert slow.quoted_snippets_by_msg == {"a": {"bbb"}}
    _assert_same_as_quadratic(_tracker(core).build(history), slow)


def test_word_cache_switches_on_and_off_and_stays_exact():
    # the pure-Python word-substring table checks a few key words against each text, and
    # past ReferenceTracker._DIRECT_KEYS keeps a cache of the words it has seen; citing
    # most of them switches it back. The map equals the quadratic scan's at every step.
    limit = ReferenceTracker._DIRECT_KEYS
    history = [_msg(i, f"`qzx{i}` glued ab{i}cd") for i in range(3 * limit)]
    history += [_msg(len(history) + i, f"the qzx{i}x was cited") for i in range(0, 3 * limit, 2)]
    history += [_msg(len(history) + i, f"then xqzx{i}") for i in range(3 * limit - 2)]
    tracker = ReferenceTracker(compiled=False)
    states = []
    for n, msg in enumerate(history, 1):
        tracker.add(msg)
        states.append(tracker._word_cache)
        _assert_same_as_quadratic(tracker.map, _quadratic_reference_scan(history[:n]))
    assert True in states and states[-1] is False


def test_incremental_add_equals_build(core):
    history = make_history(300, seed=3)
    tracker = _tracker(core)
    for m in history:
        tracker.add(m)
    full = _tracker(core).build(history)
    assert tracker.map.cited_message_ids == full.cited_message_ids
    assert tracker.map.cited_tool_use_ids == full.cited_tool_use_ids
    assert tracker.message_count == 300


def test_update_extends_or_rebuilds(core):
    history = make_history(120, seed=4)
    tracker = _tracker(core)
    tracker.update(history[:100])
    assert tracker.update(history).cited_message_ids == build_reference_map(history).cited_message_ids
    # a different branch: rebuilt from scratch
    other = make_history(50, seed=9)
    other = [dict(m, id=f"x{i}") for i, m in enumerate(other)]
    assert tracker.update(other).cited_message_ids == build_reference_map(other).cited_message_ids
    assert tracker.message_count == 50


def test_update_sees_a_message_edited_under_its_id(core):
    # GraphStore.update keeps the node id: the first and last ids match, the history does not
    history = [
        _msg(0, "the failing module is src/parser/core.py"),
        _msg(1, "nothing of note"),
        _msg(2, "still looking"),
    ]
    tracker = _tracker(core)
    assert tracker.update(history).cited_message_ids == set()
    edited = [history[0], _msg(1, "src/parser/core.py raises on empty input"), history[2]]
    assert tracker.update(edited).cited_message_ids == {"m0"}
    # equal copies (the branch re-read from the store) extend, they do not rebuild
    copies = [dict(m) for m in edited] + [_msg(3, "more")]
    before = tracker.map
    assert tracker.update(copies) is before and tracker.message_count == 4


def test_pickled_tracker_carries_on_where_it_stopped(core):
    history = make_history(160, seed=6)
    tracker = _tracker(core)
    tracker.build(history[:100])
    copy = pickle.loads(pickle.dumps(tracker))
    for m in history[100:]:
        tracker.add(m)
        copy.add(m)
    assert copy.map.cited_message_ids == tracker.map.cited_message_ids
    assert copy.map.quoted_snippets_by_msg == tracker.map.quoted_snippets_by_msg
    assert copy.message_count == 160


def test_clock_stamps_the_map_and_calls_are_accepted(core):
    history = [_msg(0, "open src/app/main.py", "user"), _msg(1, "src/app/main.py has 3 functions")]
    tracker = _tracker(core, clock=lambda: 42.0)
    refs = tracker.build([message_to_call(dict(m, timestamp=1.0, parent_id=None)) for m in history])
    assert refs.last_built_at == 42.0 and refs.cited_message_ids == {"m0"}


def test_messages_without_ids_use_their_index(core):
    refs = _tracker(core).build([{"role": "user", "content": "src/app/main.py"}, {"role": "assistant", "content": "src/app/main.py"}])
    assert refs.cited_message_ids == {"#0"}


# ---------------------------------------------------------------- agreement


def _assert_same_as_quadratic(fast, slow):
    assert fast.cited_message_ids == slow.cited_message_ids
    assert fast.cited_tool_use_ids == slow.cited_tool_use_ids
    assert fast.quoted_snippets_by_msg == slow.quoted_snippets_by_msg


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("style", ["anthropic", "openai"])
def test_agreement_with_quadratic_scan_on_synthetic_histories(core, seed, style):
    history = make_history(400, seed=seed, style=style)
    _assert_same_as_quadratic(_tracker(core).build(history), _quadratic_reference_scan(history))


_TOKENS = [
    "src/app/main.py", "lib/util/io.rs", "4f3a9c2e", "4f3a9c2e8b1d", "1700000123", "ParseConfig",
    "ParseConfigError", "TestParseConfig", "`load_it`", "load_it", "`配置`", "配置", "hello", "world",
    "UserId", "UserIds", "a1b2c3d4", "deadbeef42", "/", "(", ")", ",", ".", "\n",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_TOKENS), max_size=12), min_size=1, max_size=15), st.booleans())
def test_agreement_property(messages, glue):
    # tokens joined by spaces (or glued, which exercises the embedded cases)
    sep = "" if glue else " "
    history = [_msg(i, sep.join(tokens)) for i, tokens in enumerate(messages)]
    slow = _quadratic_reference_scan(history)
    if HAVE_COMPILED_CORE:
        _assert_same_as_quadratic(ReferenceTracker(compiled=True).build(history), slow)
    _assert_same_as_quadratic(ReferenceTracker(compiled=False).build(history), slow)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=_CODE_ALPHABET, max_size=120), min_size=1, max_size=12))
def test_trackers_equal_quadratic_scan_on_random_text(texts):
    # mixed string widths: an ASCII string must be found inside a text holding "配" or "😀"
    history = [_msg(i, t) for i, t in enumerate(texts)]
    slow = _quadratic_reference_scan(history)
    if HAVE_COMPILED_CORE:
        _assert_same_as_quadratic(ReferenceTracker(compiled=True).build(history), slow)
    _assert_same_as_quadratic(ReferenceTracker(compiled=False).build(history), slow)


@needs_core
def test_compiled_core_tracks_only_uncited_strings():
    scanner = references._refscan.Scanner(MAX_DISTINCTIVE, STOP_WORDS)
    assert scanner.add("open src/app/main.py and `load_it`") == []
    assert scanner.live_strings == 2 and scanner.strings(0) == ["src/app/main.py", "load_it"]
    assert scanner.add("no reference here") == []
    assert scanner.add("/home/me/src/app/main.py:12") == [(0, ["src/app/main.py"])]
    # message 0 is cited: its strings leave the table, message 2's own path is filed
    assert scanner.strings(0) == [] and scanner.live_strings == 1 and scanner.message_count == 3
    with pytest.raises(TypeError):
        scanner.add(b"bytes")
    with pytest.raises(IndexError):
        scanner.strings(3)


@needs_core
def test_compiled_scanner_refuses_a_nested_add():
    # Python code can run inside Scanner.add: here the stop-word set's __eq__ (a hash equal
    # to a candidate's). A nested add used to change the table, the message array and the
    # scratch arrays under the running one: uninitialised messages, then a crash.
    class Reentrant:
        scanner = None
        outcome: list = []

        def __hash__(self):
            return hash("parse")

        def __eq__(self, other):
            try:
                self.scanner.add("`nested_one` and `nested_two`")
                self.outcome.append(None)
            except RuntimeError as e:
                self.outcome.append(e)
            return False

    hook = Reentrant()
    scanner = hook.scanner = references._refscan.Scanner(MAX_DISTINCTIVE, frozenset({hook, "x" * 20}))
    assert scanner.add("`parse` and `other`") == []
    # (a set lookup may call __eq__ more than once: every nested call is refused)
    assert hook.outcome and all(isinstance(e, RuntimeError) for e in hook.outcome)
    assert scanner.message_count == 1 and scanner.strings(0) == ["parse", "other"]
    assert scanner.add("parse it") == [(0, ["parse"])]


def test_agreement_on_random_glued_text(core):
    rng = random.Random(7)
    for _ in range(200):
        history = [_msg(i, "".join(rng.choice(_TOKENS) for _ in range(rng.randint(1, 10)))) for i in range(8)]
        _assert_same_as_quadratic(_tracker(core).build(history), _quadratic_reference_scan(history))


def _claude_code_messages(path: Path) -> list[dict]:
    out = []
    for n, line in enumerate(path.open(encoding="utf-8")):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        msg = entry.get("message") if isinstance(entry, dict) else None
        if entry.get("type") in ("user", "assistant") and isinstance(msg, dict):
            content = msg.get("content")
            m = {"id": entry.get("uuid") or f"l{n}", "role": msg.get("role", entry["type"]), "content": ""}
            if isinstance(content, str):
                m["content"] = content
            elif isinstance(content, list):
                m["extra"] = {"blocks": content}
            out.append(m)
    return out


@pytest.mark.slow
def test_agreement_on_real_transcripts(corpus_dir, core):
    files = sorted((corpus_dir / "claude_code_jsonl").rglob("*.jsonl"))
    assert files
    for path in files:
        history = _claude_code_messages(path)
        if len(history) < 2:
            continue
        _assert_same_as_quadratic(_tracker(core).build(history), _quadratic_reference_scan(history))
