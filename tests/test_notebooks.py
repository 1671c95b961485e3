"""The notebooks as files: outputs stripped in git, one data path each, and all of them run.

(Executing them is nbval's job: ``make test`` passes ``notebooks/`` with ``--nbval-lax``.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_six_stories_are_there() -> None:
    names = [p.stem.split("_", 1)[0] for p in NOTEBOOKS]
    assert names == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stripped(path: Path) -> None:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    dirty = [i for i, c in enumerate(cells) if c.get("outputs") or c.get("execution_count")]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; strip them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_data_path_is_set_in_one_place(path: Path) -> None:
    sources = ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
    assigned = [s for s in sources if "DB_PATH =" in s]
    assert len(assigned) == 1, f"{path.name}: DB_PATH is assigned in {len(assigned)} cells"
