"""Types are checked in every full test run (issue #35): memkit at mypy's --strict
flags, evals at mypy's default level, both clean. The levels are pinned here too, so
that they cannot be lowered in pyproject.toml without a test saying so."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

STRICT = {
    "disallow_any_generics",
    "disallow_subclassing_any",
    "disallow_untyped_calls",
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "check_untyped_defs",
    "disallow_untyped_decorators",
    "warn_return_any",
    "no_implicit_reexport",
    "extra_checks",
}
"""What `mypy --strict` turns on per module (the rest of it is global, below)."""


def mypy_config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]


def test_mypy_is_clean_on_memkit_and_evals():
    out = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout


def test_memkit_is_held_to_the_strict_flags_and_evals_to_the_default():
    cfg = mypy_config()
    assert sorted(cfg["files"]) == ["evals", "memkit"]
    assert {"warn_unused_configs", "warn_redundant_casts", "warn_unused_ignores"} <= {
        k for k, v in cfg.items() if v is True
    }
    assert cfg["strict_equality"] is True
    ours = [
        o
        for o in cfg["overrides"]
        if any(m.split(".")[0] in ("memkit", "evals") for m in o["module"])
    ]
    assert len(ours) == 1 and sorted(ours[0]["module"]) == ["memkit", "memkit.*"]
    assert {k for k, v in ours[0].items() if v is True} == STRICT
    for o in cfg["overrides"]:  # only third-party libraries are excused, and only their stubs
        assert set(o) <= {"module", "ignore_missing_imports", *STRICT}
