"""End to end in a real browser: JupyterLab + notebook 03's widgets, and a 600-node graph.

**The lab.** JupyterLab is started as ``make lab`` starts it - on working copies made
by ``make lab-files`` (here into ``tmp_path``) and with the lab's settings dir that
target writes (news off) - on 127.0.0.1 with a free port, a random token, and its
own runtime/config/data directories, so nothing the browser does (autosave,
checkpoints) touches the repository. The notebooks find ``data/sample.db`` through
``default_database()``. The test runs all cells of notebook 03, then:

* checks the tuner's plot is the main thing (two thirds of the widget's width, at
  least 400 px tall), and that it opened on the session's own configuration (the
  notebook says which) with no warning and no stderr output in the cell;
* types a window of 16,000, where the default preset's guard gives up: the warning box
  names 'default' at 16,000; picks claude-code: the box names claude-code; types
  32,000: the box is empty (no stale warning) and the output reserve reads no more
  than the window; takes a picture at each;
* types a window of 64,000, takes another, and checks that the threshold sliders now
  read the thresholds of the claude-code engine for 64,000 tokens (0.58 / 0.73 / 0.94,
  not 32K's 0.17 / 0.46 / 0.88);
* moves the trigger slider with the keyboard and checks the table and plot change;
* checks the cut-point explorer kept the window it was given (no slider snapping);
* checks no news toast was shown, and that every request went to 127.0.0.1.

**The graph.** A 600-node synthetic session is rendered to a file and opened: the
drawing must cover at least 60 % of its frame with a median node of at least 12 px
at the default zoom (measured from vis-network's own ``getBoundingBox`` and
``canvasToDOM``); the page's positions must be the Python layout's for the page's
frame; folding turns and focusing on a compaction are exercised.

Pictures are saved under ``tmp_path`` (and copied to ``$OPCTX_SCREENSHOTS`` when
set). Without Chromium (or playwright) the tests skip; with ``CI`` set they fail.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest
from _browser import NODE_BOXES_JS, chromium, save_screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "03_compaction_tuner.ipynb"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 3.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - localhost only
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.fixture
def lab_server(tmp_path):
    sample_db = ROOT / "data" / "sample.db"
    if not sample_db.is_file():
        pytest.fail(f"{sample_db} is missing: run `make data` first")
    lab = tmp_path / "lab"
    # the working copies and settings exactly as `make lab` makes them
    subprocess.run(["make", "-s", "-C", str(ROOT), "lab-files", f"LAB_DIR={lab}"], check=True)
    assert (lab / "notebooks" / NOTEBOOK).is_file()
    dirs = {name: tmp_path / name for name in ("runtime", "config", "jdata", "ipython", "settings")}
    for d in dirs.values():
        d.mkdir()
    # user settings: only start the notebook's kernel without asking (news: the lab's own)
    target = dirs["settings"] / "@jupyterlab" / "notebook-extension"
    target.mkdir(parents=True)
    (target / "tracker.jupyterlab-settings").write_text(json.dumps({"autoStartDefaultKernel": True}))
    port, token = _free_port(), os.urandom(16).hex()
    env = {
        **{k: v for k, v in os.environ.items() if k != "OPCTX_DB"},
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_DATA_DIR": str(dirs["jdata"]),
        "IPYTHONDIR": str(dirs["ipython"]),
        "JUPYTER_PLATFORM_DIRS": "1",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    cmd = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={lab / 'notebooks'}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        f"--LabApp.app_settings_dir={lab / 'settings'}",
        f"--LabApp.user_settings_dir={dirs['settings']}",
        f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI runners often run as root
    log = (tmp_path / "jupyter.log").open("w")
    proc = subprocess.Popen(cmd, cwd=lab, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited early: {(tmp_path / 'jupyter.log').read_text()[-2000:]}")
            try:
                if _get(f"{base}/api/status?token={token}") == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not answer within 90 s")
        yield base, token, tmp_path
    finally:
        try:
            req = urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST")
            urllib.request.urlopen(req, timeout=5)  # noqa: S310 - localhost only
        except OSError:
            pass
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()


_TUNER_STATE_JS = """() => {
    const t = document.querySelector('.opctx-tuner');
    if (!t) return null;
    const table = t.querySelector('.opctx-cut-table');
    const img = t.querySelector('.opctx-budget-plot img');
    const readouts = {};
    t.querySelectorAll('.widget-slider').forEach(s => {
        const label = s.querySelector('.widget-label');
        const out = s.querySelector('.widget-readout');
        if (label && out) readouts[label.textContent.trim()] = out.textContent.trim();
    });
    const box = r => { const b = r.getBoundingClientRect(); return {width: b.width, height: b.height}; };
    const text = css => { const e = t.querySelector(css); return e ? e.textContent.trim() : null; };
    // the picture as drawn inside its box (object-fit: contain may letterbox it)
    const drawn = img && img.naturalWidth ? (() => { const b = box(img);
        const s = Math.min(b.width / img.naturalWidth, b.height / img.naturalHeight);
        return {width: img.naturalWidth * s, height: img.naturalHeight * s}; })() : null;
    return {table: table ? table.innerHTML : null, plot: img ? img.src : null, readouts: readouts,
            tuner: box(t), image: drawn, warning: text('.opctx-tuner-warnings'),
            status: text('.opctx-tuner-status')};
}"""

_CHANGED_JS = """(old) => { const t = document.querySelector('.opctx-tuner .opctx-cut-table');
    const i = document.querySelector('.opctx-tuner .opctx-budget-plot img');
    return t && i && i.src !== old.plot; }"""


def _tuner_state(page) -> dict:
    return page.evaluate(_TUNER_STATE_JS)


def _thresholds_of(preset: str, window: int) -> dict[str, str]:
    """The claude-code engine's thresholds for the notebook's session, as readouts show them."""
    from opctx.lab.frames import sessions_df
    from opctx.lab.history import load_history
    from opctx.lab.presets import build_engine

    db = ROOT / "data" / "sample.db"
    sessions = sessions_df(db, columns=["session_id", "n_nodes"])
    longest = sessions.sort_values("n_nodes", ascending=False).session_id.iloc[0]
    engine = build_engine(preset, context_window=window, model=load_history(db, longest).model)
    return {name: f"{engine.policy.get(name):.2f}"
            for name in ("trigger.recommend_pct", "trigger.auto_pct", "trigger.emergency_pct")}


def _own_window() -> int:
    """The window the notebook's session recorded (own_configuration), as the tuner opens."""
    from opctx.lab.frames import sessions_df
    from opctx.lab.history import load_history
    from opctx.lab.presets import own_configuration

    db = ROOT / "data" / "sample.db"
    sessions = sessions_df(db, columns=["session_id", "n_nodes"])
    longest = sessions.sort_values("n_nodes", ascending=False).session_id.iloc[0]
    return own_configuration(load_history(db, longest)).context_window


def _reserve(state: dict) -> int:
    return int(state["readouts"]["budget.output_reserve"].replace(",", ""))


def _type_window(page, value: int, before: dict) -> dict:
    window = _widget_input(page, ".opctx-tuner", "context window")
    window.fill(str(value))
    window.press("Enter")
    page.wait_for_function(_CHANGED_JS, arg=before, timeout=180_000)
    return _tuner_state(page)


def _widget_input(page, css: str, label: str):
    return page.locator(f"{css} .widget-inline-hbox", has_text=label).locator("input").first


def test_tuner_in_jupyterlab_offline(lab_server):
    base, token, tmp_path = lab_server
    requests: list[str] = []
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("request", lambda r: requests.append(r.url))
        try:
            page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}", wait_until="domcontentloaded")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
            # wait until the notebook's kernel is connected and idle, then run everything
            page.wait_for_function(
                """() => { const w = window.jupyterapp.shell.currentWidget;
                    const k = w && w.sessionContext && w.sessionContext.session
                              && w.sessionContext.session.kernel;
                    return k && k.connectionStatus === 'connected' && k.status === 'idle'; }""",
                timeout=120_000,
            )
            # fire and forget: the command's promise settles only when every cell has run
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            page.wait_for_function(
                "() => { const t = document.querySelector('.opctx-tuner .opctx-cut-table');"
                " return t && t.innerHTML.length > 0 && document.querySelector("
                "'.opctx-tuner .opctx-budget-plot img') && document.querySelector("
                "'.opctx-cutpoints'); }",
                timeout=240_000,
            )
            first = _tuner_state(page)
            assert first["table"] and first["plot"].startswith("data:image/png")
            # the plot is the main thing: two thirds of the width, 400 px or more
            assert first["image"]["width"] >= 0.64 * first["tuner"]["width"], first
            assert first["image"]["height"] >= 400, first

            # it opened on the session's own configuration, and said so; no warning, and
            # nothing in the cell's stderr (a logged warning there would outlive its replay)
            own = _own_window()
            notebook_text = page.locator(".jp-Notebook").inner_text()
            assert "opening on preset 'default'" in notebook_text and f"{own:,}" in notebook_text
            assert f"window {own:,}" in first["status"] and not first["warning"], first["status"]
            assert page.locator("[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
            assert _reserve(first) <= own

            # 16K: the default preset's guard gives up, and the box says so for this replay
            tuner = page.locator(".opctx-tuner").first
            at_16k = _type_window(page, 16_000, first)
            assert "'default'" in at_16k["warning"] and "window 16,000" in at_16k["warning"]
            assert _reserve(at_16k) <= 16_000
            save_screenshot(tuner, tmp_path, "tuner-warning-16k.png")
            tuner.locator("select").first.select_option("claude-code")
            page.wait_for_function(_CHANGED_JS, arg=at_16k, timeout=180_000)
            cc_16k = _tuner_state(page)
            assert "'claude-code'" in cc_16k["warning"] and "'default'" not in cc_16k["warning"]

            # claude-code at 32K, then 64K: no stale warning; the sliders follow the window
            at_32k = _type_window(page, 32_000, cc_16k)
            assert not at_32k["warning"], f"a stale warning stayed: {at_32k['warning']}"
            assert _reserve(at_32k) <= 32_000
            expected_32k = _thresholds_of("claude-code", 32_000)
            assert {k: at_32k["readouts"][k] for k in expected_32k} == expected_32k
            tuner.scroll_into_view_if_needed()
            save_screenshot(tuner, tmp_path, "tuner-claude-code-32k.png")
            at_64k = _type_window(page, 64_000, at_32k)
            expected_64k = _thresholds_of("claude-code", 64_000)
            assert {k: at_64k["readouts"][k] for k in expected_64k} == expected_64k
            assert expected_64k != expected_32k and not at_64k["warning"]
            save_screenshot(tuner, tmp_path, "tuner-claude-code-64k.png")

            # move the trigger slider from 0.73 down with the keyboard, as a user would:
            # the engine compacts earlier and more often
            slider = page.locator(".opctx-tuner .widget-slider", has_text="trigger.auto_pct").first
            handle = slider.locator(".noUi-handle").first
            handle.scroll_into_view_if_needed()
            handle.focus()
            for _ in range(30):
                page.keyboard.press("ArrowLeft")
            page.wait_for_function(
                """(old) => { const t = document.querySelector('.opctx-tuner .opctx-cut-table');
                    const i = document.querySelector('.opctx-tuner .opctx-budget-plot img');
                    return t && i && t.innerHTML !== old.table && i.src !== old.plot; }""",
                arg=at_64k,
                timeout=180_000,
            )
            moved = _tuner_state(page)
            assert moved["table"] != at_64k["table"] and moved["plot"] != at_64k["plot"]

            # the explorer kept the window it was given (a slider snapped 32,000 to 31,744)
            explorer_window = _widget_input(page, ".opctx-cutpoints", "context window")
            assert explorer_window.input_value() == str(own)
            # and no toast asked about Jupyter news
            toasts = page.evaluate(
                "() => Array.from(document.querySelectorAll('.Toastify__toast'))"
                ".map(t => t.textContent)")
            assert not [t for t in toasts if "news" in t.lower()], toasts
            save_screenshot(page, tmp_path, "lab.png", full_page=True)
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise

    outside = []
    for url in requests:
        parsed = urlparse(url)
        if parsed.scheme in ("data", "blob", "about"):
            continue
        if parsed.hostname not in LOCAL_HOSTS:
            outside.append(url)
    assert not outside, f"the page requested non-local URLs: {json.dumps(outside[:20], indent=1)}"
    assert any(urlparse(u).hostname == "127.0.0.1" for u in requests)


def _drawing(page) -> dict:
    """Cover of the frame by the drawing and the median node size, in page pixels."""
    state = page.evaluate(NODE_BOXES_JS)
    frame, boxes = state["frame"], state["boxes"]
    x0 = max(0.0, min(b["x0"] for b in boxes))
    y0 = max(0.0, min(b["y0"] for b in boxes))
    x1 = min(frame["width"], max(b["x1"] for b in boxes))
    y1 = min(frame["height"], max(b["y1"] for b in boxes))
    sizes = [min(b["x1"] - b["x0"], b["y1"] - b["y0"]) for b in boxes]
    return {"cover": (x1 - x0) * (y1 - y0) / (frame["width"] * frame["height"]),
            "median": statistics.median(sizes), "nodes": len(boxes), "frame": frame}


def test_a_600_node_session_fills_the_frame(tmp_path):
    from opctx.viz import _graph_layout as layout_module
    from opctx.viz.graph import render_graph
    from opctx.viz.synthetic import synthetic_session

    session, head = synthetic_session(600, compact_every=200, seed=1)
    view = render_graph(session, head=head, title="a 600-node session")
    page_file = view.save_html(tmp_path / "graph.html")
    data = json.loads(view.html.split('type="application/json">', 1)[1].split("</script>", 1)[0])
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 700})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        page.wait_for_selector('body[data-opctx-ready="1"]', timeout=60_000)
        drawn = _drawing(page)
        assert drawn["nodes"] == len(data["nodes"]) >= 600
        assert drawn["cover"] >= 0.6, drawn
        assert drawn["median"] >= 12, drawn
        save_screenshot(page, tmp_path, "graph-600.png")

        # the page placed every node where the Python layout puts it for this frame
        aspect = page.evaluate("() => { const c = document.getElementById('opctx-graph');"
                               " return c.clientWidth / c.clientHeight; }")
        slots = [layout_module._Slot(n["c"], n["l"], n["o"]) for n in data["nodes"]]
        expected, per_line = layout_module._wrap(slots, aspect)
        assert page.evaluate("() => window.opctxColumnsPerLine") == per_line
        positions = page.evaluate("() => window.opctxNetwork.getPositions()")
        for i, (x, y) in enumerate(expected):
            assert positions[str(i)] == pytest.approx({"x": x, "y": y})

        # fold every turn into one node, then open one with a double-click
        page.check("#opctx-turns")
        folded = _drawing(page)
        n_turns = len({n["turn"] for n in data["nodes"] if n["turn"] >= 0})
        assert folded["nodes"] <= n_turns + sum(1 for n in data["nodes"] if n["turn"] < 0)
        assert folded["median"] > drawn["median"]
        turn = next(n["turn"] for n in data["nodes"] if n["turn"] > 0
                    and sum(m["turn"] == n["turn"] for m in data["nodes"]) >= 3)
        size = sum(m["turn"] == turn for m in data["nodes"])
        point = page.evaluate(f"""() => {{ const net = window.opctxNetwork;
            const f = net.body.container.getBoundingClientRect();
            const p = net.canvasToDOM(net.getPositions(['turn:{turn}'])['turn:{turn}']);
            return {{x: f.left + p.x, y: f.top + p.y}}; }}""")
        page.mouse.dblclick(point["x"], point["y"])
        page.wait_for_function(f"() => !window.opctxNetwork.body.nodes['turn:{turn}']")
        assert _drawing(page)["nodes"] == folded["nodes"] + size - 1
        page.uncheck("#opctx-turns")
        assert _drawing(page)["nodes"] == len(data["nodes"])

        # focus on the last compaction: its summary is in view, selected, larger than before
        page.select_option("#opctx-focus", str(len(data["compactions"]) - 1))
        summary = data["compactions"][-1]["summary"]
        state = page.evaluate(NODE_BOXES_JS)
        box = next(b for b in state["boxes"] if b["id"] == summary)
        assert 0 <= box["x0"] and box["x1"] <= state["frame"]["width"]
        assert 0 <= box["y0"] and box["y1"] <= state["frame"]["height"]
        assert page.evaluate("() => window.opctxNetwork.getSelectedNodes()") == [summary]
        assert page.evaluate("() => window.opctxNetwork.getScale()") > 1.5 * page.evaluate(
            "() => (window.opctxNetwork.fit({animation: false}), window.opctxNetwork.getScale())")
        assert not errors, errors
