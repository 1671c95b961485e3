"""OpenAICompatProvider against a real HTTP server on 127.0.0.1, through the real openai client."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("openai")

from opctx.dag.providers import (  # noqa: E402
    OpenAICompatProvider,
    ProviderConfigError,
    ProviderConnectionError,
    ProviderError,
    ProviderHTTPError,
    ProviderTimeoutError,
    ToolCall,
    Usage,
)


def completion(content=None, tool_calls=None, usage=None, model="test-model"):
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage or {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class FakeServer:
    """Answers /v1/chat/completions from a script of (status, body, headers) or ("sleep", s)."""

    def __init__(self):
        self.script: list = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):  # noqa: N802 - http.server naming
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    server.requests.append({"path": self.path, "body": body})
                    step = server.script.pop(0) if server.script else (500, {"error": {"message": "script empty"}}, {})
                if step[0] == "sleep":
                    time.sleep(step[1])
                    return  # the client has given up; answer nothing
                status, payload, headers = step
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def provider(server, **kw):
    sleeps: list[float] = []
    kw.setdefault("backoff", 0.01)
    p = OpenAICompatProvider(server.base_url, api_key="k", sleep=sleeps.append, **kw)
    return p, sleeps


def test_text_tool_calls_and_usage_are_parsed(server):
    server.script.append(
        (
            200,
            completion(
                content="checking",
                tool_calls=[
                    {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": '{"path": "x.py"}'}},
                    {"id": "call_b", "type": "function", "function": {"name": "grep", "arguments": "{broken"}},
                ],
                usage={
                    "prompt_tokens": 1200,
                    "completion_tokens": 30,
                    "total_tokens": 1230,
                    "prompt_tokens_details": {"cached_tokens": 1024},
                },
            ),
            {},
        )
    )
    p, sleeps = provider(server)
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}]
    reply = p([{"role": "user", "content": "look"}], "test-model", "be brief", tools)
    assert reply.text == "checking"
    assert reply.tool_calls == [
        ToolCall("call_a", "read", {"path": "x.py"}),
        ToolCall("call_b", "grep", {"_raw": "{broken"}),
    ]
    assert reply.usage == Usage(input_tokens=1200, output_tokens=30, cache_read_tokens=1024, cache_write_tokens=0)
    assert reply.model == "test-model"
    sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "look"},
    ]
    assert sent["body"]["tools"] == tools and sent["body"]["model"] == "test-model"
    assert sleeps == [] and p.attempts == [("ok", 0.0)]


def test_no_system_and_no_tools_are_not_sent(server):
    server.script.append((200, completion(content="hi"), {}))
    p, _ = provider(server, extra_params={"temperature": 0})
    assert p([{"role": "user", "content": "x"}], "m", None, None).text == "hi"
    body = server.requests[0]["body"]
    assert "tools" not in body and body["messages"][0]["role"] == "user" and body["temperature"] == 0


def test_500_then_200_is_retried_with_backoff(server):
    server.script += [(500, {"error": {"message": "overloaded"}}, {}), (200, completion(content="fine"), {})]
    p, sleeps = provider(server, backoff=0.5)
    assert p([{"role": "user", "content": "x"}], "m", None, None).text == "fine"
    assert len(server.requests) == 2
    assert len(sleeps) == 1 and 0.5 <= sleeps[0] <= 0.55  # backoff * 2**0 plus <=10% jitter
    assert [a[0] for a in p.attempts] == [500, "ok"]


def test_429_honours_retry_after_and_backoff_grows(server):
    server.script += [
        (429, {"error": {"message": "slow down"}}, {"retry-after": "2"}),
        (503, {"error": {"message": "busy"}}, {}),
        (200, completion(content="ok"), {}),
    ]
    p, sleeps = provider(server, backoff=0.1)
    p([{"role": "user", "content": "x"}], "m", None, None)
    assert sleeps[0] == 2.0  # server hint beats the 0.1 s backoff
    assert 0.2 <= sleeps[1] <= 0.22  # second retry: backoff * 2


def test_400_is_reported_with_status_and_server_message_without_retry(server):
    server.script.append((400, {"error": {"message": "model 'nope' does not exist", "type": "invalid_request_error"}}, {}))
    p, sleeps = provider(server)
    with pytest.raises(ProviderHTTPError) as info:
        p([{"role": "user", "content": "x"}], "nope", None, None)
    err = info.value
    assert err.status == 400 and err.server_message == "model 'nope' does not exist"
    assert "HTTP 400" in str(err) and "does not exist" in str(err)
    assert len(server.requests) == 1 and sleeps == []
    assert isinstance(err, ProviderError)


def test_persistent_5xx_gives_up_after_max_retries(server):
    server.script += [(502, {"error": {"message": "bad gateway"}}, {})] * 3
    p, sleeps = provider(server, max_retries=2)
    with pytest.raises(ProviderHTTPError, match=r"HTTP 502 .*bad gateway \(after 3 attempts\)"):
        p([{"role": "user", "content": "x"}], "m", None, None)
    assert len(server.requests) == 3 and len(sleeps) == 2


def test_timeout_is_retried_then_succeeds(server):
    server.script += [("sleep", 3.0), (200, completion(content="late but fine"), {})]
    p, sleeps = provider(server, timeout=1.0, max_retries=1)
    assert p([{"role": "user", "content": "x"}], "m", None, None).text == "late but fine"
    assert [a[0] for a in p.attempts] == ["timeout", "ok"] and len(sleeps) == 1


def test_timeout_on_every_attempt_is_reported(server):
    server.script += [("sleep", 3.0), ("sleep", 3.0)]
    p, sleeps = provider(server, timeout=1.0, max_retries=1)
    with pytest.raises(ProviderTimeoutError, match=r"no answer within 1.0s on any of 2 attempts"):
        p([{"role": "user", "content": "x"}], "m", None, None)
    assert len(server.requests) == 2 and len(sleeps) == 1


def test_connection_refused_is_reported():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = OpenAICompatProvider(f"http://127.0.0.1:{port}/v1", max_retries=1, sleep=lambda s: None, timeout=2)
    with pytest.raises(ProviderConnectionError, match="cannot connect"):
        p([{"role": "user", "content": "x"}], "m", None, None)


def test_bad_configuration_is_refused():
    with pytest.raises(ProviderConfigError, match="max_retries"):
        OpenAICompatProvider("http://127.0.0.1:1/v1", max_retries=-1)
    with pytest.raises(ProviderConfigError, match="timeout"):
        OpenAICompatProvider("http://127.0.0.1:1/v1", timeout=0)


def test_missing_openai_package_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` raise ImportError
    with pytest.raises(ProviderConfigError, match=r"pip install 'opctx\[openai\]'"):
        OpenAICompatProvider("http://127.0.0.1:1/v1")


def test_chat_turn_over_the_real_client_sends_a_valid_tool_exchange(server, db_path):
    from opctx.dag.chat import chat_turn
    from opctx.dag.runtime import DagRuntime
    from opctx.dag.store import GraphStore

    server.script += [
        (
            200,
            completion(
                tool_calls=[{"id": "call_w", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}],
                usage={"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59},
            ),
            {},
        ),
        (200, completion(content="It is 3 degrees in Oslo."), {}),
    ]

    def weather(city: str) -> str:
        """Current weather of a city."""
        return f"{city}: 3C"

    p, _ = provider(server)
    with GraphStore(db_path, "live") as store:
        rt = DagRuntime(p, store.load(), store, "test-model", system="You are terse.")
        result = chat_turn("Weather in Oslo?", rt, [weather])
        stored = store.load()
    assert result.text == "It is 3 degrees in Oslo."
    second = server.requests[1]["body"]
    assert second["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_w", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}],
        },
        {"role": "tool", "tool_call_id": "call_w", "content": "Oslo: 3C"},
    ]
    assert second["tools"][0]["function"]["parameters"]["required"] == ["city"]
    first_llm = [n for n in stored if n.role == "llm"][0]
    assert first_llm.metadata["usage"] == {"input_tokens": 50, "output_tokens": 9, "cache_read_tokens": 0, "cache_write_tokens": 0}
