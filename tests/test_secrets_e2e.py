"""No secret of the corpora reaches a provider request, a store (SQLite file or
Postgres rows) or the cache.

Every secret form of `tests/secret_corpus.py` and of the held-out
`tests/secret_corpus_heldout.py` is pasted into a transcript the
way agents paste them (user text, tool-call arguments, tool results, the
final answer), staged, and consolidated through LiteLLM against the local
stub server with a disk cache; the stub answers by proposing lessons that
quote the secrets back, and every secret is also remembered directly as
content and as a tag. Then the bytes the stub received, the database files
(or every row of the Postgres schema, as text) and the cache files are
searched. The same run with redaction switched off must show every secret,
so the search itself is known to work.
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

import secret_corpus
import secret_corpus_heldout
from stub_openai import Behaviour, StubServer, reply

from memkit.consolidate import get_consolidator, run_pass_sync, stage_run
from memkit.params import ConsolidationParams, RedactionParams
from memkit.store import is_postgres_url, open_store

SECRETS = secret_corpus.SECRETS + secret_corpus_heldout.SECRETS

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


def _postgres_rows(dsn: str) -> str:
    """Every row of every table in the store's schema, as Postgres prints it."""
    import psycopg

    with psycopg.connect(dsn) as c:
        tables = [
            r[0]
            for r in c.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            )
        ]
        return "\n".join(
            str(row[0]) for t in tables for row in c.execute(f'SELECT t::text FROM "{t}" t')
        )


def _exercise(
    tmp_path: Path, srv: StubServer, redaction: RedactionParams, url: str
) -> dict[str, str]:
    """Run everything once; return the text of what the provider, the store and the cache saw."""
    cache = tmp_path / "cache"
    store = open_store(url, embedder="hashing", redaction=redaction)
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
    if is_postgres_url(url):
        stored = _postgres_rows(url)
    else:
        files = [p for p in tmp_path.glob("memory.db*") if p.is_file()]
        stored = "\n".join(p.read_bytes().decode("utf-8", "replace") for p in files)
    cached = "\n".join(p.read_text("utf-8") for p in cache.rglob("*.json"))
    return {"provider request": sent, "store": stored, "cache": cached}


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path) -> str:
    """The store: a SQLite file, or a Postgres schema of the test's own."""
    if request.param == "postgres":
        return request.getfixturevalue("pg_dsn")
    return str(tmp_path / "memory.db")


@pytest.fixture
def srv():
    with StubServer({"echo": _echo}) as s:
        yield s


def test_no_secret_reaches_provider_store_or_cache(tmp_path, srv, url):
    seen = _exercise(tmp_path, srv, RedactionParams(), url)
    leaks = {
        where: [name for name, _, secret in SECRETS if _found(secret, text)]
        for where, text in seen.items()
    }
    assert leaks == {where: [] for where in seen}, leaks
    assert "[REDACTED]" in seen["provider request"] and "[REDACTED]" in seen["store"]


def test_the_search_finds_secrets_when_redaction_is_off(tmp_path, srv, url):
    """The control: without redaction every secret is visible in the request, the
    store and the cache files, so the clean result above is not a blind search."""
    with mock.patch("memkit.consolidate.request.redact", lambda text, *a: text):
        seen = _exercise(tmp_path, srv, RedactionParams(secrets=False), url)
    for where in ("provider request", "store", "cache"):
        missing = [name for name, _, secret in SECRETS if not _found(secret, seen[where])]
        assert missing == [], (where, missing)
