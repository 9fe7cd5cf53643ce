"""What a finished run is to consolidation, defined once: its statuses, the stop
reasons that count as a normal finish, and SPEC §7 eligibility.

Staging (`memkit.consolidate.stage_run`), the evaluation suite's dataset loader
and the bundled dataset's build script all read these, so a run is eligible,
or ineligible for the same reasons, wherever it is looked at. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RUN_STATUSES: tuple[str, ...] = ("succeeded", "failed", "aborted", "parked")
"""Every status a finished run may have (SPEC §7)."""

NORMAL_STOP_REASONS: tuple[str, ...] = ("", "stop", "end_turn")
"""Stop reasons of a run that ended normally (SPEC §7 Eligibility)."""

INELIGIBLE_REASONS: tuple[str, ...] = (
    "child",
    "failed",
    "aborted",
    "parked",
    "zero_turns",
    "abnormal_stop",
)
"""Why a run is not eligible, one name per rule it breaks (`unknown_status` too,
for a status outside `RUN_STATUSES`, which a checked transcript never has)."""


def ineligible_reasons(
    *, parent_run_id: Any, status: Any, turns: Any, stop_reason: Any
) -> tuple[str, ...]:
    """Every SPEC §7 eligibility rule the run breaks, in `INELIGIBLE_REASONS` order;
    () when it is eligible.

    - `child`: it has a parent (a `parent_run_id` other than None or "").
    - its status, unless it is "succeeded" (`unknown_status` outside `RUN_STATUSES`).
    - `zero_turns`: `turns` is not a whole number >= 1 (a bool is not one).
    - `abnormal_stop`: the stop reason is not in `NORMAL_STOP_REASONS`. A
      missing stop reason (None) reads as "" (memkit): a host that records none
      is taken to have ended its run normally.
    """
    out: list[str] = []
    if parent_run_id:
        out.append("child")
    if status != "succeeded":
        out.append(status if status in RUN_STATUSES else "unknown_status")
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        out.append("zero_turns")
    stop = "" if stop_reason is None else stop_reason
    if not isinstance(stop, str) or stop not in NORMAL_STOP_REASONS:
        out.append("abnormal_stop")
    return tuple(out)


def eligible(run: Mapping[str, Any]) -> bool:
    """Only a root run that succeeded, took a turn and stopped normally stages (SPEC §7).

    `run` is a transcript mapping (`parent_run_id`, `status`, `turns`,
    `stop_reason`; a missing field reads as None)."""
    return not ineligible_reasons(
        parent_run_id=run.get("parent_run_id"),
        status=run.get("status"),
        turns=run.get("turns"),
        stop_reason=run.get("stop_reason"),
    )
