"""The clients' trigger rules, version by version: each number pinned to where it was read."""

from __future__ import annotations

import logging

import pytest

from opctx.lab import client_rules
from opctx.lab.client_rules import (
    NEVER,
    TRIGGER_RULES,
    check_tokens,
    codex_reasoning_tokens,
    resolve_client_trigger,
    rule_for,
)

OPUS = "claude-opus-4-5-20251101"


def _res(version, **kw):
    return resolve_client_trigger("claude-code", context_window=200_000, model=kw.pop("model", OPUS),
                                  client_version=version, **kw)


@pytest.mark.parametrize("version, auto, warning, label", [
    # cli.js 1.0.0-1.0.15: 180000 * 0.92, warning 0.6 of it
    ("1.0.0", 165_600, 99_360, "claude-code 1.0.0-1.0.15"),
    ("1.0.15", 165_600, 99_360, "claude-code 1.0.0-1.0.15"),
    # cli.js 1.0.16-1.0.70: (200000 - max output) * 0.92; warning 0.6, then 0.8 from 1.0.51
    ("1.0.16", 154_560, 92_736, "claude-code 1.0.16-1.0.50"),
    ("1.0.70", 154_560, 123_648, "claude-code 1.0.51-1.0.70"),
    # cli.js 1.0.71-2.1.20: window - max output - 13000; warning 20000 below
    ("1.0.71", 155_000, 135_000, "claude-code 1.0.71-2.1.1"),
    ("2.0.74", 155_000, 135_000, "claude-code 1.0.71-2.1.1"),
    ("2.1.19", 155_000, 135_000, "claude-code 2.1.2-2.1.20"),
    # cli.js 2.1.21+: window - min(max output, 20000) - 13000
    ("2.1.21", 167_000, 147_000, "claude-code >=2.1.21"),
    ("2.1.101", 167_000, 147_000, "claude-code >=2.1.21"),
])
def test_each_version_resolves_its_read_rule(version, auto, warning, label):
    res = _res(version)
    assert (res.auto_tokens, res.warning_tokens, res.rule.label, res.known) == (auto, warning, label, True)
    assert "cli.js" in res.rule.source and version.split(".")[0] in res.rule.source


def test_auto_compaction_off_never_fires_and_moves_the_warning():
    # cli.js: threshold = autoCompactEnabled ? auto threshold : effective window; warning 20000 below
    off = _res("2.1.19", auto_compact=False)
    assert off.auto_tokens == NEVER and off.warning_tokens == 148_000 and not off.auto_compact
    assert _res("2.1.21", auto_compact=False).warning_tokens == 160_000
    assert _res("1.0.70", auto_compact=False).warning_tokens == int(168_000 * 0.8)
    assert off.overridden_by == ("auto_compact",)


def test_the_max_output_of_the_model_and_the_setting():
    # 3-5 models reserve 8,192 (cli.js 1.0.x and 2.x); the setting replaces the default 32,000
    sonnet35 = "claude-3-5-sonnet-20241022"
    assert _res("1.0.70", model=sonnet35).auto_tokens == int((200_000 - 8_192) * 0.92)
    assert _res("2.0.76", model=sonnet35).auto_tokens == 200_000 - 8_192 - 13_000
    assert _res("2.0.76", max_output_tokens=64_000).auto_tokens == 123_000  # '/context' 77.0k buffer
    assert _res("2.1.30", max_output_tokens=64_000).auto_tokens == 167_000  # capped at 20,000


def test_versions_without_a_sourced_rule_say_so(caplog, monkeypatch):
    monkeypatch.setattr(client_rules, "_WARNED_VERSIONS", set())
    with caplog.at_level(logging.WARNING, logger="opctx.lab.client_rules"):
        res = _res("0.2.125")
        _res("0.2.125")
    assert not res.known and res.rule_label.startswith("no sourced rule for claude-code '0.2.125'")
    assert len([r for r in caplog.records if "0.2.125" in r.getMessage()]) == 1
    assert rule_for("claude-code", None) == (client_rules.DEFAULT_TRIGGER_RULES["claude-code"], False)
    assert rule_for("codex", "0.77.0")[1] and rule_for("codex", None)[1]


def test_every_claude_code_version_from_1_0_has_exactly_one_row():
    for version in ("1.0.0", "1.0.16", "1.0.50", "1.0.51", "1.0.70", "1.0.71", "2.0.0", "2.1.1", "2.1.2",
                    "2.1.20", "2.1.21", "2.1.300"):
        parsed = client_rules.parse_version(version)
        assert sum(r.covers(parsed) for r in TRIGGER_RULES if r.client == "claude-code") == 1, version


def test_codex_limit_and_its_count():
    res = resolve_client_trigger("codex", context_window=258_400, model="gpt-5.2-codex", client_version="0.77.0")
    assert res.auto_tokens == 244_800 and res.rule.count == "last-response+reasoning"
    # estimate_reasoning_length = len * 3 / 4 - 650 (floor 0); approx_tokens_from_byte_count = ceil(bytes / 4)
    msgs = [{"role": "assistant", "reasoning_encrypted": ["x" * 4_000, "y" * 100]},
            {"role": "user", "content": "next"},
            {"role": "assistant", "reasoning_encrypted": ["z" * 8_000], "usage": {"input_tokens": 100,
                                                                                 "output_tokens": 10}}]
    assert codex_reasoning_tokens(msgs, 3) == (4_000 * 3 // 4 - 650 + 3) // 4
    # the reasoning after the last user message is the server's: not added
    assert check_tokens(msgs, 3, "last-response+reasoning") == 110 + 588


def test_claude_code_counts_what_came_after_the_last_response_from_2_1_2():
    msgs = [{"role": "assistant", "usage": {"input_tokens": 1_000, "cache_read_tokens": 99_000,
                                            "output_tokens": 500}},
            {"role": "tool", "content": "x" * 4_002},
            {"role": "tool", "content": "p" * 9_000, "inline_output": "preview" * 10},
            {"role": "system", "content": "display only", "display_only": True}]
    assert check_tokens(msgs, 4, "last-response") == 100_500
    # characters / 4 rounded as JavaScript's Math.round does (halves up)
    assert check_tokens(msgs, 4, "last-response+after") == 100_500 + 1_001 + 18
    assert check_tokens(msgs, 1, "last-response", start=1) is None
    # what a replay adds to its own last-response figure: the same estimate over its context
    from opctx.lab.client_rules import extra_check_tokens

    assert extra_check_tokens(msgs, "last-response+after") == 1_001 + 18
    assert extra_check_tokens(msgs, "last-response") == 0
    with pytest.raises(ValueError, match="count"):
        check_tokens(msgs, 4, "tokens")
