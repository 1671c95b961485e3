"""The seeded mutation fuzzer over every sample: thousands of damaged recordings, each
imported or refused with file and reason; ``--on-error skip`` always goes on, and what it
parses is storable. Type confusion: every field every importer declares, given every other
JSON type, is named with file, line and field, and costs no more than its record."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from opctx.importers import TranscriptError, import_paths
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
    from opctx.dag.store import connect

    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    conn = connect(":memory:")  # what is parsed must also be storable
    for case in cases(samples, CASES, seed=SEED):
        outcome = check(case, tmp_path, conn)  # raises FuzzFailure on a broken contract
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


# -- type confusion: every field every importer declares, given every other JSON type ----------


@pytest.mark.slow
def test_every_declared_field_survives_every_other_type(tmp_path):
    """Each field of each importer's table (``opctx.importers.fields``), where the samples
    have it (or could), is given a value of every type it does not accept: strict mode
    names file, line and field; lenient mode imports the rest of the session, names file,
    line and field of what it skipped or kept as text, and stores what it parsed."""
    from opctx.dag.store import connect
    from opctx.importers.fuzz import check_field, field_cases, tables

    samples = sample_files(SAMPLES, export_to=tmp_path)
    conn = connect(":memory:")
    covered: set[tuple[int, str, str]] = set()
    outcomes: collections.Counter[str] = collections.Counter()
    work = tmp_path / "cases"
    work.mkdir()
    for case in field_cases(samples, per_field=1, seed=SEED):
        outcomes[check_field(case, work, conn).status] += 1  # raises FuzzFailure on a breach
        covered.add((id(case.table), case.field.path, repr(case.field.when)))
        (work / f"{case.index:05d}-field-{case.name}").unlink()
    declared = {(id(t), f.path, repr(f.when)) for t in tables() for f in t.fields}
    assert declared - covered == set(), "declared fields no case reached"
    assert sum(outcomes.values()) > 1_000 and outcomes["imported"] > outcomes["redetected"]


def test_a_wrong_typed_field_is_one_line_and_the_session_imports(tmp_path):
    """The cases that sank a whole session with an internal message and no line number."""
    import json

    from opctx.importers import parse_path
    from opctx.importers.writer import write_session

    def mutated(sample: str, pick, change) -> Path:
        lines = (SAMPLES / sample).read_text(encoding="utf-8").splitlines()
        n = next(i for i, line in enumerate(lines) if pick(json.loads(line)))
        record = json.loads(lines[n])
        change(record)
        lines[n] = json.dumps(record)
        out = tmp_path / f"{n + 1}-{sample}"
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return out

    cc = "7f3c2a10-5b8e-4d2a-9c61-0a1b2c3d4e5f.jsonl"
    codex = "rollout-2026-02-02T10-00-00-019c0000-aaaa-7bbb-8ccc-0123456789ab.jsonl"
    tool_use = lambda r: r.get("type") == "assistant" and any(  # noqa: E731
        isinstance(b, dict) and b.get("type") == "tool_use" for b in r["message"]["content"])
    cases = [
        (cc, lambda r: r.get("type") == "assistant", lambda r: r["message"].update(model=["x"]),
         "field message.model: expected a string, got list"),
        (cc, tool_use, lambda r: [b.update(name={"a": 1}) for b in r["message"]["content"]
                                  if b.get("type") == "tool_use"], "name: expected a string, got object"),
        (codex, lambda r: r["type"] == "response_item" and r["payload"].get("type") == "function_call",
         lambda r: r["payload"].update(name=7), "field payload.name: expected a string, got number"),
        (codex, lambda r: r["type"] == "turn_context", lambda r: r["payload"].update(model=["x"]),
         "field payload.model: expected a string, got list"),
        *[("hermes_sessions.jsonl", lambda r: "model" in r, lambda r, v=value: r.update(model=v),
           f"field model: expected a string, got {kind}")
          for value, kind in ((3, "number"), (["x"], "list"), ({"m": 1}, "object"))],
    ]
    for sample, pick, change, said in cases:
        path = mutated(sample, pick, change)
        line = int(path.name.split("-")[0])
        with pytest.raises(TranscriptError) as err:
            parse_path(path)
        assert err.value.line == line and said in err.value.reason and "Error" not in str(err.value)
        sessions = parse_path(path, on_error="skip")
        issues = [i for s in sessions for i in s.skipped]
        assert [(i.line, said in i.reason) for i in issues] == [(line, True)], issues
        intact = tmp_path / f"intact-{sample}"  # beside it, without the sample's side files
        intact.write_bytes((SAMPLES / sample).read_bytes())
        whole = parse_path(intact)
        assert sum(len(s.calls) for s in sessions) == sum(len(s.calls) for s in whole)  # nothing else lost
        for s in sessions:
            write_session(s, tmp_path / "x.db", replace=True)  # and the store takes it


def test_a_damaged_call_in_a_run_folder_is_named_and_the_run_imports(tmp_path):
    """A folder of one run's completion logs with one call given a wrong-typed field or a
    mutation: strict names the file; lenient imports the run or names the folder's file;
    nothing else is raised and what is parsed is storable."""
    import shutil

    from opctx.dag.store import connect
    from opctx.importers import parse_path
    from opctx.importers.fuzz import field_cases
    from opctx.importers.writer import write_session

    run = sorted((SAMPLES / "openhands_completions_run").iterdir())
    conn = connect(":memory:")
    imported = 0
    for n, target in enumerate(run):
        damaged = [c.data for c in field_cases([target], per_field=1, seed=SEED)][::7]
        damaged += [c.data for c in cases([target], 12, seed=SEED + n)]
        for i, data in enumerate(damaged):
            folder = tmp_path / f"run-{n}-{i}"
            folder.mkdir()
            for f in run:
                shutil.copy(f, folder / f.name)
            (folder / target.name).write_bytes(data)
            for mode in ("stop", "skip"):
                try:
                    sessions = parse_path(folder, on_error=mode)
                except TranscriptError as exc:
                    assert str(exc).startswith(str(folder)) and "Error" not in exc.reason, exc
                    continue
                for s in sessions:
                    write_session(s, conn, replace=True)
                imported += mode == "skip"
    assert imported > 20
