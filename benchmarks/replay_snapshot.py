"""A byte-comparable snapshot of replay figures: is a refactor really behaviour-neutral?

Replays every preset (``opctx.lab.presets.PRESETS``) over every session of the sample
database and of a corpus folder, at the recording's own window and at what-if windows (``--whatif``, every
``--whatif-every``-th session only, to keep the run in minutes), and writes one canonical
JSON document of everything deterministic a replay produces:

* ``metrics()`` (the row a sweep writes), ``steps_df`` column by column (per-request
  tokens, decisions, prefix figures), the compactions frame and every
  ``ReplayCompaction`` (folded / kept / protected stream indices, a digest of the
  summary text), ``events``, ``params``, and a digest of every request's messages;
* ``fidelity_table`` rows of the client presets over the corpus recordings that
  compacted, in both modes (``resync``, ``free``).

Nothing timed is kept (``elapsed_s``, ``duration_ms`` are left out), so two runs of
one revision give identical files, and two revisions give identical files exactly when
their replays agree. Floats are written with ``repr`` (shortest round-trip form), NaN
and infinities as strings.

The corpus is read from one database (``--corpus-db``: imported from ``--corpus`` with
``opctx.importers.import_paths`` on the first run, reused after). Parsing a transcript
mints fresh ids each time; a replay names imported messages by their position
(``opctx.lab._replay_db.replay_message_id``), so its figures do not depend on the parse,
but the request digests here hold whatever else an import mints (call ids a transcript
lacks): the runs compared still read the same database.

Run::

    .venv/bin/python benchmarks/replay_snapshot.py --corpus-db corpus.db --out snap.json
    .venv/bin/python benchmarks/replay_snapshot.py --corpus-db corpus.db --compare snap.json

``--compare FILE`` runs the snapshot again and prints the first differences against
``FILE`` (exit status 1 when there is any, 0 otherwise).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_WHATIF = (32_000, 64_000)


def _plain(value: Any) -> Any:
    """``value`` as JSON-safe Python: numpy scalars unwrapped, NaN / inf as strings."""
    import numpy as np
    import pandas as pd

    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return repr(value)


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _frame(df: Any) -> dict[str, list]:
    return {str(col): _plain(df[col].tolist()) for col in df.columns}


def _contexts_digest(result: Any) -> list[str]:
    """One digest per request of the messages it sent (message digests cached per object)."""
    cache: dict[int, tuple[Any, str]] = {}
    out = []
    for ctx in result.contexts or ():
        parts = []
        for msg in ctx:
            hit = cache.get(id(msg))
            if hit is None or hit[0] is not msg:
                hit = cache[id(msg)] = (msg, _digest(msg))
            parts.append(hit[1])
        out.append(_digest(parts))
    return out


def replay_figures(result: Any) -> dict[str, Any]:
    """Everything deterministic one ``ReplayResult`` holds."""
    # figures only: the recording's clock as a datetime repeats "timestamp", and the policy
    # (JSON) the frames carry is configuration, not a figure
    steps = result.steps_df.drop(columns=["time", "policy"], errors="ignore")
    compactions = []
    for c in result.compactions:
        d = c.to_dict()
        d.pop("duration_ms", None)
        d["summary_sha"] = _digest(d.pop("summary_text"))
        # ids of copies and summaries are minted per replay (deterministic), kept as they are
        compactions.append(d)
    return {
        "preset": result.preset,
        "trigger_check": result.params.get("trigger_check"),
        "model": result.model,
        "context_window": result.context_window,
        "summaries": result.summaries,
        "metrics": _plain(result.metrics()),
        "steps": _frame(steps),
        "compactions_df": _frame(result.compactions_df().drop(columns=["policy"], errors="ignore")),
        "compactions": _plain(compactions),
        "events": _plain(result.events),
        "contexts": _contexts_digest(result),
    }


def _db_sessions(db: Path, prefix: str) -> list[tuple[str, Any]]:
    from opctx.dag.session import DagSessionManager
    from opctx.lab.history import as_history

    return [(f"{prefix}:{meta.id}", as_history((str(db), meta.id))) for meta in DagSessionManager(str(db)).list()]


def corpus_database(corpus: Path, db: Path) -> Path:
    """``db``, importing ``corpus`` into it first when it does not exist yet."""
    if not db.exists():
        from opctx.importers import import_paths

        report = import_paths([corpus], str(db), on_error="skip")
        print(f"imported {corpus} into {db}: {len(report.written)} sessions", file=sys.stderr)
    return db


def load_sessions(db: Path | None, corpus_db: Path | None) -> list[tuple[str, Any]]:
    """``(label, history)`` of every session of the sample database and the corpus database,
    sorted by label."""
    out: list[tuple[str, Any]] = []
    if db is not None:
        out += _db_sessions(db, "db")
    if corpus_db is not None:
        out += _db_sessions(corpus_db, "corpus")
    out.sort(key=lambda x: x[0])
    return out


def fidelity_rows(histories: list[Any]) -> dict[str, Any]:
    from opctx.lab.fidelity import fidelity_table

    out = {}
    for mode in ("resync", "free"):
        table = fidelity_table(histories, mode=mode)
        out[mode] = _frame(table) if len(table) else {}
    return out


def snapshot(db: Path | None, corpus_db: Path | None, whatif: tuple[int, ...], every: int,
             fidelity: bool = True, progress: bool = True) -> dict[str, Any]:
    from opctx.lab.presets import PRESETS
    from opctx.lab.replay import replay

    started = time.perf_counter()
    sessions = load_sessions(db, corpus_db)
    replays: dict[str, Any] = {}
    n = 0
    for si, (label, history) in enumerate(sessions):
        if not history.messages:
            continue
        windows: list[int | None] = [None]
        if every > 0 and si % every == 0:
            windows += list(whatif)
        for preset in PRESETS:
            for window in windows:
                key = f"{label}|{preset}|{window or 'own'}"
                try:
                    result = replay(history, preset, context_window=window)
                    replays[key] = replay_figures(result)
                except Exception as exc:  # a failure is a figure too: it must not change either
                    replays[key] = {"error": f"{type(exc).__name__}: {exc}"}
                n += 1
        if progress:
            print(f"\r{si + 1}/{len(sessions)} sessions, {n} replays, {time.perf_counter() - started:.0f}s",
                  end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    out: dict[str, Any] = {"replays": replays}
    if fidelity and corpus_db is not None:
        compacted = [h for _, h in sessions if h.compactions and h.client in ("claude-code", "codex")]
        out["fidelity"] = fidelity_rows(compacted)
    out["meta"] = {"sessions": len(sessions), "replays": n, "whatif": list(whatif), "whatif_every": every}
    return out


def dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def differences(old: Any, new: Any, path: str = "$", limit: int = 20) -> list[str]:
    """The first ``limit`` places where two snapshot documents differ."""
    out: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                if key not in a:
                    out.append(f"{where}.{key}: only in the new snapshot")
                elif key not in b:
                    out.append(f"{where}.{key}: only in the old snapshot")
                else:
                    walk(a[key], b[key], f"{where}.{key}")
                if len(out) >= limit:
                    return
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                out.append(f"{where}: length {len(a)} -> {len(b)}")
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                walk(x, y, f"{where}[{i}]")
                if len(out) >= limit:
                    return
        elif a != b or type(a) is not type(b):
            out.append(f"{where}: {a!r} -> {b!r}")

    walk(old, new, path)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--db", type=Path, default=ROOT / "data" / "sample.db")
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus",
                    help="the transcripts imported into --corpus-db when it does not exist")
    ap.add_argument("--corpus-db", type=Path, help="the corpus as an opctx database (created from --corpus "
                    "on the first run; compare runs that read the same one)")
    ap.add_argument("--whatif", default=",".join(map(str, DEFAULT_WHATIF)),
                    help="what-if windows, comma-separated (default 32000,64000)")
    ap.add_argument("--whatif-every", type=int, default=4,
                    help="replay the what-if windows on every N-th session only (0: never)")
    ap.add_argument("--no-fidelity", action="store_true", help="leave out the fidelity tables")
    ap.add_argument("--out", type=Path, help="write the snapshot here")
    ap.add_argument("--compare", type=Path, help="compare with this snapshot; exit 1 on any difference")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    corpus_db = None
    if args.corpus_db is not None and (args.corpus_db.exists() or args.corpus.is_dir()):
        corpus_db = corpus_database(args.corpus, args.corpus_db)
    else:
        print("no --corpus-db (or no corpus to import into it): sample database only", file=sys.stderr)
    whatif = tuple(int(w) for w in args.whatif.split(",") if w.strip())
    doc = snapshot(args.db if args.db.is_file() else None, corpus_db, whatif, args.whatif_every,
                   fidelity=not args.no_fidelity, progress=not args.quiet)
    text = dump(doc)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}: {doc['meta']['replays']} replays, sha256 "
              f"{hashlib.sha256(text.encode()).hexdigest()[:16]}")
    if args.compare is not None:
        old = json.loads(args.compare.read_text(encoding="utf-8"))
        diffs = differences(old, json.loads(text))
        if diffs:
            print(f"{len(diffs)}+ difference(s) against {args.compare}:")
            for line in diffs:
                print("  " + line)
            return 1
        print(f"0 differences against {args.compare} ({doc['meta']['replays']} replays)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
