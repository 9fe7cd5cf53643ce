"""SPEC §7 eligibility, defined once in memkit.runs: each rule at its bound and one
past it, and the three readers (staging, the dataset loader, the bundled build)
agreeing with it on every combination, a missing stop reason included."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

from evals.datasets import Transcript
from memkit import eligible as memkit_eligible
from memkit.consolidate import eligible as consolidate_eligible
from memkit.runs import (
    INELIGIBLE_REASONS,
    NORMAL_STOP_REASONS,
    RUN_STATUSES,
    eligible,
    ineligible_reasons,
)

ROOT = Path(__file__).resolve().parents[1]
OK = {"parent_run_id": None, "status": "succeeded", "turns": 1, "stop_reason": "stop"}


def reasons(**changed: object) -> tuple[str, ...]:
    return ineligible_reasons(**{**OK, **changed})


def test_a_root_run_that_succeeded_took_one_turn_and_stopped_normally_is_eligible():
    assert reasons() == ()
    assert eligible(OK)


def test_parent_bound_none_and_empty_are_roots_any_id_is_a_child():
    assert reasons(parent_run_id=None) == ()
    assert reasons(parent_run_id="") == ()
    assert reasons(parent_run_id="r") == ("child",)


@pytest.mark.parametrize("status", RUN_STATUSES)
def test_every_status_but_succeeded_is_its_own_reason(status):
    assert reasons(status=status) == (() if status == "succeeded" else (status,))


def test_an_unknown_or_missing_status_is_not_eligible():
    assert reasons(status="done") == ("unknown_status",)
    assert reasons(status=None) == ("unknown_status",)
    assert "unknown_status" not in INELIGIBLE_REASONS  # a checked transcript never has it


def test_turns_bound_one_is_eligible_zero_is_not_and_only_whole_numbers_count():
    assert reasons(turns=1) == ()
    assert reasons(turns=0) == ("zero_turns",)
    assert reasons(turns=-1) == ("zero_turns",)
    assert reasons(turns=True) == ("zero_turns",)  # a bool is not a count
    assert reasons(turns=1.0) == ("zero_turns",)
    assert reasons(turns=None) == ("zero_turns",)


@pytest.mark.parametrize("stop", [*NORMAL_STOP_REASONS, None])
def test_normal_stop_reasons_and_a_missing_one_are_normal(stop):
    assert reasons(stop_reason=stop) == ()


@pytest.mark.parametrize("stop", ["length", "max_tokens", "tool_use", "error", "Stop", " ", 0])
def test_any_other_stop_reason_is_abnormal(stop):
    assert reasons(stop_reason=stop) == ("abnormal_stop",)


def test_every_broken_rule_is_named_in_order():
    got = reasons(parent_run_id="r", status="failed", turns=0, stop_reason="length")
    assert got == ("child", "failed", "zero_turns", "abnormal_stop")
    assert set(got) <= set(INELIGIBLE_REASONS)


def test_a_mapping_with_fields_missing_reads_them_as_none():
    assert eligible({"status": "succeeded", "turns": 3})  # no parent, no stop reason
    assert not eligible({"status": "succeeded"})  # no turns


def test_memkit_exports_the_one_definition():
    assert memkit_eligible is eligible
    assert consolidate_eligible is eligible


def _build_module():
    spec = importlib.util.spec_from_file_location(
        "bundled_build", ROOT / "datasets" / "bundled" / "build.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bundled_build", module)
    spec.loader.exec_module(module)
    return module


def test_the_dataset_loader_and_the_bundled_build_agree_with_memkit():
    build = _build_module()
    grid = itertools.product(
        (None, "r"), (*RUN_STATUSES,), (0, 1, 2), ("", "stop", "end_turn", "length")
    )
    for parent, status, turns, stop in grid:
        want = ineligible_reasons(
            parent_run_id=parent, status=status, turns=turns, stop_reason=stop
        )
        t = Transcript(
            run_id="x",
            scope_id="s",
            parent_run_id=parent,
            status=status,
            stop_reason=stop,
            turns=turns,
            started_at="2026-01-01T00:00:00Z",
            started_ts=0.0,
            task="t",
            messages=(),
            final_answer="",
        )
        assert t.ineligible == want and t.eligible == (want == ())
        raw = {"parent": parent, "status": status, "stop_reason": stop}
        assert build.ineligible(raw, turns) == want
        run = {"parent_run_id": parent, "status": status, "turns": turns, "stop_reason": stop}
        assert eligible(run) == (want == ())
