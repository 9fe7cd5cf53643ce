"""`memkit eval calibrate floor`: the rule's parts, the flags' bounds, and the
committed default floors reproduced from the data they were computed from."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evals.calibrate import (
    MIN_STEP,
    PARAPHRASE_KEPT,
    calibrate,
    check_args,
    choose,
    floor_grid,
    pair_shares,
)
from evals.commands import eval_main
from memkit.embed import default_floor_of, get_embedder
from memkit.errors import ConfigError

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets"


def test_grid_covers_zero_to_top_by_step():
    assert floor_grid() == [round(i / 100, 2) for i in range(51)]
    assert floor_grid(0.25, 1) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert floor_grid(0.3, 1) == [0.0, 0.3, 0.6, 0.9]


@pytest.mark.parametrize(
    ("step", "top", "margin"),
    [
        (MIN_STEP, 0.5, 0.05),
        (0.5, 0.5, 0.05),
        (0.01, 1, 0.05),
        (0.01, 0.01, 0.05),
        (0.01, 0.5, 0.0),
        (0.01, 0.5, 0.99),
    ],
)
def test_flags_at_their_bounds_are_accepted(step, top, margin):
    check_args(step, top, margin)


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--step", "0.009", "--step must be in [0.01"),
        ("--step", "0.51", "--step must be in [0.01, --top=0.5]"),
        ("--top", "1.01", "--top must be in (0, 1]"),
        ("--top", "0", "--top must be in (0, 1]"),
        ("--margin", "1", "--margin must be in [0, 1)"),
        ("--margin", "-0.01", "--margin must be in [0, 1)"),
    ],
)
def test_flags_past_their_bounds_exit_2_before_any_work(capsys, flag, value, says):
    argv = ["calibrate", "floor", "--embedder", "wordllama", "--datasets", "none", flag, value]
    assert eval_main(argv) == 2
    assert says in capsys.readouterr().err


def test_unknown_tunable_or_no_embedder_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:  # argparse's usage error (`memkit` returns its code)
        eval_main(["calibrate", "weights", "--embedder", "wordllama"])
    assert e.value.code == 2 and "invalid choice: 'weights'" in capsys.readouterr().err
    assert eval_main(["calibrate", "floor", "--embedder", "none", "--datasets", "none"]) == 2
    assert "no vectors" in capsys.readouterr().err


def _cand(floor, silence, waste, qualifies=True):
    return {
        "floor": floor,
        "silence": {"value": silence},
        "waste": {"value": waste},
        "qualifies": qualifies,
        "why": f"floor {floor}",
    }


def test_choose_most_silence_then_least_waste_then_lowest_floor():
    cands = [_cand(0.0, 0.0, 0.9), _cand(0.1, 0.4, 0.8), _cand(0.2, 0.4, 0.7)]
    cands += [_cand(0.3, 0.4, 0.7), _cand(0.4, 0.9, 0.1, qualifies=False)]
    assert choose(cands)["floor"] == 0.2
    with pytest.raises(ConfigError, match=r"no floor qualifies: floor 0\.4"):
        choose([_cand(0.4, 0.9, 0.1, qualifies=False)])


def test_pair_shares_keep_a_pair_at_the_floor_and_silence_one_below_it():
    para, unrelated = np.array([0.2, 0.5]), np.array([0.1, 0.2])
    shares = pair_shares([0.0, 0.2, 0.21], para, unrelated)
    assert shares[1] == {"paraphrase_kept": 1.0, "unrelated_below": 0.5}
    assert shares[2] == {"paraphrase_kept": 0.5, "unrelated_below": 1.0}
    assert pair_shares([0.2], np.zeros(0), np.zeros(0)) == [
        {"paraphrase_kept": None, "unrelated_below": None}
    ]


@pytest.mark.parametrize("spec", ["wordllama", "minilm"])
def test_calibration_on_the_bundled_data_reproduces_the_committed_default(capsys, spec):
    argv = ["calibrate", "floor", "--embedder", spec, "--datasets", "none", "--json"]
    assert eval_main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["data"]["shared"] == {}
    assert result["chosen"] == result["committed_default"] == default_floor_of(get_embedder(spec))
    chosen = next(c for c in result["candidates"] if c["floor"] == result["chosen"])
    assert chosen["qualifies"] and chosen["difference"]["lo"] >= -result["margin"]
    # the next floor up fails the recall guard: the choice is the guard's edge, not luck
    above = next(c for c in result["candidates"] if c["floor"] > result["chosen"])
    assert not above["recall_guard"] and above["difference"]["lo"] < -result["margin"]
    assert not result["edge"]


@pytest.mark.skipif(not (SHARED / "sts_b").is_dir(), reason="../shared/datasets absent")
def test_calibration_with_the_paraphrase_sets_keeps_the_default():
    result = calibrate("wordllama", datasets=str(SHARED))
    assert set(result["data"]["shared"]) == {"stsb", "mrpc"}
    assert result["data"]["shared_paraphrase_pairs"] > 1000
    assert result["chosen"] == default_floor_of(get_embedder("wordllama"))
    chosen = next(c for c in result["candidates"] if c["floor"] == result["chosen"])
    assert chosen["paraphrase_kept"] >= PARAPHRASE_KEPT


def test_a_missing_datasets_folder_says_bundled_only(capsys, tmp_path):
    argv = ["calibrate", "floor", "--embedder", "hashing", "--top", "0.02"]
    assert eval_main([*argv, "--datasets", str(tmp_path / "absent")]) == 0
    out, err = capsys.readouterr()
    assert "bundled data only" in err
    assert "shared sets: none" in out and "chosen floor:" in out
