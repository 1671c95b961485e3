"""``python -m llama_cpp.server`` with llama.cpp's extra CPU weight buffers turned off.

On a CPU with AMX, llama.cpp repacks the weights into AMX tiles (an "extra buffer type")
and its matrix product starts with ``ldtilecfg``. Where the kernel or the sandbox does
not give the process the AMX tile state, that instruction faults and the server dies on
its first request (a general protection fault in ``libggml-cpu``, seen on this project's
machines, whose CPUs report ``amx_tile``). With ``llama_model_params.use_extra_bufts``
false every product runs on the ordinary CPU kernels, on any CPU. Everything else is
llama-cpp-python's own server, run as its ``__main__`` with the same arguments.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["without_extra_buffers", "main"]


def without_extra_buffers() -> Callable[[], None]:
    """Make every model loaded from now on skip the extra buffer types; returns the undo."""
    import llama_cpp.llama_cpp as api

    original = api.llama_model_default_params

    def params() -> Any:
        p = original()
        if hasattr(p, "use_extra_bufts"):
            p.use_extra_bufts = False
        return p

    api.llama_model_default_params = params

    def undo() -> None:
        api.llama_model_default_params = original

    return undo


def main() -> None:
    without_extra_buffers()
    sys.argv[0] = "llama_cpp.server"
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
