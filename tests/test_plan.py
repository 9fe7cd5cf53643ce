"""The execution plan (issue #35): `eval run`, `eval sweep` and experiment files describe
their work as units (system x setting x replicate x scope), built purely, and one
runner (`evals.execute`) runs them."""

from __future__ import annotations

import json
import time

import pytest
from test_eval_data import write_tiny_dataset

from evals import kinds
from evals.commands import run_main, sweep_main
from evals.config import RunConfig
from evals.plan import PIPELINE, STORE, System, run_plan, sweep_plan
from memkit.consolidate.reply import local_reply
from memkit.errors import ConfigError
from memkit.params import FoldParams

SCOPES = ("s1", "s2")


def _cells(plan):
    return [(u.system.name, u.setting, u.replicate, u.scope) for u in plan.units]


def test_a_run_plans_store_once_per_scope_then_each_consolidator_per_replicate():
    cfg = RunConfig(dataset="d", consolidators=("heuristic", "oracle"), replicates=2)
    plan = run_plan(cfg, SCOPES)
    assert _cells(plan) == [
        ("store", 0, 0, "s1"),
        ("store", 0, 0, "s2"),
        *[("pipeline:heuristic", 0, r, s) for r in (0, 1) for s in SCOPES],
        *[("pipeline:oracle", 0, r, s) for r in (0, 1) for s in SCOPES],
    ]
    assert [s.name for s in plan.systems] == ["store", "pipeline:heuristic", "pipeline:oracle"]
    assert plan.systems[1] == System("pipeline:heuristic", PIPELINE, "heuristic")
    (setting,) = plan.settings
    assert [v.name for v in setting.variants] == ["default"]


def test_a_run_takes_its_tunables_into_its_one_setting():
    cfg = RunConfig(dataset="d", recall={"floor": 0.3}, fold={"window_days": 7})
    (setting,) = run_plan(cfg, SCOPES).settings
    assert setting.variants[0].recall.floor == 0.3
    assert setting.fold == FoldParams(window_days=7)


def test_a_run_with_several_embedders_plans_a_store_system_per_embedder():
    cfg = RunConfig(
        dataset="d", embedder="wordllama", embedders=("wordllama", "hashing"), consolidators=()
    )
    plan = run_plan(cfg, ("s1",))
    assert plan.systems == (
        System("store@wordllama", STORE, "wordllama"),
        System("store@hashing", STORE, "hashing"),
    )


def test_store_mode_off_plans_no_store_unit_and_one_replicate_is_the_bound():
    cfg = RunConfig(dataset="d", store_mode=False, consolidators=("heuristic",), replicates=1)
    assert _cells(run_plan(cfg, SCOPES)) == [("pipeline:heuristic", 0, 0, s) for s in SCOPES]
    with pytest.raises(ConfigError, match="replicates"):
        RunConfig(dataset="d", replicates=0)


def test_a_recall_sweep_shares_one_store_replay_per_fold_point():
    grid = {"floor": [0.1, 0.2], "fold.window_days": [7, 30]}
    plan = sweep_plan(grid, {}, SCOPES)
    # points in grid order: (0.1, 7) (0.1, 30) (0.2, 7) (0.2, 30): two fold settings
    assert [s.points for s in plan.settings] == [(0, 2), (1, 3)]
    assert [s.fold.window_days for s in plan.settings] == [7, 30]
    assert [[v.name for v in s.variants] for s in plan.settings] == [["0", "2"], ["1", "3"]]
    assert [v.recall.floor for v in plan.settings[0].variants] == [0.1, 0.2]
    assert _cells(plan) == [("store", k, 0, s) for k in (0, 1) for s in SCOPES]


def test_a_consolidation_sweep_plans_a_pipeline_setting_per_point():
    grid = {"snapshot_policy": ["recent", "relevant"]}
    plan = sweep_plan(grid, {"recall": {"floor": 0.4}}, SCOPES, consolidator="oracle")
    assert [s.consolidation.snapshot_policy for s in plan.settings] == ["recent", "relevant"]
    assert [s.points for s in plan.settings] == [(0,), (1,)]
    assert all(s.variants[0].recall.floor == 0.4 for s in plan.settings)  # the base holds
    assert _cells(plan) == [("pipeline:oracle", k, 0, s) for k in (0, 1) for s in SCOPES]


def test_a_sweep_grid_is_checked_while_planning():
    with pytest.raises(ConfigError, match="empty"):
        sweep_plan({}, {}, SCOPES)
    with pytest.raises(ConfigError, match="no values"):
        sweep_plan({"floor": []}, {}, SCOPES)
    with pytest.raises(ConfigError, match="unknown tunable"):
        sweep_plan({"flor": [0.1]}, {}, SCOPES)


EXPERIMENT = """
name = "hosted"
datasets = ["datasets/bundled", "locomo:../shared/datasets"]
modes = ["pipeline"]
replicates = 3

[models."litellm:openai/gpt-4o-mini"]
temperature = 0

[models.heuristic]
"""


@pytest.fixture
def exp(tmp_path):
    from evals.experiment import load_experiment

    p = tmp_path / "e.toml"
    p.write_text(EXPERIMENT, encoding="utf-8")
    return load_experiment(p)


def test_an_experiment_file_plans_its_models_replicates_and_modes(exp):
    from evals.experiment import run_overrides

    cfg = RunConfig(**run_overrides(exp))
    assert cfg.dataset == "datasets/bundled" and cfg.name == "hosted"
    assert _cells(run_plan(cfg, ("s1",))) == [
        *[("pipeline:litellm:openai/gpt-4o-mini", 0, r, "s1") for r in range(3)],
        *[("pipeline:heuristic", 0, r, "s1") for r in range(3)],
    ]


def test_flags_win_over_the_experiment_file(exp):
    from evals.experiment import run_overrides

    kw = run_overrides(exp, replicates=1, consolidators=["oracle"], mode="both", dataset_given=True)
    assert "dataset" not in kw  # the command line's dataset is used
    cfg = RunConfig(dataset="d", **kw)
    assert _cells(run_plan(cfg, ("s1",))) == [
        ("store", 0, 0, "s1"),
        ("pipeline:oracle", 0, 0, "s1"),
    ]
    store_only = RunConfig(**run_overrides(exp, mode="store"))
    assert [s.name for s in run_plan(store_only, ("s1",)).systems] == ["store"]


def test_an_experiment_with_two_datasets_is_two_run_folders(exp, tmp_path):
    from evals.experiment import dataset_folders

    assert dataset_folders(exp, tmp_path) == [
        ("datasets/bundled", tmp_path / "datasets_bundled"),
        ("locomo:../shared/datasets", tmp_path / "locomo_.._shared_datasets"),
    ]


def test_a_sweep_scores_the_experiment_files_one_model_or_asks_which(exp, tmp_path):
    from evals.experiment import load_experiment, sweep_consolidator

    assert sweep_consolidator(None, None) == "heuristic"
    assert sweep_consolidator(exp, "oracle") == "oracle"
    with pytest.raises(ConfigError, match="lists 2 models"):
        sweep_consolidator(exp, None)
    one = tmp_path / "one.toml"
    one.write_text('[models."litellm:openai/x"]\nseed = 1\n', encoding="utf-8")
    assert sweep_consolidator(load_experiment(one), None) == "litellm:openai/x"


class Silent:
    """CONTRIBUTING's worked example of a new consolidator kind: never proposes a change."""

    name = "silent"

    async def propose(self, request):
        return local_reply(self.name, '{"changes": []}', time.perf_counter())


def test_a_kind_registered_once_runs_in_eval_run_and_eval_sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(kinds, "KINDS", dict(kinds.KINDS))  # the registration ends here
    kinds.register("silent")(lambda spec, opts, ctx: Silent())
    data = ["--dataset", str(write_tiny_dataset(tmp_path / "tiny")), "--quiet"]
    out = tmp_path / "run"
    assert run_main([*data, "--consolidator", "silent", "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["systems"] == ["store", "pipeline:silent"]
    attempts = [json.loads(x) for x in (out / "attempts.jsonl").read_text().splitlines()]
    assert attempts and {a["model"] for a in attempts} == {"silent"}
    assert {a["outcome"] for a in attempts} == {"ok"}
    sweep = ["--grid", "snapshot_size=4,8", "--consolidator", "silent"]
    sweep += ["--objective", "strict_validity", "--out", str(tmp_path / "s")]  # nothing written
    assert sweep_main([*data, *sweep]) == 0
    assert (tmp_path / "s" / "sweep.csv").is_file()
    monkeypatch.setattr(kinds, "KINDS", {})
    assert not kinds.calls_model("silent")  # unregistered: memkit's get_consolidator refuses it
    assert run_main([*data, "--consolidator", "silent", "--out", str(tmp_path / "r2")]) == 2


def test_units_are_gathered_in_system_replicate_scope_order_and_tagged():
    from evals.runner import gather

    unit = {"system": "pipeline:b", "replicate": 1, "scope_id": "s1", "probes": [{"q": 1}]}
    units = [
        unit,
        {**unit, "replicate": 0, "scope_id": "s2", "evidence": [{"run": "r"}]},
        {"system": "store", "replicate": 0, "scope_id": "s2", "timing": {"t": 1}},
        {**unit, "replicate": 0, "probes": [{"q": 0}]},
    ]
    files = gather(units)
    assert files["probes"] == [
        {"q": 0, "system": "pipeline:b", "replicate": 0},
        {"q": 1, "system": "pipeline:b", "replicate": 0},
        {"q": 1, "system": "pipeline:b", "replicate": 1},
    ]
    assert files["evidence"] == [{"run": "r", "system": "pipeline:b"}]
    assert files["timing"] == [{"t": 1}] and files["writes"] == []
