"""The visual toolkit on real recorded transcripts (skipped where the corpus is absent).

Real Claude Code recordings with real compactions are parsed (no database) and
drawn: the page must hold no raw markup from the transcript, every recorded
compaction must be listed and diffable in the shared layout, and the graph must
carry the compaction membership the summary names.
"""

from __future__ import annotations

import json
import re

import pytest

from opctx.dag.nodes import Graph
from opctx.viz.diff import compare_compaction, list_compactions
from opctx.viz.graph import render_graph, to_networkx, vis_network_js

pytestmark = [pytest.mark.corpus, pytest.mark.slow]


def _compacted_recordings(corpus_dir, limit=4):
    manifest = json.loads((corpus_dir / "manifest.json").read_text(encoding="utf-8"))
    picked = [e for e in manifest
              if e["format"] == "claude_code_jsonl" and (e["stats"].get("compact_boundary") or 0) > 0]
    picked.sort(key=lambda e: e["bytes"])
    return picked[:limit]


def test_recorded_compactions_render_and_diff(corpus_dir):
    from opctx.importers import parse_path

    entries = _compacted_recordings(corpus_dir)
    if not entries:
        pytest.skip("no Claude Code recording with a compaction in the corpus")
    for entry in entries:
        sessions = parse_path(corpus_dir / entry["file"], on_error="skip")
        main = max(sessions, key=lambda s: len(s.calls))
        graph = Graph(main.calls)
        listed = list_compactions(graph)
        assert len(listed) == len(main.recorded_compactions), entry["file"]
        assert listed.recorded.all()

        page = render_graph(graph, head=main.head).html
        own = page.replace(vis_network_js(), "")
        assert own.count("<script") == 3, entry["file"]  # ours only: data, library, init
        data = re.search(r'type="application/json">(.*?)</script>', page, re.S).group(1)
        assert "<" not in data and ">" not in data

        g = to_networkx(graph, head=main.head)
        for index, row in listed.iterrows():
            diff = compare_compaction(graph, compaction=index)
            after = diff.rows[diff.rows.side == "after"]
            assert (after.status == "summary").sum() == 1
            folded = diff.rows[(diff.rows.side == "before") & (diff.rows.status == "folded")]
            assert len(folded) == row.folded > 0
            if index == len(listed) - 1:  # the latest compaction decides membership
                assert all(g.nodes[n]["compaction"] == "folded" for n in folded.original_id)
