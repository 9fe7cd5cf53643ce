"""`open_store(url)`: one entry point that picks the backend from a URL.

`postgresql://...` (or `postgres://`) opens a `PostgresStore`; `sqlite:///rel.db`,
`sqlite:////abs/path.db`, `sqlite://` (in memory) or a plain path open a
`SQLiteStore` (the SQLAlchemy spelling). Imports the backend it needs only.
`open_scratch_store(url)` gives a fresh store that vanishes on close.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memkit.errors import ConfigError

if TYPE_CHECKING:
    from memkit.store.rules import SQLStore


def is_postgres_url(url: str) -> bool:
    """True for a `postgresql://` or `postgres://` URL."""
    return str(url).startswith(("postgresql://", "postgres://"))


def sqlite_path(url: str) -> str:
    """The SQLite path a URL or plain path names; ConfigError for any other scheme."""
    url = str(url)
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        if rest in ("", "/"):
            return ":memory:"
        if not rest.startswith("/"):
            raise ConfigError(f"sqlite URL {url!r} has a host part (want sqlite:///path)")
        return rest[1:]
    if "://" in url or is_postgres_url(url):
        raise ConfigError(
            f"unknown store URL {url!r} (want postgresql://..., sqlite:///path or a path)"
        )
    return url


def open_store(url: str, **options: Any) -> SQLStore:
    """Open the store a URL names; `options` go to the backend's `open`
    (embedder, clock, fold, redaction; `ann` on Postgres)."""
    if is_postgres_url(url):
        from memkit.store.postgres import PostgresStore

        return PostgresStore.open(str(url), **options)
    from memkit.store.sqlite import SQLiteStore

    return SQLiteStore.open(sqlite_path(url), **options)


def open_scratch_store(url: str | None = None, **options: Any) -> SQLStore:
    """A new, empty store that is gone after `close()`: in memory (SQLite) when
    `url` is None or names SQLite; on a Postgres server, a schema of its own
    in that database, dropped on close. `options` as for `open_store`."""
    if url is not None and is_postgres_url(url):
        from memkit.store.postgres import PostgresStore

        return PostgresStore.scratch(str(url), **options)
    if url is not None:
        sqlite_path(url)  # an unknown scheme is refused, not replaced by memory
    from memkit.store.sqlite import SQLiteStore

    return SQLiteStore.open(":memory:", **options)


def redacted_url(url: str | None) -> str | None:
    """A store URL fit for run files and messages: any password replaced by ***."""
    if url is None or not is_postgres_url(url):
        return url
    from memkit.store.postgres import safe_dsn

    return safe_dsn(str(url))
