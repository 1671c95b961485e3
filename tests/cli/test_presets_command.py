"""``opctx presets``: the strategy presets and their compaction policies, as JSON."""

from __future__ import annotations

import json

import pytest

from opctx.cli import EXIT_OK, EXIT_USAGE, main
from opctx.context.policy import CompactionPolicy
from opctx.lab.presets import PRESETS, build_engine


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_presets_list(capsys):
    code, out, _ = run(capsys, "presets", "list")
    assert code == EXIT_OK
    assert [line.split()[0] for line in out.splitlines()] == list(PRESETS)
    code, out, _ = run(capsys, "presets", "list", "--json")
    rows = json.loads(out)
    assert [r["name"] for r in rows] == list(PRESETS)
    assert rows[1] == {"name": "claude-code", "client": "claude-code", "aging": "client",
                       "description": PRESETS["claude-code"].description}


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_show_prints_the_policy(capsys, name):
    code, out, _ = run(capsys, "presets", "show", name)
    assert code == EXIT_OK
    assert CompactionPolicy.from_dict(json.loads(out)) == PRESETS[name].policy


def test_presets_show_resolved_for_a_window_model_and_version(capsys):
    code, out, _ = run(capsys, "presets", "show", "claude-code", "--window", "200000",
                       "--model", "claude-sonnet-4-5", "--client-version", "2.0.76")
    assert code == EXIT_OK
    shown = CompactionPolicy.from_dict(json.loads(out))
    engine = build_engine("claude-code", context_window=200_000, model="claude-sonnet-4-5",
                          client_version="2.0.76")
    assert shown == engine.policy and shown.resolved
    assert shown.budget.output_reserve == 32_000 and shown.client.version == "2.0.76"


def test_presets_show_unknown_or_without_a_name(capsys):
    code, _, err = run(capsys, "presets", "show", "gpt-magic")
    assert code == EXIT_USAGE and "unknown preset 'gpt-magic'" in err and "hermes" in err
    with pytest.raises(SystemExit) as exc:
        main(["presets", "show"])
    assert exc.value.code == EXIT_USAGE
    for argv in (["presets"], ["presets", "list"], ["presets", "show"]):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--help"])
        assert exc.value.code == 0
    assert "usage: opctx presets" in capsys.readouterr().out
