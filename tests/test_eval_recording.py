"""Recorded runs: record a live run's answers, replay them offline by request hash.

A live run against the loopback stub (a budget that shapes requests, the
proposal schema as response_format) is recorded with `memkit eval record`;
`replay:<file>` then reproduces its system's rows without any server,
byte-identical across reruns, with the real tokens and latency. A request
missing from the recording is reported as "not in the recording" (named,
counted apart, the run exits 1), never scored as a model failure.
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from stub_openai import StubServer, reply
from test_docs import DECODING
from test_eval_data import write_tiny_dataset

from evals.commands import record_main, run_main
from evals.datasets import load_dataset
from evals.record import record_run
from evals.replay import CachingEmbedder
from evals.runfolder import read_json, read_jsonl
from evals.runner import RunConfig, run_eval
from memkit.consolidate import ReplayConsolidator, get_consolidator
from memkit.consolidate.recording import read_recording
from memkit.embed import get_embedder
from memkit.errors import ConfigError

LIVE = "litellm:openai/rec"
OPTS = {"api_key": "sk-test", "structured_output": "json_object", "max_request_bytes": 800}


def _answer(body):
    """A deterministic model: one add per batch from the first user message; tokens
    scale with the request so every entry's numbers differ."""
    payload = json.loads(body["messages"][-1]["content"])
    users = [
        m["content"] for r in payload["rollouts"] for m in r["messages"] if m["role"] == "user"
    ]
    change = {"ids": [], "entry": {"kind": "fact", "content": users[0][:120]}}
    time.sleep(0.02)
    n = len(body["messages"][-1]["content"])
    return reply(json.dumps({"changes": [change]}), prompt_tokens=n // 3, completion_tokens=17)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")
    return root, load_dataset(root)


@pytest.fixture(scope="module")
def emb():
    return CachingEmbedder(get_embedder("wordllama"))


@pytest.fixture(scope="module")
def recorded(tiny, emb, tmp_path_factory):
    """A live run (its LiteLLM system and the heuristic) and the recording of it."""
    root, ds = tiny
    tmp = tmp_path_factory.mktemp("rec")
    with StubServer({"rec": _answer}) as srv:
        cfg = RunConfig(
            dataset=str(root),
            name="live",
            store_mode=False,
            consolidators=(LIVE, "heuristic"),
            cache_dir=str(tmp / "cache"),
            model_options={LIVE: {**OPTS, "api_base": srv.url}},
            resamples=200,
        )
        live = run_eval(cfg, tmp / "live", quiet=True, dataset=ds, embedder=emb, report=False)
        sent = [c.body for c in srv.calls]
    summary = record_run(tmp / "live", tmp / "rec.jsonl", note="stub")
    return root, ds, tmp, live, sent, summary


def _replay(root, ds, emb, out, spec):
    cfg = RunConfig(dataset=str(root), store_mode=False, consolidators=(spec,), resamples=200)
    return run_eval(cfg, out, quiet=True, dataset=ds, embedder=emb)


def test_the_recording_holds_answers_hashes_tokens_latency_and_the_budget(recorded):
    _, ds, tmp, _, sent, summary = recorded
    header, entries = read_recording(tmp / "rec.jsonl")
    assert summary["entries"] == len(entries) == summary["answered"] > 0
    assert header["system"] == f"pipeline:{LIVE}" and header["model"] == "openai/rec"
    assert header["request_budget"] == 800 and header["note"] == "stub"
    assert header["options"]["structured_output"] == "json_object"
    assert "api_key" not in header["options"]
    assert header["dataset"]["fingerprint"] == ds.fingerprint()
    assert header["isolate"] is True  # this run split failed batches (docs/behaviour.md "Parking")
    assert ReplayConsolidator(tmp / "rec.jsonl").isolate is True
    rows = [
        r for r in read_jsonl(tmp / "live" / "attempts.jsonl") if r["system"] == header["system"]
    ]
    assert {(r["request_hash"], r["replicate"]) for r in rows} == set(entries)
    for e in entries.values():
        (a,) = e["attempts"]
        assert a["outcome"] == "ok" and a["input_tokens"] > 0 and a["latency_s"] > 0
        assert a["response_format"] == "json_object+schema"
    # the live requests were shaped to the budget: some needed it
    assert all(len(b["messages"][-1]["content"].encode()) <= 800 for b in sent)
    passes = read_jsonl(tmp / "live" / "passes.jsonl")
    assert not [p for p in passes if p.get("error_code") == "request_too_large"]
    assert any(p["excerpt_size"] for p in passes if p["system"] == header["system"])


def test_replay_reproduces_the_live_rows_offline_and_byte_identical(recorded, emb):
    root, ds, tmp, live, _, _ = recorded
    spec = f"replay:{tmp / 'rec.jsonl'}"
    a = _replay(root, ds, emb, tmp / "r1", spec)
    b = _replay(root, ds, emb, tmp / "r2", spec)
    assert a.failures == [] and b.failures == []
    m1 = (tmp / "r1" / "metrics.json").read_text()
    assert m1 == (tmp / "r2" / "metrics.json").read_text()
    want = live.metrics.set_index(["system", "metric"])["value"]
    got = a.metrics.set_index(["system", "metric"])["value"]
    for m in (*DECODING, "input_tokens", "output_tokens"):
        assert got[(f"pipeline:{spec}", m)] == want[(f"pipeline:{LIVE}", m)], m
    # real latency, as recorded, in the latency table the report shows
    lat_live = read_json(tmp / "live" / "latency.json")["systems"][f"pipeline:{LIVE}"]
    lat_rep = read_json(tmp / "r1" / "latency.json")["systems"][f"pipeline:{spec}"]
    assert lat_rep["latency_p50_s"] == lat_live["latency_p50_s"]
    assert lat_rep["latency_p50_s"]["value"] >= 0.02
    rows = read_jsonl(tmp / "r1" / "attempts.jsonl")
    assert all(r["cached"] and r["input_tokens"] > 0 for r in rows)


def test_a_request_not_in_the_recording_is_named_not_scored_as_a_failure(recorded, emb):
    root, ds, tmp, _, _, _ = recorded
    lines = (tmp / "rec.jsonl").read_text().splitlines()
    dropped = json.loads(lines[1])["request_hash"]
    (tmp / "short.jsonl").write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    spec = f"replay:{tmp / 'short.jsonl'}"
    res = _replay(root, ds, emb, tmp / "miss", spec)
    (line,) = [x for x in res.failures if x.startswith("NOT IN THE RECORDING")]
    assert dropped[:12] in line and spec in line
    health = read_json(tmp / "miss" / "manifest.json")["providers"]["failures"][f"pipeline:{spec}"]
    assert health["not_recorded"][0] == dropped and health["failed"] == 0
    assert health["fails_run"] is True
    got = res.metrics.set_index(["system", "metric"])["value"]
    assert got[(f"pipeline:{spec}", "provider_failures")] == 0.0  # a miss is no model failure
    report = (tmp / "miss" / "report.md").read_text()
    assert "NOT IN THE RECORDING" in report and "not in the recording" in report


def test_changed_request_shaping_misses_the_reshaped_requests(recorded, emb):
    root, ds, tmp, _, _, _ = recorded
    lines = (tmp / "rec.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["request_budget"] = 900  # as if the budget rule had changed since recording
    (tmp / "reshaped.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    spec = f"replay:{tmp / 'reshaped.jsonl'}"
    res = _replay(root, ds, emb, tmp / "reshaped", spec)
    health = read_json(tmp / "reshaped" / "manifest.json")["providers"]["failures"][
        f"pipeline:{spec}"
    ]
    assert health["not_recorded"] and health["failed"] == 0
    assert any(x.startswith("NOT IN THE RECORDING") for x in res.failures)
    # every attempt metric of the replay is computed only on requests it found
    rows = read_jsonl(tmp / "reshaped" / "attempts.jsonl")
    assert {r["outcome"] for r in rows} >= {"replay_miss"}


def test_record_command_and_run_record_flag(recorded, tiny, tmp_path, capsys):
    _, _, tmp, _, _, _ = recorded
    out = tmp_path / "again.jsonl"
    assert record_main([str(tmp / "live"), "--out", str(out)]) == 0
    assert out.read_bytes() == (tmp / "rec.jsonl").read_bytes().replace(b'"stub"', b"null")
    assert "recorded pipeline:litellm:openai/rec" in capsys.readouterr().out
    assert record_main([str(tmp / "live"), "--out", str(out), "--system", "heuristic"]) == 2
    assert "not a litellm system" in capsys.readouterr().err
    assert record_main([str(tmp_path), "--out", str(out)]) == 2
    root, _ = tiny
    argv = ["--dataset", str(root), "--mode", "pipeline", "--consolidator", "heuristic"]
    assert run_main([*argv, "--record", str(out), "--quiet"]) == 2
    assert "--record writes the recording of one litellm" in capsys.readouterr().err


def test_a_recording_that_is_not_one_is_refused(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "something-else"}\n')
    with pytest.raises(ConfigError, match="header"):
        get_consolidator(f"replay:{bad}")
    bad.write_text('{"kind": "memkit-recording", "version": 1}\n{"request_hash": "x"}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2"):
        get_consolidator(f"replay:{bad}")
    with pytest.raises(ConfigError, match="no recording"):
        get_consolidator(f"replay:{tmp_path / 'missing.jsonl'}")


def test_bad_recording_lines_are_named_by_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    head = '{"kind": "memkit-recording", "version": 1}\n'
    for body, fragment in (("\n{nope\n", r"bad\.jsonl:3: not JSON"), ("\n[1]\n", ":3: a line")):
        bad.write_text(head + body)
        with pytest.raises(ConfigError, match=fragment):
            read_recording(bad)
    bad.write_bytes(head.encode() + b'{"x": "\xe9"}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: not UTF-8"):
        read_recording(bad)


def test_an_answer_holding_a_line_separator_reads_back(tmp_path):
    """U+2028/U+0085 stay raw in a line (ensure_ascii=False); only "\\n" ends one."""
    from memkit.consolidate.recording import write_recording

    entry = {"request_hash": "a" * 64, "replicate": 0, "attempts": [{}], "text": "x\u2028y\x85z"}
    p = tmp_path / "r.jsonl"
    assert write_recording(p, {"model": "m"}, [entry]) == 1
    header, entries = read_recording(p)
    assert header["model"] == "m" and entries[("a" * 64, 0)] == entry
    assert p.read_bytes().count(b"\n") == 2  # byte-stable form: one line each, sorted keys
    assert p.read_text(encoding="utf-8").splitlines()[0] == (
        '{"kind": "memkit-recording", "model": "m", "version": 1}'
    )


def test_runs_of_single_scopes_make_one_recording(tiny, emb, tmp_path):
    root, ds = tiny
    scopes = sorted({t.scope_id for t in ds.transcripts})
    assert len(scopes) >= 2
    with StubServer({"rec": _answer}) as srv:

        def live(name, scope, **opts):
            cfg = RunConfig(
                dataset=str(root),
                name=name,
                store_mode=False,
                consolidators=(LIVE,),
                scopes=(scope,),
                cache_dir=str(tmp_path / "cache"),
                model_options={LIVE: {**OPTS, "api_base": srv.url, **opts}},
                resamples=50,
            )
            run_eval(cfg, tmp_path / name, quiet=True, dataset=ds, embedder=emb, report=False)
            return tmp_path / name

        parts = [live(f"s{i}", s) for i, s in enumerate(scopes)]
        other = live("other-budget", scopes[0], max_request_bytes=700)
    summary = record_run(parts, tmp_path / "all.jsonl")
    header, entries = read_recording(tmp_path / "all.jsonl")
    assert header["source_runs"] == [p.name for p in parts] and "api_base" not in header["options"]
    assert summary["entries"] == len(entries)
    res = _replay(root, ds, emb, tmp_path / "whole", f"replay:{tmp_path / 'all.jsonl'}")
    assert res.failures == []  # every scope's requests are in the one recording
    with pytest.raises(ConfigError, match="request_budget differ"):
        record_run([parts[0], other], tmp_path / "mixed.jsonl")
