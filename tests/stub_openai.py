"""A scripted, stdlib-only OpenAI-compatible chat server on 127.0.0.1, for tests.

LiteLLM reaches it as `model="openai/<name>"` with `api_base=server.url`; the
part after `openai/` selects the behaviour script for that model, so one server
can play a well-behaved model, a rate-limited one and a fence-happy one at once
(the eval suite uses that for two-model comparisons). Nothing leaves the host.

    with StubServer(behaviours={"good": reply('{"changes": []}'),
                                "flaky": [rate_limited(0.01), reply("{}")]}) as srv:
        litellm.completion(model="openai/good", api_base=srv.url, api_key="x", ...)
        srv.calls  # every request received, in order

A behaviour is a `Behaviour`, a list of them (a script: each call takes the
next; the last one repeats), or a callable `(request_body) -> Behaviour` for
answers that depend on the request (e.g. echoing or inventing memory ids).
`consolidation_payload(body)` reads a consolidation request's rollouts and
memories; `first_time(b, then)` answers `b` the first time a request's
messages are seen and `then` afterwards (a 429 per distinct request, say,
whatever order concurrent passes arrive in).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Behaviour",
    "Call",
    "StubServer",
    "consolidation_payload",
    "fenced",
    "first_time",
    "gate",
    "rate_limited",
    "reply",
    "server_error",
    "slow",
    "status",
    "truncated",
]


@dataclass(frozen=True)
class Behaviour:
    """One scripted answer.

    kind: "reply" (200 with `content`), "status" (an error status with a JSON
    error body and `headers`), "truncated" (a 200 whose body stops half way
    while Content-Length promises more, then the connection closes).
    `delay_s` is waited before answering (interrupted when the server stops).
    """

    kind: str = "reply"
    content: str = '{"changes": []}'
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    prompt_tokens: int = 11
    completion_tokens: int = 7


Script = Behaviour | Sequence[Behaviour] | Callable[[dict[str, Any]], Behaviour] | None


def reply(content: str, *, prompt_tokens: int = 11, completion_tokens: int = 7) -> Behaviour:
    """A normal 200 answer whose message content is `content`."""
    return Behaviour(
        "reply", content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )


def fenced(content: str) -> Behaviour:
    """A 200 answer wrapping `content` in a ```json fence, as chatty models do."""
    return reply(f"Here you go:\n```json\n{content}\n```\n")


def status(code: int, *, headers: Mapping[str, str] | None = None) -> Behaviour:
    return Behaviour("status", status=code, headers=dict(headers or {}))


def rate_limited(retry_after: float | None = None) -> Behaviour:
    """429, with a Retry-After header (seconds) when given."""
    h = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
    return status(429, headers=h)


def server_error(code: int = 500) -> Behaviour:
    return status(code)


def slow(delay_s: float, content: str = '{"changes": []}') -> Behaviour:
    """A valid answer that arrives only after `delay_s` seconds."""
    return Behaviour("reply", content, delay_s=delay_s)


def gate(
    n: int, then: Behaviour, *, timeout_s: float = 60.0
) -> Callable[[dict[str, Any]], Behaviour]:
    """A script holding each of the first `n` requests until all `n` have arrived.

    It makes "n requests were in flight at once" a fact the test can assert
    however slow the machine is; `timeout_s` keeps a harness that never sends
    `n` at once from hanging (the assert on `max_in_flight` then fails).
    """
    cond = threading.Condition()
    arrived = [0]

    def script(body: dict[str, Any]) -> Behaviour:
        with cond:
            arrived[0] += 1
            cond.notify_all()
            cond.wait_for(lambda: arrived[0] >= n, timeout=timeout_s)
        return then

    return script


def truncated(content: str = '{"changes": []}') -> Behaviour:
    """A 200 whose body is cut half way (Content-Length promises more)."""
    return Behaviour("truncated", content)


def consolidation_payload(body: Mapping[str, Any]) -> dict[str, Any]:
    """The `{"rollouts": [...], "memories": [...]}` JSON of a consolidation request."""
    return json.loads(body["messages"][-1]["content"])


def first_time(
    first: Behaviour, then: Behaviour | Callable[[dict[str, Any]], Behaviour]
) -> Callable[[dict[str, Any]], Behaviour]:
    """A script answering `first` to each distinct request once, `then` to its repeats."""
    seen: set[str] = set()
    lock = threading.Lock()

    def script(body: dict[str, Any]) -> Behaviour:
        key = json.dumps(body.get("messages"), sort_keys=True)
        with lock:
            new = key not in seen
            seen.add(key)
        if new:
            return first
        return then(body) if callable(then) else then

    return script


@dataclass(frozen=True)
class Call:
    """One request the stub received."""

    model: str
    body: dict[str, Any]
    path: str
    time: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])


class StubServer:
    """Threaded HTTP server; use as a context manager. `.url` is the api_base."""

    def __init__(
        self,
        behaviours: Mapping[str, Script] | None = None,
        *,
        default: Script = None,
        api_key: str | None = None,
    ):
        self.behaviours: dict[str, Script] = dict(behaviours or {})
        self.default = default
        self.api_key = api_key
        """When set, a request without `Authorization: Bearer <api_key>` gets 401
        (a gateway that checks keys); `GET /models` answers too (reachability)."""
        self.auth_seen: list[str | None] = []
        """The Authorization header of every request (GET and POST), in order."""
        self.calls: list[Call] = []
        self.in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}
        """Per model, the most requests being answered at once (client-side limits)."""
        self._served: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> StubServer:
        handler = _make_handler(self)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def calls_for(self, model: str) -> list[Call]:
        return [c for c in self.calls if c.model == model]

    # -- scripting -------------------------------------------------------------
    def _next(self, model: str, body: dict[str, Any]) -> Behaviour:
        with self._lock:
            self.calls.append(Call(model, body, "/chat/completions", time.time()))
            n = self._served.get(model, 0)
            self._served[model] = n + 1
        script = self.behaviours.get(model, self.default)
        if script is None:
            return Behaviour("status", status=404)
        if isinstance(script, Behaviour):
            return script
        if callable(script):
            return script(body)
        seq = list(script)
        return seq[min(n, len(seq) - 1)]


def _completion_body(model: str, b: Behaviour) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": b.content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": b.prompt_tokens,
                "completion_tokens": b.completion_tokens,
                "total_tokens": b.prompt_tokens + b.completion_tokens,
            },
        }
    ).encode()


def _make_handler(server: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output quiet
            pass

        def _refused(self) -> bool:
            """Record the Authorization header; answer 401 when it is not the server's key."""
            auth = self.headers.get("Authorization")
            with server._lock:
                server.auth_seen.append(auth)
            if server.api_key is None or auth == f"Bearer {server.api_key}":
                return False
            self._json(401, {"error": {"message": "stub: bad key", "type": "auth", "code": None}})
            return True

        def _json(self, code: int, obj: Any) -> None:
            payload = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            if self._refused():
                return
            if self.path.rstrip("/").endswith("/models"):
                models = [{"id": m, "object": "model"} for m in server.behaviours]
                self._json(200, {"object": "list", "data": models})
            else:
                self._json(404, {"error": {"message": "stub: no such path", "code": None}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            if self._refused():
                return
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            model = str(body.get("model", ""))
            with server._lock:  # in flight from arrival, so a script that waits counts
                now = server.in_flight[model] = server.in_flight.get(model, 0) + 1
                server.max_in_flight[model] = max(server.max_in_flight.get(model, 0), now)
            try:
                self._answer(model, server._next(model, body))
            finally:
                with server._lock:
                    server.in_flight[model] -= 1

        def _answer(self, model: str, b: Behaviour) -> None:
            if b.delay_s and server._stop.wait(b.delay_s):
                self.close_connection = True
                return
            if b.kind == "status":
                payload = json.dumps(
                    {"error": {"message": f"stub status {b.status}", "type": "stub", "code": None}}
                ).encode()
                self.send_response(b.status)
                for k, v in b.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            payload = _completion_body(model, b)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if b.kind == "truncated":
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(payload)

    return Handler


def _serve(argv: list[str] | None = None) -> None:
    """`python tests/stub_openai.py --latency 0.5 [--rate-429 0.1]`: serve every model
    `{"changes": []}` after the latency (one request in 1/rate gets a 429 with
    Retry-After), print the api_base on stdout, run until stdin closes. Used by
    `memkit bench harness --latency` to keep the server out of the measured process."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="stub_openai")
    p.add_argument("--latency", type=float, default=0.5)
    p.add_argument("--rate-429", type=float, default=0.0)
    p.add_argument("--retry-after", type=float, default=1.0)
    a = p.parse_args(argv)
    every = round(1 / a.rate_429) if a.rate_429 > 0 else 0
    count = [0]
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> Behaviour:
        with lock:
            count[0] += 1
            n = count[0]
        if every and n % every == 0:
            return rate_limited(a.retry_after)
        return slow(a.latency)

    with StubServer(default=answer) as srv:
        print(srv.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    _serve()
