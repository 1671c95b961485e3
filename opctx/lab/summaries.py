"""Real LLM summaries through any OpenAI-compatible endpoint, cached so a sweep never pays twice.

``LLMSummaries(endpoint, model, prompt="claude-code")`` summarises folded messages with
a named prompt (``opctx.lab.summary_prompts``) through ``/v1/chat/completions`` (Ollama,
vLLM, llama.cpp's server, OpenAI ...: the ``OpenAICompatProvider`` of
``opctx.dag.providers``) or through any in-process provider call. It is used three ways:

* ``summaries.summarise(messages, previous_summary=None) -> SummaryRecord`` and
  ``summarise_many(batches)`` (bounded concurrency): what ``probe_table`` calls;
* as a provider call itself, ``summaries(messages, model, system, tools) -> Reply``, so
  ``replay(h, "default", summaries=summaries)`` and ``build_engine(name,
  summarizer_provider=summaries)`` use it as the engine's summariser. The engine renders
  its own prompt; a named prompt other than ``opctx`` gets the engine's transcript as one
  block. A failed summary raises ``ProviderError`` there, so the engine falls back to the
  structural summary and says so (``fell_back_to_structural``, ``error``);
* offline: ``LLMSummaries.from_cache(model, prompt)`` answers from the cache only (a
  miss is a failure, recorded), so a notebook re-runs without the endpoint.

The cache
=========
A SQLite file of its own (``SummaryCache``; default ``$OPCTX_SUMMARY_CACHE``, else
``summaries.sqlite`` in opctx's per-user cache folder, ``opctx.lab.sources.cache_dir``).
An entry is content-addressed: the key is the sha256 of the model label, the prompt
name, the sha256 of the exact request (system prompt and user text, so the input and
the prompt's wording) and the call parameters (``max_tokens``, ``temperature``, extra
parameters). The endpoint URL is not part of the key: the same model served elsewhere
gives the same summary entry (give another ``model`` label to keep them apart). Only
successful summaries are stored, with the token counts and latency measured when they
were made; a failure is retried on the next run. Writes are ``INSERT OR IGNORE`` inside
one transaction (the first writer wins; concurrent runs never overwrite each other).

Calls
=====
``CallSettings``: ``max_tokens`` (512), ``temperature`` (0.0), ``timeout`` per attempt
(120 s), ``retries`` after the first attempt (2, exponential backoff from ``backoff``
seconds, ``Retry-After`` honoured: the provider's loop), ``concurrency`` (4 calls at a
time in ``summarise_many``), ``max_input_tokens`` (``None``; else the oldest folded
messages are left out, with a note, until the request fits a small model's window),
``offline``. As the engine's summariser, the transcript the engine rendered is cut the
same way, from its oldest line. Each summary is a ``SummaryRecord`` (``opctx.lab.summaries.SummaryRecord``)
with the model, the token counts (input = the whole prompt, cached part included:
opctx's ``Usage`` convention, which ``opctx.lab.prices.request_cost`` prices directly),
latency, ok / error, attempts and whether the cache answered. A server that reports no
usage gets opctx's estimate (``estimated=True``).

>>> from opctx.dag.providers import ScriptedProvider
>>> s = LLMSummaries(ScriptedProvider(["short summary"]), "fake-model", cache=":memory:")
>>> r = s.summarise([{"role": "user", "content": "fix calc.py"}])
>>> r.ok, r.text, r.cached, s.summarise([{"role": "user", "content": "fix calc.py"}]).cached
(True, 'short summary', False, True)
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from opctx.context.prompts import SYSTEM as ENGINE_SYSTEM
from opctx.dag.providers import ProviderError, Reply, Usage, as_reply

from .summary_prompts import SummaryPrompt, get_prompt

__all__ = [
    "CallSettings",
    "SummaryRecord",
    "SummaryCache",
    "LLMSummaries",
    "default_cache_path",
    "CACHE_ENV",
]

CACHE_ENV = "OPCTX_SUMMARY_CACHE"
_KEY_VERSION = 1


def default_cache_path() -> Path:
    """``$OPCTX_SUMMARY_CACHE``, else ``summaries.sqlite`` in opctx's per-user cache folder."""
    from .sources import cache_dir

    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else cache_dir() / "summaries.sqlite"


@dataclass(frozen=True)
class CallSettings:
    """How summaries are requested (see the module docstring, "Calls")."""

    max_tokens: int = 512
    temperature: float = 0.0
    timeout: float = 120.0
    retries: int = 2
    backoff: float = 0.5
    concurrency: int = 4
    max_input_tokens: int | None = None
    offline: bool = False
    extra_params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.max_tokens <= 0 or self.timeout <= 0 or self.retries < 0 or self.concurrency < 1:
            raise ValueError(f"invalid CallSettings: {self}")

    def params(self) -> dict[str, Any]:
        """What is sent with every request (and keys the cache)."""
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, **dict(self.extra_params)}


@dataclass(frozen=True)
class SummaryRecord:
    """One summary: its text, what it cost and how it was obtained."""

    key: str
    model: str
    endpoint: str
    prompt: str
    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    latency_s: float = 0.0
    ok: bool = False
    error: str | None = None
    attempts: int = 0
    cached: bool = False
    estimated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def usage(self) -> dict[str, int]:
        """The token counts under the names ``opctx.lab.prices.request_cost`` takes."""
        return {
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens, "cache_write_tokens": self.cache_write_tokens,
        }


_SCHEMA = """
CREATE TABLE IF NOT EXISTS summaries (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    prompt TEXT NOT NULL,
    request_sha256 TEXT NOT NULL,
    params_json TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    text TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    latency_s REAL NOT NULL,
    estimated INTEGER NOT NULL,
    created_at REAL NOT NULL
)
"""
_COLUMNS = ("text", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "latency_s", "estimated")


class SummaryCache:
    """Content-addressed summaries in a SQLite file (``":memory:"`` for a throw-away one)."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        target = default_cache_path() if path is None else path
        self.path = str(target)
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
        try:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise ValueError(f"{self.path}: not a summary cache ({exc})") from None

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM summaries WHERE key = ?", (key,)).fetchone()
        return dict(zip(_COLUMNS, row, strict=True)) if row else None

    def put(self, record: SummaryRecord, request_sha256: str, params: dict[str, Any]) -> bool:
        """Store a successful summary; ``False`` when the key was already there (kept as it was)."""
        if not record.ok:
            return False
        values = (
            record.key, record.model, record.prompt, request_sha256, json.dumps(params, sort_keys=True),
            record.endpoint, record.text, record.input_tokens, record.output_tokens, record.cache_read_tokens,
            record.cache_write_tokens, record.latency_s, int(record.estimated), time.time(),
        )
        with self._lock:
            cur = self._conn.execute(f"INSERT OR IGNORE INTO summaries VALUES ({', '.join('?' * len(values))})", values)
        return cur.rowcount == 1

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM summaries").fetchone()[0])

    def entries(self) -> list[dict[str, Any]]:
        """``(model, prompt, summaries)`` per model and prompt held."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT model, prompt, count(*) FROM summaries GROUP BY model, prompt ORDER BY model, prompt"
            ).fetchall()
        return [{"model": m, "prompt": p, "summaries": n} for m, p, n in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _estimate(text: str) -> int:
    from opctx.context.tokens import estimate_text_tokens

    return int(estimate_text_tokens(text))


class LLMSummaries:
    """Summaries from a model behind an endpoint (or an in-process provider call); see the module docstring.

    ``endpoint``: a base URL (``http://127.0.0.1:8080/v1``), a provider call
    ``(messages, model, system, tools) -> Reply | str``, or ``None`` with
    ``settings.offline``. ``cache``: ``True`` (the default file), ``False`` (none), a path,
    or a ``SummaryCache``.
    """

    def __init__(
        self,
        endpoint: str | Callable[..., Any] | None,
        model: str,
        prompt: str | SummaryPrompt = "opctx",
        *,
        cache: bool | str | os.PathLike | SummaryCache = True,
        settings: CallSettings | None = None,
        api_key: str | None = None,
    ) -> None:
        self.settings = settings or CallSettings()
        if endpoint is None and not self.settings.offline:
            raise ValueError("LLMSummaries needs an endpoint URL or a provider call (or settings.offline=True)")
        self.model = str(model)
        self.prompt = get_prompt(prompt)
        self.endpoint = endpoint if isinstance(endpoint, str) else ""
        self._call = None if isinstance(endpoint, str) or endpoint is None else endpoint
        self._api_key = api_key
        self._local = threading.local()
        self.cache = _open_cache(cache)
        self.records: list[SummaryRecord] = []
        self._records_lock = threading.Lock()
        self.endpoint_calls = 0

    @classmethod
    def from_cache(
        cls, model: str, prompt: str | SummaryPrompt = "opctx", *, cache: bool | str | os.PathLike | SummaryCache = True,
        settings: CallSettings | None = None,
    ) -> LLMSummaries:
        """Answers from the cache only (a miss is recorded as a failure): offline notebooks."""
        return cls(None, model, prompt, cache=cache, settings=replace(settings or CallSettings(), offline=True))

    @property
    def label(self) -> str:
        """``llm:<prompt>:<model>``: how tables name these summaries."""
        return f"llm:{self.prompt.name}:{self.model}"

    # -- the request ---------------------------------------------------------------------------

    def request(self, messages: Sequence[dict], previous_summary: str | None = None) -> tuple[str | None, str]:
        """``(system, user_text)`` sent for ``messages``, fitted to ``settings.max_input_tokens``."""
        limit = self.settings.max_input_tokens
        msgs = list(messages)
        system, user = self.prompt.render(msgs, previous_summary)
        if limit is None or _estimate((system or "") + user) <= limit:
            return system, user
        lo, hi = 1, len(msgs)  # drop the oldest messages until the request fits
        while lo < hi:
            mid = (lo + hi) // 2
            s, u = self._render_suffix(msgs, mid, previous_summary)
            if _estimate((s or "") + u) <= limit:
                hi = mid
            else:
                lo = mid + 1
        return self._render_suffix(msgs, lo, previous_summary)

    def _render_suffix(self, msgs: list[dict], start: int, previous: str | None) -> tuple[str | None, str]:
        note = {"role": "user", "content": f"({start} earlier message(s) left out to fit the summary call)"}
        return self.prompt.render([note, *msgs[start:]], previous)

    def fit_block(self, transcript: str, previous_summary: str | None = None) -> tuple[str | None, str]:
        """``(system, user_text)`` around an already rendered transcript (the engine's), its
        oldest part left out, at a line start, until the request fits ``settings.max_input_tokens``."""
        system, user = self.prompt.render_block(transcript, previous_summary)
        limit = self.settings.max_input_tokens
        if limit is None or _estimate((system or "") + user) <= limit:
            return system, user

        def from_offset(offset: int) -> tuple[str | None, str]:
            newline = transcript.find("\n", offset)
            start = newline + 1 if offset and newline >= 0 else offset
            note = f"({start} earlier characters of the conversation left out to fit the summary call)\n"
            return self.prompt.render_block(note + transcript[start:], previous_summary)

        lo, hi = 1, len(transcript)  # the smallest offset whose rest fits
        while lo < hi:
            mid = (lo + hi) // 2
            s, u = from_offset(mid)
            if _estimate((s or "") + u) <= limit:
                hi = mid
            else:
                lo = mid + 1
        return from_offset(lo)

    def key(self, system: str | None, user: str, purpose: str | None = None) -> tuple[str, str]:
        """``(cache key, request sha256)`` of a request (``purpose``: the prompt name by default)."""
        request_sha = _sha256(json.dumps([system, user], ensure_ascii=False))
        body = {"v": _KEY_VERSION, "model": self.model, "prompt": purpose or self.prompt.name, "request": request_sha,
                "params": self.settings.params()}
        return _sha256(json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)), request_sha

    # -- one summary ---------------------------------------------------------------------------

    def summarise(self, messages: Sequence[dict], previous_summary: str | None = None) -> SummaryRecord:
        """Summarise ``messages`` with the named prompt; never raises for endpoint trouble."""
        system, user = self.request(messages, previous_summary)
        return self.complete(system, user)

    def summarise_many(self, batches: Sequence[Sequence[dict] | tuple[Sequence[dict], str | None]]) -> list[SummaryRecord]:
        """Many summaries, ``settings.concurrency`` at a time; identical requests are made once."""
        requests = []
        for batch in batches:
            if isinstance(batch, tuple):
                requests.append(self.request(batch[0], batch[1]))
            else:
                requests.append(self.request(batch))
        unique = list(dict.fromkeys(requests))
        with ThreadPoolExecutor(max_workers=self.settings.concurrency, thread_name_prefix="opctx-summary") as pool:
            done = dict(zip(unique, pool.map(lambda r: self.complete(*r), unique), strict=True))
        return [done[r] for r in requests]

    def complete(self, system: str | None, user: str, *, purpose: str | None = None) -> SummaryRecord:
        """One request through the cache, then the endpoint (with retries); recorded.

        ``purpose`` names a request that is not a summary (``"judge"``): it keys the cache
        and the record instead of the prompt name, and the answer is kept as it came.
        """
        key, request_sha = self.key(system, user, purpose)
        base = SummaryRecord(key=key, model=self.model, endpoint=self.endpoint, prompt=purpose or self.prompt.name)
        postprocess = purpose is None
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is not None:
            record = replace(base, ok=True, cached=True, **{**hit, "estimated": bool(hit["estimated"])})
        elif self.settings.offline:
            record = replace(base, error="OfflineMiss: not in the summary cache and the summaries are offline")
        else:
            record = self._call_endpoint(base, system, user, postprocess)
            if record.ok and self.cache is not None:
                self.cache.put(record, request_sha, self.settings.params())
        with self._records_lock:
            self.records.append(record)
        return record

    def _provider(self) -> Callable[..., Any]:
        if self._call is not None:
            return self._call
        provider = getattr(self._local, "provider", None)
        if provider is None:  # one client per thread: a provider's attempt log is per call
            from opctx.dag.providers import OpenAICompatProvider

            provider = OpenAICompatProvider(
                self.endpoint, self._api_key, timeout=self.settings.timeout, max_retries=self.settings.retries,
                backoff=self.settings.backoff, extra_params=self.settings.params(),
            )
            self._local.provider = provider
        return provider

    def _call_endpoint(self, base: SummaryRecord, system: str | None, user: str, postprocess: bool) -> SummaryRecord:
        provider = self._provider()
        started = time.perf_counter()
        with self._records_lock:
            self.endpoint_calls += 1
        try:
            reply = as_reply(provider([{"role": "user", "content": user}], self.model, system, None))
        except Exception as exc:  # every failure is recorded with the summary, never raised here
            attempts = len(getattr(provider, "attempts", ()) or ()) or 1
            return replace(base, error=f"{type(exc).__name__}: {exc}", attempts=attempts,
                           latency_s=time.perf_counter() - started)
        latency = time.perf_counter() - started
        attempts = len(getattr(provider, "attempts", ()) or ()) or 1
        text = (reply.text or "").strip()
        if not text:
            return replace(base, error="EmptySummary: the endpoint returned no text", attempts=attempts, latency_s=latency)
        usage, estimated = reply.usage, False
        if usage is None or not (usage.input_tokens or usage.output_tokens):
            usage, estimated = Usage(_estimate((system or "") + user), _estimate(text)), True
        return replace(
            base, text=self.prompt.postprocess(text) if postprocess else text, ok=True, attempts=attempts,
            latency_s=latency, estimated=estimated, **usage.to_dict(),
        )

    # -- as the engine's provider call ---------------------------------------------------------

    def __call__(self, messages: list[dict], model: str | None = None, system: str | None = None,
                 tools: list[dict] | None = None) -> Reply:
        """The ``ProviderCall`` shape: the engine's summary request, answered with this prompt.

        The engine's ``model`` is the replayed agent's; the summary is made by ``self.model``.
        """
        user = str(messages[-1].get("content") or "") if messages else ""
        sys_text, user_text = system, user
        if system == ENGINE_SYSTEM and (self.prompt.name != "opctx" or self.settings.max_input_tokens is not None):
            transcript, previous = _engine_parts(user)
            sys_text, user_text = self.fit_block(transcript, previous)
        record = self.complete(sys_text, user_text)
        if not record.ok:
            raise ProviderError(record.error or "the summary failed")
        usage = Usage(record.input_tokens, record.output_tokens, record.cache_read_tokens, record.cache_write_tokens)
        return Reply(text=record.text, tool_calls=[], usage=usage, model=self.model, raw=record)

    def __getstate__(self) -> dict[str, Any]:
        """What a worker process needs: the endpoint, model, prompt, settings and the cache's path.

        Records stay with the instance they were made by; an in-memory cache does not travel.
        """
        path = self.cache.path if self.cache is not None and self.cache.path != ":memory:" else False
        return {"endpoint": self._call if self._call is not None else (self.endpoint or None), "model": self.model,
                "prompt": self.prompt, "cache": path, "settings": self.settings, "api_key": self._api_key}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["endpoint"], state["model"], state["prompt"], cache=state["cache"],  # type: ignore[misc]
                      settings=state["settings"], api_key=state["api_key"])

    # -- accounting ----------------------------------------------------------------------------

    def usage(self) -> dict[str, Any]:
        """Totals over the records so far (token counts as measured when each summary was made)."""
        with self._records_lock:
            records = list(self.records)
        total: dict[str, Any] = {k: sum(getattr(r, k) for r in records if r.ok) for k in (
            "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")}
        total.update(summaries=len(records), failed=sum(1 for r in records if not r.ok),
                     cached=sum(1 for r in records if r.cached), endpoint_calls=self.endpoint_calls)
        return total

    def records_df(self) -> Any:
        """The records as a pandas DataFrame (one row per summary asked for)."""
        import pandas as pd

        with self._records_lock:
            return pd.DataFrame([r.to_dict() for r in self.records])

    def __repr__(self) -> str:
        where = self.endpoint or ("offline" if self.settings.offline else "in-process")
        return f"LLMSummaries({where!r}, {self.model!r}, prompt={self.prompt.name!r})"


def _open_cache(cache: bool | str | os.PathLike | SummaryCache) -> SummaryCache | None:
    if cache is False or cache is None:
        return None
    if isinstance(cache, SummaryCache):
        return cache
    return SummaryCache(None if cache is True else cache)


def _engine_parts(prompt: str) -> tuple[str, str | None]:
    """The transcript (and previous summary) inside the engine's FRESH / UPDATE prompt."""
    from opctx.context import prompts

    fresh_head, fresh_tail = prompts.FRESH.split("{conversation}")
    if prompt.startswith(fresh_head) and prompt.endswith(fresh_tail):
        return prompt[len(fresh_head): len(prompt) - len(fresh_tail)], None
    head, rest = prompts.UPDATE.split("{previous_summary}")
    middle, tail = rest.split("{conversation}")
    if prompt.startswith(head) and prompt.endswith(tail) and middle in prompt:
        body = prompt[len(head): len(prompt) - len(tail)]
        previous, _, transcript = body.partition(middle)
        return transcript, previous
    return prompt, None

