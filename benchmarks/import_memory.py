"""Benchmark: peak memory of importing one large transcript.

Generates, in /tmp, a realistic Claude Code session file and a Codex rollout of about
``--mb`` MB each (default 75), then imports each ``--repeat`` times, every run in a fresh
child process (``import_paths`` into a new database, what ``opctx import FILE`` does),
and reads the child's peak resident set size (``ru_maxrss`` from ``os.wait4``).

Side by side, in children of their own: ``python`` (the interpreter with opctx's importers
imported: the fixed cost) and ``json baseline`` (every line of the file parsed with
``json.loads`` and kept in a list: the least a loader that holds the parsed file needs).

Reported: median peak RSS in MB, peak / file size, and the ratio to the baseline.
Target: peak at most 3x the file size.

What the Claude Code file holds, per turn: a user request; assistant lines written one
per content block (thinking, text, tool_use) sharing one ``message.id``; tool results
with Claude Code's structured ``toolUseResult`` beside the text (the output twice, as the
client writes it); outputs from a few hundred bytes to 200 KB (a log-normal spread);
``usage`` on every assistant line; and a ``compact_boundary`` + summary whenever the
conversation since the last one passes about 600 KB (Claude Code compacts near its
200K-token window). The Codex rollout: ``turn_context``, reasoning with encrypted content,
``function_call`` / ``function_call_output`` pairs, ``token_count`` events and
``compacted`` items the same way.

Usage: ``.venv/bin/python benchmarks/import_memory.py [--mb 75] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_RATIO = 3.0
COMPACT_EVERY = 600_000  # bytes of conversation between two compactions
WORDS = ("the parser config request handler returns value error index table cache session "
         "token model branch commit test fails passes because when function module import").split()
CJK_WORDS = "我们 需要 修复 这个 问题 数据 接口 分页 订单 测试".split()


def _text(rng: random.Random, n: int, cjk: float = 0.0) -> str:
    """About ``n`` bytes of words; ``cjk``: the share of Chinese words (0: ASCII only)."""
    out, size = [], 0
    while size < n:
        w = rng.choice(CJK_WORDS) if cjk and rng.random() < cjk else rng.choice(WORDS)
        out.append(w)
        size += len(w.encode()) + 1
    return " ".join(out)


def _prose(rng: random.Random, n: int) -> str:
    """What people and models write here: mostly Chinese with English terms (as the corpus)."""
    return _text(rng, n, cjk=0.6)


def _output(rng: random.Random) -> str:
    """A tool output: code and logs (ASCII) four times in five, else text with Chinese in it."""
    return _text(rng, _output_size(rng), cjk=0.3 if rng.random() < 0.2 else 0.0)


def _output_size(rng: random.Random) -> int:
    return int(min(200_000, max(200, rng.lognormvariate(7.6, 1.3))))


def claude_code_lines(target: int, seed: int = 0):
    """Yield JSONL lines of one Claude Code session until about ``target`` bytes."""
    rng = random.Random(seed)
    sid = "5e55a0e0-0000-4000-8000-000000000075"
    base = {"sessionId": sid, "cwd": "/home/dev/shop", "version": "2.0.76", "gitBranch": "main",
            "userType": "external", "isSidechain": False}
    n = written = since_compact = 0
    parent = None
    clock = 1_767_000_000

    def emit(kind: str, message: dict | None = None, **extra) -> str:
        nonlocal n, parent, clock
        n += 1
        clock += rng.randint(1, 20)
        uid = f"{n:08x}-0000-4000-8000-{n:012x}"
        rec = {**base, "type": kind, "uuid": uid, "parentUuid": parent,
               "timestamp": f"2026-01-{1 + clock // 86400 % 28:02d}T{clock // 3600 % 24:02d}:"
                            f"{clock // 60 % 60:02d}:{clock % 60:02d}.000Z", **extra}
        if message is not None:
            rec["message"] = message
        parent = uid
        return json.dumps(rec, ensure_ascii=False) + "\n"

    turn = 0
    while written < target:
        turn += 1
        chunk = [emit("user", {"role": "user", "content": f"Turn {turn}: " + _prose(rng, rng.randint(40, 600))})]
        for step in range(rng.randint(1, 6)):
            mid = f"msg_{turn:05d}_{step}"
            usage = {"input_tokens": rng.randint(5, 50), "cache_read_input_tokens": rng.randint(1000, 150000),
                     "cache_creation_input_tokens": rng.randint(0, 5000), "output_tokens": rng.randint(20, 800)}
            msg = {"role": "assistant", "id": mid, "model": "claude-sonnet-4-5-20250929", "type": "message",
                   "usage": usage, "stop_reason": None}
            if rng.random() < 0.5:
                chunk.append(emit("assistant", {**msg, "content": [
                    {"type": "thinking", "thinking": _prose(rng, rng.randint(100, 1500)),
                     "signature": "Eq" + "A" * 300}]}, requestId=f"req_{turn}_{step}"))
            chunk.append(emit("assistant", {**msg, "content": [
                {"type": "text", "text": _prose(rng, rng.randint(50, 800))}]}, requestId=f"req_{turn}_{step}"))
            tool_id = f"toolu_{turn:06d}{step:02d}"
            tool = rng.choice(["Bash", "Read", "Grep", "Edit"])
            chunk.append(emit("assistant", {**msg, "content": [
                {"type": "tool_use", "id": tool_id, "name": tool,
                 "input": {"command": f"pytest -x tests/test_{turn}.py"} if tool == "Bash"
                 else {"file_path": f"/home/dev/shop/src/mod_{turn}.py"}}]}, requestId=f"req_{turn}_{step}"))
            out = _output(rng)
            structured = ({"stdout": out, "stderr": "", "interrupted": False, "isImage": False}
                          if tool == "Bash" else
                          {"type": "text", "file": {"filePath": f"/home/dev/shop/src/mod_{turn}.py",
                                                    "content": out, "numLines": out.count(" ") // 12 + 1}})
            chunk.append(emit("user", {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tool_id, "content": out}]}, toolUseResult=structured))
        chunk.append(emit("assistant", {"role": "assistant", "id": f"msg_{turn:05d}_end",
                                        "model": "claude-sonnet-4-5-20250929", "type": "message",
                                        "content": [{"type": "text", "text": _prose(rng, rng.randint(100, 1200))}],
                                        "usage": {"input_tokens": 10, "output_tokens": 300}}))
        size = sum(len(c.encode()) for c in chunk)
        written += size
        since_compact += size
        yield from chunk
        if since_compact > COMPACT_EVERY:
            since_compact = 0
            boundary = emit("system", None, subtype="compact_boundary", content="Conversation compacted",
                            compactMetadata={"trigger": "auto", "preTokens": 155_000}, level="info")
            yield boundary
            yield emit("user", {"role": "user", "content": "This session is being continued from a previous "
                                                           "conversation. Summary:\n" + _prose(rng, 6000)},
                       isCompactSummary=True, isVisibleInTranscriptOnly=True)


def codex_lines(target: int, seed: int = 1):
    """Yield JSONL lines of one Codex rollout until about ``target`` bytes."""
    rng = random.Random(seed)
    clock = 1_767_000_000
    written = since_compact = 0

    def emit(kind: str, payload: dict) -> str:
        nonlocal clock
        clock += rng.randint(1, 20)
        return json.dumps({"timestamp": f"2026-01-05T{clock // 3600 % 24:02d}:{clock // 60 % 60:02d}:"
                                        f"{clock % 60:02d}.000Z", "type": kind, "payload": payload},
                          ensure_ascii=False) + "\n"

    yield emit("session_meta", {"id": "019c0000-0000-7000-8000-000000000075", "cwd": "/home/dev/shop",
                                "originator": "codex_cli_rs", "cli_version": "0.77.0",
                                "instructions": _text(rng, 3000)})
    turn = 0
    while written < target:
        turn += 1
        chunk = [emit("turn_context", {"cwd": "/home/dev/shop", "model": "gpt-5-codex",
                                       "approval_policy": "on-request"}),
                 emit("response_item", {"type": "message", "role": "user", "content": [
                     {"type": "input_text", "text": f"Turn {turn}: " + _prose(rng, rng.randint(40, 600))}]})]
        for step in range(rng.randint(1, 6)):
            call = f"call_{turn:05d}_{step}"
            chunk.append(emit("response_item", {"type": "reasoning", "summary": [
                {"type": "summary_text", "text": _prose(rng, rng.randint(50, 400))}],
                "encrypted_content": "gAAAA" + "x" * rng.randint(500, 3000)}))
            chunk.append(emit("response_item", {"type": "function_call", "name": "shell", "call_id": call,
                                                "arguments": json.dumps({"command": ["bash", "-lc",
                                                                                     f"pytest -x t{turn}"]})}))
            chunk.append(emit("response_item", {"type": "function_call_output", "call_id": call,
                                                "output": json.dumps({"output": _output(rng),
                                                                      "metadata": {"exit_code": 0}})}))
            chunk.append(emit("event_msg", {"type": "token_count", "info": {"last_token_usage": {
                "input_tokens": rng.randint(1000, 150000), "cached_input_tokens": 900,
                "output_tokens": 300, "total_tokens": 151000}, "model_context_window": 272000}}))
        chunk.append(emit("response_item", {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": _prose(rng, rng.randint(100, 1200))}]}))
        size = sum(len(c.encode()) for c in chunk)
        written += size
        since_compact += size
        yield from chunk
        if since_compact > COMPACT_EVERY:
            since_compact = 0
            yield emit("compacted", {"message": "", "replacement_history": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Turn 1"}]},
                {"type": "compaction", "encrypted_content": "gAAAA" + "y" * 4000}]})


def write(path: Path, lines) -> int:
    with open(path, "w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line)
    return path.stat().st_size


_IMPORT = """
import sys
from opctx.importers import import_paths
r = import_paths([sys.argv[1]], sys.argv[2])
assert r.ok and r.sessions >= 1, (r.failed, r.issues[:3])
"""
_BASELINE = """
import json, sys
import opctx.importers
with open(sys.argv[1], "rb") as fh:
    records = [json.loads(line) for line in fh]
assert records
"""
_PYTHON = "import sys, opctx.importers"


def peak_rss_mb(code: str, *args: str) -> float:
    """Run ``code`` in a fresh interpreter and return its peak RSS in MB (``ru_maxrss``)."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}): {code[:60]!r}")
    return usage.ru_maxrss / 1024  # Linux reports KiB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=75.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats", default="claude_code,codex")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="opctx-memory-"))
    ok = True
    try:
        target = int(args.mb * 1e6)
        files = {"claude_code": (work / "5e55a0e0-0000-4000-8000-000000000075.jsonl", claude_code_lines),
                 "codex": (work / "rollout-2026-01-05T00-00-00-019c0000-0000-7000-8000-000000000075.jsonl",
                           codex_lines)}
        print(f"{'format':<12} {'what':<14} {'file MB':>8} {'peak MB':>8} {'peak/file':>9} {'vs baseline':>11}")
        for fmt in args.formats.split(","):
            path, gen = files[fmt]
            size = write(path, gen(target)) / 1e6
            rows = {}
            for name, code in (("python", _PYTHON), ("json baseline", _BASELINE), ("import", _IMPORT)):
                runs = []
                for _ in range(args.repeat):
                    db = work / "m.db"
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{db}{suffix}").unlink(missing_ok=True)
                    runs.append(peak_rss_mb(code, str(path), str(db)))
                rows[name] = statistics.median(runs)
            for name, peak in rows.items():
                print(f"{fmt:<12} {name:<14} {size:8.1f} {peak:8.1f} {peak / size:8.2f}x "
                      f"{peak / rows['json baseline']:10.2f}x")
            ratio = rows["import"] / size
            ok = ok and ratio <= TARGET_RATIO
            print(f"{fmt}: import peak {ratio:.2f}x the file size (target <= {TARGET_RATIO:.0f}x): "
                  f"{'OK' if ratio <= TARGET_RATIO else 'MISSED'}")
            path.unlink()
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
