"""Hostile source files for every adapter (issue #22): bytes that are not UTF-8,
nesting too deep, NaN/Infinity and lone surrogates are DatasetErrors naming
file:line[:field], never tracebacks."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_adapters import TAU_TRAJECTORY as _TRAJ
from test_adapters import _locomo_conv, _msc_episode

from evals.adapters import load_locomo, load_msc, load_paws, load_stsb
from memkit.errors import ConfigError, DatasetError

DEEP = b"[" * 50_000 + b"]" * 50_000
MSC = "msc_dialogue_session_3_test.jsonl"


def _msc(tmp_path: Path, second: bytes) -> Path:
    f = tmp_path / MSC
    f.write_bytes(json.dumps(_msc_episode()).encode() + b"\n" + second + b"\n")
    return f


@pytest.mark.parametrize(
    "second, where",
    [
        (json.dumps(_msc_episode()).encode().replace(b"gym", b"g\xffm", 1), r":2: not UTF-8"),
        (DEEP, r":2: nested deeper"),
        (b'{"x": NaN}', r":2:x: NaN"),
        (b'{"dialog": "\\ud800"}', r":2:dialog: not UTF-8"),
    ],
    ids=["latin", "deep", "nan", "surrogate"],
)
def test_msc_hostile_lines(tmp_path, second, where):
    f = _msc(tmp_path, second)
    with pytest.raises(DatasetError, match=rf"\.jsonl{where}"):
        load_msc(f)
    assert len(load_msc(f, limit=1).transcripts) == 3  # the good line still loads


@pytest.mark.parametrize(
    "text, where",
    [
        (
            b'[{"sample_id": "c", "x": ' + b"[" * 100 + b"]" * 100 + b"}]",
            r"\.json:\[0\]\.x\[0\].*: nested deeper",
        ),
        (b"[\n" + b"[" * 50_000 + b"]" * 50_000 + b"\n]", r"\.json: nested deeper"),
        (b'[\n{"sample_id": "c\xe9"}\n]', r"\.json:2: not UTF-8"),
        (b'[{"sample_id": Infinity}]', r"\.json:\[0\]\.sample_id: Infinity"),
    ],
    ids=["deep-field", "deep", "latin", "infinity"],
)
def test_locomo_hostile_documents(tmp_path, text, where):
    f = tmp_path / "locomo10.json"
    f.write_bytes(text)
    with pytest.raises(DatasetError, match=where):
        load_locomo(f)


def test_locomo_still_loads(tmp_path):
    f = tmp_path / "locomo10.json"
    f.write_text(json.dumps([_locomo_conv()]), encoding="utf-8")
    assert load_locomo(f).transcripts


def test_tsv_not_utf8_names_the_line(tmp_path):
    f = tmp_path / "paws_wiki_labeled_final_test.tsv"
    f.write_bytes(b"id\tsentence1\tsentence2\tlabel\n1\ta\tb\t1\n2\tcaf\xe9\tb\t0\n")
    with pytest.raises(DatasetError, match=r"\.tsv:3: not utf-8"):
        load_paws(f)


@pytest.mark.parametrize("score", ["nan", "NaN", "inf", "-Infinity"])
def test_stsb_non_finite_score_is_refused(tmp_path, score):
    f = tmp_path / "sts-b_glue_dev.tsv"
    head = (
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    )
    f.write_text(head + f"0\tg\tf\ty\t0\tn\tn\ta\tb\t{score}\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"\.tsv:2:score: not a finite number"):
        load_stsb(f)


@pytest.mark.parametrize("limit", ["5", 2.5, -1, True])
def test_an_adapter_limit_is_checked_before_work(tmp_path, limit):
    from evals.adapters import load_longmemeval, load_mrpc, load_swe_agent, load_tau_bench

    loaders = (load_locomo, load_longmemeval, load_msc, load_paws, load_mrpc, load_stsb)
    for load in (*loaders, load_swe_agent, load_tau_bench):
        with pytest.raises(ConfigError, match="limit"):
            load(tmp_path, limit=limit)


# --- wrong types anywhere in a record: every adapter, every field ---------------------

WRONG = (5, None, "x", [], {}, True, 2.5, [5], ["x"], [{}])
"""What a mistyped source may carry where anything else belongs."""


def _valid_records() -> dict[str, tuple[str, object, dict]]:
    """Per adapter: its file name, how a record is written, one valid record."""
    from test_adapters import _lme, _turn

    swe = [dict(m) for m in _TRAJ]
    swe[3] = {"role": "tool", "tool_call_ids": ["c1"], "content": "ok", "agent": "main"}
    session = [_turn("user", "I like green tea.", True), _turn("assistant", "Noted.")]
    return {
        "locomo": ("locomo10.json", lambda r: json.dumps([r]), _locomo_conv()),
        "msc": (MSC, json.dumps, _msc_episode()),
        "longmemeval": (
            "longmemeval_oracle.json",
            lambda r: json.dumps([r]),
            _lme("q1", "single-session-user", [("s1", "2023/05/20 (Sat) 02:21", session)]),
        ),
        "tau_bench": (
            "gpt-4o-airline.json",
            lambda r: json.dumps([r]),
            {
                "task_id": 1,
                "trial": 0,
                "reward": 1.0,
                "info": {"task": {"user_id": "mia"}},
                "traj": _TRAJ,
            },
        ),
        "swe_agent": ("a.traj", json.dumps, {"history": swe}),
    }


def _paths(value, at=()):
    """Every place in a record: the record, each field, the first items of each list."""
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield from _paths(v, (*at, i))


def _with(record, at, value):
    if not at:
        return value
    out = copy.deepcopy(record)
    inner = out
    for k in at[:-1]:
        inner = inner[k]
    inner[at[-1]] = value
    return out


# What each adapter reads, and the JSON types it documents for it, written here from the
# sources' published shapes (not from the adapters' code): a path regex (indices as
# [n]) -> the kinds that fit. S string, I integer, N number, B boolean, L list,
# O object, Z null. A path matching none is a field the adapter does not read.
_SESSION = r"conversation\.session_\d+"
_OBS = r"observation\.session_\d+_observation"
_CHAT = {  # OpenAI-format messages (tau-bench traj, SWE-agent history)
    r"\[\d+\]": "O",
    r"\[\d+\]\.role": "S",
    r"\[\d+\]\.content": "SZL",
    r"\[\d+\]\.content\[\d+\]": "O",
    r"\[\d+\]\.content\[\d+\]\.text": "S",
    r"\[\d+\]\.name": "S",
    r"\[\d+\]\.tool_calls": "LZ",
    r"\[\d+\]\.tool_calls\[\d+\]": "O",
    r"\[\d+\]\.tool_calls\[\d+\]\.(id|type)": "S",
    r"\[\d+\]\.tool_calls\[\d+\]\.function": "O",
    r"\[\d+\]\.tool_calls\[\d+\]\.function\.(name|arguments)": "S",
}
SCHEMA = {
    "locomo": {
        "": "O",
        "sample_id": "S",
        "conversation": "O",
        r"conversation\.speaker_[ab]": "S",
        rf"{_SESSION}_date_time": "S",
        _SESSION: "L",
        rf"{_SESSION}\[\d+\]": "O",
        rf"{_SESSION}\[\d+\]\.(speaker|dia_id|text|blip_caption)": "S",
        "observation": "O",
        _OBS: "O",
        rf"{_OBS}\.\w+": "L",
        rf"{_OBS}\.\w+\[\d+\]": "L",
        rf"{_OBS}\.\w+\[\d+\]\[0\]": "S",
        rf"{_OBS}\.\w+\[\d+\]\[1\]": "SL",
        rf"{_OBS}\.\w+\[\d+\]\[1\]\[\d+\]": "S",
        "qa": "L",
        r"qa\[\d+\]": "O",
        r"qa\[\d+\]\.question": "S",
        r"qa\[\d+\]\.(answer|adversarial_answer)": "SN",
        r"qa\[\d+\]\.evidence": "SL",
        r"qa\[\d+\]\.evidence\[\d+\]": "S",
        r"qa\[\d+\]\.category": "I",
    },
    "msc": {
        "": "O",
        "metadata": "O",
        r"metadata\.initial_data_id": "S",
        r"(previous_dialogs\[\d+\]\.)?personas": "L",
        r"(previous_dialogs\[\d+\]\.)?personas\[\d+\]": "L",
        r"(previous_dialogs\[\d+\]\.)?personas\[\d+\]\[\d+\]": "S",
        r"(previous_dialogs\[\d+\]\.)?dialog": "L",
        r"(previous_dialogs\[\d+\]\.)?dialog\[\d+\]": "O",
        r"(previous_dialogs\[\d+\]\.)?dialog\[\d+\]\.(text|id)": "S",
        "previous_dialogs": "L",
        r"previous_dialogs\[\d+\]": "O",
        r"previous_dialogs\[\d+\]\.time_back": "S",
    },
    "longmemeval": {
        "": "O",
        "question_(id|type|date)|question": "S",
        "answer": "SN",
        "(haystack_session_ids|haystack_dates|answer_session_ids)": "L",
        r"(haystack_session_ids|haystack_dates|answer_session_ids)\[\d+\]": "S",
        "haystack_sessions": "L",
        r"haystack_sessions\[\d+\]": "L",
        r"haystack_sessions\[\d+\]\[\d+\]": "O",
        r"haystack_sessions\[\d+\]\[\d+\]\.(role|content)": "S",
        r"haystack_sessions\[\d+\]\[\d+\]\.has_answer": "B",
    },
    "tau_bench": {
        "": "O",
        "task_id|trial": "I",
        "reward": "N",
        "info": "O",
        r"info\.task": "O",
        r"info\.task\.user_id": "S",
        "traj": "L",
        r"traj\[\d+\]\.tool_call_id": "S",
        **{f"traj{k}": v for k, v in _CHAT.items()},
    },
    "swe_agent": {
        "": "O",
        "history": "L",
        r"history\[\d+\]\.tool_call_ids": "LS",
        r"history\[\d+\]\.tool_call_ids\[\d+\]": "S",
        **{f"history{k}": v for k, v in _CHAT.items()},
    },
}


def _kinds(adapter: str, path: str) -> str | None:
    """The kinds that fit at path, or None when the adapter does not read it."""
    for pattern, kinds in SCHEMA[adapter].items():
        if re.fullmatch(pattern, path):
            return kinds
    return None


def _fits(value, kinds: str) -> bool:
    if isinstance(value, bool):
        return "B" in kinds
    if isinstance(value, int):
        return "I" in kinds or "N" in kinds
    kind = {str: "S", float: "N", list: "L", dict: "O", type(None): "Z"}[type(value)]
    return kind in kinds


def _misfit(adapter: str, path: str, value) -> str | None:
    """The first place in value (at path) whose type the adapter's source does not
    document, or None when every field it reads fits."""
    kinds = _kinds(adapter, path)
    if kinds is None:
        return None
    if not _fits(value, kinds):
        return path
    inner = (
        ((f"{path}[{i}]", v) for i, v in enumerate(value))
        if isinstance(value, list)
        else ((f"{path}.{k}" if path else k, v) for k, v in value.items())
        if isinstance(value, dict)
        else ()
    )
    return next((bad for p, v in inner if (bad := _misfit(adapter, p, v))), None)


def _name(at: tuple) -> str:
    """A mutation's path as the adapters name fields: `qa[1].answer`."""
    out = ""
    for k in at:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else k)
    return out


@pytest.mark.parametrize("adapter", ["locomo", "msc", "longmemeval", "tau_bench", "swe_agent"])
def test_a_wrong_type_anywhere_is_a_dataset_error_naming_the_field(tmp_path, adapter):
    """Each field of a valid record replaced by each WRONG value (1,760 cases). A value
    whose type (or a type inside it) the source does not document where the adapter
    reads it is refused with a DatasetError at file:record:field, the field being the
    one replaced or one inside it; never loaded as data (a number as message text).
    A field the adapter does not read loads. A value of a fitting type (another
    string, an empty list) may load or be refused for what it says, not traceback.

    Before the adapters checked each field they read, 369 of these escaped as
    TypeError & co. (a traceback); then a net named file and record only, and 771
    loaded, most with the wrong value kept as data."""
    from evals.runner import load_any

    name, write, record = _valid_records()[adapter]
    f = tmp_path / name
    f.write_text(write(record), encoding="utf-8")
    assert load_any(f"{adapter}:{f}").transcripts  # the valid record loads
    counts = dict.fromkeys(("bad refused", "fits refused", "fits loaded", "unread loaded"), 0)
    for at in list(_paths(record)):
        path = _name(at)
        for value in WRONG:
            f.write_text(write(_with(record, at, value)), encoding="utf-8")
            bad = _misfit(adapter, path, value)
            unread = _kinds(adapter, path) is None
            try:
                load_any(f"{adapter}:{f}")
            except DatasetError as e:
                assert str(e).startswith(f"{f}:1"), (at, value, str(e))
                assert not unread, (path, value, str(e))
                if bad is not None:
                    got = type(_at(value, bad[len(path) :])).__name__
                    assert (e.field or "") == bad and f"got {got}" in str(e), (path, value, str(e))
                    counts["bad refused"] += 1
                else:
                    counts["fits refused"] += 1
            else:
                assert bad is None, f"{path} = {value!r} loaded; {bad} is mistyped"
                counts["unread loaded" if unread else "fits loaded"] += 1
    print(f"{adapter}: {sum(counts.values())} cases, {counts}")
    assert counts["bad refused"] > 0


def _at(value, rest: str):
    """The item of value at a field path relative to it (`[0].text`)."""
    for index, key in re.findall(r"\[(\d+)\]|\.?([^.\[]+)", rest):
        value = value[int(index)] if index else value[key]
    return value


def test_a_mistyped_adapter_file_exits_2_with_one_message(tmp_path, capsys):
    from memkit.cli import main

    conv = _locomo_conv()
    conv["qa"] = 5
    f = tmp_path / "locomo10.json"
    f.write_text(json.dumps([conv]), encoding="utf-8")
    code = main(["eval", "run", "--dataset", f"locomo:{f}", "--quiet", "--out",
                 str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and f"{f}:1" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1
