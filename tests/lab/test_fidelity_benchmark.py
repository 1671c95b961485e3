"""benchmarks/fidelity.py: any folder of transcripts, both modes, every variant, LOSO calibration, JSON."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from opctx.lab.calibrate import simulated_recording

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("fidelity_benchmark", ROOT / "benchmarks" / "fidelity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fidelity_benchmark"] = module
    spec.loader.exec_module(module)
    return module


fb = _load_benchmark()


@pytest.fixture(scope="module")
def report():
    histories = [simulated_recording(155_000, requests=110, seed=s, session_id=f"sim-{s}") for s in (3, 8)]
    histories.append(simulated_recording(150_000, requests=110, seed=9, version="2.0.74", session_id="sim-9"))
    return fb.measure(histories)


def test_every_variant_in_both_modes_per_client_version(report):
    assert not report["errors"]
    seen = {(r["mode"], r["variant"], r["version"]) for r in report["results"]}
    for mode in ("resync", "free"):
        for variant in fb.VARIANTS:
            assert {(mode, variant, "2.0.76"), (mode, variant, "2.0.74")} <= seen
    for r in report["results"]:
        assert r["client"] == "claude-code" and 0 <= r["within_one"] <= r["replayable"] <= r["automatic"]
        assert r["false_positives"] >= 0
    default = {(r["mode"], r["version"]): r for r in report["results"] if r["variant"] == "default"}
    # 2.0.76 recordings compact at the 2.0.x rule: the client's check predicts each one at the same request
    assert default[("resync", "2.0.76")]["share"] == 1.0 and default[("resync", "2.0.76")]["precision"] == 1.0
    assert "cli.js" in default[("resync", "2.0.76")]["rule_source"]
    per_version = [r for r in report["results"] if r["version"] != "all"]
    assert len(report["rows"]) == sum(r["automatic"] for r in per_version)


def test_calibration_is_reported_leave_one_session_out(report):
    (cal,) = report["calibration"]
    assert cal["client"] == "claude-code" and cal["unit"] == "tokens_before_window"
    assert cal["rows"] >= 4 and cal["loso_max_abs_error_tokens"] >= cal["loso_median_abs_error_tokens"] >= 0
    # the simulated client checks the last response: preTokens is that total, nothing appended after it counts
    assert report["check"] and all(c["pre_tokens"] == c["last_total"] for c in report["check"])


def test_the_unknown_version_warning_is_not_hidden():
    source = (ROOT / "benchmarks" / "fidelity.py").read_text(encoding="utf-8")
    assert "logging.ERROR" not in source and "level=logging.WARNING" in source


def test_any_folder_of_transcripts_and_json(tmp_path, capsys):
    if not SAMPLES.is_dir():
        pytest.fail("data/samples is missing")
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLES, corpus)
    assert fb.main(["--corpus", str(corpus), "--json", "--variants", "default"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sessions"] >= 1 and out["corpus"] == str(corpus)
    assert {"results", "rows", "calibration", "check", "errors", "revision"} <= set(out)
    assert fb.main(["--corpus", str(tmp_path / "absent")]) == 2
    assert fb.main(["--corpus", str(corpus), "--variants", "nonsense"]) == 2
