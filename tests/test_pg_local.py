"""The private Postgres server of the tests and benches always stops (`evals.pg_local`):
SIGTERM while it starts or runs stops it and deletes its folder, and folders a
killed run left behind are removed at the next start, never a live server's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPO, pg_opted_out, process_gone

from evals.pg_local import (
    DATA,
    LEGACY_AGE_S,
    OWNER,
    PREFIX,
    SignalsHeld,
    Terminated,
    is_stale,
    pid_in,
    sweep,
)

CHILD = """
import time
from evals.pg_local import local_postgres
with local_postgres(None) as uri:
    print("ready", flush=True)
    time.sleep(300)
"""


def _wait(what, seconds: float = 60.0):
    """Poll `what()` until truthy (its value) or fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while not (got := what()):
        assert time.monotonic() < deadline, f"not within {seconds} s: {what.__doc__}"
        time.sleep(0.05)
    return got


def _running_in(folder: Path) -> list[int]:
    """Pids of processes whose command line names `folder` (a postmaster's -D)."""
    pids = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if str(folder) in p.joinpath("cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(p.name))
        except OSError:
            continue
    return [pid for pid in pids if not process_gone(pid)]


@pytest.fixture
def short_tmp():
    """A temporary directory with a short path: the server's socket lives in its
    folder, and a socket path is at most 107 bytes (pytest's tmp_path can be longer)."""
    d = Path(tempfile.mkdtemp(prefix="mk-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("when", ["starting", "running"])
def test_sigterm_stops_the_private_server_and_deletes_its_folder(short_tmp, when):
    if pg_opted_out():
        pytest.skip("Postgres half opted out (MEMKIT_TEST_PG=0)")
    tmp_path = short_tmp
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def folder():
            """the server's folder appears"""
            return next(tmp_path.glob(f"{PREFIX}*"), None)

        where = _wait(folder)
        if when == "running":
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
            postmaster = pid_in(where / DATA / "postmaster.pid")
            assert postmaster is not None and not process_gone(postmaster)
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode != 0 and "Terminated" in err, err[-2000:]

    def stopped():
        """no process runs in the folder and the folder is gone"""
        return not _running_in(where) and not where.exists()

    _wait(stopped)
    if when == "running":
        assert process_gone(postmaster)


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _folder(tmp: Path, name: str, owner: int | None, postmaster: int | None) -> Path:
    """A `memkit-pg-*` folder: with an owner file (this layout) or without (the earlier one)."""
    f = tmp / f"{PREFIX}{name}"
    data = f / DATA if owner is not None else f
    data.mkdir(parents=True)
    if owner is not None:
        (f / OWNER).write_text(f"{owner}\n")
    if postmaster is not None:
        (data / "postmaster.pid").write_text(f"{postmaster}\n{data}\n")
    return f


def test_a_folder_is_stale_only_when_its_owner_and_its_server_are_gone(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    stale = {
        _folder(tmp_path, "owner-gone", dead, None),
        _folder(tmp_path, "both-gone", dead, dead),
        _folder(tmp_path, "legacy-server-gone", None, dead),
    }
    kept = {
        _folder(tmp_path, "server-alive", dead, alive),
        _folder(tmp_path, "starting", alive, None),
        _folder(tmp_path, "running", alive, alive),
        _folder(tmp_path, "legacy-alive", None, alive),
        _folder(tmp_path, "legacy-initialising", None, None),
    }
    garbled = tmp_path / f"{PREFIX}garbled"
    (garbled / DATA).mkdir(parents=True)
    (garbled / OWNER).write_text("not a pid\n")
    other = tmp_path / "other-pg-x"
    other.mkdir()
    (other / "postmaster.pid").write_text(f"{dead}\n")
    kept |= {garbled, other}
    assert set(sweep(tmp_path)) == stale
    assert {p for p in tmp_path.iterdir()} == kept


def test_an_ownerless_folder_without_a_server_is_stale_only_past_its_age(tmp_path):
    f = _folder(tmp_path, "legacy", None, None)
    changed = f.stat().st_mtime
    assert not is_stale(f, now=changed + LEGACY_AGE_S)
    assert is_stale(f, now=changed + LEGACY_AGE_S + 1)


@pytest.mark.parametrize(
    ("signum", "error"), [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)]
)
def test_a_signal_is_held_until_release_then_raised(signum, error):
    signals = SignalsHeld()
    before = signal.getsignal(signum)
    if not signals.install():
        pytest.skip("signal handlers need the main thread")
    try:
        os.kill(os.getpid(), signum)

        def kept():
            """the held signal is kept"""
            return signals.pending == signum

        _wait(kept, 10)  # held: nothing raised meanwhile
        with pytest.raises(error):
            signals.release()
        assert signals.pending is None
        signals.release()  # nothing more to raise
    finally:
        signals.restore()
    assert signal.getsignal(signum) == before
