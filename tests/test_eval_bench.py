"""`memkit bench harness` runs end to end on a tiny dataset and reports its numbers."""

from __future__ import annotations

import json

import pytest
from test_eval_data import write_tiny_dataset

from evals.bench_harness import main


def test_bench_harness_json(tmp_path, capsys):
    root = write_tiny_dataset(tmp_path / "tiny")
    assert main(["--dataset", str(root), "--points", "3", "--embedder", "hashing", "--json"]) == 0
    got = capsys.readouterr()
    out = json.loads(got.out)
    # issue #23: progress as plain lines on stderr (no carriage returns), stdout stays JSON
    assert got.err.strip() and "\r" not in got.err
    assert out["probes"] == 5 and out["floor_sweep_points"] == 3
    assert out["passes"] == 8  # one per eligible run (a6 failed: nothing staged)
    assert out["passes_per_s"] > 0 and out["store_mode_s"] >= 0


def test_bench_harness_latency_mode_json(capsys):
    """The provider-scale mode runs against its loopback server and reports every level."""
    args = ["--latency", "0.05", "--levels", "1,4", "--scopes", "4", "--runs", "1"]
    args += ["--min-ideal-s", "0"]
    assert main([*args, "--rss-scopes", "0", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["concurrency"]: r for r in out["levels"]}
    assert set(rows) == {1, 4} and all(r["passes"] == 4 for r in rows.values())
    assert rows[1]["in_flight_max"] == 1 and rows[4]["ideal_passes_per_s"] == 80.0
    assert all(r["cpu_ms_per_pass"] > 0 and r["share_of_ideal"] > 0 for r in rows.values())


def test_levels_run_long_enough_for_the_ideal_wall_time():
    """Each level runs >= --runs passes per scope and >= --min-ideal-s of ideal wall."""
    from evals.bench_harness import runs_for

    assert runs_for(1, 64, 0.5, 2, 8.0) == 2  # 128 passes at 2/s: 64 s ideal already
    assert runs_for(32, 64, 0.5, 2, 8.0) == 8  # 512 passes at 64/s: exactly 8 s
    assert runs_for(32, 64, 0.5, 2, 8.01) == 9  # one past: a 9th pass per scope
    assert runs_for(64, 64, 0.5, 2, 8.0) == 16
    assert runs_for(128, 64, 0.5, 2, 8.0) == 16  # capped by the scopes, not the limit


def test_bench_harness_quiet_prints_no_progress(tmp_path, capsys):
    """Issue #23: `bench harness` (a long command) takes --quiet: the result only."""
    root = write_tiny_dataset(tmp_path / "tiny")
    argv = ["--dataset", str(root), "--points", "2", "--embedder", "hashing", "--json", "--quiet"]
    assert main(argv) == 0
    got = capsys.readouterr()
    assert got.err == "" and json.loads(got.out)["floor_sweep_points"] == 2


def test_bench_redact_json(tmp_path, capsys):
    """`memkit bench redact` measures every shape and both embedders; a bad size exits 2."""
    from evals import bench_redact

    out = tmp_path / "redact.json"
    argv = ["--texts", "4", "--repeat", "1", "--writes", "3", "--rounds", "2"]
    assert bench_redact.main([*argv, "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["us_per_kb"]) == {"prose", "config", "secrets"}
    assert all(v > 0 for v in res["us_per_kb"].values())
    for rates in res["remember_per_s"].values():
        assert rates["on"] > 0 and rates["off"] > 0
        assert rates["ratio_q1"] <= rates["ratio_on_off"] <= rates["ratio_q3"]
    assert "on/off" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        bench_redact.main(["--rounds", "1"])
    assert e.value.code == 2


def test_bench_redact_texts_have_the_secrets_only_in_the_secrets_shape():
    from evals.bench_redact import texts
    from memkit import redact

    assert all(redact(t) == t for t in texts("prose", 30, 1) + texts("config", 30, 1))
    assert all(redact(t) != t for t in texts("secrets", 30, 1) if "Sup3r" in t)


def test_bench_embed_table(tmp_path, capsys):
    """`memkit bench embed`: one row per embedder, rates against the first one's,
    quality columns undefined (never 0) when the pair sets are absent."""
    from evals.commands import bench_main

    args = ["embed", "--embedder", "hashing-32", "--embedder", "hashing-64", "--sizes", "50,80"]
    args += ["--texts", "8", "--writes", "4", "--datasets", str(tmp_path), "--quiet"]
    assert bench_main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "remember/s @50 rows" in lines[0] and "@80 rows" in lines[0] and len(lines) == 4
    first, second = (line.split(" | ") for line in lines[2:])
    assert first[0] == "| hashing-32" and second[0] == "| hashing-64"
    assert first[4].endswith("(1.00x)") and first[5].endswith("(1.00x)")
    assert first[-3:] == ["undefined", "undefined", "undefined |"]


def test_bench_embed_quality_on_the_pair_sets(shared_datasets):
    """STS-B Spearman and PAWS/MRPC ROC-AUC from the real files (hashing: fast)."""
    from evals.bench_embed import load_sets, quality
    from memkit.embed import get_embedder

    sets = load_sets(str(shared_datasets))
    assert {k: len(v) for k, v in sets.items()} == {
        "stsb_spearman": 1500,
        "paws_auc": 8000,
        "mrpc_auc": 1725,
    }
    q = quality(get_embedder("hashing"), sets)
    assert 0.5 < q["stsb_spearman"] < 0.9 and 0.6 < q["mrpc_auc"] < 0.9
    assert 0.4 < q["paws_auc"] < 0.6  # word-order swaps: bag-of-n-grams cannot tell


@pytest.mark.parametrize(
    "bad", [["--sizes", "0"], ["--sizes", "x"], ["--texts", "0"], ["--batch", "0"]]
)
def test_bench_embed_refuses_bad_values(bad, capsys):
    from evals.commands import bench_main

    with pytest.raises(SystemExit) as e:
        bench_main(["embed", *bad])
    assert e.value.code == 2


def test_bench_scopes_table(tmp_path, capsys):
    """`memkit bench scopes`: one row per cap; a 0 cap keeps only the scope in use
    and says how many it dropped, no cap drops none; the JSON holds the same rows."""
    import json

    from evals.commands import bench_main

    out = tmp_path / "rows.json"
    args = ["scopes", "--scopes", "3", "--rows", "50", "--batch", "25", "--caps", "0,none"]
    assert bench_main([*args, "--json", str(out)]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| ")]
    assert len(lines) == 3 and lines[0].startswith("| cap MB | writes/s")
    capped, free = (json.loads(out.read_text())["rows"][i] for i in (0, 1))
    assert (capped["cap_mb"], capped["scopes_held"]) == (0.0, 1) and capped["evicted"] > 0
    assert (free["cap_mb"], free["scopes_held"], free["evicted"]) == (None, 3, 0)
    assert free["cache_mb"] > capped["cache_mb"] > 0


@pytest.mark.parametrize(
    "bad",
    [["--scopes", "0"], ["--rows", "30", "--batch", "25"], ["--caps", "-1"], ["--caps", "x"]],
)
def test_bench_scopes_refuses_bad_values(bad, capsys):
    from evals.commands import bench_main

    assert bench_main(["scopes", *bad]) == 2
    assert "memkit bench scopes" in capsys.readouterr().err


def test_bench_scopes_says_undefined_where_proc_gave_no_rss():
    """A row whose RSS /proc did not say renders "undefined", never 0; VmRSS is
    read by the same reader as the peak."""
    from evals import bench_clients, bench_scopes

    row = {"cap_mb": None, "writes_per_s": 10.0, "recalls_per_s": 5.0, "cache_mb": 1.0}
    row |= {"rss_start_mb": None, "rss_end_mb": 40.0, "rss_peak_mb": None}
    row |= {"scopes_held": 2, "evicted": 0}
    meta = {"scopes": 2, "rows": 10, "batch": 5, "backend": "sqlite", "load": "0"}
    body = bench_scopes.render([row], meta).splitlines()[-1]
    assert body == "| none | 10 | 5 | undefined | 40 | undefined | 1 | 2 | 0 |"
    assert bench_clients.status_mb("VmRSS", "VmRSS:\t  2048 kB\nVmHWM:\t 4096 kB") == 2.0
    assert bench_clients.status_mb("VmRSS", "VmHWM:\t 4096 kB") is None
