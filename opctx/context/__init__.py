"""Context orchestration: what each turn feeds the model and how history is compacted.

Modules: ``types``, ``tokens``, ``budget``, ``usage``, ``references``, ``aging``,
``system_prompt``, ``prompts``, ``summarize`` (with its private ``_cut``, ``_cut_facts``,
``_summary_config``, ``_transcript``, ``_structural``), ``persistence``,
``provider_messages``, ``fit`` (the last step of a prepare: the request as sent fits the
window), ``engine``, ``turn``.
Depends only on ``opctx.dag`` and the standard library (plus tiktoken).
"""
