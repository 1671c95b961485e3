"""Context orchestration: what each turn feeds the model and how history is compacted.

Modules: ``policy`` (``CompactionPolicy``: every number that decides when and how a
history is compacted or aged, one typed value; exported here), ``types``, ``tokens`` (with
its private ``_model_table``, ``_tiktoken_offline``, ``_heuristic``, ``_family_profiles``,
``_image_sizes``, ``_message_parts``), ``token_counts`` (counts persisted per node and
estimator identity: a cold cut without a tokenizer pass), ``budget``, ``usage``, ``references``, ``aging``,
``masking``, ``recent`` (a view of the first and last messages), ``system_prompt``, ``prompts``,
``summarize`` (with its private ``_cut``,
``_cut_facts``, ``_summary_config``, ``_transcript``, ``_structural``), ``persistence``,
``provider_messages``, ``anthropic_messages``, ``fit`` (the last step of a prepare: the
request as sent fits the window; with its private ``_cut_counts``), ``engine``, ``turn``.
Depends only on ``opctx.dag`` and the standard library (plus tiktoken, and the ``regex``
module tiktoken itself requires).

The request shapes are exported here: ``to_provider_messages`` (OpenAI chat messages)
and ``to_anthropic_request`` (Anthropic Messages ``{"system", "messages"}``), both built
from one assembly (display-only lines left out, tool results right after their calls).
"""

from .anthropic_messages import anthropic_request_tokens, thinking_retention, to_anthropic_request
from .policy import CompactionPolicy
from .provider_messages import is_display_only, to_provider_messages

__all__ = [
    "CompactionPolicy",
    "anthropic_request_tokens",
    "is_display_only",
    "thinking_retention",
    "to_anthropic_request",
    "to_provider_messages",
]
