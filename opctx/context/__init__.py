"""Context orchestration: what each turn feeds the model and how history is compacted.

Modules: ``types``, ``tokens``, ``budget``, ``usage``, ``references``, ``aging``,
``system_prompt``, ``prompts``, ``summarize``, ``persistence``, ``provider_messages``,
``engine``, ``turn``.
Depends only on ``opctx.dag`` and the standard library (plus tiktoken).
"""
