"""The examples that end ``opctx COMMAND --help`` (argparse epilogs, kept as written)."""

from __future__ import annotations

__all__ = ["EXAMPLES"]

EXAMPLES: dict[str, str] = {
    "import": """\
examples:
  opctx import ~/.claude/projects --db mine.db --on-error skip
  opctx import run.traj.json --db mine.db --format swe_agent --replace""",
    "sessions": """\
examples:
  opctx sessions                                  # $OPCTX_DB, else data/sample.db
  opctx sessions --db mine.db --sort nodes --limit 10
  opctx sessions --format claude_code --model opus --since 2026-01-01
  opctx sessions --min-nodes 150 --until 2026-03-31T12:00 --sort start --reverse
  opctx sessions --json | jq '.[].session_id'""",
    "show": """\
examples:
  opctx show cc-7f3c                               # a unique prefix is enough
  opctx show cc-7f3c --all --width 0               # every branch, lines not cut
  opctx show cc-7f3c --json""",
    "search": """\
examples:
  opctx search "context window"
  opctx search TODO --format codex --limit 50
  opctx search 'pytest NEAR(failed, 5)' --raw --session cc-7f3c""",
    "export": """\
examples:
  opctx export cc-7f3c --format openai -o messages.json
  opctx export cc-7f3c --format jsonl > session.jsonl   # re-importable""",
    "export-frames": """\
examples:
  opctx export-frames --db mine.db --out frames/
  python -c "import pandas as pd; print(pd.read_parquet('frames/turns.parquet').describe())"
  duckdb -c "SELECT format, count(*) FROM 'frames/sessions.parquet' GROUP BY 1\"""",
    "build-samples": """\
examples:
  opctx build-samples                              # data/sample.db of this checkout
  opctx build-samples --db /tmp/samples.db --no-scenarios""",
    "info": """\
examples:
  opctx info
  opctx info --json
  opctx info --db data/sample.db                   # + persisted token counts per estimator""",
    "presets": """\
examples:
  opctx presets list
  opctx presets show hermes                      # the policy as JSON ("client": the client's rules)
  opctx presets show claude-code --window 200000 --model claude-sonnet-4-5 --client-version 2.0.76
  opctx presets show codex --model gpt-5 | jq .trigger""",
}
