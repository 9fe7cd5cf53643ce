"""`worker.shutdown(drain=True)` finishes the submitted work (issue #33 item 6).

Was: `shutdown()` cancelled every pass and dropped the admitted scopes, so the README's
worker recipe (submit, then shut down) stored nothing in a short script.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

from test_worker import FAST, TIMEOUTS, Evidence, Passes, make_worker, run

REPO = Path(__file__).resolve().parents[1]


def test_drain_runs_every_submitted_scope_even_inside_its_window():
    async def main():
        ev = Evidence()
        ev.stage("a", 6)  # more than one batch: the continuation runs too
        ev.stage("b")
        passes = Passes(ev)
        w = make_worker(passes, dataclasses.replace(FAST, window_s=3600.0))
        task = asyncio.create_task(w.run())
        assert w.submit("a") and w.submit("b")
        await w.shutdown(drain=True)  # the hour-long window is skipped, not waited
        await task
        assert ev.pending["a"] == [] and ev.pending["b"] == []
        assert passes.calls == {"a": 2, "b": 1} and passes.cancelled == []
        assert w.closed and w.submit("a") is False

    run(main())


def test_drain_retries_a_timeout_once_then_stops():
    async def main():
        ev = Evidence()
        ev.stage("t")
        passes = Passes(ev, {"t": ["hang"]})
        records = []
        w = make_worker(passes, TIMEOUTS, on_pass=records.append)
        task = asyncio.create_task(w.run())
        assert w.submit("t")
        await w.shutdown(drain=True)
        await task
        assert [r.next for r in records] == ["retry", "leave"]
        assert ev.pending["t"] == [] and ev.consumed["t"] == ["r1"]

    run(main())


def test_drain_refuses_new_submits_and_runs_without_a_started_scheduler():
    async def main():
        ev = Evidence()
        ev.stage("a")
        ev.stage("late")
        gate = asyncio.Event()
        passes = Passes(ev, {"a": [gate]})
        w = make_worker(passes, FAST)  # run() never started by the host
        assert w.submit("a")
        drain = asyncio.create_task(w.shutdown(drain=True))
        await passes.started.wait()
        assert w.submit("late") is False  # draining admits nothing new
        gate.set()
        await drain
        assert ev.pending["a"] == [] and ev.pending["late"] == ["r2"]

    run(main())


def _script(code: str, cwd: Path) -> str:
    cwd.mkdir()
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_the_readme_worker_recipe_stores_its_run(tmp_path):
    readme = (REPO / "README.md").read_text()
    recipe = re.search(r"The deferred worker in a short script.*?```python\n(.*?)```", readme, re.S)
    assert recipe, "README lost its worker recipe"
    script = recipe[1]
    assert "shutdown(drain=True)" in script
    assert _script(script, tmp_path / "drain") == "['We deploy with `make deploy`.']"
    # the same script with a plain shutdown() stores nothing: what the recipe fixed
    assert _script(script.replace("(drain=True)", "()"), tmp_path / "plain") == "[]"
