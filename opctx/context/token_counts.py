"""Token counts persisted per node and per estimator identity: a cold cut with no tokenizer pass.

Deciding a cut on a history just read from the database used to estimate every message
again: the tokenizer pass is the whole cost (about 15 times LangChain's summarisation
decision on 10,000 messages). The store keeps each node's count beside it
(``node_tokens``, ``opctx.dag._token_counts``); this module says what a count means and
when it is made.

Identity
========
A count is ``(tokens, thinking tokens)`` of one message (stored with the message's other
cut facts, its tool ids and its place in a turn, encoded by ``_cut_facts.encode_shape``) as ``Estimator.message_tokens``
prices it for a model family: it depends on the counter (an encoding name, or the
heuristic), on the family's constants (``FamilyProfile``: scale, structure costs, CJK
and line-number rates, image rule), on the heuristic's per-class rates and the chunk
size of chunked encoding, and on the rules that split a message into parts.
:func:`estimator_identity` names all of them: ``"<counter>/<family>/<digest>"``, the
digest covering the constants, the estimator's class and ``COUNT_RULES_VERSION`` (raised
whenever the way a message is counted changes without a constant changing). A count
stored under another identity is never read: another encoding, another family, edited
constants or an older opctx simply find no count and estimate.

Where counting happens (a choice)
=================================
* **Not at append.** Appending stays a plain insert: the model a history will be
  priced for is not known when it is written (one import is replayed under many
  families), and an append that ran a tokenizer would cost the import, the chat loop
  and the store benchmark a tokenizer pass nobody asked for.
* **Lazily, on the first cut decision, with write-back on request.**
  :func:`load_counted_branch` reads the branch and every count stored for the identity,
  estimates only the messages without one, and writes those back when called with
  ``write_back=True`` (what a process that owns the session does: it paid for the pass
  anyway). A reader is never surprised by a write: the default is not to write, and a
  database opened read-only (``connect_readonly``) is never written.
* **In batch**, after an import or before a sweep: :func:`persist_token_counts` counts
  every node of a session that has no count yet, in one transaction.

Write-backs race with other writers: a count lands only when the stored message still
equals the one counted (compare-and-set inside the write transaction,
``DagSessionDB.put_token_counts``), an update of a node drops its counts (a trigger), and
two processes writing the same count keep one row (``ON CONFLICT DO NOTHING``).

Coverage (what ``opctx info --db`` prints) is :func:`token_count_coverage`.

>>> from opctx.dag.session_db import DagSessionDB
>>> db = DagSessionDB(":memory:")
>>> sid = db.create_session(session_id="s")
>>> _ = db.append_messages(sid, [{"role": "user", "content": "hello"},
...                              {"role": "assistant", "content": "hi there"}])
>>> persist_token_counts(db, sid, "gpt-4o")
2
>>> loaded = load_counted_branch(db, sid, "gpt-4o")
>>> loaded.persisted, len(loaded.messages)
(2, 2)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Any

from opctx.dag.store import token_count_coverage

from ._cut_facts import MessageFacts, encode_shape
from ._heuristic import HEURISTIC_CHARS_PER_TOKEN
from ._image_sizes import IMAGE_TOKENS
from ._model_table import model_family
from ._tiktoken_offline import ENCODE_CHUNK_CHARS
from .tokens import Estimator, Method, default_estimator

__all__ = [
    "COUNT_RULES_VERSION",
    "CountedBranch",
    "estimator_identity",
    "load_counted_branch",
    "persist_token_counts",
    "token_count_coverage",
]

# Raise when the way a message is counted changes (message_parts, message_cost, the
# thinking share) without any constant changing: older counts then stop being read.
COUNT_RULES_VERSION = 1


def estimator_identity(
    estimator: Estimator | None = None, model: str | None = None, method: Method | None = None
) -> str:
    """``"<counter>/<family>/<digest>"``: what a persisted count was made with (module docstring).

    >>> a = estimator_identity(Estimator("heuristic"), "gpt-4o")
    >>> a.startswith("heuristic/openai/")
    True
    >>> a == estimator_identity(Estimator("heuristic"), "claude-sonnet-4-5")
    False
    """
    est = estimator or default_estimator()
    counter, profile = est.profile(model, method)
    constants = [
        f"rules={COUNT_RULES_VERSION}",
        f"class={type(est).__module__}.{type(est).__qualname__}",
        f"method={method or est.method}",
        *(f"{f.name}={getattr(profile, f.name)!r}" for f in fields(profile)),
        f"chunk={ENCODE_CHUNK_CHARS}",
        f"image={IMAGE_TOKENS}",
    ]
    if counter == "heuristic":
        constants.append(f"heuristic={sorted(HEURISTIC_CHARS_PER_TOKEN.items())!r}")
    digest = hashlib.sha256("\n".join(constants).encode()).hexdigest()[:12]
    return f"{counter}/{model_family(model)}/{digest}"


@dataclass
class CountedBranch:
    """A session's active branch with the facts the cut needs: ``facts`` is a warm
    ``MessageFacts`` for ``find_cut_index(messages, ..., facts=facts)``.

    ``persisted``: messages whose count came from the database; ``estimated``: messages
    the tokenizer counted now; ``written``: counts written back.
    """

    messages: list[dict]
    facts: MessageFacts
    identity: str
    persisted: int
    estimated: int
    written: int = 0


def _facts_for(estimator: Estimator, model: str | None, method: Method | None) -> MessageFacts:
    # the engine's own estimate (DefaultContextEngine: estimator.message_tokens(msg, model))
    return MessageFacts(lambda msg: estimator.message_tokens(msg, model, method))


def load_counted_branch(
    db: Any,
    session_id: str,
    model: str | None = None,
    *,
    estimator: Estimator | None = None,
    method: Method | None = None,
    write_back: bool = False,
) -> CountedBranch:
    """The active branch of ``session_id`` in ``db`` (a ``DagSessionDB``) with its facts:
    stored counts of this estimator identity are read, the rest estimated (and stored
    when ``write_back``; never on a read-only database)."""
    est = estimator or default_estimator()
    identity = estimator_identity(est, model, method)
    messages = db.get_branch(session_id)
    facts = _facts_for(est, model, method)
    counts = db.token_counts(session_id, identity)
    persisted = facts.seed(messages, counts)
    facts.table(messages)  # estimates what was not seeded
    counted = [m for m in messages if m.get("id") not in counts] if persisted < len(messages) else []
    loaded = CountedBranch(messages, facts, identity, persisted, len(counted))
    if write_back and counted:
        loaded.written = _put(db, session_id, identity, facts, counted)
    return loaded


def persist_token_counts(
    db: Any,
    session_id: str,
    model: str | None = None,
    *,
    estimator: Estimator | None = None,
    method: Method | None = None,
) -> int:
    """Count every node of ``session_id`` without a count for this identity and store the
    counts (one transaction); the number written. The batch after an import."""
    est = estimator or default_estimator()
    identity = estimator_identity(est, model, method)
    have = db.token_counts(session_id, identity)
    missing = [m for m in db.get_messages(session_id) if m.get("id") not in have]
    return _put(db, session_id, identity, _facts_for(est, model, method), missing)


def _put(db: Any, session_id: str, identity: str, facts: MessageFacts, messages: list[dict]) -> int:
    rows = []
    for msg in messages:
        got = facts.get(msg)
        rows.append((msg, got[0], got[6], encode_shape(got)))
    return db.put_token_counts(session_id, identity, rows)
