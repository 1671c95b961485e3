"""Synthetic long coding-agent sessions with planted identifiers (deterministic, seeded).

Why
---
Real transcripts (the corpus) show what agents really produce, but nobody knows
which of their details a later turn *needed*. To test reference-loss metrics
(``opctx.lab.metrics.reference_losses``) and compare strategies we need sessions
where the answer is known. This module generates realistic, long coding-agent
sessions - file reads with line numbers, grep output, pytest runs with failures
and tracebacks, shell output with commit hashes, edits, errors, Chinese and
mixed Chinese/English user turns - and *plants* identifiers: a distinctive path,
hex id, CamelCase symbol, error class or snake_case name that appears for the
first time in exactly one tool result and is referred back to by a later user or
assistant message. Every planted identifier, its source message and its uses are
recorded in the scenario's metadata so that a test can compute which losses a
strategy must cause, independently of the metric's implementation.

Design choices
--------------
* Determinism: everything comes from one ``random.Random(seed)``; timestamps
  start at a fixed epoch (2026-01-01 UTC) and advance by seeded gaps (tool
  results within seconds, user turns minutes apart) so that wall-clock gates in
  aging see realistic spacing. The same seed gives byte-identical output on
  every platform (no ``hash()``, no set iteration order, no wall clock).
* Message shape: the message dicts of ``opctx.dag.messages`` with OpenAI-style
  tool traffic (assistant ``tool_calls`` answered by ``role="tool"`` messages
  carrying ``tool_call_id``). Ids are ``sc<seed>_<index>``; ``parent_id`` chains
  the list. Assistant messages carry ``model``; no provider ``usage`` is
  invented (the sessions are synthetic; estimator-only metrics apply).
* Noise never creates accidental references: the project layout is listed in
  the first user message, so any path a later tool call or grep output shows
  was first introduced by a user message (never masked or aged). Assistant noise
  text never quotes tool-result-only strings. Commit hashes, request ids and
  test names in tool output are never mentioned again. Hence, under observation
  masking, the only identifiers that can be lost are the planted ones - which is
  what lets a test say "exactly these losses".
* Planted identifiers appear only in their source tool result and in their
  uses (``Scenario.validate`` checks it). Uses are scheduled a number of tool
  results after the source (``gap``), spread on both sides of 10 (the masking
  window M of "The Complexity Trap") so that masking presets lose some and keep
  others. A second use of the same identifier (``second_use``) always finds the
  first use in context (user and assistant text is never masked).
* ``planted`` records, per identifier: ``identifier``, ``kind``,
  ``source_index`` / ``source_id`` (the tool result), ``source_tool_ordinal``
  (0-based count of tool results before it in the session), and ``uses``: a
  list of ``{"index", "id", "role", "tool_results_before"}``.

Public API
----------
``generate_session(seed, n_turns=40, ...) -> Scenario``,
``write_scenarios(out_dir, seeds=..., ...) -> list[Path]`` (one ``<name>.jsonl``
message list per scenario, one message per line, plus ``<name>.meta.json``),
``load_scenario(path) -> Scenario`` and
``build_scenario_sessions(db_path, n=..., ...) -> list[str]`` (sessions in a
``DagSessionDB``; the planted metadata goes into the session's extra meta under
``"scenario"``) and ``ScenarioSpec(seed, n_turns)``, the picklable recipe a sweep
sends to a worker, which generates the session itself (``sweep`` calls its
``load()``): a 10,000-session sweep needs no database and pickles a few bytes per
session instead of its messages.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "SCENARIO_EPOCH",
    "DEFAULT_MODEL",
    "PlantedIdentifier",
    "Scenario",
    "generate_session",
    "write_scenarios",
    "load_scenario",
    "build_scenario_sessions",
    "ScenarioSpec",
]

SCENARIO_EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: fixed so runs are reproducible
DEFAULT_MODEL = "claude-sonnet-4-5"

_PACKAGES = ["app", "core", "billing", "auth", "storage", "api", "jobs", "cli"]
_MODULES = [
    "config", "models", "handlers", "service", "utils", "schema", "client",
    "cache", "worker", "routes", "errors", "session", "parser", "metrics",
]
_NOUNS = [
    "Ledger", "Quill", "Vector", "Harbor", "Signal", "Beacon", "Cobalt", "Tensor",
    "Falcon", "Meadow", "Prism", "Anchor", "Cipher", "Orbit", "Pylon", "Quarry",
]
_VERBS = ["reconcile", "resolve", "dispatch", "ingest", "compact", "render", "hydrate", "flush"]
_FUNCS = [
    "load", "save", "parse", "validate", "build", "fetch", "apply", "merge",
    "render", "encode", "decode", "refresh", "close", "open", "reset", "check",
]
_ERRORS = ["KeyError", "ValueError", "TypeError", "AttributeError", "AssertionError", "RuntimeError"]

_USER_EN = [
    "The tests in {pkg} are failing after the last change, can you find out why?",
    "Please refactor {path} so that the retry logic lives in one place.",
    "Add input validation to the {func} function and cover it with tests.",
    "Why is the {pkg} worker so slow? Profile it and suggest a fix.",
    "Let's clean up the error handling in {path}; it swallows exceptions.",
    "Can you check whether the cache invalidation in {pkg} is correct?",
    "Run the full test suite and fix whatever is broken.",
    "Rename the {func} helper to something clearer and update the callers.",
]
_USER_ZH = [
    "{pkg} 模块的测试又挂了，帮我看看是哪里出的问题。",
    "请把 {path} 里的重复代码抽出来，保持接口不变。",
    "这个 {func} 函数的边界情况没有处理好，加上校验和单元测试。",
    "帮我检查一下 {pkg} 的缓存失效逻辑，感觉有竞态条件。",
    "运行一下全部测试，把失败的都修好，然后总结一下改了什么。",
]
_USER_MIXED = [
    "先看一下 {path} 的 {func}，then run the tests for {pkg} again.",
    "这个 bug 好像和 {pkg} 的 config loading 有关，please double-check.",
    "把 {func} 改成 async 的版本，注意 error handling 不要吞掉异常。",
]
_ASSISTANT_STEP = [
    "Let me look at the relevant code first.",
    "I'll search the code base for the call sites.",
    "Running the tests to see the current state.",
    "Let me check the recent history of this module.",
    "I'll apply the change now.",
    "Let me read the module to understand the control flow.",
    "我先看一下相关的代码。",
    "先跑一下测试看看现在的状态。",
]
_ASSISTANT_DONE = [
    "Done. The change is applied and the affected tests pass again.",
    "I've made the update; the remaining failures are unrelated to this change.",
    "The refactor is complete and the public interface is unchanged.",
    "已经修改完成，相关测试都通过了。",
    "改好了：逻辑集中到了一处，调用方不需要改动。",
]
_USE_TEMPLATES = {
    "user": [
        "Earlier a tool output mentioned {ident} - where does that come from?",
        "Go back to {ident} from before; I think that is the real cause.",
        "之前输出里出现过 {ident}，这个和现在的问题有关系吗？",
        "Can you double-check {ident}? 我记得前面看到过。",
    ],
    "assistant": [
        "This looks related to {ident}, which showed up in an earlier output.",
        "The failure matches what we saw with {ident} earlier.",
        "这和前面看到的 {ident} 是同一个问题。",
    ],
}


@dataclass
class PlantedIdentifier:
    """One identifier planted in a tool result and referred back to later."""

    identifier: str
    kind: str
    source_index: int
    source_id: str
    source_tool_ordinal: int
    uses: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "identifier": self.identifier,
            "kind": self.kind,
            "source_index": self.source_index,
            "source_id": self.source_id,
            "source_tool_ordinal": self.source_tool_ordinal,
            "uses": [dict(u) for u in self.uses],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlantedIdentifier:
        return cls(
            identifier=d["identifier"],
            kind=d["kind"],
            source_index=int(d["source_index"]),
            source_id=d["source_id"],
            source_tool_ordinal=int(d["source_tool_ordinal"]),
            uses=[dict(u) for u in d.get("uses", [])],
        )


@dataclass
class Scenario:
    """A generated session: its messages and what was planted where."""

    name: str
    seed: int
    messages: list[dict[str, Any]]
    planted: list[PlantedIdentifier]
    model: str = DEFAULT_MODEL
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def meta(self) -> dict[str, Any]:
        """JSON metadata: name, seed, model, generation parameters, planted identifiers."""
        return {
            "name": self.name,
            "seed": self.seed,
            "model": self.model,
            "params": dict(self.params),
            "n_messages": len(self.messages),
            "planted": [p.to_dict() for p in self.planted],
        }

    def validate(self) -> None:
        """Check the guarantees the tests rely on; raise ``ValueError`` naming the problem.

        Each planted identifier occurs in its source tool result, in each of its
        uses, and in no other message.
        """
        texts = [_message_text(m) for m in self.messages]
        for p in self.planted:
            expected = {p.source_index} | {u["index"] for u in p.uses}
            found = {i for i, t in enumerate(texts) if p.identifier in t}
            if found != expected:
                raise ValueError(
                    f"scenario {self.name}: planted identifier {p.identifier!r} occurs in "
                    f"messages {sorted(found)}, expected exactly {sorted(expected)}"
                )


def _message_text(msg: dict[str, Any]) -> str:
    # local import: scenarios must stay importable without the rest of the lab
    from opctx.dag.messages import message_text

    return message_text(msg)


class _Generator:
    """Builds one session step by step; see the module docstring for the rules."""

    def __init__(self, seed: int, *, model: str, n_planted: int, file_lines: tuple[int, int]):
        self.seed = seed
        self.rng = random.Random(seed)
        self.model = model
        self.n_planted = n_planted
        self.file_lines = file_lines
        self.messages: list[dict[str, Any]] = []
        self.clock = SCENARIO_EPOCH + self.rng.randint(0, 86_400)
        self.tool_ordinal = 0
        self.call_counter = 0
        self.planted: list[PlantedIdentifier] = []
        # planted identifiers waiting for their use: (due tool ordinal, planted, role)
        self.pending_uses: list[tuple[int, PlantedIdentifier, str]] = []
        self.used_tokens: set[str] = set()
        self.paths = sorted(
            {f"src/{p}/{m}.py" for p in _PACKAGES for m in self.rng.sample(_MODULES, 4)}
        )
        self.test_paths = [f"tests/test_{p.split('/')[1]}_{p.split('/')[2][:-3]}" for p in self.paths[:8]]

    # -- primitives ----------------------------------------------------------
    def _advance(self, low: float, high: float) -> float:
        self.clock += round(self.rng.uniform(low, high), 3)
        return self.clock

    def _append(self, msg: dict[str, Any]) -> dict[str, Any]:
        index = len(self.messages)
        msg["id"] = f"sc{self.seed}_{index:05d}"
        msg["parent_id"] = self.messages[-1]["id"] if self.messages else None
        self.messages.append(msg)
        return msg

    def _hex(self, n: int) -> str:
        while True:
            value = "".join(self.rng.choice("0123456789abcdef") for _ in range(n))
            # a digit and a letter each, so id extractors see it as an id, not a word/number
            if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
                if value not in self.used_tokens:
                    self.used_tokens.add(value)
                    return value

    # -- planted identifiers -------------------------------------------------
    def _new_identifier(self) -> tuple[str, str]:
        kind = self.rng.choice(["path", "hexid", "symbol", "error", "snake"])
        tag = self._hex(6)
        if kind == "path":
            ident = f"src/{self.rng.choice(_PACKAGES)}_{tag}/{self.rng.choice(_VERBS)}_job.py"
        elif kind == "hexid":
            ident = self._hex(12)
        elif kind == "symbol":
            a, b = self.rng.sample(_NOUNS, 2)
            ident = f"{a}{b}X{tag}"
        elif kind == "error":
            ident = f"{self.rng.choice(_NOUNS)}Drift{tag}Error"
        else:
            ident = f"{self.rng.choice(_VERBS)}_batch_{tag}"
        return kind, ident

    def _plant_line(self, kind: str, ident: str) -> str:
        if kind == "path":
            return f"WARNING: config override loaded from {ident}"
        if kind == "hexid":
            return f"INFO request_id={ident} status=retrying"
        if kind == "symbol":
            return f"    registry.register({ident})  # legacy adapter"
        if kind == "error":
            return f"E   {ident}: checksum mismatch in batch"
        return f"DEBUG scheduled job {ident} (priority=low)"

    def _maybe_plant(self, lines: list[str], turn_fraction: float) -> PlantedIdentifier | None:
        if len(self.planted) >= self.n_planted or turn_fraction > 0.8:
            return None
        # spread plants over the first 80% of the session
        if self.rng.random() > 0.12:
            return None
        kind, ident = self._new_identifier()
        position = self.rng.randint(0, len(lines))
        lines.insert(position, self._plant_line(kind, ident))
        planted = PlantedIdentifier(
            identifier=ident,
            kind=kind,
            source_index=len(self.messages),
            source_id=f"sc{self.seed}_{len(self.messages):05d}",
            source_tool_ordinal=self.tool_ordinal,
        )
        self.planted.append(planted)
        # alternate short and long gaps around the masking window of 10
        short = len(self.planted) % 2 == 1
        gap = self.rng.randint(2, 7) if short else self.rng.randint(13, 40)
        role = self.rng.choice(["user", "assistant"])
        self.pending_uses.append((self.tool_ordinal + gap, planted, role))
        if self.rng.random() < 0.3:
            self.pending_uses.append((self.tool_ordinal + gap + self.rng.randint(3, 20), planted, role))
        return planted

    def _due_uses(self, role: str) -> list[PlantedIdentifier]:
        due = [p for (t, p, r) in self.pending_uses if t <= self.tool_ordinal and r == role]
        self.pending_uses = [
            (t, p, r) for (t, p, r) in self.pending_uses if not (t <= self.tool_ordinal and r == role)
        ]
        # one use per identifier per message, in planting order
        unique: list[PlantedIdentifier] = []
        for p in due:
            if p not in unique:
                unique.append(p)
        return unique

    def _record_uses(self, uses: list[PlantedIdentifier], role: str) -> None:
        index = len(self.messages)
        for p in uses:
            p.uses.append(
                {
                    "index": index,
                    "id": f"sc{self.seed}_{index:05d}",
                    "role": role,
                    "tool_results_before": self.tool_ordinal,
                }
            )

    # -- tool outputs ----------------------------------------------------------
    def _file_body(self, path: str) -> list[str]:
        rng = random.Random(f"{self.seed}:{path}:{self.tool_ordinal // 25}")
        n = rng.randint(*self.file_lines)
        module = path.rsplit("/", 1)[-1][:-3]
        lines = [f'"""The {module} module of the {path.split("/")[1]} package."""', "", "import logging"]
        lines.append("from typing import Any")
        lines.append("")
        lines.append("log = logging.getLogger(__name__)")
        while len(lines) < n:
            func = rng.choice(_FUNCS)
            arg = rng.choice(["value", "payload", "item", "record", "options"])
            lines += [
                "",
                f"def {func}_{module}({arg}: Any, *, strict: bool = False) -> Any:",
                f'    """{func.capitalize()} a {module} {arg}."""',
                f"    if {arg} is None:",
                f'        raise ValueError("{arg} is required")',
                f"    result = dict({arg}) if isinstance({arg}, dict) else {{'value': {arg}}}",
                "    if strict:",
                "        for key in sorted(result):",
                "            if key.startswith('_'):",
                "                log.warning('private key %s ignored', key)",
                "    return result",
            ]
        return [f"{i + 1:5d}\t{line}" for i, line in enumerate(lines[:n])]

    def _grep_output(self, pattern: str) -> list[str]:
        hits = self.rng.sample(self.paths, min(len(self.paths), self.rng.randint(3, 12)))
        out = []
        for path in sorted(hits):
            for _ in range(self.rng.randint(1, 4)):
                line = self.rng.randint(1, 400)
                out.append(f"{path}:{line}:    result = {pattern}(payload, strict=True)")
        return out

    def _test_output(self, failing: bool) -> tuple[list[str], bool]:
        n = self.rng.randint(40, 220)
        lines = [
            "============================= test session starts ==============================",
            "platform linux -- Python 3.12.3, pytest-8.3.2, pluggy-1.5.0",
            f"collected {n} items",
            "",
        ]
        failed = self.rng.randint(1, 4) if failing else 0
        for test_path in self.test_paths:
            marks = "".join(self.rng.choice("....................F" if failing else ".") for _ in range(self.rng.randint(5, 30)))
            lines.append(f"{test_path}.py {marks}")
        if failed:
            lines += ["", "=================================== FAILURES ==================================="]
            for _ in range(failed):
                path = self.rng.choice(self.paths)
                func = self.rng.choice(_FUNCS)
                err = self.rng.choice(_ERRORS)
                module = path.rsplit("/", 1)[-1][:-3]
                lines += [
                    f"___________________________ test_{func}_{module}_edge ___________________________",
                    "",
                    "    def test_edge():",
                    f">       {func}_{module}(None)",
                    "",
                    f"{path}:{self.rng.randint(10, 300)}: in {func}_{module}",
                    "    raise ValueError(\"value is required\")",
                    f"E   {err}: value is required",
                ]
            lines.append(f"=========================== {failed} failed, {n - failed} passed in {self.rng.uniform(0.5, 30):.2f}s ===========================")
        else:
            lines.append(f"============================== {n} passed in {self.rng.uniform(0.5, 30):.2f}s ==============================")
        return lines, bool(failed)

    def _shell_output(self) -> list[str]:
        lines = []
        for _ in range(self.rng.randint(3, 10)):
            lines.append(f"commit {self._hex(40)}")
            lines.append("Author: Dev <dev@example.invalid>")
            lines.append(f"    {self.rng.choice(['fix', 'refactor', 'test', 'docs'])}: {self.rng.choice(_MODULES)} cleanup")
        return lines

    def _traceback(self) -> list[str]:
        path = self.rng.choice(self.paths)
        err = self.rng.choice(_ERRORS)
        return [
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.12/runpy.py", line 198, in _run_module_as_main',
            f'  File "/repo/{path}", line {self.rng.randint(5, 400)}, in main',
            "    return run(options)",
            f"{err}: unexpected state while processing the request",
        ]

    # -- turns -------------------------------------------------------------------
    def _tool_call(self, turn_fraction: float) -> tuple[dict[str, Any], list[str], bool]:
        kind = self.rng.choices(["read_file", "grep", "run_tests", "bash", "edit_file"], [5, 3, 2, 1, 2])[0]
        path = self.rng.choice(self.paths)
        is_error = False
        if kind == "read_file":
            args: dict[str, Any] = {"path": path}
            lines = self._file_body(path)
        elif kind == "grep":
            # a plain word: a snake_case pattern would be a reference to earlier tool output
            pattern = self.rng.choice(_FUNCS)
            args = {"pattern": pattern, "path": "src"}
            lines = self._grep_output(pattern)
        elif kind == "run_tests":
            args = {"command": "pytest -q"}
            lines, _ = self._test_output(self.rng.random() < 0.5)
        elif kind == "bash":
            if self.rng.random() < 0.3:
                args = {"command": f"python -m {path[:-3].replace('/', '.')}"}
                lines = self._traceback()
                is_error = True
            else:
                args = {"command": "git log -n 5"}
                lines = self._shell_output()
        else:
            args = {"path": path, "old": "strict: bool = False", "new": "strict: bool = True"}
            lines = [f"Applied edit to {path}: 1 replacement."]
        self.call_counter += 1
        call = {"id": f"call_{self.seed}_{self.call_counter:05d}", "name": kind, "arguments": args}
        return call, lines, is_error

    def _user_text(self) -> str:
        lang = self.rng.choices(["en", "zh", "mixed"], [5, 3, 2])[0]
        template = self.rng.choice({"en": _USER_EN, "zh": _USER_ZH, "mixed": _USER_MIXED}[lang])
        return template.format(
            pkg=self.rng.choice(_PACKAGES), path=self.rng.choice(self.paths), func=self.rng.choice(_FUNCS)
        )

    def _with_uses(self, text: str, role: str) -> str:
        uses = self._due_uses(role)
        if not uses:
            return text
        self._record_uses(uses, role)
        mentions = [self.rng.choice(_USE_TEMPLATES[role]).format(ident=p.identifier) for p in uses]
        return " ".join([text, *mentions]) if role == "assistant" else " ".join([*mentions, text])

    def run(self, n_turns: int, max_tools_per_turn: int) -> None:
        layout = "\n".join(f"- {p}" for p in self.paths + [t + ".py" for t in self.test_paths])
        self._append(
            {
                "role": "user",
                "content": "You are working in a Python repository with this layout:\n" + layout
                + "\n\n" + self._user_text(),
                "timestamp": self._advance(0, 1),
            }
        )
        for turn in range(n_turns):
            fraction = turn / max(1, n_turns)
            if turn:
                text = self._with_uses(self._user_text(), "user")
                self._append({"role": "user", "content": text, "timestamp": self._advance(30, 900)})
            for _ in range(self.rng.randint(1, max_tools_per_turn)):
                parallel = 2 if self.rng.random() < 0.15 else 1
                calls = [self._tool_call(fraction) for _ in range(parallel)]
                text = self._with_uses(self.rng.choice(_ASSISTANT_STEP), "assistant")
                self._append(
                    {
                        "role": "assistant",
                        "content": text,
                        "model": self.model,
                        "tool_calls": [c for c, _, _ in calls],
                        "timestamp": self._advance(2, 25),
                    }
                )
                for call, lines, is_error in calls:
                    self._maybe_plant(lines, fraction)
                    msg: dict[str, Any] = {
                        "role": "tool",
                        "content": "\n".join(lines),
                        "name": call["name"],
                        "arguments": call["arguments"],
                        "tool_call_id": call["id"],
                        "timestamp": self._advance(0.2, 6),
                    }
                    if is_error:
                        msg["is_error"] = True
                    self._append(msg)
                    self.tool_ordinal += 1
            text = self._with_uses(self.rng.choice(_ASSISTANT_DONE), "assistant")
            self._append(
                {"role": "assistant", "content": text, "model": self.model, "timestamp": self._advance(2, 30)}
            )
        # uses scheduled past the end of the session are dropped from the record
        self.pending_uses.clear()


def generate_session(
    seed: int,
    n_turns: int = 40,
    *,
    max_tools_per_turn: int = 6,
    n_planted: int = 12,
    file_lines: tuple[int, int] = (40, 260),
    model: str = DEFAULT_MODEL,
    name: str | None = None,
) -> Scenario:
    """One deterministic synthetic coding-agent session.

    ``n_turns`` user turns, each with 1..``max_tools_per_turn`` tool-calling
    assistant steps (15% of them with two parallel calls) and a closing
    assistant message. Up to ``n_planted`` identifiers are planted (see the
    module docstring). Raises ``ValueError`` on non-positive sizes.
    """
    if n_turns < 1:
        raise ValueError(f"n_turns must be >= 1, got {n_turns}")
    if max_tools_per_turn < 1:
        raise ValueError(f"max_tools_per_turn must be >= 1, got {max_tools_per_turn}")
    if n_planted < 0:
        raise ValueError(f"n_planted must be >= 0, got {n_planted}")
    if not (0 < file_lines[0] <= file_lines[1]):
        raise ValueError(f"file_lines must be (low, high) with 0 < low <= high, got {file_lines}")
    gen = _Generator(seed, model=model, n_planted=n_planted, file_lines=file_lines)
    gen.run(n_turns, max_tools_per_turn)
    scenario = Scenario(
        name=name or f"scenario-{seed:04d}",
        seed=seed,
        messages=gen.messages,
        planted=[p for p in gen.planted if p.uses],
        model=model,
        params={
            "n_turns": n_turns,
            "max_tools_per_turn": max_tools_per_turn,
            "n_planted": n_planted,
            "file_lines": list(file_lines),
        },
    )
    unused = [p for p in gen.planted if not p.uses]
    if unused:
        # identifiers whose use fell past the end stay in the text but are not
        # "planted references"; they are recorded so tests can tell them apart
        scenario.params["unused_plants"] = [p.to_dict() for p in unused]
    scenario.validate()
    return scenario


def write_scenarios(
    out_dir: str | Path,
    seeds: list[int] | tuple[int, ...] = (1, 2, 3),
    **kwargs: Any,
) -> list[Path]:
    """Write one ``<name>.jsonl`` (one message dict per line) + ``<name>.meta.json`` per seed.

    Returns the JSONL paths. ``kwargs`` go to ``generate_session``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for seed in seeds:
        scenario = generate_session(seed, **kwargs)
        path = out / f"{scenario.name}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for msg in scenario.messages:
                fh.write(json.dumps(msg, ensure_ascii=False, sort_keys=True) + "\n")
        (out / f"{scenario.name}.meta.json").write_text(
            json.dumps(scenario.meta, ensure_ascii=False, indent=1, sort_keys=True) + "\n",
            encoding="utf-8",
        )
        written.append(path)
    return written


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario written by ``write_scenarios`` (the ``.jsonl``; the meta file beside it)."""
    path = Path(path)
    messages = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                messages.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON: {exc.msg}") from exc
    meta_path = path.with_suffix("").with_suffix(".meta.json")
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    return Scenario(
        name=meta.get("name", path.stem),
        seed=int(meta.get("seed", -1)),
        messages=messages,
        planted=[PlantedIdentifier.from_dict(p) for p in meta.get("planted", [])],
        model=meta.get("model", DEFAULT_MODEL),
        params=meta.get("params", {}),
    )


def build_scenario_sessions(
    db_path: str | Path,
    n: int = 3,
    *,
    first_seed: int = 1,
    **kwargs: Any,
) -> list[str]:
    """Generate ``n`` scenarios (seeds ``first_seed`` ..) into sessions of a ``DagSessionDB``.

    Session ids are ``scenario-<seed>``; an existing session of that id is
    replaced, so the call is idempotent. The session's extra meta holds the
    scenario metadata under ``"scenario"``. Returns the session ids.
    """
    from opctx.dag.session_db import DagSessionDB

    db = DagSessionDB(str(db_path))
    ids = []
    try:
        for seed in range(first_seed, first_seed + n):
            scenario = generate_session(seed, **kwargs)
            sid = f"scenario-{seed:04d}"
            if db.get_session(sid) is not None:
                db.delete_session(sid)
            db.create_session(
                session_id=sid,
                title=f"Synthetic coding session (seed {seed})",
                model=scenario.model,
                source="scenario",
            )
            db.append_messages(sid, [dict(m) for m in scenario.messages])
            db.set_extra_meta(sid, {"scenario": scenario.meta})
            ids.append(sid)
    finally:
        close = getattr(db, "close", None)
        if callable(close):
            close()
    return ids


@dataclass(frozen=True)
class ScenarioSpec:
    """A generated session by its recipe: ``load()`` is ``generate_session(seed,
    n_turns)`` as a ``RecordedHistory`` (what ``opctx.lab.sweep`` replays)."""

    seed: int
    n_turns: int = 40

    @property
    def label(self) -> str:
        return f"scenario-{self.seed:04d}"

    def load(self) -> Any:
        from .history import RecordedHistory

        scenario = generate_session(self.seed, n_turns=self.n_turns)
        return RecordedHistory.from_messages(scenario.messages, model=scenario.model,
                                             session_id=self.label, fmt="scenario")
