"""Public-benchmark adapters: mapping rules on tiny crafted files, counts on the real data."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from evals.adapters import (
    MSC_SESSION3_START,
    load_locomo,
    load_longmemeval,
    load_mrpc,
    load_msc,
    load_paws,
    load_stsb,
    pairs_frame,
)
from evals.adapters.locomo import CATEGORIES
from evals.datasets import check_dataset, parse_timestamp
from memkit.errors import ConfigError, DatasetError

TAU_CALL = {"id": "c1", "type": "function", "function": {"name": "get_user", "arguments": "{}"}}
TAU_TRAJECTORY = [
    {"role": "system", "content": "policy"},
    {"role": "user", "content": "Hi, I am mia_li."},
    {"role": "assistant", "content": None, "tool_calls": [TAU_CALL]},
    {"role": "tool", "tool_call_id": "c1", "name": "get_user", "content": '{"name": "Mia"}'},
    {"role": "assistant", "content": "Hello Mia."},
]
"""A small τ-bench trajectory with one tool call (the agent adapters' fixture)."""

# --- LoCoMo -----------------------------------------------------------------------


def _locomo_conv() -> dict:
    return {
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_2_date_time": "9:05 am on 3 June, 2023",
            "session_2": [
                {"speaker": "Bo", "dia_id": "D2:1", "text": "I moved to Oslo."},
                {"speaker": "Ann", "dia_id": "D2:2", "text": "Wow!"},
            ],
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bo."},
                {
                    "speaker": "Bo",
                    "dia_id": "D1:2",
                    "text": "Look at my dog.",
                    "img_url": ["http://x"],
                    "blip_caption": "a photo of a dog",
                },
            ],
        },
        "observation": {
            "session_1_observation": {"Bo": [["Bo has a dog.", "D1:2"]], "Ann": []},
            "session_2_observation": {"Bo": [["Bo moved to Oslo.", ["D2:1", "D2:2"]]]},
        },
        "qa": [
            {
                "question": "Where does Bo live?",
                "answer": "Oslo",
                "evidence": ["D2:1"],
                "category": 4,
            },
            {
                "question": "What pet does Bo have, and where?",
                "answer": 2,
                "evidence": ["D1:2; D2:1", "D:9:9"],
                "category": 1,
            },
            {
                "question": "What would Bo's dog like?",
                "answer": "a walk",
                "category": 3,
            },
            {
                "question": "What is Ann's cat called?",
                "adversarial_answer": "Tom",
                "evidence": ["D1:1"],
                "category": 5,
            },
        ],
    }


def test_locomo_mapping(tmp_path):
    f = tmp_path / "locomo10.json"
    f.write_text(json.dumps([_locomo_conv()]), encoding="utf-8")
    ds = load_locomo(tmp_path)
    assert ds.license == "CC BY-NC 4.0" and ds.version.startswith("sha256:")
    runs = ds.transcripts_by_scope()["locomo:conv-1"]
    assert [r.run_id for r in runs] == ["locomo:conv-1:session_1", "locomo:conv-1:session_2"]
    s1 = runs[0]
    assert s1.started_ts == parse_timestamp("2023-05-08T13:56:00+00:00")
    assert [m["role"] for m in s1.messages] == ["user", "assistant"]
    assert s1.messages[1]["content"] == "Look at my dog. [shares a photo: a photo of a dog]"
    assert s1.messages[1]["name"] == "Bo" and s1.meta["dia_ids"] == ("D1:1", "D1:2")
    assert s1.eligible and s1.turns == 1 and s1.task == "Hi Bo."
    dog, oslo = ds.facts
    assert (dog.kind, dog.established_in, dog.meta["dia_ids"]) == (
        "fact",
        ("locomo:conv-1:session_1",),
        ("D1:2",),
    )
    assert oslo.meta["dia_ids"] == ("D2:1", "D2:2")
    where, both, blank, adversarial = ds.probes
    # an answer without evidence: undefined (its own category), never off-topic
    assert blank.relevant == () and blank.meta["undefined"] == "no_evidence"
    assert ds.info["no_evidence_probes"] == 1 and not blank.meta["unmapped"]
    assert "undefined" not in where.meta and "undefined" not in both.meta
    assert where.after_run == "locomo:conv-1:session_2"
    assert where.relevant == (oslo.fact_id,)
    assert both.relevant == (dog.fact_id, oslo.fact_id)  # "D1:2; D2:1" split, order kept
    assert both.meta["evidence"] == ("D1:2", "D2:1", "D9:9")
    assert both.meta["unmatched_evidence"] == ("D9:9",) and both.meta["answer"] == "2"
    assert adversarial.relevant == () and adversarial.meta["adversarial"]
    assert adversarial.meta["answer"] == "Tom" and adversarial.meta["unmapped"]
    assert check_dataset(ds) == []
    assert load_locomo(f, limit=0).transcripts == ()
    assert load_locomo(f).fingerprint() == ds.fingerprint()
    assert json.loads(json.dumps(ds.counts))["probes"] == 4
    assert len(ds.to_frames()["facts"]) == 2


def test_locomo_bad_date_names_record_and_field(tmp_path):
    conv = _locomo_conv()
    conv["conversation"]["session_2_date_time"] = "someday"
    (tmp_path / "locomo10.json").write_text(json.dumps([conv, conv]), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"locomo10\.json:1:conversation\.session_2_date_time"):
        load_locomo(tmp_path)


def test_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match=r"locomo10\.json"):
        load_locomo(tmp_path)


# --- LongMemEval ----------------------------------------------------------------------


def _turn(role: str, content: str, ans: bool = False) -> dict:
    return {"role": role, "content": content, "has_answer": ans}


def _lme(qid: str, qtype: str, sessions: list[tuple[str, str, list]], answer="x") -> dict:
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": f"question {qid}?",
        "answer": answer,
        "question_date": "2023/12/20 (Wed) 22:41",
        "haystack_session_ids": [s[0] for s in sessions],
        "haystack_dates": [s[1] for s in sessions],
        "haystack_sessions": [s[2] for s in sessions],
        "answer_session_ids": [s[0] for s in sessions],
    }


def _write_parts(root: Path, parts: list[list[dict]]) -> None:
    n = len(parts)
    for k, part in enumerate(parts, start=1):
        (root / f"longmemeval_oracle.part{k}of{n}.json").write_text(json.dumps(part), "utf-8")


KU = _lme(
    "ku1",
    "knowledge-update",
    [
        (
            "later",
            "2023/11/30 (Thu) 20:25",
            [_turn("user", "Now 25 postcards.", True), _turn("assistant", "Great!")],
        ),
        (
            "early",
            "2023/08/11 (Fri) 20:17",
            [_turn("user", "I have 17 postcards.", True), _turn("assistant", "Nice.")],
        ),
    ],
    answer=25,
)
PREF = _lme(
    "pref1",
    "single-session-preference",
    [
        (
            "s",
            "2023/05/21 (Sun) 11:54",
            [_turn("user", "I prefer aisle seats.", True), _turn("assistant", "Noted.")],
        )
    ],
)
ONE_SESSION_KU = _lme(
    "ku2",
    "knowledge-update",
    [
        (
            "only",
            "2023/05/21 (Sun) 11:54",
            [
                _turn("user", "I had 3 cats.", True),
                _turn("user", "Now I have 4 cats.", True),
                _turn("assistant", "ok"),
            ],
        )
    ],
)


def test_longmemeval_parts_join_in_part_order_and_write_the_whole_haystack(tmp_path):
    _write_parts(tmp_path, [[PREF], [KU, ONE_SESSION_KU]])
    ds = load_longmemeval(tmp_path)
    assert [p.probe_id for p in ds.probes] == ["lme:pref1:q", "lme:ku1:q", "lme:ku2:q"]
    assert ds.name == "longmemeval-oracle" and ds.license == "MIT"
    # every turn is a fact, answer turn or not, established in its session
    assert len(ds.facts) == sum(len(t.messages) for t in ds.transcripts) == 9
    pref = ds.facts_by_id["lme:pref1:s:0"]
    assert pref.kind == "fact" and pref.content == "I prefer aisle seats."
    assert pref.meta["has_answer"] and not ds.facts_by_id["lme:pref1:s:1"].meta["has_answer"]
    assert ds.facts_by_id["lme:pref1:s:1"].meta["role"] == "assistant"
    # knowledge update: both answer turns stay relevant, as the authors score them
    early, later = ds.facts_by_id["lme:ku1:early:0"], ds.facts_by_id["lme:ku1:later:0"]
    assert early.superseded_by is None and later.superseded_by is None
    ku = ds.probes[1]
    assert ku.after_run == "lme:ku1:later"  # the latest session, not the last listed
    assert set(ku.relevant) == {early.fact_id, later.fact_id} and ku.distractors == ()
    assert ku.meta["answer"] == "25" and ku.meta["group"] == "knowledge-update"
    assert ku.meta["rank_all"] and "undefined" not in ku.meta
    assert len(ds.probes[2].relevant) == 2
    runs = ds.transcripts_by_scope()["lme:ku1"]
    assert [r.run_id for r in runs] == ["lme:ku1:early", "lme:ku1:later"]
    assert runs[0].messages[0] == {"role": "user", "content": "I have 17 postcards."}
    assert check_dataset(ds) == []
    assert [p.probe_id for p in load_longmemeval(tmp_path, limit=2).probes] == [
        "lme:pref1:q",
        "lme:ku1:q",
    ]
    abstain = json.loads(json.dumps(PREF))
    abstain["question_id"] = "pref1_abs"
    (tmp_path / "longmemeval_s_abs.json").write_text(json.dumps([abstain]), "utf-8")
    (probe,) = load_longmemeval(tmp_path / "longmemeval_s_abs.json", variant="s").probes
    assert probe.meta["undefined"] == "abstention" and probe.meta["abstention"]


def test_longmemeval_missing_part_and_bad_variant(tmp_path):
    _write_parts(tmp_path, [[PREF], [KU], [ONE_SESSION_KU]])
    (tmp_path / "longmemeval_oracle.part2of3.json").unlink()
    with pytest.raises(DatasetError, match=r"part1\.\.part3of3"):
        load_longmemeval(tmp_path)
    with pytest.raises(ConfigError, match="'m'"):
        load_longmemeval(tmp_path, variant="m")


def test_longmemeval_bad_date_names_question_and_field(tmp_path):
    bad = json.loads(json.dumps(PREF))
    bad["haystack_dates"] = ["21 May"]
    (tmp_path / "longmemeval_s_x.json").write_text(json.dumps([KU, bad]), "utf-8")
    with pytest.raises(DatasetError, match=r"longmemeval_s_x\.json:2:haystack_dates\[0\]"):
        load_longmemeval(tmp_path, variant="s")


# --- MSC ---------------------------------------------------------------------------


def _msc_episode() -> dict:
    return {
        "personas": [
            ["I own a Jeep.", "I enjoy exercising at the gym."],
            ["I go on runs. I may join the gym. I might get a treadmill.", "I am from Alaska."],
        ],
        "dialog": [
            {"text": "Did you check out the gym?", "id": "Speaker 1"},
            {"text": "Yes.", "id": "Speaker 2"},
        ],
        "metadata": {"initial_data_id": "test_0", "session_id": 2},
        "previous_dialogs": [
            {
                "personas": [
                    ["I own a Jeep.", "I enjoy exercising at the gym."],
                    ["I am from Alaska."],
                ],
                "dialog": [{"text": "What car do you own?"}, {"text": "None, I walk."}],
                "time_num": 1,
                "time_unit": "hour",
                "time_back": "5 days 1 hour ago",
            },
            {
                "personas": [
                    ["I like to go to the gym."],
                    [
                        "I go on runs. I may join the gym.",
                        "I might get a treadmill.",
                        "My sister is a nurse.",
                    ],
                ],
                "dialog": [{"text": "Did you run today?"}, {"text": "Yes!"}],
                "time_num": 5,
                "time_unit": "days",
                "time_back": "5 days ago",
            },
        ],
    }


def test_msc_sessions_personas_and_fold_in_gold(tmp_path):
    f = tmp_path / "msc_dialogue_session_3_test.jsonl"
    f.write_text(json.dumps(_msc_episode()) + "\n", encoding="utf-8")
    ds = load_msc(tmp_path)
    runs = ds.transcripts_by_scope()["msc:test_0"]
    base = datetime.fromisoformat(MSC_SESSION3_START).timestamp()
    assert [r.run_id for r in runs] == ["msc:test_0:s1", "msc:test_0:s2", "msc:test_0:s3"]
    assert [r.started_ts for r in runs] == [base - 5 * 86400 - 3600, base - 5 * 86400, base]
    assert [m["role"] for m in runs[0].messages] == ["user", "assistant"]
    groups = ds.fold_groups()
    sid = "msc:test_0:s"
    assert groups["msc:test_0:merged:p2:0"] == [f"{sid}2:p2:0", f"{sid}2:p2:1"]
    # the s1 gym line *is* merged line p1:1 (same text): normalised into it, established
    # in s1; the s2 line "I like to go to the gym." restates a live fact: a paraphrase
    gym = ds.facts_by_id["msc:test_0:merged:p1:1"]
    assert "msc:test_0:merged:p1:1" not in groups
    assert gym.established_in == ("msc:test_0:s1", "msc:test_0:s2")
    assert gym.paraphrases == ("I like to go to the gym.",)
    assert gym.meta["normalised"] == (f"{sid}1:p1:1", f"{sid}2:p1:0")
    assert gym.meta["folded_from"] == (f"{sid}1:p1:1", f"{sid}2:p1:0")
    assert f"{sid}1:p1:1" not in ds.facts_by_id and f"{sid}2:p1:0" not in ds.facts_by_id
    alaska = ds.facts_by_id["msc:test_0:merged:p2:1"]  # unchanged line: one fact, from s1
    assert "msc:test_0:merged:p2:1" not in groups and alaska.established_in[0].endswith("s1")
    assert ds.info["normalised"] == 4  # Jeep, gym (said, then restated), Alaska
    assert ds.facts_by_id[f"{sid}2:p2:1"].meta["fold_group"] == "msc:test_0:merged:p2:0"
    labels = {(p.a, p.b): p.label for p in ds.pairs}
    assert labels[("I like to go to the gym.", "I enjoy exercising at the gym.")] == "paraphrase"
    assert [lab for (a, _), lab in labels.items() if a == "My sister is a nurse."] == ["distinct"]
    sister = ds.facts_by_id[f"{sid}2:p2:2"]
    assert sister.superseded_by is None  # the merged list dropped it: it folds nowhere
    merged = ds.facts_by_id["msc:test_0:merged:p2:0"]
    assert merged.established_in == ("msc:test_0:s2",) and merged.meta["merged"]
    assert merged.meta["folded_from"] == (f"{sid}2:p2:0", f"{sid}2:p2:1")
    assert ds.facts_by_id["msc:test_0:merged:p1:0"].kind == "fact"  # "I own a Jeep."
    assert ds.probes == () and check_dataset(ds) == []


def test_msc_bad_gap_names_line_and_field(tmp_path):
    ep = _msc_episode()
    ep["previous_dialogs"][1]["time_back"] = "a while ago"
    f = tmp_path / "msc_dialogue_session_3_test.jsonl"
    f.write_text(json.dumps(_msc_episode()) + "\n" + json.dumps(ep) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"\.jsonl:2:previous_dialogs\[1\]\.time_back"):
        load_msc(f)
    assert len(load_msc(f, limit=1).transcripts) == 3


# --- pairs -----------------------------------------------------------------------------


def test_paws_keeps_quotes_and_labels(tmp_path):
    f = tmp_path / "paws_wiki_labeled_final_test.tsv"
    f.write_text(
        'id\tsentence1\tsentence2\tlabel\n1\tHe said "go .\tHe said go .\t1\n2\tA B .\tB A .\t0\n',
        encoding="utf-8",
    )
    pairs = load_paws(tmp_path)
    assert [(p.a, p.label, p.source) for p in pairs] == [
        ('He said "go .', "paraphrase", "paws"),
        ("A B .", "distinct", "paws"),
    ]
    assert load_paws(f, limit=1) == pairs[:1]
    f.write_text("id\tsentence1\tsentence2\tlabel\n1\ta\tb\t1\n2\ta\tb\tyes\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"\.tsv:3:label: expected 0 or 1, got 'yes'"):
        load_paws(f)


def test_mrpc_reads_through_the_bom(tmp_path):
    f = tmp_path / "msr_paraphrase_test.txt"
    head = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    f.write_text("\ufeff" + head + "0\t1\t2\tIt's 5.\tIt is 6.\n", encoding="utf-8")
    (pair,) = load_mrpc(tmp_path)
    assert (pair.a, pair.b, pair.label, pair.source) == ("It's 5.", "It is 6.", "distinct", "mrpc")


def _stsb_file(tmp_path: Path, scores: list[str]) -> Path:
    f = tmp_path / "sts-b_glue_dev.tsv"
    head = (
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    )
    rows = "".join(f"{i}\tg\tf\ty\t0\tn\tn\ta{i}\tb{i}\t{s}\n" for i, s in enumerate(scores))
    f.write_text(head + rows, encoding="utf-8")
    return f


def test_stsb_cut_offs_at_and_past_each_bound(tmp_path):
    f = _stsb_file(tmp_path, ["4.000", "3.999", "1.000", "1.001", "5.0", "0"])
    pairs = load_stsb(f)
    assert [(p.a, p.label, p.score) for p in pairs] == [
        ("a0", "paraphrase", 4.0),
        ("a2", "distinct", 1.0),
        ("a4", "paraphrase", 5.0),
        ("a5", "distinct", 0.0),
    ]
    assert [p.a for p in load_stsb(f, paraphrase_at=3.999, distinct_at=1.001)] == [
        "a0",
        "a1",
        "a2",
        "a3",
        "a4",
        "a5",
    ]
    with pytest.raises(ConfigError, match=r"distinct_at 4\.0"):
        load_stsb(f, paraphrase_at=4.0, distinct_at=4.0)
    frame = pairs_frame(pairs)
    assert list(frame.columns) == ["a", "b", "label", "source", "score"] and len(frame) == 4


def test_stsb_bad_score_names_line(tmp_path):
    f = _stsb_file(tmp_path, ["4.0", "high"])
    with pytest.raises(DatasetError, match=r"\.tsv:3:score"):
        load_stsb(f)


# --- the real public data (skips cleanly when absent) -------------------------------------


def _assert_probes_resolve(ds) -> None:
    facts = ds.facts_by_id
    for p in ds.probes:
        assert all(facts[f].scope_id == p.scope_id for f in p.relevant + p.distractors)
    assert check_dataset(ds) == []


def test_locomo_real(shared_datasets):
    ds = load_locomo(shared_datasets)
    assert len(ds.scopes) == 10
    assert ds.counts["runs"] == 272 and ds.counts["eligible_runs"] == 272
    assert ds.counts["probes"] == 1986
    # 2,541 observations; 8 repeat another of the same speaker and are merged into it
    assert ds.counts["facts"] == 2541 - 8 and ds.info["normalised"] == 8
    undefined = Counter(p.meta.get("undefined") for p in ds.probes if p.meta.get("undefined"))
    assert undefined["unmapped"] == 307 == ds.info["unmapped_probes"]
    # #32 finding 5: four answerable open-domain questions cite no evidence; they drove
    # offtopic_silence to 0.000 (n=4) as off-topic probes, now they are undefined
    assert undefined["no_evidence"] == 4 == ds.info["no_evidence_probes"]
    blank = [p for p in ds.probes if p.meta.get("undefined") == "no_evidence"]
    assert all(p.meta["group"] == "3 open-domain" and p.meta["answer"] for p in blank)
    offtopic = [p for p in ds.probes if not p.relevant and not p.meta.get("undefined")]
    assert all(p.meta.get("apart") for p in offtopic)  # none left outside the adversarial
    counts = {g: sum(p.meta["group"] == g for p in ds.probes) for g in CATEGORIES.values()}
    assert list(counts.values()) == [282, 321, 96, 841, 446]
    assert all(bool(p.meta.get("apart")) == (p.meta["category"] == 5) for p in ds.probes)
    assert sum(p.is_paraphrase for p in ds.pairs) == 8 and len(ds.pairs) > 8
    assert sum(len(t.messages) for t in ds.transcripts) == 5882
    assert sum(p.meta["category"] == 5 for p in ds.probes) == 446
    _assert_probes_resolve(ds)
    assert len(load_locomo(shared_datasets, limit=2).scopes) == 2


def test_longmemeval_oracle_real(shared_datasets):
    ds = load_longmemeval(shared_datasets / "longmemeval")
    assert ds.counts["probes"] == 500 and len({p.probe_id for p in ds.probes}) == 500
    assert ds.counts["runs"] == 948 and ds.counts["messages"] == 10960
    assert ds.counts["facts"] == 10960  # the whole haystack, one fact per turn
    assert sum(f.meta["has_answer"] for f in ds.facts) == 896
    ku = [p for p in ds.probes if p.meta["question_type"] == "knowledge-update"]
    assert len(ku) == 78 and ds.counts["superseded"] == 0
    assert sum(p.meta["abstention"] for p in ds.probes) == 30
    assert sum(p.meta.get("undefined") == "abstention" for p in ds.probes) == 30
    _assert_probes_resolve(ds)


def test_longmemeval_s_real(shared_datasets):
    ds = load_longmemeval(shared_datasets, variant="s")
    assert ds.counts["probes"] == 6 and ds.counts["runs"] > 6 * 40
    _assert_probes_resolve(ds)


def test_msc_real(shared_datasets):
    ds = load_msc(shared_datasets)
    assert len(ds.scopes) == 501 and ds.counts["runs"] == 3 * 501
    merged = [f for f in ds.facts if f.meta.get("merged")]
    assert len(merged) == 5230  # 5,231 merged lines, one of them blank
    # 8,485 per-session lines: 3,428 are their merged line or restate it (normalised
    # away), 4,774 are superseded by the merged line they fold into, 283 fold nowhere
    assert ds.info["normalised"] == 3428
    assert len(ds.facts) - len(merged) == 5057 and ds.counts["superseded"] == 4774
    assert sum(len(f.paraphrases) for f in merged) == 170
    assert len(ds.info["ambiguous_text"]) == 80
    assert len(ds.pairs) == 10161 and sum(p.is_paraphrase for p in ds.pairs) == 4944
    assert check_dataset(ds) == []


def test_pairs_real(shared_datasets):
    paws = load_paws(shared_datasets)
    mrpc = load_mrpc(shared_datasets)
    stsb = load_stsb(shared_datasets)
    assert len(paws) == 8000 and sum(p.is_paraphrase for p in paws) == 3536
    assert len(mrpc) == 1725 and sum(p.is_paraphrase for p in mrpc) == 1147
    assert not mrpc[0].a.startswith("\ufeff")
    # STS-B cut-offs: >= 4.0 paraphrase (264), <= 1.0 distinct (389), 847 in between dropped
    assert len(stsb) == 653 and sum(p.is_paraphrase for p in stsb) == 264
    assert all(p.score >= 4.0 if p.is_paraphrase else p.score <= 1.0 for p in stsb)


@pytest.mark.parametrize(
    "module", ["locomo", "longmemeval", "msc", "pairs", "swe_agent", "tau_bench"]
)
def test_each_adapter_module_states_its_mapping_and_what_it_leaves_out(module):
    """Issue #18 item 6: one module per source under evals/adapters/, each opening with
    a docstring that states its mapping and what it leaves out."""
    import importlib

    doc = importlib.import_module(f"evals.adapters.{module}").__doc__ or ""
    assert re.search(r"\bmapping\b", doc, re.I), module
    assert re.search(r"\bleft out\b|\bleaves out\b", doc, re.I), module


def test_msc_supersedes_are_many_to_one_and_written_after_their_sources(tmp_path):
    """Issue #18 item 3: a merged persona line supersedes every session line folded into
    it (was: one predecessor kept), and within its session it is written after them
    (was: fact-id order wrote `merged:` before its own `s2:` sources)."""
    from evals.replay import predecessors_of, writes_by_run

    f = tmp_path / "msc_dialogue_session_3_test.jsonl"
    f.write_text(json.dumps(_msc_episode()) + "\n", encoding="utf-8")
    ds = load_msc(tmp_path)
    sid, merged = "msc:test_0:s", "msc:test_0:merged:p2:0"
    sources = [f"{sid}2:p2:0", f"{sid}2:p2:1"]
    assert sorted(predecessors_of(ds.facts)[merged]) == sources
    s2 = writes_by_run(ds.facts)["msc:test_0:s2"]
    assert merged < min(sources)  # by id alone it would come first
    assert all(s2.index(s) < s2.index(merged) for s in sources)
