"""Shared fixtures. Public datasets are read in place from ../shared/datasets
(or $MEMKIT_SHARED_DATASETS) and tests that need them skip cleanly without."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_datasets_dir() -> Path:
    env = os.environ.get("MEMKIT_SHARED_DATASETS")
    return Path(env) if env else REPO.parent / "shared" / "datasets"


@pytest.fixture
def shared_datasets() -> Path:
    """Folder of public datasets; skips the test when it is not there."""
    d = shared_datasets_dir()
    if not d.is_dir():
        pytest.skip(f"public datasets not present at {d}")
    return d


@pytest.fixture
def repo_root() -> Path:
    return REPO
