"""The store (SPEC §1-4 and the store side of §7) as one package.

This module is the store's public surface, exported once: the two backends,
opening a store by URL, copying one between backends and moving one to
another embedder. The rules live in `rules`; what differs between the engines
in `sqlite_db`, `postgres`, `pg_search` and the two `*schema` modules; the
in-memory indexes in `index`, `gram_index` and `keyword_index`, and their bound
in `index_bound` (`INDEX_CACHE_MB`, the default of `index_cache_mb`); the pure recall
arithmetic in `rank`; the failed-pass plan in `parking`; `memkit store` in `cli`.
Importing it loads neither psycopg nor any consolidation code.
"""

from __future__ import annotations

from memkit.store.backends import (
    is_postgres_url,
    open_scratch_store,
    open_store,
    redacted_url,
    sqlite_path,
)
from memkit.store.copy import CopyReport, copy_store
from memkit.store.index_bound import CACHE_MB as INDEX_CACHE_MB
from memkit.store.postgres import PostgresStore
from memkit.store.reembed import ReembedFailed, ReembedReport, reembed
from memkit.store.rules import SQLStore
from memkit.store.sqlite import SQLiteStore

__all__ = [
    "CopyReport",
    "INDEX_CACHE_MB",
    "PostgresStore",
    "ReembedFailed",
    "ReembedReport",
    "SQLStore",
    "SQLiteStore",
    "copy_store",
    "is_postgres_url",
    "open_scratch_store",
    "open_store",
    "redacted_url",
    "reembed",
    "sqlite_path",
]
