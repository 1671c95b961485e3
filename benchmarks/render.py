"""Rendering a 5,000-node session: page size and generation time.

Target: the HTML of a 5,000-node session is under 5 MB and is
generated in under 2 s. Three ways are measured side by side on the same
synthetic session (``opctx.viz.synthetic``: tool calls, agentic frames, reads,
compactions every 400 nodes):

* ``collapse=auto``   the default: frames and folded ranges collapsed (the graph
                      has more than ``max_nodes`` nodes), then capped at 1,500;
* ``collapse=False``  no collapsing, capped at 1,500 (the newest are drawn);
* ``uncapped``        everything drawn (``max_nodes`` = the session size): the
                      baseline the cap is for.

The very first render (cold: it reads the vis-network bundle and fills the
token-estimate cache) is timed and printed on its own. Each case is then run
``REPEATS`` times after one warm-up; medians and p95 are printed, plus the ratio of each to the uncapped baseline. The script exits
non-zero if the default path misses either target.

    .venv/bin/python benchmarks/render.py
"""

from __future__ import annotations

import statistics
import sys
import time

from opctx.viz.graph import node_infos, render_graph
from opctx.viz.synthetic import synthetic_session

N_NODES = 5_000
REPEATS = 7
MAX_BYTES = 5_000_000  # 5 MB, decimal
MAX_SECONDS = 2.0


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def measure(graph, head, **kwargs) -> tuple[list[float], int, dict]:
    render_graph(graph, head=head, **kwargs)  # warm-up
    times: list[float] = []
    size = 0
    stats: dict = {}
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        view = render_graph(graph, head=head, **kwargs)
        times.append(time.perf_counter() - t0)
        size, stats = len(view.html.encode("utf-8")), view.stats
    return times, size, stats


def main() -> int:
    graph, head = synthetic_session(N_NODES, compact_every=400, payload="<b>x</b> ")
    print(f"session: {len(graph)} nodes, head {head}")
    t0 = time.perf_counter()
    cold = render_graph(graph, head=head)
    print(f"first render, cold token cache (collapse=auto): {time.perf_counter() - t0:.3f} s, "
          f"{len(cold.html.encode('utf-8')) / 1e6:.2f} MB")
    t0 = time.perf_counter()
    node_infos(graph, head=head)
    print(f"node_infos alone, warm cache: {time.perf_counter() - t0:.3f} s")
    cases = {
        "collapse=auto": {},
        "collapse=False": {"collapse": False},
        "uncapped": {"collapse": False, "max_nodes": len(graph)},
    }
    results = {name: measure(graph, head, **kw) for name, kw in cases.items()}
    base = statistics.median(results["uncapped"][0])
    print(f"{'case':<16}{'median s':>10}{'p95 s':>9}{'MB':>8}{'drawn':>8}{'edges':>8}{'vs uncapped':>13}")
    for name, (times, size, stats) in results.items():
        med = statistics.median(times)
        print(
            f"{name:<16}{med:>10.3f}{_p95(times):>9.3f}{size / 1e6:>8.2f}"
            f"{stats['drawn_nodes']:>8}{stats['drawn_edges']:>8}{med / base:>12.2f}x"
        )
    times, size, _ = results["collapse=auto"]
    ok = statistics.median(times) < MAX_SECONDS and size < MAX_BYTES
    times_nc, size_nc, _ = results["collapse=False"]
    ok = ok and statistics.median(times_nc) < MAX_SECONDS and size_nc < MAX_BYTES
    print(f"targets (< {MAX_BYTES / 1e6:.1f} MB, < {MAX_SECONDS:.0f} s median): {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
