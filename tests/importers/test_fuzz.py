"""The seeded mutation fuzzer over every sample: thousands of damaged
recordings, each imported or refused with file and reason; ``--on-error skip`` always goes on."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from opctx.importers import import_paths
from opctx.importers.fuzz import MUTATIONS, cases, check, mutate, sample_files

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
CASES = 2_400  # 200 per sample (12): every mutation on every sample 20 times
SEED = 20260115


@pytest.fixture(scope="module")
def samples() -> list[Path]:
    files = sample_files(SAMPLES)
    assert len(files) >= 11
    return files


def test_the_corpus_is_deterministic(samples):
    first = [(c.name, c.mutation, c.data) for c in cases(samples, 60, seed=SEED)]
    again = [(c.name, c.mutation, c.data) for c in cases(samples, 60, seed=SEED)]
    other = [(c.name, c.mutation, c.data) for c in cases(samples, 60, seed=SEED + 1)]
    assert first == again and first != other
    import random

    data = SAMPLES.joinpath("openai_chat.json").read_bytes()
    assert mutate(data, "lone_surrogate", random.Random(1)) == mutate(data, "lone_surrogate", random.Random(1))


def test_every_case_imports_or_fails_cleanly(samples, tmp_path):
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    for case in cases(samples, CASES, seed=SEED):
        outcome = check(case, tmp_path)  # raises FuzzFailure on a broken contract
        outcomes[outcome.status] += 1
        seen[(case.name, case.mutation)] += 1
        (tmp_path / f"{case.index:05d}-{case.mutation}-{case.name}").unlink()
    assert sum(outcomes.values()) == CASES >= 2_000
    assert {m for _, m in seen} == set(MUTATIONS)
    assert {n for n, _ in seen} == {p.name for p in samples}
    # the mutations leave both kinds of outcome: the fuzzer is neither too weak nor too strong
    assert outcomes["imported"] > CASES // 4 and outcomes["failed"] > CASES // 10


def test_skip_always_goes_on_to_the_next_file(samples, tmp_path):
    """Folders of damaged files, each ending with an intact one: the intact one is imported."""
    batch = 60
    all_cases = list(cases(samples, 600, seed=SEED + 7))
    intact = SAMPLES / "openai_chat.json"
    for start in range(0, len(all_cases), batch):
        folder = tmp_path / f"batch{start:04d}"
        folder.mkdir()
        for case in all_cases[start:start + batch]:
            (folder / f"{case.index:05d}-{case.mutation}-{case.name}").write_bytes(case.data)
        (folder / "zzz-intact.json").write_bytes(intact.read_bytes())
        report = import_paths([folder], tmp_path / f"{start}.db", on_error="skip")
        names = {Path(w["path"]).name for w in report.written}
        assert "zzz-intact.json" in names, report.failed[-3:]
        for path, message in report.failed:
            assert message.startswith(path), message
            assert "internal error" not in message, message
        # every file found is accounted for: parsed (written or already present), failed or
        # ignored (a damaged Aider file without its header is not a candidate at all)
        assert report.files + len(report.failed) + len(report.ignored) == report.candidates > batch - 10
