"""benchmarks/summary_quality.py: the JSON shape, on the project's sample database."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from opctx.lab.probes import FAMILIES

ROOT = Path(__file__).resolve().parents[2]


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("summary_quality_benchmark", ROOT / "benchmarks" / "summary_quality.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["summary_quality_benchmark"] = module
    spec.loader.exec_module(module)
    return module


sq = _load_benchmark()


def test_json_has_exactly_the_documented_shape(capsys):
    assert sq.main(["--corpus", str(ROOT / "data" / "sample.db"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"strategies", "probes_per_cut_median", "weak_families"}
    assert set(report["strategies"]) == {"recorded", "structural", "masking", "keep-all", "drop-all"}
    for name, s in report["strategies"].items():
        assert set(s) == {"retention_pct", "context_tokens_median", "cuts"}, name
        assert set(s["retention_pct"]) <= set(FAMILIES) and s["cuts"] >= 2
    assert all(v in (None, 100.0) for v in report["strategies"]["keep-all"]["retention_pct"].values())
    assert isinstance(report["weak_families"], list) and report["probes_per_cut_median"] > 0


def test_text_report_names_the_coverage(capsys):
    assert sq.main(["--corpus", str(ROOT / "data" / "sample.db"), "--strategies", "recorded,keep-all"]) == 0
    out = capsys.readouterr().out
    assert "recorded Claude Code compactions with probes: 2 of 2" in out and "keep-all" in out
    assert sq.main(["--corpus", str(ROOT / "nowhere")]) == 2
