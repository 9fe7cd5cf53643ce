"""memkit: a faithful reference implementation of an LLM agent's long-term memory.

Importing memkit is free of side effects: no network, no files, no environment
reads, and litellm is not imported (only `memkit.llm` imports it, lazily).
Heavier submodules load on first attribute access.
"""

from __future__ import annotations

import importlib
from typing import Any

from memkit.errors import (
    AlreadyConsumed,
    ConfigError,
    DatasetError,
    EmbedderMismatch,
    LocalServerError,
    MemkitError,
    MissingExtra,
    NotFound,
    ProposalError,
    ProviderError,
    RequestTooLarge,
    StaleSnapshot,
    SubmitRefused,
    ToolError,
    TranscriptError,
)
from memkit.params import (
    AssemblyParams,
    ConsolidationParams,
    FoldParams,
    RecallParams,
    RedactionParams,
    WorkerParams,
)
from memkit.redact import redact  # eager: a lazy `redact` is shadowed by the submodule
from memkit.text import trigram_similarity, truncate_bytes, truncate_middle, word_set
from memkit.types import (
    KINDS,
    Change,
    CommitResult,
    Entry,
    Memory,
    Recalled,
    RememberResult,
    Rollout,
)

_LAZY: dict[str, str] = {
    "AssembledBlock": "memkit.assemble",
    "Attempt": "memkit.consolidate",
    "BlockAccount": "memkit.assemble",
    "BlockEntry": "memkit.assemble",
    "ConsolidationRequest": "memkit.consolidate",
    "ConsolidationWorker": "memkit.worker",
    "Consolidator": "memkit.consolidate",
    "Embedder": "memkit.embed",
    "FinishResult": "memkit.worker",
    "HashingEmbedder": "memkit.embed",
    "MiniLMEmbedder": "memkit.embed",
    "LiteLLMEmbedder": "memkit.embed",
    "MemoryTools": "memkit.tools",
    "NATIVE_PROMPT_VERSION": "memkit.consolidate",
    "PassRecord": "memkit.worker",
    "PassResult": "memkit.consolidate",
    "SQLiteStore": "memkit.store",
    "WordLlamaEmbedder": "memkit.embed",
    "afinish_run": "memkit.worker",
    "assemble_block": "memkit.assemble",
    "block_for_run": "memkit.assemble",
    "build_rollout": "memkit.consolidate",
    "eligible": "memkit.runs",
    "finish_run": "memkit.worker",
    "get_consolidator": "memkit.consolidate",
    "get_embedder": "memkit.embed",
    "run_pass": "memkit.consolidate",
    "run_pass_sync": "memkit.consolidate",
    "stage_run": "memkit.consolidate",
}

__all__ = [
    "AlreadyConsumed",
    "AssembledBlock",
    "AssemblyParams",
    "Attempt",
    "BlockAccount",
    "BlockEntry",
    "Change",
    "CommitResult",
    "ConfigError",
    "ConsolidationParams",
    "ConsolidationRequest",
    "ConsolidationWorker",
    "Consolidator",
    "DatasetError",
    "Embedder",
    "EmbedderMismatch",
    "Entry",
    "FinishResult",
    "FoldParams",
    "HashingEmbedder",
    "KINDS",
    "LiteLLMEmbedder",
    "LocalServerError",
    "MemkitError",
    "Memory",
    "MemoryTools",
    "MiniLMEmbedder",
    "MissingExtra",
    "NATIVE_PROMPT_VERSION",
    "NotFound",
    "PassRecord",
    "PassResult",
    "ProposalError",
    "ProviderError",
    "RecallParams",
    "Recalled",
    "RedactionParams",
    "RememberResult",
    "RequestTooLarge",
    "Rollout",
    "SQLiteStore",
    "StaleSnapshot",
    "SubmitRefused",
    "ToolError",
    "TranscriptError",
    "WordLlamaEmbedder",
    "WorkerParams",
    "afinish_run",
    "assemble_block",
    "block_for_run",
    "build_rollout",
    "eligible",
    "finish_run",
    "get_consolidator",
    "get_embedder",
    "redact",
    "run_pass",
    "run_pass_sync",
    "stage_run",
    "trigram_similarity",
    "truncate_bytes",
    "truncate_middle",
    "word_set",
]

__version__ = "0.1.0"


def __dir__() -> list[str]:
    """Every public name, the lazy ones included (they load on first access)."""
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'memkit' has no attribute {name!r}")
