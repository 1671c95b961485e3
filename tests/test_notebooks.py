"""The notebooks as files: stored outputs that nbval compares, one data switch, any data.

(Executing them on the sample database is nbval's job: ``make test`` passes
``notebooks/`` with ``--nbval``, comparing each cell's output with the stored one; the
stored outputs are written by ``notebooks/store_outputs.py``. Here they also run on
single transcripts of formats that lack what the sample database has: compactions,
provider usage, tool calls, more than one session.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SAMPLES = ROOT / "data" / "samples"


def _sources(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]


def test_the_stories_are_there() -> None:
    names = [p.stem.split("_", 1)[0] for p in NOTEBOOKS]
    assert {"01", "02", "03", "04", "05", "06", "07", "09"} <= set(names) and names == sorted(set(names))


def test_the_fidelity_notebook_says_when_its_recordings_are_simulated() -> None:
    """Without a recorded automatic compaction it falls back to simulated recordings, and says so."""
    sources = "\n".join(_sources(ROOT / "notebooks" / "07_fidelity.ipynb"))
    assert "simulated_recording(" in sources and "SIMULATED" in sources
    assert 'mode=mode' in sources and "calibrate(" in sources and "loso_fidelity_table(" in sources


NOT_COMPARED = ("nbval-ignore-output", "nbval-skip")
# notebooks whose outputs nbval compares (a notebook added later is compared once its
# outputs are stored: make notebook-outputs NB=...)
COMPARED = ("01", "02", "03", "04", "05", "06", "07", "09")


def _code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]


def _compared(path: Path) -> bool:
    metadata = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    return (metadata.get("opctx") or {}).get("outputs") == "compared"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_are_only_what_nbval_compares(path: Path) -> None:
    """No pictures or widget views (never compared); a compared cell has its position as
    execution count (nbval skips a cell without one as "unrun"); a cell that is not compared
    has none, stores nothing and says why in its first line."""
    for i, cell in enumerate(_code_cells(path)):
        compared = _compared(path) and not set(cell["metadata"].get("tags", ())) & set(NOT_COMPARED)
        assert cell.get("execution_count") == (i + 1 if compared else None), f"{path.name} cell {i}"
        kinds = {k for out in cell.get("outputs", []) for k in out.get("data", {})}
        assert not kinds & {"image/png", "image/jpeg", "image/svg+xml",
                            "application/vnd.jupyter.widget-view+json"}, f"{path.name} cell {i}"
        if set(cell["metadata"].get("tags", ())) & set(NOT_COMPARED):
            assert not cell.get("outputs"), f"{path.name} cell {i}: output stored but not compared"
            first = "".join(cell["source"]).splitlines()[0]
            assert first.startswith("# output not compared by nbval: "), f"{path.name} cell {i}"
            assert len(first) > len("# output not compared by nbval: ") + 20  # says why
    if not _compared(path):
        assert not any(c.get("outputs") for c in _code_cells(path)), (
            f"{path.name} stores outputs nbval does not compare: store them with "
            "make notebook-outputs NB=notebooks/" + path.name)


def test_nbval_compares_at_least_half_of_all_code_cells() -> None:
    counts = {p.name: (sum(1 for c in _code_cells(p)
                           if not set(c["metadata"].get("tags", ())) & set(NOT_COMPARED))
                       if _compared(p) else 0, len(_code_cells(p))) for p in NOTEBOOKS}
    compared = sum(n for n, _ in counts.values())
    total = sum(t for _, t in counts.values())
    assert compared * 2 >= total, counts
    assert {p.name[:2] for p in NOTEBOOKS if _compared(p)} >= set(COMPARED)


def test_make_test_compares_outputs_with_the_sanitisers() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "--nbval " in makefile and "--nbval-lax" not in makefile
    assert "--nbval-sanitize-with notebooks/nbval_sanitize.cfg" in makefile
    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((ROOT / "notebooks" / "nbval_sanitize.cfg").read_text())
    assert len(patterns) >= 4
    import re

    def clean(text: str) -> str:
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text

    # two runs differ only in these; the figures beside them stay compared
    assert clean("PosixPath('/home/a/opctx/data/sample.db')") == clean("PosixPath('/x/data/sample.db')")
    assert clean("node u_4150322eb00a4e6e, 12 tokens") == clean("node u_a689f940ba50470b, 12 tokens")
    assert clean("node u_4150322eb00a4e6e, 12 tokens") != clean("node u_a689f940ba50470b, 13 tokens")
    assert clean("<object at 0x7f3a2c>") == clean("<object at 0x55d1e0>")
    assert clean("replayed in 42 ms") == clean("replayed in 1.5 s")
    assert clean("3 sessions, 40 turns") == "3 sessions, 40 turns"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_data_path_is_set_in_one_place(path: Path) -> None:
    assigned = [s for s in _sources(path) if "DB_PATH =" in s]
    assert len(assigned) == 1, f"{path.name}: DB_PATH is assigned in {len(assigned)} cells"


@pytest.mark.parametrize("path", NOTEBOOKS[1:], ids=lambda p: p.name)
def test_every_data_notebook_takes_its_data_from_the_one_switch(path: Path) -> None:
    """``OPCTX_DB`` (through ``default_database()``) picks the data of every notebook."""
    (cell,) = [s for s in _sources(path) if "DB_PATH =" in s]
    assert "DB_PATH = default_database()" in cell
    assert not any("sample.db" in s and "open_database(" in s for s in _sources(path))


def _run(path: Path, cwd: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()


@pytest.mark.slow
@pytest.mark.parametrize("sample", [
    "mini_swe_agent.traj.json",  # one session, no compaction, no provider usage
    "sample.aider.chat.history.md",  # lossy Markdown: no tool calls, no usage
    "openai_chat.json",  # a bare message list: one short session
], ids=["mini-swe-agent", "aider", "openai-chat"])
def test_notebooks_run_unchanged_on_a_single_transcript(sample, tmp_path, monkeypatch):
    if not (SAMPLES / sample).is_file():
        pytest.fail(f"data/samples/{sample} is missing")
    monkeypatch.setenv("OPCTX_DB", str(SAMPLES / sample))
    monkeypatch.setenv("OPCTX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    for path in NOTEBOOKS[1:]:
        _run(path, cwd=tmp_path)  # a CellExecutionError names the notebook's failing cell


# -- make lab: working copies, one data switch, no news ----------------------------------------


def _make(*args: str) -> str:
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-s", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True)
    return done.stdout


def test_make_lab_opens_ignored_working_copies_and_never_overwrites_them(tmp_path):
    import subprocess

    lab = tmp_path / "lab"
    tracked = {p.name: p.read_bytes() for p in NOTEBOOKS}
    _make("lab-files", f"LAB_DIR={lab}")
    copies = {p.name: p.read_bytes() for p in (lab / "notebooks").glob("*.ipynb")}
    assert copies == tracked
    mine = lab / "notebooks" / NOTEBOOKS[2].name
    mine.write_text(mine.read_text(encoding="utf-8").replace("Compaction tuner", "My tuner"),
                    encoding="utf-8")
    edited = mine.read_bytes()
    (lab / "notebooks" / NOTEBOOKS[0].name).unlink()  # a deleted copy comes back, current
    _make("lab-files", f"LAB_DIR={lab}")
    assert mine.read_bytes() == edited != tracked[mine.name]
    assert (lab / "notebooks" / NOTEBOOKS[0].name).read_bytes() == tracked[NOTEBOOKS[0].name]
    assert {p.name: p.read_bytes() for p in NOTEBOOKS} == tracked  # the checkout stays clean
    # JupyterLab runs on the copies, and the default folder is ignored by git
    command = _make("-n", "lab", f"LAB_DIR={lab}")
    assert f"--notebook-dir={lab}/notebooks" in command
    assert f"--LabApp.app_settings_dir={lab}/settings" in command
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q",
                              ".lab/notebooks/01_quickstart.ipynb"])
    assert ignored.returncode == 0, ".lab/ is not in .gitignore"


def test_make_lab_data_sets_the_one_switch(tmp_path):
    command = _make("-n", "lab", f"LAB_DIR={tmp_path}", "DATA=some/transcripts")
    assert "export OPCTX_DB" in command and "'some/transcripts'" in command
    assert "-m opctx.lab.sources" in command  # imported once, before JupyterLab starts (one line if not)
    assert "OPCTX_DB" not in _make("-n", "lab", f"LAB_DIR={tmp_path}").split("jupyter lab")[1]


def test_make_lab_turns_the_news_toast_off_with_the_real_setting(tmp_path):
    """``--LabApp.news_url=None`` stops the request but not the toast asking about news;
    ``fetchNews: "false"`` does. Checked against the installed JupyterLab's schema."""
    from jupyterlab.commands import get_app_dir

    _make("lab-files", f"LAB_DIR={tmp_path}")
    overrides = json.loads((tmp_path / "settings" / "overrides.json").read_text())
    plugin = "@jupyterlab/apputils-extension:notification"
    package, name = plugin.split(":")
    schema = json.loads((Path(get_app_dir()) / "schemas" / package / f"{name}.json").read_text())
    settings = overrides[plugin]
    assert settings["fetchNews"] == "false"
    assert "false" in [choice["const"] for choice in schema["properties"]["fetchNews"]["oneOf"]]
    assert set(settings) <= set(schema["properties"]) and settings["checkForUpdates"] is False


def test_a_notebook_compares_the_two_output_reserve_policies():
    """docs/design.md: both reserve policies, side by side across window sizes."""
    sources = "\n".join(_sources(ROOT / "notebooks" / "06_token_estimation.ipynb"))
    assert "BudgetAllocator(reserve_policy=policy)" in sources
    assert 'for policy in ("cap", "floor")' in sources
    assert "1_000_000" in sources and "8_192" in sources  # both ends of the window range
    assert "input budget" in sources and "new_figure" in sources


@pytest.mark.slow
def test_nbval_compares_marked_notebooks_and_runs_new_ones_lax(tmp_path):
    """A stored notebook fails on an output it did not store; a notebook whose outputs were
    never stored (no mark) runs without comparison until they are."""
    import shutil
    import subprocess
    import sys

    import nbformat

    shutil.copy(ROOT / "notebooks" / "conftest.py", tmp_path / "conftest.py")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(42)")]
    nbformat.write(nb, tmp_path / "new.ipynb")
    nb.metadata["opctx"] = {"outputs": "compared"}
    nb.cells[0].execution_count = 1
    nbformat.write(nb, tmp_path / "stored.ipynb")
    done = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "-q",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-2000:]
    assert "FAILED stored.ipynb::Cell 0" in done.stdout
