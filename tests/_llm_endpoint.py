"""A local OpenAI-compatible ``/v1/chat/completions`` server for tests: counts what it is asked.

``with fake_endpoint(reply=...) as ep:`` serves on 127.0.0.1 (a free port) in a thread;
``ep.url`` is the API root, ``ep.requests`` the number of completion requests, ``ep.bodies``
what they sent, ``ep.max_in_flight`` the most requests served at once. ``fail_first=n``
answers the first ``n`` requests with HTTP 500 (``fail_status``), ``delay`` holds each
answer that many seconds, and ``reply`` (text or a function of the request body) is the
assistant's text. Usage is reported as the server counted it (words of the prompt, of
the answer).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Endpoint:
    url: str = ""
    requests: int = 0
    bodies: list[dict] = field(default_factory=list)
    max_in_flight: int = 0
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextlib.contextmanager
def fake_endpoint(
    reply: str | Callable[[dict], str] = "SUMMARY: the user asked to fix calc.py.",
    *,
    fail_first: int = 0,
    fail_status: int = 500,
    delay: float = 0.0,
) -> Iterator[Endpoint]:
    state = Endpoint()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            with state.lock:
                state.requests += 1
                number = state.requests
                state.bodies.append(body)
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                if delay:
                    time.sleep(delay)
                if number <= fail_first:
                    self._send(fail_status, {"error": {"message": f"failure {number}"}})
                    return
                text = reply(body) if callable(reply) else reply
                prompt_words = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
                self._send(200, {
                    "id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", ""),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt_words, "completion_tokens": len(text.split()),
                              "total_tokens": prompt_words + len(text.split())},
                })
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
