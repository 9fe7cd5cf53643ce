"""The metric registry: every metric registered once with all its fields, and
every list a report or sweep prints derived from it."""

from __future__ import annotations

import json
import math

import pytest

from evals import registry
from evals.report import RECALL_PLOT, VALIDITY_PLOT, WASTE_PARTS, build_report
from memkit.errors import ConfigError


def test_every_metric_has_every_field():
    metrics = registry.all_metrics()
    assert len(metrics) > 40
    for name, m in metrics.items():
        assert m.name == name
        assert m.unit in registry.UNITS, name
        assert m.direction in ("higher", "lower", "neutral"), name
        assert m.definition.strip() and m.family.strip(), name
        assert isinstance(m.pooled, bool), name
        assert m.mark in ("↑", "↓", "·")


@pytest.mark.parametrize(
    "bad",
    [
        {"unit": "session"},
        {"direction": "up"},
        {"definition": " "},
        {"family": ""},
        {"lists": ("front_page",)},
        {"pooled": "yes"},
    ],
)
def test_a_metric_missing_a_field_is_refused(bad):
    kw = {"unit": "probe", "definition": "d", "direction": "higher", "family": "f"} | bad
    with pytest.raises(ConfigError, match="metric 'zz_test'"):
        registry.add("zz_test", **kw)
    assert "zz_test" not in registry.REGISTRY


def test_a_name_registers_once():
    with pytest.raises(ConfigError, match="registered twice"):
        registry.add("p_at_1", unit="probe", definition="d", direction="higher", family="f")


def test_lists_derive_from_the_registry():
    for listed in registry.LISTS:
        names = registry.names(listed=listed)
        assert names, listed
        assert all(listed in registry.get(n).lists for n in names)
    assert "budget_waste" in registry.names(listed="headline")
    assert registry.get("budget_waste").direction == "lower"
    assert registry.get("budget_waste").pooled
    assert registry.get("p_at_1").direction == "higher"
    with pytest.raises(ConfigError, match="unknown metric list"):
        registry.names(listed="front_page")


def test_unknown_metric_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown metric 'ndcg@8'.*ndcg_at_8"):
        registry.get("ndcg@8")


def test_report_plot_selections_are_registered():
    for m in (*RECALL_PLOT, *WASTE_PARTS, *VALIDITY_PLOT):
        registry.get(m)


def _folder(tmp_path, metric):
    (tmp_path / "manifest.json").write_text(json.dumps({"name": "t", "systems": ["store"]}))
    row = {"system": "store", "metric": metric, "value": 0.5, "lo": 0.4, "hi": 0.6, "n": 3}
    (tmp_path / "metrics.json").write_text(json.dumps({"version": 1, "metrics": [row]}))
    return tmp_path


def test_report_refuses_an_unregistered_metric(tmp_path):
    with pytest.raises(ConfigError, match="unknown metric 'p_at_one'"):
        build_report(_folder(tmp_path, "p_at_one"))


def test_report_marks_direction(tmp_path):
    md, _ = build_report(_folder(tmp_path, "budget_waste"))
    text = md.read_text(encoding="utf-8")
    assert "budget_waste ↓" in text and "0.500 [0.400, 0.600]" in text


def test_unit_functions_give_values_or_pairs():
    import row_fixtures

    from evals.units import ProbeUnit

    row = row_fixtures.probe(
        relevant=["f1"],
        recalled=[{"fact": "f1", "score": 0.9, "bytes": 10}],
        admitted=[{"fact": "f1", "bytes": 10}],
    )
    p = ProbeUnit(row)
    for m in registry.all_metrics().values():
        if m.unit != "probe":
            continue
        v = m.fn(p)
        if m.pooled:
            assert len(v) == 2, m.name
        else:
            assert isinstance(float(v), float) and not math.isinf(v), m.name


def test_rollout_shares_get_wilson_intervals_not_a_collapsed_t():
    """None parked in 130 rollouts over 8 scopes is not 'exactly 0': Wilson says how
    many could hide behind that (the t interval of an all-zero sample is [0, 0])."""
    from evals.stats import WILSON_DEFF, interval

    for m in ("parked_rollouts", "pending_rollouts"):
        assert registry.bounded(m)
    scopes = [i % 8 for i in range(130)]
    e = interval([0.0] * 130, None, scopes, bounded=registry.bounded("parked_rollouts"))
    assert e.method == WILSON_DEFF and e.lo == 0.0 and 0.02 < e.hi < 0.06
    t = interval([0.0] * 130, None, scopes, bounded=False)
    assert (t.lo, t.hi) == (0.0, 0.0)  # what it was
