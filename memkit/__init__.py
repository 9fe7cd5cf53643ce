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
    MemkitError,
    NotFound,
    ProposalError,
    ProviderError,
    RequestTooLarge,
    StaleSnapshot,
    ToolError,
    TranscriptError,
)
from memkit.params import (
    AssemblyParams,
    ConsolidationParams,
    FoldParams,
    RecallParams,
    RedactionParams,
)
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
    "SQLiteStore": "memkit.store",
    "assemble_block": "memkit.assemble",
    "AssembledBlock": "memkit.assemble",
    "BlockAccount": "memkit.assemble",
    "MemoryTools": "memkit.tools",
    "get_embedder": "memkit.embed",
    "Embedder": "memkit.embed",
    "stage_run": "memkit.consolidate",
    "run_pass": "memkit.consolidate",
    "PassResult": "memkit.consolidate",
    "get_consolidator": "memkit.consolidate",
    "ConsolidationWorker": "memkit.worker",
    "finish_run": "memkit.worker",
}

__all__ = [
    "AlreadyConsumed",
    "AssembledBlock",
    "AssemblyParams",
    "BlockAccount",
    "Change",
    "CommitResult",
    "ConfigError",
    "ConsolidationParams",
    "ConsolidationWorker",
    "DatasetError",
    "Embedder",
    "EmbedderMismatch",
    "Entry",
    "FoldParams",
    "KINDS",
    "MemkitError",
    "Memory",
    "MemoryTools",
    "NotFound",
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
    "ToolError",
    "TranscriptError",
    "assemble_block",
    "finish_run",
    "get_consolidator",
    "get_embedder",
    "run_pass",
    "stage_run",
    "trigram_similarity",
    "truncate_bytes",
    "truncate_middle",
    "word_set",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'memkit' has no attribute {name!r}")
