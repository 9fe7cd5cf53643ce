"""`memkit bench geometry` (evals.bench_geometry): each statistic on a hand-computed
ranking, the block scan against a full sort (ties to the lower index, across a
block's edge), and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evals import bench_geometry as bg
from memkit.errors import ConfigError


def _ranked(rows: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(rows, dtype=np.float32)
    return np.tile(np.arange(s.shape[1]), (s.shape[0], 1)), s


def test_each_statistic_on_a_hand_computed_ranking():
    # query 0: 1st 0.9, 2nd 0.7; 8th 0.5, 9th 0.495 (gap 0.005); ranks 9-12 within
    # 0.01 of the 8th: 0.495 and 0.491 (0.489 is not) -> 2.
    # query 1: 1st 0.8, 2nd 0.6; 8th 0.4, 9th 0.3 (gap 0.1); none within 0.01 -> 0.
    q0 = [0.9, 0.7, 0.6, 0.6, 0.55, 0.52, 0.51, 0.5, 0.495, 0.491, 0.489, 0.2]
    q1 = [0.8, 0.6, 0.5, 0.5, 0.45, 0.42, 0.41, 0.4, 0.3, 0.2, 0.1, 0.0]
    idx, s = _ranked([q0, q1])
    g = bg.geometry(idx, s, own=[0, 5])  # query 0's own row ranks first, query 1's does not
    assert g["own_text_first"] == 1
    assert g["median_first"] == pytest.approx(0.85)
    assert g["median_gap_1_2"] == pytest.approx(0.2)
    assert g["median_8th"] == pytest.approx(0.45)
    assert g["median_gap_8_9"] == pytest.approx((0.005 + 0.1) / 2, abs=1e-6)
    assert g["q25_gap_8_9"] == pytest.approx(0.005 + 0.25 * 0.095, abs=1e-6)
    assert g["median_ranks_9_40_within_001_of_8th"] == 1.0  # median of 2 and 0


def test_a_row_just_within_001_of_the_8th_is_a_near_tie_and_just_past_it_is_not():
    base = [0.9, 0.8, 0.7, 0.6, 0.5, 0.5, 0.5, 0.5]
    idx, s = _ranked([[*base, 0.4901, 0.0], [*base, 0.4899, 0.0]])
    assert bg.geometry(idx[:1], s[:1], own=[0])["median_ranks_9_40_within_001_of_8th"] == 1.0
    assert bg.geometry(idx[1:], s[1:], own=[0])["median_ranks_9_40_within_001_of_8th"] == 0.0


def test_fewer_than_nine_ranked_rows_is_refused_not_zero():
    idx, s = _ranked([[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]])
    with pytest.raises(ConfigError, match="at least 9"):
        bg.geometry(idx, s, own=[0])
    idx, s = _ranked([[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]])
    assert bg.geometry(idx, s, own=[0])["median_gap_8_9"] == pytest.approx(0.1)


def test_block_scan_matches_a_full_sort_with_ties_across_a_block_edge(monkeypatch):
    monkeypatch.setattr(bg, "BLOCK", 7)
    rng = np.random.default_rng(3)
    v = rng.standard_normal((50, 4)).astype(np.float32)
    v[20] = v[3]  # exact ties, in different blocks
    v[33] = v[3]
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    q = np.vstack([v[3], rng.standard_normal(4).astype(np.float32)])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    idx, s = bg.top_ranks(v, q, k=12)
    for j in range(q.shape[0]):
        full = (q[j] @ v.T).astype(np.float32)
        want = np.lexsort((np.arange(50), -full))[:12]
        assert idx[j].tolist() == want.tolist()
        assert np.allclose(s[j], full[want], atol=1e-6)  # BLAS order may move a last bit
    assert idx[0][:3].tolist() == [3, 20, 33]  # the tie, lower index first


def test_reworded_queries_are_seeded_distinct_rows():
    texts = [f"stored memory number {i} about the deploy script" for i in range(30)]
    a = bg.reworded(texts, 10, seed=1)
    assert a == bg.reworded(texts, 10, seed=1)
    own, q = a
    assert len(set(own)) == 10 and all(q[k] != texts[i] for k, i in enumerate(own))
    assert len(bg.reworded(texts, 30, seed=1)[0]) == 30
    with pytest.raises(ConfigError, match="--queries 31"):
        bg.reworded(texts, 31, seed=1)
    with pytest.raises(ConfigError, match="--queries 0"):
        bg.reworded(texts, 0, seed=1)


def test_a_file_pool_smaller_than_a_size_is_refused(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("".join(f"Sentence number {i} of the corpus is here.\n" for i in range(12)))
    take = bg.text_source(f"file:{p}")
    assert len(take(12)) == 12
    with pytest.raises(ConfigError, match="fewer than 13"):
        take(13)
    with pytest.raises(ConfigError, match="want 'synthetic'"):
        bg.text_source("nonsense")


def test_command_writes_the_json_with_its_load(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert bg.main(["--sizes", "300", "--queries", "5", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    g = d["sizes"]["300"]
    assert 0 <= g["own_text_first"] <= 5 and -1 <= g["median_8th"] <= 1
    assert d["load_start"] and d["load_end"] and d["texts"] == "synthetic"
    assert "300 rows" in capsys.readouterr().out
