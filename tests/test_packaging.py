"""Packaging metadata: the licence is an SPDX expression (no deprecation warnings at install)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from packaging.licenses import canonicalize_license_expression
from packaging.requirements import Requirement

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_license_is_an_spdx_string_and_setuptools_understands_it():
    """A TOML table made setuptools warn three times per install (deprecated since 77)."""
    license_ = PYPROJECT["project"]["license"]
    assert isinstance(license_, str)
    assert canonicalize_license_expression(license_) == license_ == "Apache-2.0"
    (setuptools,) = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]
                     if Requirement(r).name == "setuptools"]
    assert not setuptools.specifier.contains("76.9") and setuptools.specifier.contains("77.0")


def test_installed_metadata_carries_the_expression():
    metadata = importlib.metadata.metadata("opctx")
    assert metadata.get("License-Expression") == "Apache-2.0"
