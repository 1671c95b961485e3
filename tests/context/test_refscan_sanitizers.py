"""The compiled reference core (``_refscan.c``) under AddressSanitizer and UndefinedBehaviorSanitizer.

The test builds ``opctx/context/_refscan.c`` with ``-fsanitize=address,undefined`` into a
temporary folder (gcc, the interpreter's own headers), then runs this file as a script in a
subprocess of the same interpreter with ``libasan`` preloaded (CPython itself is not
instrumented, so the runtime must come first). The script imports the sanitized module
from the temporary folder (not the installed one) and feeds it seeded mutations of the text
of every file in ``data/samples``: byte flips, truncation, deep nesting, huge and empty
fields, invalid UTF-8 (decoded with ``surrogateescape``: lone surrogates), random code
points, NULs, repeated slices. Each case goes through ``extract`` (several limits, up to
past the 64 strings where the selection switches to a set), a fresh ``Scanner`` (one
message a line), a ``Scanner`` that lives through all the cases (its table grows, rehashes
and reuses freed slots), the error paths, and every few cases the ``ReferenceTracker``. The
results must equal the normal build's (the pure-Python path's where the core is not built),
and the sanitizers must say nothing: a non-zero exit, ``ERROR: AddressSanitizer`` or
``runtime error:`` in the output fails the test. A planted fault checks that the harness
really catches one.

Skips cleanly where there is no gcc, no ``Python.h`` or no ``libasan``.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "opctx" / "context" / "_refscan.c"
SAMPLES = ROOT / "data" / "samples"
CASES = 2000
SEED = 20240615
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


# ------------------------------------------------------------------ building


def _toolchain() -> tuple[str, str, str] | str:
    """(gcc, include dir, libasan path), or why the sanitizer build cannot run here."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return "no gcc on PATH"
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        return f"no Python.h in {include}"
    libasan = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(libasan) or not os.path.exists(libasan):
        return "gcc has no libasan.so"
    return gcc, include, libasan


def _build(gcc: str, include: str, source: Path, module: str, out_dir: Path) -> Path:
    target = out_dir / (module + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [
        gcc, "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
        "-fno-sanitize-recover=undefined", f"-I{include}", str(source), "-o", str(target),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"sanitizer build failed:\n{done.stderr}"
    return target


def _sanitized_env(libasan: str) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_PRELOAD"] = libasan
    # CPython keeps objects alive on purpose at exit: leaks are not what this looks for
    env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0"
    # every PyMem_Malloc through malloc, where AddressSanitizer puts red zones around it
    env["PYTHONMALLOC"] = "malloc"
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _sanitizer_report(done: subprocess.CompletedProcess) -> str | None:
    output = done.stdout + done.stderr
    if done.returncode != 0 or any(marker in output for marker in SANITIZER_MARKERS):
        return f"exit {done.returncode}\n{output[-6000:]}"
    return None


# ------------------------------------------------------------------ the tests (pytest)

if __name__ != "__main__":
    import pytest

    @pytest.fixture(scope="module")
    def toolchain() -> tuple[str, str, str]:
        found = _toolchain()
        if isinstance(found, str):
            pytest.skip(f"sanitizer build not possible here: {found}")
        return found

    _PLANTED = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
static PyObject *overflow(PyObject *m, PyObject *n) {
    Py_ssize_t k = PyLong_AsSsize_t(n);
    char *buf = PyMem_Malloc(8);
    volatile char c = buf[k];  /* k = 8: one past the end */
    PyMem_Free(buf);
    return PyLong_FromLong(c);
}
static PyObject *signed_overflow(PyObject *m, PyObject *n) {
    volatile int x = (int)PyLong_AsLong(n);
    return PyLong_FromLong(x + INT_MAX);  /* n = 1: signed overflow */
}
static PyMethodDef methods[] = {
    {"overflow", overflow, METH_O, NULL}, {"signed_overflow", signed_overflow, METH_O, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_planted", NULL, -1, methods};
PyMODINIT_FUNC PyInit__planted(void) { return PyModule_Create(&def); }
"""

    @pytest.mark.parametrize(("call", "marker"), [("overflow(8)", "ERROR: AddressSanitizer"), ("signed_overflow(1)", "runtime error:")])
    def test_the_harness_catches_a_planted_fault(toolchain, tmp_path, call, marker):
        # the same build flags, preload and options as below: a real fault must fail the run
        gcc, include, libasan = toolchain
        source = tmp_path / "_planted.c"
        source.write_text(_PLANTED)
        _build(gcc, include, source, "_planted", tmp_path)
        script = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import _planted; _planted.{call}; print('survived')"
        done = subprocess.run([sys.executable, "-c", script], env=_sanitized_env(libasan), capture_output=True, text=True, timeout=120)
        assert marker in done.stderr and _sanitizer_report(done) is not None, done.stdout + done.stderr

    def test_refscan_under_address_and_undefined_behaviour_sanitizers(toolchain, tmp_path):
        gcc, include, libasan = toolchain
        _build(gcc, include, SOURCE, "_refscan", tmp_path)
        done = subprocess.run(
            [sys.executable, __file__, str(tmp_path), str(SEED), str(CASES)],
            env=_sanitized_env(libasan), capture_output=True, text=True, timeout=600, cwd=ROOT,
        )  # fmt: skip
        report = _sanitizer_report(done)
        assert report is None, report
        summary = re.search(r"cases (\d+), texts (\d+), characters (\d+), reference (\w+)", done.stdout)
        assert summary, done.stdout
        assert int(summary[1]) == CASES and int(summary[2]) > CASES


# ------------------------------------------------------------------ the fuzz driver (subprocess)

_BIG = 120_000  # characters a "huge field" adds at most
_MAX_LINES = 400  # messages a case is split into at most (one a line)


def _mutate(data: bytes, rng: random.Random) -> str:
    """One seeded mutation of a sample file's bytes, decoded as a transcript reader would."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        at = rng.randint(0, len(buf))
        if op == 0:  # byte flips
            for _ in range(rng.randint(1, 16)):
                if buf:
                    buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif op == 1:  # truncation
            del buf[at:]
        elif op == 2:  # deep nesting
            depth = rng.choice([10, 1_000, 20_000])
            opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}"), (b"`", b"`"), (b"/", b""), (b"(", b")")])
            buf[at:at] = opener * depth + b"1" + closer * depth
        elif op == 3:  # a huge field: one character, a pair, or a slice of the file, repeated
            unit = rng.choice([b"T", b"a1", b"x", b"Ab", b"`", b"ab/", b"_", b"\n", bytes(buf[at : at + rng.randint(1, 64)]) or b"z"])
            buf[at:at] = unit * (rng.randint(1, _BIG) // len(unit))
        elif op == 4:  # empty fields
            quoted = [m.span(1) for m in re.finditer(rb'"([^"\\]{1,200})"', bytes(buf))]
            for start, end in sorted(rng.sample(quoted, min(len(quoted), rng.randint(1, 20))), reverse=True):
                del buf[start:end]
        elif op == 5:  # invalid UTF-8: stray continuation bytes, encoded surrogates, overlong, > U+10FFFF
            junk = [bytes([rng.randrange(0x80, 0x100)]), b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xff\xfe"]
            buf[at:at] = b"".join(rng.choice(junk) for _ in range(rng.randint(1, 12)))
        elif op == 6:  # repeated windows
            piece = bytes(buf[at : at + rng.randint(3, 40)])
            buf[at:at] = piece * rng.randint(2, 400)
        elif op == 7:  # NULs
            buf[at:at] = b"\x00" * rng.randint(1, 40)
        else:  # empty the file
            buf.clear()
    text = bytes(buf).decode("utf-8", "surrogateescape")
    if rng.random() < 0.5:  # random code points, lone surrogates and the last one included
        points = [rng.choice([rng.randrange(0x110000), rng.randrange(0xD800, 0xE000), 0, 0x10FFFF, rng.randrange(128)]) for _ in range(rng.randint(1, 60))]
        at = rng.randint(0, len(text))
        text = text[:at] + "".join(map(chr, points)) + text[at:]
    return text


def _fuzz_main(argv: list[str]) -> int:
    build_dir, seed, cases = argv[0], int(argv[1]), int(argv[2])
    sys.path.insert(0, build_dir)
    import _refscan as sanitized  # the instrumented build, not the installed module

    from opctx.context import references
    from opctx.context.references import STOP_WORDS, ReferenceTracker, _extract_python

    assert Path(sanitized.__file__).parent == Path(build_dir), sanitized.__file__
    normal = references._refscan  # the installed build, None where it did not build

    def reference_extract(text: str, limit: int) -> list[str]:
        return normal.extract(text, limit, STOP_WORDS) if normal else _extract_python(text, limit)

    def maps_of(history: list[dict], core) -> tuple:
        references._refscan = core
        try:
            m = ReferenceTracker(compiled=core is not None).build(history)
        finally:
            references._refscan = normal
        return m.cited_message_ids, m.cited_tool_use_ids, m.quoted_snippets_by_msg

    _error_paths(sanitized, STOP_WORDS)
    samples = [p.read_bytes() for p in sorted(SAMPLES.rglob("*")) if p.is_file()]
    assert samples, SAMPLES
    rng = random.Random(seed)
    cores = [sanitized, normal] if normal else [sanitized]
    long_lived = [core.Scanner(32, STOP_WORDS) for core in cores]
    texts = characters = 0
    for case in range(cases):
        text = _mutate(rng.choice(samples), rng)
        for limit in (32, rng.choice([-1, 0, 1, 5, 63, 64, 65, 200, 10**9])):
            got = sanitized.extract(text, limit, STOP_WORDS)
            assert got == reference_extract(text, limit), (case, limit)
        lines = text.split("\n")
        if len(lines) > _MAX_LINES:  # a huge field of newlines: the rest is one more message
            lines[_MAX_LINES:] = ["\n".join(lines[_MAX_LINES:])]
        limit = rng.choice([32, 1, 100])
        for scanners in ([core.Scanner(limit, STOP_WORDS) for core in cores], long_lived):
            first = scanners[0].message_count
            citations = [[scanner.add(line) for line in lines] for scanner in scanners]
            held = [[scanner.strings(i) for i in range(first, scanner.message_count)] for scanner in scanners]
            counters = [(scanner.message_count, scanner.live_strings, scanner.comparisons) for scanner in scanners]
            for found in (citations, held, counters):
                assert all(x == found[0] for x in found), case
        if case % 10 == 0:
            history = [{"id": f"m{i % 7}", "role": "user", "content": line} for i, line in enumerate(lines)]
            assert maps_of(history, sanitized) == maps_of(history, normal), case
        texts += len(lines)
        characters += len(text)
    print(f"cases {cases}, texts {texts}, characters {characters}, reference {'compiled' if normal else 'python'}")
    return 0


def _error_paths(core, stop_words: frozenset) -> None:
    """Wrong types and states raise, and leave nothing behind for the sanitizers."""
    scanner = core.Scanner(32, stop_words)
    for bad, error in ((b"bytes", TypeError), (None, TypeError), (42, TypeError)):
        try:
            scanner.add(bad)
        except error:
            pass
        else:
            raise AssertionError(f"add({bad!r}) did not raise")
    for index, error in ((-1, IndexError), (0, IndexError), (10**30, OverflowError), ("0", TypeError)):
        try:
            scanner.strings(index)
        except error:
            pass
        else:
            raise AssertionError(f"strings({index!r}) did not raise")
    try:
        scanner.__init__(32, stop_words)
    except RuntimeError:
        pass
    else:
        raise AssertionError("a second __init__ did not raise")
    bare = core.Scanner.__new__(core.Scanner)
    try:
        bare.add("text")
    except RuntimeError:
        pass
    else:
        raise AssertionError("add on an uninitialised Scanner did not raise")
    for args in ((32, {"a"}), ("32", stop_words), (32,)):
        try:
            core.Scanner(*args)
        except TypeError:
            pass
        else:
            raise AssertionError(f"Scanner{args!r} did not raise")
    try:
        core.extract(b"bytes", 32, stop_words)
    except TypeError:
        pass
    else:
        raise AssertionError("extract(bytes) did not raise")

    # a stop word whose __eq__ calls add() again, filing strings the running add() then
    # finds: it used to write them past the scratch array sized before (UBSan: "store to
    # null pointer" in scan_windows); refused now
    inner = [f"inner{k}xyz" for k in range(30)]

    refused = []

    class Nested:
        def __hash__(self):
            return hash("parse")

        def __eq__(self, other):
            try:
                nested.add(" ".join(f"`{w}`" for w in inner))
            except RuntimeError:
                refused.append(True)
            return False

    nested = core.Scanner(32, frozenset({Nested(), "x" * 20}))
    assert nested.add("`parse` " + " ".join(inner)) == [] and refused  # (CPython may call __eq__ twice)
    assert nested.strings(0) == ["parse"] and nested.message_count == 1

    class Text(str):
        pass

    assert core.extract(Text("see `load_it` in src/app/main.py"), 32, stop_words) == ["src/app/main.py", "load_it"]
    assert scanner.add(Text("see `load_it` here")) == [] and scanner.add("load_it again") == [(0, ["load_it"])]


if __name__ == "__main__":
    sys.exit(_fuzz_main(sys.argv[1:]))
