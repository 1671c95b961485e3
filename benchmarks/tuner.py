"""How live the CompactionTuner feels: the time from a slider change to a new plot and table.

The tuner must feel live on the longest corpus session. What a user waits
for after moving a control (once the debounce fires) is ``CompactionTuner.update()``:
one replay with the new parameters plus the plot and the table. This script imports
the corpus into a temporary database, opens the tuner on the session with the most
messages, and moves controls the way a user does:

* ``first``    the tuner's construction (first replay, cold caches);
* ``slider``   a control moved to a value not seen before (a real replay);
* ``revisit``  a value seen before (served from the tuner's memo);

each next to the baseline of a bare ``replay(...)`` with the same parameters, so the
widget's own overhead (plot, table) is the ratio. Without a corpus it runs on the
longest session of a generated scenario and says so.

Run: ``.venv/bin/python benchmarks/tuner.py [--moves 12] [--window 32000]``
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opctx.lab.history import load_history  # noqa: E402
from opctx.lab.replay import replay  # noqa: E402

CORPUS = Path(os.environ.get("OPCTX_CORPUS", ROOT.parent / "shared" / "corpus"))


def longest_session(tmp: Path) -> tuple[str, str, str]:
    """(db path, session id, where it came from) of the session with the most messages."""
    db = tmp / "tuner.db"
    if CORPUS.is_dir():
        from opctx.importers import import_paths

        import_paths([CORPUS], db, on_error="skip")
        origin = f"corpus {CORPUS}"
    else:
        from opctx.lab.scenarios import build_scenario_sessions

        build_scenario_sessions(db)
        origin = "generated scenarios (no corpus found)"
    from opctx.lab.frames import sessions_df

    frame = sessions_df(db, columns=["session_id", "n_nodes"])
    sid = frame.sort_values("n_nodes").session_id.iloc[-1]
    return str(db), sid, origin


def summary(label: str, times: list[float], baseline: list[float] | None = None) -> str:
    med = statistics.median(times)
    text = f"  {label:<44} median {med * 1000:8.1f} ms   max {max(times) * 1000:8.1f} ms"
    if baseline:
        text += f"   ratio to bare replay {med / statistics.median(baseline):5.2f}x"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--moves", type=int, default=12, help="slider moves to time")
    parser.add_argument("--window", type=int, default=32_000, help="context window of the tuner")
    args = parser.parse_args()
    logging.getLogger("opctx").setLevel(logging.ERROR)  # anti-thrash notes are expected

    from opctx.widgets import CompactionTuner

    with tempfile.TemporaryDirectory(prefix="opctx-bench-tuner-") as tmp:
        db, sid, origin = longest_session(Path(tmp))
        history = load_history(db, sid)
        print(f"session {sid} from {origin}: {len(history.messages)} messages, "
              f"window {args.window:,}")

        started = time.perf_counter()
        tuner = CompactionTuner((db, sid), context_window=args.window, debounce_ms=0)
        first = time.perf_counter() - started

        control = "cut.keep_ratio" if "cut.keep_ratio" in tuner.controls else next(iter(tuner.controls))
        widget = tuner.controls[control]
        low, high = getattr(widget, "min", 0), getattr(widget, "max", 1)
        span = high - low
        values = [low + span * (0.05 + 0.9 * i / max(1, args.moves - 1)) for i in range(args.moves)]
        if isinstance(widget.value, int):
            values = [int(v) for v in values]

        slider, bare = [], []
        for value in values:
            tuner._resetting = True  # set the value without the debounced callback
            widget.value = value
            tuner._resetting = False
            started = time.perf_counter()
            tuner.update()
            slider.append(time.perf_counter() - started)
            params = tuner.params()
            started = time.perf_counter()
            replay(history, tuner.preset.value, context_window=args.window, keep_contexts=False,
                   **params)
            bare.append(time.perf_counter() - started)

        revisit = []
        for value in values[: max(1, args.moves // 2)]:
            tuner._resetting = True
            widget.value = value
            tuner._resetting = False
            started = time.perf_counter()
            tuner.update()
            revisit.append(time.perf_counter() - started)

        print(f"moving {control!r} over {len(values)} new values, then back over "
              f"{len(revisit)} of them:")
        print(f"  {'first (construction, cold)':<44} {first * 1000:8.1f} ms")
        print(summary("slider -> new plot and table", slider, bare))
        print(summary("bare replay, same parameters (baseline)", bare))
        print(summary("revisit a value (memoised)", revisit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
