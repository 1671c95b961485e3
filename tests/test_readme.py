"""The README's Python examples run as written (a tour that fails is worse than none)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def test_the_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(ROOT)  # the lab example reads data/sample.db like a user in the checkout
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip(), "every example prints what it shows"


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_document_named_is_in_the_repository(doc: Path) -> None:
    """Links and named documents resolve inside the checkout: a reader of a fresh clone
    has no specification or notes beside it, so the design is told in docs/design.md."""
    text = doc.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"
    for name in ("SPEC-NOTES", "openprogram-context.md"):
        assert name not in text, f"{doc.name} names {name}, which a clone does not have"
