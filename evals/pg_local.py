"""A private Postgres server for the tests and the benches that always stops.

`local_postgres` starts a `pgserver` in a temporary folder `memkit-pg-*`
(the server's data in its `data/`, the starting process's pid in `owner.pid`)
and stops the server and deletes the folder however the block ends: normally,
by an exception, by Ctrl-C, or by SIGTERM (a CI timeout, `kill`), which
raises `Terminated` (a KeyboardInterrupt, so every `finally` runs and pytest
tears its fixtures down as for Ctrl-C). SIGINT and SIGTERM that arrive while
the server starts or stops are held and raised once it is done, so a signal
never cuts a start or a stop in half. (Handlers can be installed only from
the main thread; elsewhere pgserver's atexit hook stops the server on a
normal exit.) What a SIGKILL leaves behind is removed at the next start
(`sweep`): a folder whose owner and server are both gone. A live server is
never touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PREFIX = "memkit-pg-"
OWNER = "owner.pid"
DATA = "data"
LEGACY_AGE_S = 600.0
"""A folder of the earlier layout (the data directly in it, no owner file) and
no postmaster.pid is removed only when unchanged this long: until then it may
be a server being initialised."""
STOP_WAIT_S = 30.0


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread runs (see the module docstring)."""


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie runs nothing); unsure (no access) counts as alive."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def pid_in(path: Path) -> int | None:
    """The pid on the first line of `path` (an owner.pid or a postmaster.pid), or None."""
    try:
        return int(path.read_text().split("\n", 1)[0].strip())
    except (OSError, ValueError):
        return None


def is_stale(folder: Path, now: float | None = None) -> bool:
    """True when `folder` (a `memkit-pg-*` folder) is left from a run that is gone:
    its server does not run, nor its owner (the earlier layout, without an
    owner file: a postmaster.pid whose process is gone, or no postmaster.pid
    and unchanged for `LEGACY_AGE_S`). Anything unsure is kept."""
    owned = (folder / OWNER).exists()
    postmaster = pid_in((folder / DATA if owned else folder) / "postmaster.pid")
    if postmaster is not None and pid_alive(postmaster):
        return False
    if owned:
        owner = pid_in(folder / OWNER)
        return owner is not None and not pid_alive(owner)
    if postmaster is not None:
        return True
    try:
        age = (time.time() if now is None else now) - folder.stat().st_mtime
    except OSError:
        return False
    return age > LEGACY_AGE_S


def sweep(tmp: Path | None = None) -> list[Path]:
    """Remove the stale `memkit-pg-*` folders in `tmp` (default: the temporary
    directory); returns the folders removed."""
    removed = []
    for folder in sorted(Path(tmp or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        if folder.is_dir() and not folder.is_symlink() and is_stale(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def stop_postmaster(data: Path, wait: float = STOP_WAIT_S) -> None:
    """Stop the server whose postmaster.pid is in `data`, if it runs: a fast
    shutdown (SIGINT), then SIGKILL after `wait` seconds."""
    pid = pid_in(data / "postmaster.pid")
    if pid is None or not pid_alive(pid):
        return
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + wait
    while pid_alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)


class SignalsHeld:
    """While installed, SIGTERM raises `Terminated` and SIGINT KeyboardInterrupt,
    except while `held`: the signal is then kept and raised by `release`."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.held = True
        self.pending: int | None = None
        self.previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Install the handlers (only the main thread can); True when installed."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for s in self.SIGNALS:
            self.previous[s] = signal.signal(s, self._handle)
        return True

    def _handle(self, signum: int, frame: Any) -> None:
        if self.held:
            self.pending = signum
        else:
            raise self.error(signum)

    @staticmethod
    def error(signum: int) -> KeyboardInterrupt:
        if signum == signal.SIGTERM:
            return Terminated("SIGTERM")
        return KeyboardInterrupt()

    def release(self) -> None:
        """Stop holding; raise a signal kept meanwhile."""
        self.held = False
        if self.pending is not None:
            signum, self.pending = self.pending, None
            raise self.error(signum)

    def restore(self) -> None:
        """The handlers from before `install` (the default where none was Python's)."""
        for s, h in self.previous.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)
        self.previous.clear()


@contextmanager
def local_postgres(dsn: str | None, shared_buffers: str | None = None) -> Iterator[str]:
    """`dsn`, or a private pgserver in a temporary folder, stopped and deleted
    however the block ends (restarted once with `shared_buffers` when given)."""
    if dsn:
        yield dsn
        return
    import pgserver

    sweep()
    signals = SignalsHeld()
    signals.install()
    try:
        folder = Path(tempfile.mkdtemp(prefix=PREFIX))
        (folder / OWNER).write_text(f"{os.getpid()}\n")
        server = None
        try:
            server = pgserver.get_server(folder / DATA, cleanup_mode="delete")
            signals.release()  # a signal held while starting is raised here
            yield _prepared(server, shared_buffers)
        finally:
            signals.held = True
            _remove(folder, server.cleanup if server is not None else None)
    finally:
        signals.restore()
    signals.release()  # a signal held while stopping


def _prepared(server: Any, shared_buffers: str | None) -> str:
    """The server's URI, with pgvector and `shared_buffers` (a restart) when given."""
    import psycopg

    uri: str = server.get_uri()
    with psycopg.connect(uri, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        if shared_buffers:
            c.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
    if shared_buffers:
        from pgserver import _commands

        _commands.pg_ctl(  # type: ignore[attr-defined]  # made at import, per binary
            ["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user
        )
    return uri


def _remove(folder: Path, cleanup: Callable[[], None] | None) -> None:
    """Stop the folder's server (pgserver's cleanup, then whatever still runs there)
    and delete the folder."""
    try:
        if cleanup is not None:
            cleanup()
    finally:
        stop_postmaster(folder / DATA)
        shutil.rmtree(folder, ignore_errors=True)


def fresh_schema(base: str) -> str:
    """A DSN of `base` whose search_path is a new, empty schema of its own (a bench's store)."""
    from urllib.parse import quote

    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema},public')}"
