"""Running a command without the power to ignore file modes (shared by the permission tests).

File modes do not bind root (CI runs as root). ``without_bypass_prefix()`` is a command
prefix that keeps the user (root stays root, so the test's own files stay its own) but
drops the two capabilities that bypass file modes, ``CAP_DAC_OVERRIDE`` and
``CAP_DAC_READ_SEARCH`` (``setpriv --bounding-set``); as any other user it is empty.
Where that is impossible the test is skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest


def without_bypass_prefix() -> list[str]:
    if os.geteuid() != 0:
        return []  # file modes already bind us
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file modes cannot be enforced here")
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "import opctx"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot drop the capabilities here: {probe.stderr.strip()[-200:]}")
    return prefix
