"""The ``>>>`` examples in the library's docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "opctx"
EXAMPLE = re.compile(r"^\s*>>> ", re.MULTILINE)
MODULES = sorted(
    ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
    for path in PKG.rglob("*.py")
    if EXAMPLE.search(path.read_text(encoding="utf-8"))
)


def test_examples_are_found():
    # a rename that hid every example from this test would otherwise pass silently
    assert {"opctx.dag.nodes", "opctx.dag.store", "opctx.context.references"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
