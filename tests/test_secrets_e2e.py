"""No secret of the corpus reaches a provider request, the SQLite file or the cache.

Every secret form of `tests/secret_corpus.py` is pasted into a transcript the
way agents paste them (user text, tool-call arguments, tool results, the
final answer), staged, and consolidated through LiteLLM against the local
stub server with a disk cache; the stub answers by proposing lessons that
quote the secrets back, and every secret is also remembered directly as
content and as a tag. Then the bytes the stub received, the database files
and the cache files are searched. The same run with redaction switched off
must show every secret, so the search itself is known to work.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from unittest import mock

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parent))

from secret_corpus import SECRETS
from stub_openai import Behaviour, StubServer, reply

from memkit import SQLiteStore
from memkit.consolidate import get_consolidator, run_pass_sync, stage_run
from memkit.params import ConsolidationParams, RedactionParams

SCOPE = "ops"
PER_RUN = 4  # secrets per transcript: 3 messages each, well inside the evidence budget


def _transcript(i: int, chunk: list[tuple[str, str, str]]) -> dict:
    messages: list[dict] = [{"role": "system", "content": "You are a helpful agent."}]
    for j, (_, text, _) in enumerate(chunk):
        call_id = f"call-{i}-{j}"
        messages += [
            {"role": "user", "content": f"Here is the config:\n{text}"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "shell", "arguments": json.dumps({"cmd": text})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": f"ran: {text}"},
        ]
    return {
        "run_id": f"run-{i}",
        "scope_id": SCOPE,
        "status": "succeeded",
        "stop_reason": "stop",
        "turns": 1,
        "messages": messages,
        "final_answer": "Done. " + " | ".join(t for _, t, _ in chunk),
    }


def _echo(body: dict) -> Behaviour:
    """Propose one lesson per pasted secret, quoting the evidence back."""
    payload = json.loads(body["messages"][1]["content"])
    texts = [r["final"] for r in payload["rollouts"]]
    changes = [
        {"ids": [], "entry": {"kind": "fact", "content": t[:8000], "tags": [t[:60]]}} for t in texts
    ]
    return reply(json.dumps({"changes": changes}))


def _strings(value, out: list[str]) -> list[str]:
    """Every string inside a JSON value, and inside strings that are JSON themselves."""
    if isinstance(value, str):
        out.append(value)
        try:
            inner = json.loads(value)
        except ValueError:
            return out
        if not isinstance(inner, str):
            _strings(inner, out)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)
    return out


def _forms(secret: str) -> tuple[str, ...]:
    """The secret as written and JSON-escaped (tool arguments are JSON text)."""
    return (secret, json.dumps(secret)[1:-1])


def _found(secret: str, haystack: str) -> bool:
    return any(f in haystack for f in _forms(secret))


def _exercise(tmp_path: Path, srv: StubServer, redaction: RedactionParams) -> dict[str, str]:
    """Run everything once; return the text of what the provider, the DB and the cache saw."""
    db = tmp_path / "memory.db"
    cache = tmp_path / "cache"
    store = SQLiteStore.open(db, embedder="hashing", redaction=redaction)
    for name, text, _ in SECRETS:
        store.remember(SCOPE, f"{name}: {text}", tags=[text[:200]])
    chunks = [SECRETS[k : k + PER_RUN] for k in range(0, len(SECRETS), PER_RUN)]
    for i, chunk in enumerate(chunks):
        assert stage_run(store, _transcript(i, chunk)) is not None
    consolidator = get_consolidator(
        "litellm:openai/echo", api_base=srv.url, api_key="stub", cache_dir=str(cache)
    )
    params = ConsolidationParams(snapshot_size=0, timeout_s=10.0)
    while store.pending_rollouts(SCOPE, 1):
        res = run_pass_sync(store, SCOPE, consolidator, params)
        assert res.outcome == "committed", res.error
    store.close()
    sent = "\n".join(s for c in srv.calls_for("echo") for s in _strings(c.body, []))
    files = [p for p in tmp_path.glob("memory.db*") if p.is_file()]
    stored = "\n".join(p.read_bytes().decode("utf-8", "replace") for p in files)
    cached = "\n".join(p.read_text("utf-8") for p in cache.rglob("*.json"))
    return {"provider request": sent, "SQLite file": stored, "cache": cached}


@pytest.fixture
def srv():
    with StubServer({"echo": _echo}) as s:
        yield s


def test_no_secret_reaches_provider_database_or_cache(tmp_path, srv):
    seen = _exercise(tmp_path, srv, RedactionParams())
    leaks = {
        where: [name for name, _, secret in SECRETS if _found(secret, text)]
        for where, text in seen.items()
    }
    assert leaks == {where: [] for where in seen}, leaks
    assert "[REDACTED]" in seen["provider request"] and "[REDACTED]" in seen["SQLite file"]


def test_the_search_finds_secrets_when_redaction_is_off(tmp_path, srv):
    """The control: without redaction every secret is visible in the request, the
    database and the cache files, so the clean result above is not a blind search."""
    with mock.patch("memkit.consolidate.request.redact", lambda text, *a: text):
        seen = _exercise(tmp_path, srv, RedactionParams(secrets=False))
    for where in ("provider request", "SQLite file", "cache"):
        missing = [name for name, _, secret in SECRETS if not _found(secret, seen[where])]
        assert missing == [], (where, missing)
