"""Shared fixtures. Public datasets are read in place from ../shared/datasets
(or $MEMKIT_SHARED_DATASETS) and tests that need them skip cleanly without."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_datasets_dir() -> Path:
    env = os.environ.get("MEMKIT_SHARED_DATASETS")
    return Path(env) if env else REPO.parent / "shared" / "datasets"


@pytest.fixture
def shared_datasets() -> Path:
    """Folder of public datasets; skips the test when it is not there."""
    d = shared_datasets_dir()
    if not d.is_dir():
        pytest.skip(f"public datasets not present at {d}")
    return d


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def rendered_figures(monkeypatch) -> list:
    """Every matplotlib figure saved while the test runs (what `evals.report` renders
    to PNG), in order: plots are checked as the report draws them. A closed figure
    draws again on a new canvas (`FigureCanvasAgg(fig)`)."""
    from matplotlib.figure import Figure

    saved: list = []
    savefig = Figure.savefig

    def spy(self, *args, **kwargs):
        saved.append(self)
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return saved


# --- store backends: one conformance suite over SQLite and Postgres ---------------------
#
# `make_store(**open_options)` opens a store on the test's backend; tests that take
# it (or the `store_url` of a shared store, for several connections or processes)
# run once per backend. The Postgres half starts one private `pgserver` per test
# session (per xdist worker) in a temporary directory, or uses MEMKIT_TEST_PG_DSN,
# and gives every test a schema of its own. It is skipped only when the user opts
# out explicitly: MEMKIT_TEST_PG=0.

BACKENDS = ("sqlite", "postgres")


def pg_opted_out() -> bool:
    return os.environ.get("MEMKIT_TEST_PG", "1").strip().lower() in ("0", "false", "no", "off")


@pytest.fixture(scope="session")
def pg_server_dsn():
    """DSN of a Postgres server with pgvector, alive for the whole session."""
    if pg_opted_out():
        pytest.skip("Postgres half opted out (MEMKIT_TEST_PG=0)")
    given = os.environ.get("MEMKIT_TEST_PG_DSN")
    from evals.pg_local import local_postgres  # missing pgserver fails, never skips

    with local_postgres(given) as dsn:  # a private server is stopped even when tests fail
        if not given:
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as c:
                # Test speed only: commits skip the WAL fsync (a server crash could lose
                # the last commits, never consistency; no test crashes the server).
                c.execute("ALTER SYSTEM SET synchronous_commit = off")
                c.execute("SELECT pg_reload_conf()")
        yield dsn


def with_schema(dsn: str, schema: str) -> str:
    """The DSN with `search_path` set to `schema` (then public, where pgvector lives)."""
    from memkit.store.postgres import dsn_with_schema

    return dsn_with_schema(dsn, schema)


@pytest.fixture
def schemas(pg_server_dsn):
    """`new()`: the DSN of another empty schema, dropped after the test."""
    import uuid

    import psycopg

    made: list[str] = []

    def new() -> str:
        schema = f"fs_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_server_dsn, autocommit=True) as c:
            c.execute(f"CREATE SCHEMA {schema}")
        made.append(schema)
        return with_schema(pg_server_dsn, schema)

    yield new
    with psycopg.connect(pg_server_dsn, autocommit=True) as c:
        for schema in made:
            c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def pg_fold_search() -> str:
    """The fold-in mode the Postgres half runs in: every Postgres test's database is
    set to it (`pg_dsn`; floor `SERVER_FLOOR` in server mode), which every store
    opened there follows. MEMKIT_TEST_FOLD_SEARCH: "default" (unset) is a new
    store's mode (server, each writer's default cap: `make test`), "server" the
    postings alone (cap 0: `make test-fold-server`), "client" the writer's
    index alone (`make test-fold-client`)."""
    mode = os.environ.get("MEMKIT_TEST_FOLD_SEARCH", "default").strip().lower()
    assert mode in ("default", "client", "server"), mode
    return mode


def pytest_configure(config):
    """A server-mode run's stores fold in from the postings alone (cap 0,
    `memkit.store.fold_local`), as before the cap, unless
    MEMKIT_TEST_FOLD_LOCAL_ROWS names one; tests/test_fold_local.py tests the cap."""
    if pg_fold_search() == "server":
        from memkit.store import fold_local

        fold_local.LOCAL_ROWS = int(os.environ.get("MEMKIT_TEST_FOLD_LOCAL_ROWS", "0"))


SERVER_FLOOR = 0.1
"""The postings' floor of a server-mode test database: the lowest positive fold
threshold a test opens with."""


def pytest_collection_modifyitems(config, items):
    """A run in another mode (MEMKIT_TEST_FOLD_SEARCH=server or client, `make
    test-fold-server` / `test-fold-client`) keeps only the tests that open a
    Postgres store: the rest do not depend on the mode and `make test` already
    ran them. The benches' tests go too: a bench names its mode itself
    (`--fold-search`; tests/test_bench_backends.py runs it in both modes)."""
    if pg_fold_search() == "default":
        return
    pg = ("pg_dsn", "pg_server_dsn")
    kept, dropped = [], []
    for item in items:
        names = getattr(item, "fixturenames", ())
        params = getattr(getattr(item, "callspec", None), "params", {})
        uses_pg = any(n in names for n in pg) or params.get("backend") == "postgres"
        uses_pg = uses_pg and not item.nodeid.startswith("tests/test_bench_")
        (kept if uses_pg else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(autouse=True)
def _skip_long_lists_hard(monkeypatch):
    """In a server-mode run every probe skips all the codes it may (h - 1, the
    last in the order: no estimate needed), so the whole Postgres half checks
    the skip rule's exactness (`memkit.store.fold_postings.split_probe`)."""
    if pg_fold_search() == "server":
        monkeypatch.setattr("memkit.store.fold_postings.SKIP_KEEP", 1)
        monkeypatch.setattr("memkit.store.fold_postings.LONG_LIST", 0.0)


def _set_mode(dsn: str) -> None:
    """Make `dsn`'s (empty) schema a store in the run's mode (`pg_fold_search`): a
    reused schema has no meta, so the mode is written, not left to creation."""
    import psycopg

    from memkit.store.fold_postings import write_mode
    from memkit.store.pg_schema import migrate

    mode = "server" if pg_fold_search() == "default" else pg_fold_search()
    with psycopg.connect(dsn, autocommit=True) as c:
        migrate(c)
        write_mode(c, mode, SERVER_FLOOR)


def _postings_problems(c) -> list[str]:
    """In a server-mode run, how the test's live rows' postings are wrong ([]: right)."""
    from memkit.store.fold_listed import problems
    from memkit.store.fold_postings import read_mode
    from memkit.store.postgres import PgDb

    postings = read_mode(c)
    return [] if postings is None else problems(PgDb(c), postings)


_PG_POOL: list[str] = []
"""Emptied schemas of this session, reused: emptying costs a fraction of creating,
migrating and dropping a schema per test."""


@pytest.fixture
def pg_dsn(pg_server_dsn, request):
    """A Postgres store DSN of this test's own (an empty schema; emptied afterwards)."""
    import uuid

    import psycopg

    if _PG_POOL:
        schema = _PG_POOL.pop()
    else:
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_server_dsn, autocommit=True) as c:
            c.execute(f"CREATE SCHEMA {schema}")
    dsn = with_schema(pg_server_dsn, schema)
    if not request.node.nodeid.startswith("tests/test_bench_"):  # a bench names its mode
        _set_mode(dsn)
    try:
        yield dsn
    finally:
        _recycle_schema(pg_server_dsn, schema)


def _recycle_schema(base: str, schema: str) -> None:
    """Empty a test's schema for the next test; drop it when it is not simply a
    store of this version (a test inserted a newer schema version, a lock held)."""
    import psycopg

    from memkit.store.pg_ann import drop_all
    from memkit.store.pg_schema import SCHEMA_VERSION

    bad: list[str] = []
    with psycopg.connect(with_schema(base, schema), autocommit=True) as c:
        ok = False
        try:
            c.execute("SET lock_timeout = '5s'")
            tables, versions = c.execute(
                "SELECT to_regclass('memories') IS NOT NULL, to_regclass('schema_version') "
                "IS NOT NULL"
            ).fetchone()
            if tables and versions:
                (top,) = c.execute("SELECT max(version) FROM schema_version").fetchone()
                if top == SCHEMA_VERSION:
                    bad = _postings_problems(c)
                    drop_all(c)  # every HNSW index (memkit.store.pg_ann)
                    c.execute(
                        "TRUNCATE memories, rollouts, scopes, meta, fold_postings, fold_posted "
                        "RESTART IDENTITY"
                    )
                    ok = True
            else:
                ok = not tables and not versions  # never opened: still empty
        except psycopg.Error:
            ok = False
        if not ok:
            c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    if ok:
        _PG_POOL.append(schema)
    assert not bad, f"fold-in postings out of step with the rows: {bad}"


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_url(backend, tmp_path, request) -> str:
    """Where a shared store of the test's backend lives (a file path or a DSN)."""
    if backend == "postgres":
        return request.getfixturevalue("pg_dsn")
    return str(tmp_path / "store.db")


@pytest.fixture
def make_store(backend, request):
    """Open a fresh store on the test's backend: `make_store(embedder=None, clock=...)`.
    SQLite stores are in memory; every call on Postgres gives a new empty schema's
    store unless `url` names one. All are closed after the test."""
    from memkit.store import open_store

    opened = []

    def make(url: str | None = None, **options):
        if url is None:
            url = request.getfixturevalue("pg_dsn") if backend == "postgres" else ":memory:"
            if backend == "postgres" and opened:
                if all(s.closed for s in opened):  # e.g. hypothesis examples
                    _empty_pg_schema(url)
                else:
                    url = _fresh_pg_schema(request)
        s = open_store(url, **options)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()  # closing twice is harmless on both backends


def _fresh_pg_schema(request) -> str:
    """Another empty schema for a test that opens several independent stores."""
    import uuid

    import psycopg

    base = request.getfixturevalue("pg_server_dsn")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    request.addfinalizer(lambda: _drop_schema(base, schema))
    _set_mode(with_schema(base, schema))
    return with_schema(base, schema)


def _empty_pg_schema(dsn: str) -> None:
    """Empty the store tables of a schema (cheaper than a new schema per example)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("TRUNCATE memories, rollouts, scopes, meta RESTART IDENTITY")
        if c.execute("SELECT to_regclass('fold_postings')").fetchone()[0] is not None:
            c.execute("TRUNCATE fold_postings")
    _set_mode(dsn)


def _drop_schema(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {schema} CASCADE")


def process_gone(pid: int) -> bool:
    """True once `pid` has exited: no /proc entry, or a zombie (it runs nothing)."""
    from evals.pg_local import pid_alive

    return not pid_alive(pid)
