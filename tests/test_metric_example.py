"""CONTRIBUTING's worked example: a metric is one registration plus its test.

`admitted_share` is registered here exactly as CONTRIBUTING's diff adds it to
`evals/metrics/probe.py`; nothing else is touched, and the metric reaches
metrics.json and the per-scope breakdown with the hand-computed value."""

from __future__ import annotations

import pytest
import row_fixtures

from evals import registry
from evals.aggregate import breakdown_from_run, metrics_from_run
from evals.metrics.probe import probe_metric
from evals.runfolder import write_jsonl


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as loaded, restored after the test (the example is not shipped)."""
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.all_metrics()))


def test_a_metric_registered_once_reaches_metrics_json_and_the_breakdown(fresh_registry, tmp_path):
    probe_metric(
        "admitted_share",
        "admitted / recalled entries, pooled over probes",
        "neutral",
        "dedup",
        pooled=True,
        lists=("breakdown",),
    )(lambda p: (len(p.admitted), len(p.labels)))

    def probe(scope, recalled, admitted):
        row = row_fixtures.probe(
            scope_id=scope,
            recalled=[{"fact": f} for f in recalled],
            admitted=[{"fact": f, "bytes": 1} for f in admitted],
        )
        return {**row.to_json(), "system": "store", "replicate": 0}

    write_jsonl(
        tmp_path / "probes.jsonl",
        [probe("s1", ["a", "b", "c"], ["a"]), probe("s2", ["a"], ["a"]), probe("s2", [], [])],
    )
    table = metrics_from_run(tmp_path).set_index("metric")
    row = table.loc["admitted_share"]
    assert row["value"] == pytest.approx(2 / 4)  # (1 + 1 + 0) / (3 + 1 + 0)
    assert row["unit"] == "probe" and row["direction"] == "neutral"
    by_scope = breakdown_from_run(tmp_path).query("metric == 'admitted_share'")
    assert dict(zip(by_scope.scope_id, by_scope.value, strict=True)) == {
        "s1": pytest.approx(1 / 3),
        "s2": 1.0,
    }


def test_the_example_is_not_a_shipped_metric():
    assert "admitted_share" not in registry.all_metrics()
