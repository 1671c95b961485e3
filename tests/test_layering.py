"""Imports point only downward: dag <- context <- toolkit (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "opctx"
LAYER = {"dag": 0, "context": 1, "importers": 2, "lab": 3, "viz": 4, "widgets": 5}
# The toolkit may use everything below it; lab, viz and widgets are allowed to
# use importers and each other in this order only.


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.parent.relative_to(PKG.parent).parts[: len(path.parent.relative_to(PKG.parent).parts) - node.level + 1]
                mod = ".".join(base) + ("." + node.module if node.module else "")
            else:
                mod = node.module or ""
            out.add(mod)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize("package", sorted(LAYER))
def test_imports_point_downward(package):
    bad = []
    for path in sorted((PKG / package).rglob("*.py")):
        for mod in _imports(path):
            parts = mod.split(".")
            if parts[0] != "opctx" or len(parts) < 2 or parts[1] not in LAYER:
                continue
            if LAYER[parts[1]] > LAYER[package]:
                bad.append(f"{path.relative_to(PKG)} imports {mod}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


@pytest.mark.parametrize(("module", "other"), [("agentic", "runtime"), ("runtime", "agentic")])
def test_agentic_and_runtime_do_not_import_each_other(module, other):
    # what both need (the turn's ContextVars, node writing) lives in dag/_context.py
    imports = _imports(PKG / "dag" / f"{module}.py")
    assert f"opctx.dag.{other}" not in imports
