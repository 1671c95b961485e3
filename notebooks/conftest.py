"""nbval in ``make test``: compare outputs only where they were stored on purpose.

``make test`` runs the notebooks with ``--nbval``: every code cell's output is compared
with the output stored in the notebook (sanitised by ``nbval_sanitize.cfg``), except the
cells tagged ``nbval-ignore-output`` / ``nbval-skip``, each saying why in its first line.
The stored outputs are written by ``store_outputs.py`` (``make notebook-outputs``), which
marks the notebook (``metadata.opctx.outputs = "compared"``). A notebook without that
mark - a new one, or one whose outputs were stripped - runs as under ``--nbval-lax``: an
exception fails it, its printout is not compared, until its outputs are stored.
"""

from __future__ import annotations


def _compared(notebook: object) -> bool:
    metadata = getattr(notebook, "metadata", None) or {}
    return (metadata.get("opctx") or {}).get("outputs") == "compared"


def pytest_collection_modifyitems(items: list) -> None:
    for item in items:
        notebook = getattr(item.parent, "nb", None)
        options = getattr(item, "options", None)
        if notebook is not None and options is not None and not _compared(notebook):
            options["check"] = False
