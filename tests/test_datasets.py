"""Loaders and validators: every rule rejects a crafted bad file at file:line:field."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evals.datasets import (
    Dataset,
    check_dataset,
    compute_counts,
    load_dataset,
    load_pairs,
    parse_timestamp,
    validate_dataset,
)
from memkit.errors import DatasetError
from memkit.types import KINDS


def _msg(role: str, content: Any, **kw: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **kw}


def _run(run_id: str, scope: str, day: int, **kw: Any) -> dict[str, Any]:
    rec = {
        "run_id": run_id,
        "scope_id": scope,
        "parent_run_id": None,
        "status": "succeeded",
        "stop_reason": "stop",
        "turns": 1,
        "started_at": f"2026-03-{day:02d}T09:00:00Z",
        "task": f"task of {run_id}",
        "messages": [
            _msg("system", "You are helpful."),
            _msg("user", f"hello from {run_id}"),
            _msg("assistant", f"answer {run_id}"),
        ],
        "final_answer": f"answer {run_id}",
    }
    rec.update(kw)
    return rec


def _fact(fid: str, scope: str, runs: list[str], **kw: Any) -> dict[str, Any]:
    rec = {
        "fact_id": fid,
        "scope_id": scope,
        "kind": "fact",
        "content": f"content of {fid}",
        "paraphrases": [f"{fid} said one way", f"{fid} said another way"],
        "established_in": runs,
        "retracted_in": None,
        "superseded_by": None,
    }
    rec.update(kw)
    return rec


def valid_records() -> dict[str, Any]:
    """A small dataset that passes every rule; each test breaks exactly one thing."""
    tool_run = _run(
        "s1:r1",
        "s1",
        1,
        turns=2,
        messages=[
            _msg("system", "You are a coding assistant."),
            _msg("user", "How do we deploy?"),
            _msg(
                "assistant",
                None,
                tool_calls=[
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "ops/deploy.sh"}'},
                    }
                ],
            ),
            _msg("tool", "#!/bin/sh\nmake deploy", tool_call_id="call_1", name="read_file"),
            _msg("assistant", "Run make deploy."),
        ],
    )
    transcripts = [
        tool_run,
        _run("s1:r2", "s1", 3),
        _run("s1:c1", "s1", 2, parent_run_id="s1:r1", status="failed", stop_reason="error"),
        _run("s2:r1", "s2", 5),
    ]
    facts = [
        _fact("s1:old", "s1", ["s1:r1"], superseded_by="s1:new"),
        _fact("s1:new", "s1", ["s1:r2"], kind="procedure"),
        _fact("s1:gone", "s1", ["s1:r1"], retracted_in="s1:r2", kind="preference"),
        _fact("s2:a", "s2", ["s2:r1"], kind="learning", hard_case="negation"),
    ]
    probes = [
        {
            "probe_id": "s1:p1",
            "scope_id": "s1",
            "after_run": "s1:r2",
            "query": "how do we deploy now?",
            "relevant": ["s1:new"],
            "distractors": ["s1:old"],
        },
        {
            "probe_id": "s1:p2",
            "scope_id": "s1",
            "after_run": "s1:r1",
            "query": "how did we deploy at first?",
            "relevant": ["s1:old", "s1:gone"],
        },
        {
            "probe_id": "s2:p1",
            "scope_id": "s2",
            "after_run": "s2:r1",
            "query": "what is the capital of Peru?",
            "relevant": [],
            "distractors": [],
        },
    ]
    pairs = [
        {
            "a": "Deploy with make.",
            "b": "Use make to deploy.",
            "label": "paraphrase",
            "source": "t",
        },
        {"a": "Port 8080.", "b": "Port 8081.", "label": "distinct", "source": "t", "score": 0.5},
    ]
    meta = {
        "name": "tiny",
        "version": "1",
        "description": "fixture",
        "license": "CC0",
        "counts": {"scopes": 2, "runs": 4, "facts": 4, "probes": 3, "pairs": 2},
    }
    return {
        "dataset.json": meta,
        "transcripts.jsonl": transcripts,
        "facts.jsonl": facts,
        "probes.jsonl": probes,
        "pairs.jsonl": pairs,
    }


def write(root: Path, recs: dict[str, Any]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, value in recs.items():
        if name == "dataset.json":
            (root / name).write_text(json.dumps(value), encoding="utf-8")
        else:
            lines = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value]
            (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_valid_fixture_loads_with_records_and_helpers(tmp_path):
    ds = load_dataset(write(tmp_path / "d", valid_records()))
    assert isinstance(ds, Dataset)
    assert (ds.name, ds.version, ds.license) == ("tiny", "1", "CC0")
    assert ds.scopes == ("s1", "s2")
    assert [t.run_id for t in ds.transcripts_by_scope()["s1"]] == ["s1:r1", "s1:c1", "s1:r2"]
    r1 = ds.runs_by_id["s1:r1"]
    assert r1.started_ts == parse_timestamp("2026-03-01T09:00:00+00:00")
    assert r1.started_at == "2026-03-01T09:00:00Z"
    assert r1.eligible and not ds.runs_by_id["s1:c1"].eligible
    run = r1.as_run()
    assert run["messages"][2]["tool_calls"][0]["id"] == "call_1"
    run["messages"].clear()  # a copy: the record is untouched
    assert len(r1.messages) == 5
    assert ds.facts_by_id["s1:new"].kind == "procedure"
    assert ds.facts_by_id["s2:a"].meta == {"hard_case": "negation"}  # extra fields kept
    assert ds.fold_groups() == {"s1:new": ["s1:old"]}
    assert [p.probe_id for p in ds.probes if p.off_topic] == ["s2:p1"]
    assert ds.pairs[1].score == 0.5 and ds.pairs[0].score is None
    frames = ds.to_frames()
    assert list(frames) == ["transcripts", "facts", "probes", "pairs"]
    assert len(frames["transcripts"]) == 4 and "messages" not in frames["transcripts"]
    assert frames["probes"]["off_topic"].sum() == 1
    assert check_dataset(ds) == []


def test_counts_are_computed():
    recs = valid_records()
    counts = compute_counts(_ds(recs))
    assert (counts["runs"], counts["root_runs"], counts["eligible_runs"]) == (4, 3, 3)
    assert counts["ineligible_by_reason"] == {
        "child": 1,
        "failed": 1,
        "aborted": 0,
        "parked": 0,
        "zero_turns": 0,
        "abnormal_stop": 1,
    }
    assert (counts["messages"], counts["tool_calls"]) == (14, 1)
    assert counts["restatements"] == 0 and counts["paraphrases"] == 8
    assert counts["facts_by_hard_case"] == {"negation": 1}
    assert counts["pairs_by_label"] == {"distinct": 1, "paraphrase": 1}
    assert counts["by_status"] == {"succeeded": 3, "failed": 1}
    assert counts["facts_by_kind"] == {"fact": 1, "preference": 1, "procedure": 1, "learning": 1}
    assert (counts["superseded"], counts["retracted"], counts["off_topic_probes"]) == (1, 1, 1)


def _ds(recs: dict[str, Any]) -> Dataset:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return load_dataset(write(Path(d), recs))


def test_fingerprint_is_stable_and_content_sensitive(tmp_path):
    recs = valid_records()
    a = load_dataset(write(tmp_path / "a", recs)).fingerprint()
    b = load_dataset(write(tmp_path / "b", recs)).fingerprint()
    assert a == b and len(a) == 64
    recs["facts.jsonl"][3]["content"] = "changed"
    assert load_dataset(write(tmp_path / "c", recs)).fingerprint() != a


def test_blank_lines_are_allowed_and_line_numbers_stay_true(tmp_path):
    recs = valid_records()
    facts = [json.dumps(f) for f in recs["facts.jsonl"]]
    facts.insert(1, "")
    recs["facts.jsonl"] = facts
    recs["facts.jsonl"][3] = json.dumps({**json.loads(facts[3]), "kind": "opinion"})
    errs = validate_dataset(write(tmp_path / "d", recs))
    assert [(Path(e.file).name, e.line, e.field) for e in errs] == [("facts.jsonl", 4, "kind")]


Mut = Callable[[dict[str, Any]], None]


def _set(file: str, i: int, path: str, value: Any) -> Mut:
    """Mutation: set a (dotted / indexed) field of record i in file."""

    def go(recs: dict[str, Any]) -> None:
        obj = recs[file][i] if file != "dataset.json" else recs[file]
        keys = path.split(".")
        for k in keys[:-1]:
            obj = obj[int(k)] if k.isdigit() else obj[k]
        last = keys[-1]
        if value is _DEL:
            del obj[last]
        elif last.isdigit():
            obj[int(last)] = value
        else:
            obj[last] = value

    return go


def _raw(file: str, i: int, text: str) -> Mut:
    def go(recs: dict[str, Any]) -> None:
        recs[file][i] = text

    return go


def _all(*muts: Mut) -> Mut:
    def go(recs: dict[str, Any]) -> None:
        for m in muts:
            m(recs)

    return go


def _append(file: str, rec: Any) -> Mut:
    def go(recs: dict[str, Any]) -> None:
        recs[file].append(copy.deepcopy(rec))

    return go


_DEL = object()
T, F, P, Q, M = "transcripts.jsonl", "facts.jsonl", "probes.jsonl", "pairs.jsonl", "dataset.json"
_CALL = {"id": "call_9", "type": "function", "function": {"name": "ls", "arguments": "{}"}}

# (case id, mutation, file, line, field, message fragment)
CASES: list[tuple[str, Mut, str, int | None, str | None, str]] = [
    ("bad json", _raw(T, 1, '{"run_id": "x",'), T, 2, None, "invalid JSON"),
    ("not an object", _raw(F, 0, "[1, 2]"), F, 1, None, "expected a JSON object"),
    ("missing run_id", _set(T, 0, "run_id", _DEL), T, 1, "run_id", "required"),
    ("blank scope", _set(T, 0, "scope_id", "  "), T, 1, "scope_id", "non-blank"),
    ("turns type", _set(T, 1, "turns", "3"), T, 2, "turns", "expected integer"),
    ("turns bool", _set(T, 1, "turns", True), T, 2, "turns", "bool"),
    ("turns below 0", _set(T, 1, "turns", -1), T, 2, "turns", ">= 0"),
    ("status", _set(T, 1, "status", "done"), T, 2, "status", "unknown status 'done'"),
    ("stop null", _set(T, 1, "stop_reason", None), T, 2, "stop_reason", "null"),
    ("timestamp", _set(T, 1, "started_at", "March 3rd"), T, 2, "started_at", "ISO 8601"),
    ("messages type", _set(T, 1, "messages", "hi"), T, 2, "messages", "expected list"),
    ("role", _set(T, 1, "messages.1.role", "human"), T, 2, "messages[1].role", "unknown role"),
    ("role missing", _set(T, 1, "messages.1.role", _DEL), T, 2, "messages[1].role", "required"),
    ("message not object", _set(T, 1, "messages.1", "hi"), T, 2, "messages[1]", "object"),
    ("content type", _set(T, 1, "messages.1.content", 5), T, 2, "messages[1].content", "string"),
    (
        "null content no calls",
        _set(T, 1, "messages.2.content", None),
        T,
        2,
        "messages[2].content",
        "null",
    ),
    (
        "unanswered call",
        _set(T, 0, "messages.3", _msg("user", "never mind")),
        T,
        1,
        "messages[2].tool_calls[0].id",
        "no tool result",
    ),
    (
        "result answers nothing",
        _set(T, 0, "messages.3.tool_call_id", "call_X"),
        T,
        1,
        "messages[3].tool_call_id",
        "answers no earlier tool call",
    ),
    (
        "result before call",
        _set(T, 1, "messages.1", _msg("tool", "x", tool_call_id="call_1")),
        T,
        2,
        "messages[1].tool_call_id",
        "answers no earlier",
    ),
    (
        "answered twice",
        _set(T, 0, "messages.4", _msg("tool", "again", tool_call_id="call_1")),
        T,
        1,
        "messages[4].tool_call_id",
        "already answered",
    ),
    (
        "tool without id",
        _set(T, 0, "messages.3.tool_call_id", _DEL),
        T,
        1,
        "messages[3].tool_call_id",
        "required",
    ),
    (
        "calls on user",
        _set(T, 1, "messages.1.tool_calls", [_CALL]),
        T,
        2,
        "messages[1].tool_calls",
        "only assistant",
    ),
    (
        "tool_call_id on user",
        _set(T, 1, "messages.1.tool_call_id", "call_1"),
        T,
        2,
        "messages[1].tool_call_id",
        "only tool messages",
    ),
    (
        "call without function",
        _set(T, 0, "messages.2.tool_calls.0.function", _DEL),
        T,
        1,
        "messages[2].tool_calls[0].function",
        "required",
    ),
    (
        "call args type",
        _set(T, 0, "messages.2.tool_calls.0.function.arguments", {"a": 1}),
        T,
        1,
        "messages[2].tool_calls[0].function.arguments",
        "expected string",
    ),
    (
        "call type",
        _set(T, 0, "messages.2.tool_calls.0.type", "code"),
        T,
        1,
        "messages[2].tool_calls[0].type",
        "unsupported",
    ),
    (
        "duplicate call id",
        _set(T, 0, "messages.2.tool_calls", [_CALL, _CALL]),
        T,
        1,
        "messages[2].tool_calls[1].id",
        "duplicate tool call id",
    ),
    ("duplicate run id", _set(T, 1, "run_id", "s1:r1"), T, 2, "run_id", "duplicate id 's1:r1'"),
    (
        "unknown parent",
        _set(T, 2, "parent_run_id", "s1:zz"),
        T,
        3,
        "parent_run_id",
        "unknown run 's1:zz'",
    ),
    (
        "parent other scope",
        _set(T, 2, "parent_run_id", "s2:r1"),
        T,
        3,
        "parent_run_id",
        "belongs to scope 's2'",
    ),
    ("own parent", _set(T, 2, "parent_run_id", "s1:c1"), T, 3, "parent_run_id", "its own parent"),
    ("kind", _set(F, 1, "kind", "opinion"), F, 2, "kind", "unknown kind 'opinion'"),
    ("blank content", _set(F, 1, "content", ""), F, 2, "content", "non-blank"),
    ("paraphrases type", _set(F, 1, "paraphrases", "p"), F, 2, "paraphrases", "expected list"),
    ("paraphrase item", _set(F, 1, "paraphrases.1", 3), F, 2, "paraphrases[1]", "non-blank"),
    (
        "established empty",
        _set(F, 1, "established_in", []),
        F,
        2,
        "established_in",
        "at least one run",
    ),
    (
        "established unknown",
        _set(F, 1, "established_in", ["s1:r9"]),
        F,
        2,
        "established_in[0]",
        "unknown run 's1:r9'",
    ),
    (
        "established foreign",
        _set(F, 1, "established_in", ["s2:r1"]),
        F,
        2,
        "established_in[0]",
        "belongs to scope 's2'",
    ),
    (
        "established twice",
        _set(F, 1, "established_in", ["s1:r2", "s1:r2"]),
        F,
        2,
        "established_in",
        "listed twice",
    ),
    ("retracted unknown", _set(F, 2, "retracted_in", "s1:r7"), F, 3, "retracted_in", "unknown run"),
    (
        "retracted before evidence",
        _set(F, 1, "retracted_in", "s1:r1"),
        F,
        2,
        "retracted_in",
        "earlier than the fact's first evidence",
    ),
    (
        "superseded unknown",
        _set(F, 0, "superseded_by", "s1:nope"),
        F,
        1,
        "superseded_by",
        "unknown fact 's1:nope'",
    ),
    (
        "superseded foreign",
        _set(F, 0, "superseded_by", "s2:a"),
        F,
        1,
        "superseded_by",
        "belongs to scope 's2'",
    ),
    (
        "superseded self",
        _set(F, 0, "superseded_by", "s1:old"),
        F,
        1,
        "superseded_by",
        "cannot supersede itself",
    ),
    (
        "successor earlier",
        _set(F, 1, "superseded_by", "s1:old"),
        F,
        2,
        "superseded_by",
        "established before this fact",
    ),
    ("duplicate fact id", _set(F, 3, "fact_id", "s1:new"), F, 4, "fact_id", "duplicate id"),
    (
        "fact scope",
        _append(F, _fact("s9:x", "s9", ["s1:r1"])),
        F,
        5,
        "scope_id",
        "scope 's9' has no transcripts",
    ),
    ("retracted type", _set(F, 2, "retracted_in", 7), F, 3, "retracted_in", "expected string"),
    ("probe query", _set(P, 0, "query", ""), P, 1, "query", "non-blank"),
    ("probe relevant type", _set(P, 0, "relevant", "s1:new"), P, 1, "relevant", "expected list"),
    ("probe after unknown", _set(P, 0, "after_run", "s1:r5"), P, 1, "after_run", "unknown run"),
    (
        "probe after foreign",
        _set(P, 0, "after_run", "s2:r1"),
        P,
        1,
        "after_run",
        "belongs to scope 's2'",
    ),
    (
        "probe relevant unknown",
        _set(P, 0, "relevant", ["s1:zz"]),
        P,
        1,
        "relevant[0]",
        "unknown fact 's1:zz'",
    ),
    (
        "probe relevant foreign",
        _set(P, 0, "relevant", ["s2:a"]),
        P,
        1,
        "relevant[0]",
        "belongs to scope 's2'",
    ),
    (
        "probe distractor unknown",
        _set(P, 0, "distractors", ["s1:zz"]),
        P,
        1,
        "distractors[0]",
        "unknown fact",
    ),
    (
        "probe relevant twice",
        _set(P, 0, "relevant", ["s1:new", "s1:new"]),
        P,
        1,
        "relevant[1]",
        "listed twice",
    ),
    (
        "relevant and distractor",
        _set(P, 0, "distractors", ["s1:new"]),
        P,
        1,
        "relevant[0]",
        "both relevant and a distractor",
    ),
    (
        "relevant superseded",
        _all(_set(P, 0, "relevant", ["s1:old"]), _set(P, 0, "distractors", [])),
        P,
        1,
        "relevant[0]",
        "superseded by 's1:new'",
    ),
    (
        "relevant retracted",
        _set(P, 0, "relevant", ["s1:gone"]),
        P,
        1,
        "relevant[0]",
        "retracted in 's1:r2'",
    ),
    (
        "relevant not yet",
        _set(P, 1, "relevant", ["s1:new"]),
        P,
        2,
        "relevant[0]",
        "not established yet",
    ),
    ("probe scope", _set(P, 2, "scope_id", "s7"), P, 3, "scope_id", "scope 's7'"),
    ("duplicate probe id", _set(P, 1, "probe_id", "s1:p1"), P, 2, "probe_id", "duplicate id"),
    ("pair label", _set(Q, 0, "label", "same"), Q, 1, "label", "unknown label 'same'"),
    ("pair text", _set(Q, 0, "b", ""), Q, 1, "b", "non-blank"),
    ("pair source", _set(Q, 1, "source", _DEL), Q, 2, "source", "required"),
    ("pair score", _set(Q, 1, "score", "high"), Q, 2, "score", "number"),
    ("meta name", _set(M, 0, "name", _DEL), M, None, "name", "required"),
    ("meta counts type", _set(M, 0, "counts", [1]), M, None, "counts", "expected object"),
    (
        "count wrong",
        _set(M, 0, "counts.facts", 5),
        M,
        None,
        "counts.facts",
        "states 5 but the files hold 4",
    ),
    (
        "count bytes",
        _set(M, 0, "counts.bytes", {"facts.jsonl": 1}),
        M,
        None,
        "counts.bytes",
        "states",
    ),
    ("count unknown", _set(M, 0, "counts.widgets", 1), M, None, "counts.widgets", "unknown count"),
]


@pytest.mark.parametrize(
    ("mutate", "file", "line", "fld", "fragment"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_each_rule_rejects_a_crafted_bad_file(tmp_path, mutate, file, line, fld, fragment):
    recs = valid_records()
    mutate(recs)
    root = write(tmp_path / "d", recs)
    errs = validate_dataset(root)
    where = [(Path(e.file).name, e.line, e.field) for e in errs]
    assert (file, line, fld) in where, f"expected {file}:{line}:{fld}, got {[str(e) for e in errs]}"
    hit = next(e for e in errs if (Path(e.file).name, e.line, e.field) == (file, line, fld))
    assert fragment in str(hit)
    loc = str(root / file) + (f":{line}" if line else "") + (f":{fld}" if fld else "")
    assert str(hit).startswith(f"{loc}: ")
    with pytest.raises(DatasetError) as info:
        load_dataset(root)
    assert len(info.value.errors) == len(errs)  # nothing dropped
    assert str(errs[0]).split(": ", 1)[0] in str(info.value)


def test_bounds_at_and_past(tmp_path):
    """turns: 0 accepted, -1 rejected; established_in: one run accepted, none rejected."""
    recs = valid_records()
    recs["transcripts.jsonl"][1]["turns"] = 0
    recs["facts.jsonl"][1]["established_in"] = ["s1:r2"]
    ds = load_dataset(write(tmp_path / "ok", recs))
    assert ds.runs_by_id["s1:r2"].turns == 0 and not ds.runs_by_id["s1:r2"].eligible


def test_errors_are_all_collected_not_just_the_first(tmp_path):
    recs = valid_records()
    recs["facts.jsonl"][0]["kind"] = "x"
    recs["probes.jsonl"][2]["query"] = ""
    recs["transcripts.jsonl"][3]["status"] = "??"
    errs = validate_dataset(write(tmp_path / "d", recs))
    names = {(Path(e.file).name, e.line, e.field) for e in errs}
    assert {
        ("facts.jsonl", 1, "kind"),
        ("probes.jsonl", 3, "query"),
        ("transcripts.jsonl", 4, "status"),
    } <= names
    # references to a rejected line are not reported a second time
    assert len(errs) == 3, [str(e) for e in errs]
    with pytest.raises(DatasetError) as info:
        load_dataset(tmp_path / "d")
    text = str(info.value)
    assert "more error(s)" in text and "probes.jsonl:3:query" in text


def test_missing_files_and_folder(tmp_path):
    recs = valid_records()
    root = write(tmp_path / "d", recs)
    (root / "probes.jsonl").unlink()
    (root / "pairs.jsonl").unlink()  # optional
    errs = validate_dataset(root)
    assert [(Path(e.file).name, e.line) for e in errs] == [("probes.jsonl", None)]
    assert "missing" in str(errs[0])
    assert "does not exist" in str(validate_dataset(tmp_path / "nope")[0])


def test_unicode_line_separators_inside_strings_do_not_split_records(tmp_path):
    recs = valid_records()
    recs["facts.jsonl"][3]["content"] = "Trên\u2028hai dòng\x85và\x0cthêm"
    ds = load_dataset(write(tmp_path / "d", recs))
    assert ds.facts_by_id["s2:a"].content == "Trên\u2028hai dòng\x85và\x0cthêm"
    crlf = tmp_path / "crlf"
    write(crlf, valid_records())
    for name in ("facts.jsonl", "probes.jsonl"):
        p = crlf / name
        p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    assert validate_dataset(crlf) == []


def test_byte_order_mark_is_reported(tmp_path):
    root = write(tmp_path / "d", valid_records())
    p = root / "pairs.jsonl"
    p.write_text("\ufeff" + p.read_text(encoding="utf-8"), encoding="utf-8")
    errs = validate_dataset(root)
    assert [(Path(e.file).name, e.line) for e in errs] == [("pairs.jsonl", 1)]


@pytest.mark.parametrize(
    "prefix, fragment", [(b"\xef\xbb\xbf", "byte-order mark"), (b"\x1e", "U+001E")]
)
def test_a_line_opening_with_a_bom_or_record_separator_is_an_error_at_its_line(
    tmp_path, prefix, fragment
):
    """jsonlines would drop either silently; a dataset line is plain JSON."""
    root = write(tmp_path / "d", valid_records())
    p = root / "facts.jsonl"
    lines = p.read_bytes().split(b"\n")
    lines[1] = prefix + lines[1]
    p.write_bytes(b"\n".join(lines))
    err = _at(root, "facts.jsonl", 2)
    assert err.field is None and fragment in str(err) and "facts.jsonl:2" in str(err)


def test_a_bom_opening_a_file_is_one_error_and_the_line_is_still_read(tmp_path):
    root = write(tmp_path / "d", valid_records())
    p = root / "facts.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    errs = validate_dataset(root)
    assert [(Path(e.file).name, e.line) for e in errs] == [("facts.jsonl", 1)]
    assert "byte-order mark" in str(errs[0])


def test_a_null_line_is_not_an_object(tmp_path):
    root = write(tmp_path / "d", valid_records())
    _write_line(root, "probes.jsonl", 0, b"null")
    assert "expected a JSON object, got NoneType" in str(_at(root, "probes.jsonl", 1))


def test_naive_timestamp_is_utc_and_offsets_are_honoured():
    assert parse_timestamp("2026-03-01T09:00:00") == parse_timestamp("2026-03-01T09:00:00Z")
    assert parse_timestamp("2026-03-01T10:00:00+01:00") == parse_timestamp("2026-03-01T09:00:00Z")
    with pytest.raises(ValueError, match="'yesterday'"):
        parse_timestamp("yesterday")


def test_load_pairs_validates_and_keeps_scores(tmp_path):
    p = tmp_path / "pairs.jsonl"
    recs = valid_records()["pairs.jsonl"]
    p.write_text("\n".join(json.dumps(r) for r in recs), encoding="utf-8")
    pairs = load_pairs(p)
    assert [x.label for x in pairs] == ["paraphrase", "distinct"]
    assert pairs[0].is_paraphrase and pairs[1].score == 0.5
    p.write_text(json.dumps(recs[0]) + "\n" + json.dumps({**recs[1], "label": "x"}), "utf-8")
    with pytest.raises(DatasetError, match=r"pairs\.jsonl:2:label"):
        load_pairs(p)


# --- the bundled dataset ----------------------------------------------------------


def test_bundled_dataset_validates_and_meets_every_count(repo_root):
    root = repo_root / "datasets" / "bundled"
    if not (root / "transcripts.jsonl").exists():
        pytest.skip("bundled dataset not generated yet")
    ds = load_dataset(root)  # raises with file:line:field on any problem
    c = compute_counts(ds)
    assert c["scopes"] >= 8
    # >= 80 eligible root transcripts: root, succeeded, >= 1 turn, normal stop
    assert c["eligible_runs"] >= 80
    assert sum(t.eligible and t.is_root for t in ds.transcripts) == c["eligible_runs"]
    status = c["by_status"]
    assert c["ineligible_by_reason"]["child"] >= 1
    assert status.get("failed", 0) >= 1
    assert status.get("aborted", 0) >= 1
    assert status.get("parked", 0) >= 1
    assert c["facts"] >= 150
    assert set(c["facts_by_kind"]) == set(KINDS)
    assert all(len(f.paraphrases) >= 2 for f in ds.facts), [
        f.fact_id for f in ds.facts if len(f.paraphrases) < 2
    ]
    assert c["superseded_or_retracted"] >= 15
    assert c["probes"] >= 250
    assert c["off_topic_probes"] >= 1
    assert all(not p.relevant for p in ds.probes if p.off_topic)
    assert c["pairs"] >= 1 and set(c["pairs_by_label"]) == {"paraphrase", "distinct"}
    # dataset.json states the headline counts (load_dataset compared every stated key)
    assert all(ds.counts.get(k) == c[k] for k in ("scopes", "runs", "facts", "probes", "pairs"))


# --- hostile lines (issue #22): depth, encoding, NaN/Infinity, surrogates -----------------


def _write_line(root: Path, name: str, index: int, raw: bytes) -> None:
    """Replace line `index` (0-based) of a written file with raw bytes."""
    p = root / name
    lines = p.read_bytes().split(b"\n")
    lines[index] = raw
    p.write_bytes(b"\n".join(lines))


def _at(root: Path, name: str, line: int) -> DatasetError:
    """The one error reported at name:line (others may follow from a lost record)."""
    errs = [e for e in validate_dataset(root) if (Path(e.file).name, e.line) == (name, line)]
    assert len(errs) == 1, [str(e) for e in errs]
    return errs[0]


@pytest.mark.parametrize(
    "name, index, raw, fld, fragment",
    [
        ("facts.jsonl", 1, b"[" * 50_000 + b"]" * 50_000, None, "nested deeper"),
        ("facts.jsonl", 1, b'{"x": ' + b"[" * 100 + b"]" * 100 + b"}", "x" + "[0]" * 64, "nested"),
        ("probes.jsonl", 2, '{"query": "caf\xe9"}'.encode("latin-1"), None, "0xe9 at column 15"),
        ("pairs.jsonl", 0, None, "score", "NaN"),
        ("transcripts.jsonl", 0, None, "turns", "Infinity"),
        ("facts.jsonl", 0, None, "content", "lone surrogate"),
        ("facts.jsonl", 0, None, "paraphrases[0]", "lone surrogate"),
        ("probes.jsonl", 0, b'{"n": 1' + b"0" * 5000 + b"}", None, "invalid JSON"),
    ],
    ids=[
        "deep-50000",
        "deep-65",
        "latin-1",
        "nan",
        "infinity",
        "surrogate",
        "surrogate-list",
        "bigint",
    ],
)
def test_hostile_lines_are_dataset_errors_at_file_line_field(
    tmp_path, name, index, raw, fld, fragment
):
    recs = valid_records()
    root = write(tmp_path / "d", recs)
    if raw is None:  # a field of a valid record set to a value JSON text can carry
        rec = recs[name][index]
        text = json.dumps(rec, ensure_ascii=True)
        if fld == "score":
            text = text[:-1] + ', "score": NaN}'
        elif fld == "turns":
            text = text.replace(f'"turns": {rec["turns"]}', '"turns": Infinity')
        else:
            key = fld.split("[")[0]
            text = text.replace(
                f'"{key}": ',
                f'"{key}": ' + ('["\\ud800 x"], "_": ' if "[" in fld else '"\\ud800 x", "_": '),
                1,
            )
        raw = text.encode()
    _write_line(root, name, index, raw)
    err = _at(root, name, index + 1)
    assert (Path(err.file).name, err.line, err.field) == (name, index + 1, fld), str(err)
    assert fragment in str(err)
    with pytest.raises(DatasetError):
        load_dataset(root)


def test_dataset_json_not_utf8_names_the_line(tmp_path):
    root = write(tmp_path / "d", valid_records())
    p = root / "dataset.json"
    p.write_bytes(
        json.dumps(json.loads(p.read_text()), indent=1).replace("name", "n\xe4me").encode("latin-1")
    )
    err = validate_dataset(root)[0]
    assert Path(err.file).name == "dataset.json" and err.line == 2 and "not UTF-8" in str(err)


def test_a_bad_dataset_exits_2_with_one_message_and_no_traceback(tmp_path, capsys):
    from memkit.cli import main

    root = write(tmp_path / "d", valid_records())
    _write_line(root, "facts.jsonl", 1, b"[" * 50_000 + b"]" * 50_000)
    assert (
        main(["eval", "run", "--dataset", str(root), "--quiet", "--out", str(tmp_path / "o")]) == 2
    )
    err = capsys.readouterr().err
    assert "facts.jsonl:2" in err and "nested deeper" in err and "Traceback" not in err


def test_nesting_bound_at_and_past():
    from evals.datasets import MAX_DEPTH, parse_json_line

    at = b'{"x": ' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}"
    assert parse_json_line(at, "f.jsonl", 1)["x"] is not None
    past = b'{"x": ' + b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1) + b"}"
    with pytest.raises(DatasetError, match=r"f\.jsonl:3:x"):
        parse_json_line(past, "f.jsonl", 3)


@pytest.mark.parametrize("path", [None, 5, b"datasets", ""])
def test_a_path_that_is_not_a_path_is_refused(path):
    from memkit.errors import ConfigError

    for load in (load_dataset, validate_dataset, load_pairs):
        with pytest.raises(ConfigError, match="dataset path"):
            load(path)
