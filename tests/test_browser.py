"""End to end in a real browser: JupyterLab + notebook 03 + the CompactionTuner, offline.

A JupyterLab server is started on 127.0.0.1 (a free port, a random token, its
own runtime/config/data directories under ``tmp_path``, no browser of its own,
update checks and news off) with a *copy* of ``notebooks/`` as its root, so that
nothing the browser does (autosave, checkpoints) touches the repository. The
copy sits next to a ``data`` symlink to the repository's ``data/``, so the
notebooks' relative ``../data/sample.db`` resolves as it does in ``make lab``.

Debian's Chromium is driven by playwright (never a downloaded browser). The
test runs all cells of notebook 03, waits for the tuner, moves one slider with
the keyboard, and checks that the cut-point table and the budget plot both
change. Every request the page makes is recorded; any request to a host other
than 127.0.0.1/localhost fails the test (``data:`` and ``blob:`` URLs are not
network requests). A screenshot is saved under ``tmp_path``. The server is shut
down through its own API, then terminated if it lingers.

Without Chromium (or playwright) the test skips; with the ``CI`` environment
variable set it fails instead, so CI cannot silently lose it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK = "03_compaction_tuner.ipynb"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"browser test cannot run in CI: {reason}")
    pytest.skip(reason)


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
    if not (ROOT / "notebooks" / NOTEBOOK).is_file():
        pytest.fail(f"notebooks/{NOTEBOOK} is missing")
    work = tmp_path / "lab"
    shutil.copytree(ROOT / "notebooks", work / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    (work / "data").symlink_to(ROOT / "data", target_is_directory=True)
    dirs = {name: tmp_path / name for name in ("runtime", "config", "jdata", "ipython", "settings")}
    for d in dirs.values():
        d.mkdir()
    # user settings: start the notebook's kernel without asking, never fetch news
    for plugin, values in {
        "@jupyterlab/notebook-extension/tracker": {"autoStartDefaultKernel": True},
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                         "checkForUpdates": False},
    }.items():
        package, name = plugin.rsplit("/", 1)
        target = dirs["settings"] / package
        target.mkdir(parents=True, exist_ok=True)
        (target / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    port, token = _free_port(), os.urandom(16).hex()
    env = {
        **os.environ,
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
        f"--ServerApp.root_dir={work / 'notebooks'}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        f"--LabApp.user_settings_dir={dirs['settings']}",
        f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI runners often run as root
    log = (tmp_path / "jupyter.log").open("w")
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
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


def _tuner_state(page) -> dict:
    return page.evaluate(
        """() => {
            const t = document.querySelector('.opctx-tuner');
            if (!t) return null;
            const table = t.querySelector('.opctx-cut-table');
            const img = t.querySelector('.opctx-budget-plot img');
            return {table: table ? table.innerHTML : null, plot: img ? img.src : null};
        }"""
    )


def test_tuner_in_jupyterlab_offline(lab_server):
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} not found")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed")
    base, token, tmp_path = lab_server
    requests: list[str] = []
    console: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                                    headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
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
                "'.opctx-tuner .opctx-budget-plot img'); }",
                timeout=240_000,
            )
            before = _tuner_state(page)
            assert before["table"] and before["plot"].startswith("data:image/png")

            # move the trigger slider from 0.80 down to 0.50 with the keyboard, as a user
            # would: the engine compacts earlier and more often
            slider = page.locator(".opctx-tuner .widget-slider", has_text="auto_compact_pct").first
            handle = slider.locator(".noUi-handle").first
            handle.scroll_into_view_if_needed()
            handle.focus()
            for _ in range(30):
                page.keyboard.press("ArrowLeft")
            page.wait_for_function(
                """(old) => { const t = document.querySelector('.opctx-tuner .opctx-cut-table');
                    const i = document.querySelector('.opctx-tuner .opctx-budget-plot img');
                    return t && i && t.innerHTML !== old.table && i.src !== old.plot; }""",
                arg=before,
                timeout=180_000,
            )
            after = _tuner_state(page)
            assert after["table"] != before["table"]
            assert after["plot"] != before["plot"]
            page.screenshot(path=str(tmp_path / "tuner.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()

    assert (tmp_path / "tuner.png").stat().st_size > 10_000
    outside = []
    for url in requests:
        parsed = urlparse(url)
        if parsed.scheme in ("data", "blob", "about"):
            continue
        if parsed.hostname not in LOCAL_HOSTS:
            outside.append(url)
    assert not outside, f"the page requested non-local URLs: {json.dumps(outside[:20], indent=1)}"
    assert any(urlparse(u).hostname == "127.0.0.1" for u in requests)
