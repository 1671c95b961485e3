"""Store the outputs nbval compares: run notebooks on data/sample.db and keep what they print.

``make test`` runs every notebook with nbval comparing each code cell's output with the
output stored in the notebook (``--nbval``, sanitised by ``notebooks/nbval_sanitize.cfg``:
timings, paths, object ids). This script writes those stored outputs:

    python notebooks/store_outputs.py notebooks/03_compaction_tuner.ipynb ...
    make notebook-outputs NB=notebooks/08_new.ipynb      (all notebooks: make notebook-outputs)

Each notebook is executed from ``notebooks/`` on the sample database (``OPCTX_DB`` is
removed: stored outputs are the sample's, whatever data the machine points at), then:

* a cell tagged ``nbval-ignore-output`` or ``nbval-skip`` keeps no output (nbval does not
  compare it; its first line says why);
* pictures (PNG, JPEG, SVG) and widget views are dropped: nbval never compares them (a
  PNG differs with the fonts and the matplotlib of a machine, a widget view holds a random
  model id); their ``text/plain`` beside them stays and is compared;
* execution counts are the cells' positions (1, 2, ...: nbval compares only a cell with
  one, an empty output included; a cell that is not compared has none); timing
  metadata, the kernel's version details and the notebook's widget state are dropped;
* the checkout's path is written ``<checkout>``, as the sanitiser writes it;
* the notebook is marked ``metadata.opctx.outputs = "compared"``. nbval compares the cells
  of marked notebooks only: a new notebook runs as before (an exception fails it, its
  printout is not compared) until its outputs are stored with this script.

``--out DIR`` writes the executed notebooks to DIR instead of in place (two runs into two
folders and a diff show which cells are not deterministic).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_COMPARED = ("nbval-ignore-output", "nbval-skip")
DROPPED = ("image/png", "image/jpeg", "image/svg+xml", "application/vnd.jupyter.widget-view+json")
MARK = {"outputs": "compared"}


def _kept_outputs(outputs: list, count: int) -> list:
    kept = []
    for out in outputs:
        data = out.get("data")
        if data is not None:
            for key in DROPPED:
                data.pop(key, None)
            if not data:
                continue
            out["metadata"] = {}
        if "execution_count" in out:
            out["execution_count"] = count
        kept.append(out)
    return kept


def tidy(nb: object) -> None:
    """Keep what nbval compares, nothing else (module docstring)."""
    code = [cell for cell in nb.cells if cell.cell_type == "code"]  # type: ignore[attr-defined]
    for count, cell in enumerate(code, start=1):
        cell.metadata.pop("execution", None)
        tags = cell.metadata.get("tags", [])
        if any(tag in tags for tag in NOT_COMPARED):
            cell.execution_count, cell.outputs = None, []
        else:
            # nbval compares a cell only when it has an execution count (one without is
            # "unrun"), an empty output included: a cell that starts printing then fails
            cell.execution_count = count
            cell.outputs = _kept_outputs(cell.outputs, count)
    nb.metadata.pop("widgets", None)  # type: ignore[attr-defined]
    # the kernel's version details differ between machines and say nothing about results
    nb.metadata["language_info"] = {"name": "python"}  # type: ignore[attr-defined]
    nb.metadata["opctx"] = dict(MARK)  # type: ignore[attr-defined]


def store(path: Path, out_dir: Path | None = None, timeout: int = 900) -> Path:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    tidy(nb)
    target = (out_dir / path.name) if out_dir else path
    nbformat.write(nb, target)
    # the tracked notebooks end with a newline, as the editors write them
    text = target.read_text(encoding="utf-8")
    # the machine's checkout path is written as the sanitiser writes it ("[checkout path]"
    # in nbval_sanitize.cfg): the stored notebooks say nothing of the machine that ran them
    text = text.replace(f"{HERE.parent}/", "<checkout>/")
    if not text.endswith("\n"):
        text += "\n"
    target.write_text(text, encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook in notebooks/")
    parser.add_argument("--out", type=Path, default=None, help="write here instead of in place")
    args = parser.parse_args(argv)
    os.environ.pop("OPCTX_DB", None)
    paths = args.notebooks or sorted(HERE.glob("*.ipynb"))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        if not path.is_file():
            print(f"{path}: no such notebook", file=sys.stderr)
            return 1
        print(f"storing the outputs of {path.name}", flush=True)
        store(path.resolve(), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
