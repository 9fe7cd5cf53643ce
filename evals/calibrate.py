"""`memkit eval calibrate floor --embedder NAME`: an embedder's default recall floor,
computed from data by one stated rule, with every figure it came from.

Cosine scales differ between embedders (a right answer scores 0.1-0.3 with
WordLlama, higher with MiniLM), so a floor does not transfer: each embedder's
`default_floor` is what this command prints, and a test reruns it on the
bundled data and checks the committed value (docs/embedders.md).

The rule (`RULE`):
1. Candidates: floors 0, `step`, 2*`step`, ... up to `top` (default 0.00 to
   0.50 by 0.01).
2. Bundled data (`datasets/bundled`, always present), store mode, the
   embedder under calibration, every other tunable at its default: all
   candidates are probed on one replay (the sweep's variants).
3. Recall guard (issue #32's non-inferiority, so noise does not choose): a
   floor qualifies when the lower end of the paired 95% interval of its
   recall@8 minus the best candidate's (same probes, clustered by scope)
   clears -`margin` (0.05): the data show it loses less than the margin. A
   wide interval fails; it cannot qualify a floor by luck.
4. Paraphrase guard (when `../shared/datasets` holds them): a floor qualifies
   only if it keeps at least `PARAPHRASE_KEPT` (0.99) of the paraphrase pairs
   of STS-B dev (score >= 4) and MRPC test (label 1) at or above it: a floor
   must not cut a restatement of a memory.
5. Among qualifying floors: the highest off-topic silence (what a floor is
   for), then the least budget waste, then the lowest floor.

Off-topic silence is the objective, not a constraint: 38 off-topic probes in 8
scopes give an interval far wider than any useful margin, so "silence at least
where it is today" cannot be shown; recall over 256 probes can carry the test.
STS-B's unrelated pairs (score <= 1) are printed beside each floor (the
share below it) as a larger-sample view of the same silence, outside the
rule. PAWS is not used: its pairs swap words within one sentence, so
paraphrases and non-paraphrases alike score near 1 and say nothing of a floor.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memkit.errors import ConfigError, MemkitError

FLOOR = "recall.floor"
RECALL, SILENCE, WASTE = "recall_at_8", "offtopic_silence", "budget_waste"
MARGIN = 0.05
PARAPHRASE_KEPT = 0.99
STEP, TOP = 0.01, 0.50
MIN_STEP = 0.01
"""The finest grid: 101 candidates over [0, 1] (one replay; each costs little)."""
RULE = (
    f"among floors whose {RECALL} is non-inferior to the best floor's (lower end of the "
    "paired 95% CI of floor - best clears -margin) and that keep >= "
    f"{PARAPHRASE_KEPT:g} of the paraphrase pairs (when present): the highest "
    f"{SILENCE}, then the least {WASTE}, then the lowest floor"
)


def check_args(step: float, top: float, margin: float) -> None:
    """The flags' bounds, checked before any work: `top` in (0, 1], `step` in
    [`MIN_STEP`, top], `margin` in [0, 1)."""
    if not 0 < top <= 1:
        raise ConfigError(f"--top must be in (0, 1], got {top!r}")
    if not MIN_STEP <= step <= top:
        raise ConfigError(f"--step must be in [{MIN_STEP:g}, --top={top:g}], got {step!r}")
    if not 0 <= margin < 1:
        raise ConfigError(f"--margin must be in [0, 1), got {margin!r}")


def floor_grid(step: float = STEP, top: float = TOP) -> list[float]:
    """The candidates: 0, step, 2*step, ... <= top, rounded to 4 places."""
    check_args(step, top, MARGIN)
    n = math.floor(top / step + 1e-9)
    return [round(i * step, 4) for i in range(n + 1)]


def pair_shares(
    floors: Sequence[float], paraphrase: np.ndarray, unrelated: np.ndarray
) -> list[dict[str, float | None]]:
    """Per floor: the share of paraphrase cosines at or above it (kept) and of
    unrelated cosines below it (silenced); None where a set is empty."""

    def share(mask: np.ndarray) -> float | None:
        return float(mask.mean()) if mask.size else None

    return [
        {"paraphrase_kept": share(paraphrase >= f), "unrelated_below": share(unrelated < f)}
        for f in floors
    ]


def choose(candidates: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The chosen candidate by step 5 of the rule among those that qualify;
    a ConfigError when none does (say which guard failed everywhere)."""
    ok = [c for c in candidates if c["qualifies"]]
    if not ok:
        raise ConfigError("no floor qualifies: " + "; ".join(c["why"] for c in candidates[:3]))
    return min(ok, key=lambda c: (-c["silence"]["value"], c["waste"]["value"], c["floor"]))


def _est(row: Mapping[str, Any]) -> dict[str, Any]:
    def num(x: Any) -> float | None:
        return None if x is None or x != x else round(float(x), 6)

    return {"value": num(row["value"]), "lo": num(row["lo"]), "hi": num(row["hi"])}


def bundled_candidates(emb: Any, floors: Sequence[float], margin: float) -> list[dict[str, Any]]:
    """Steps 2 and 3 of the rule on `datasets/bundled`: per floor its recall@8,
    silence and waste estimates and the recall guard's verdict."""
    from evals.runner import load_any
    from evals.sweep import recommend, sweep

    res = sweep(
        load_any("datasets/bundled"),
        {FLOOR: list(floors)},
        embedder=emb,
        metrics=[RECALL, SILENCE, WASTE],
        margin=margin,
    )
    rows = {(int(r["point_index"]), r["metric"]): r for _, r in res.frame.iterrows()}
    verdicts = recommend(res.frame, [FLOOR], units=res.units, margin=margin)["constraint"]
    out = []
    for v in verdicts["points"]:
        i = int(v["point_index"])
        d = v["difference"]
        out.append(
            {
                "floor": float(v[FLOOR]),
                "recall_at_8": _est(rows[i, RECALL]),
                "difference": None if d is None else {k: d[k] for k in ("value", "lo", "hi")},
                "recall_guard": bool(v["qualifies"]),
                "silence": _est(rows[i, SILENCE]),
                "waste": _est(rows[i, WASTE]),
                "why": v["why"],
            }
        )
    return out


def shared_pairs(emb: Any, datasets: str | None) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
    """Step 4's data: ({set: pairs used}, paraphrase cosines, STS-B unrelated
    cosines); empty where `datasets` is None or holds no such set."""
    from evals.adapters import load_mrpc, load_stsb
    from evals.bench_embed import cosines

    used: dict[str, int] = {}
    para: list[Any] = []
    unrelated: list[Any] = []
    if datasets is None:
        return used, np.zeros(0), np.zeros(0)
    for name, load in (("stsb", load_stsb), ("mrpc", load_mrpc)):
        try:
            pairs = load(datasets)
        except (MemkitError, OSError):
            continue
        used[name] = len(pairs)
        para += [p for p in pairs if p.label == "paraphrase"]
        if name == "stsb":
            unrelated += [p for p in pairs if p.label == "distinct"]
    c_para = cosines(emb, para) if para else np.zeros(0)
    c_unrel = cosines(emb, unrelated) if unrelated else np.zeros(0)
    return used, c_para, c_unrel


def calibrate(
    spec: str,
    *,
    datasets: str | None = "../shared/datasets",
    step: float = STEP,
    top: float = TOP,
    margin: float = MARGIN,
) -> dict[str, Any]:
    """The whole rule for embedder `spec`: every candidate's figures, the data
    used, the chosen floor and the embedder's committed default beside it."""
    from evals.replay import CachingEmbedder
    from memkit.embed import default_floor_of, fingerprint_of, get_embedder

    check_args(step, top, margin)
    floors = floor_grid(step, top)
    emb = get_embedder(spec)
    if emb is None:
        raise ConfigError("--embedder none has no vectors, so no floor to calibrate")
    cands = bundled_candidates(CachingEmbedder(emb), floors, margin)
    used, c_para, c_unrel = shared_pairs(emb, datasets)
    for c, s in zip(cands, pair_shares(floors, c_para, c_unrel), strict=True):
        c.update(s)
        kept = s["paraphrase_kept"]
        c["qualifies"] = c["recall_guard"] and (kept is None or kept >= PARAPHRASE_KEPT)
        if c["recall_guard"] and not c["qualifies"]:
            c["why"] = f"paraphrase pairs kept {kept:.3f} < {PARAPHRASE_KEPT:g}"
    chosen = choose(cands)
    return {
        "embedder": emb.name,
        "fingerprint": fingerprint_of(emb),
        "rule": RULE,
        "margin": margin,
        "data": {
            "bundled": "datasets/bundled (store mode)",
            "shared": used,
            "shared_paraphrase_pairs": int(c_para.size),
            "shared_unrelated_pairs": int(c_unrel.size),
        },
        "candidates": cands,
        "chosen": chosen["floor"],
        "committed_default": default_floor_of(emb),
        "edge": chosen["floor"] in (floors[0], floors[-1]) and len(floors) > 1,
    }


def _f(e: Mapping[str, Any] | None, key: str = "value") -> str:
    v = None if e is None else e.get(key)
    return "-" if v is None else f"{v:.3f}"


def _share(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def render(result: Mapping[str, Any]) -> str:
    """The candidates table, the data used and the chosen floor, as text."""
    from evals.report import text_table

    head = ["floor", "recall@8", "- best [95% CI]", "off-topic silence", "waste"]
    head += ["paraphrase kept", "STS-B unrelated below", "qualifies"]
    rows = [head]
    for c in result["candidates"]:
        d = c["difference"]
        diff = "best" if d is None else f"{_f(d)} [{_f(d, 'lo')}, {_f(d, 'hi')}]"
        mark = "CHOSEN" if c["floor"] == result["chosen"] else ("yes" if c["qualifies"] else "no")
        rows.append(
            [
                f"{c['floor']:.2f}",
                _f(c["recall_at_8"]),
                diff,
                f"{_f(c['silence'])} [{_f(c['silence'], 'lo')}, {_f(c['silence'], 'hi')}]",
                _f(c["waste"]),
                _share(c["paraphrase_kept"]),
                _share(c["unrelated_below"]),
                mark,
            ]
        )
    data = result["data"]
    shared = data["shared"]
    used = (
        ", ".join(f"{k} ({n:,} pairs read)" for k, n in shared.items())
        + f": {data['shared_paraphrase_pairs']:,} paraphrase, "
        f"{data['shared_unrelated_pairs']:,} unrelated"
        if shared
        else "none (no STS-B or MRPC found; the paraphrase guard was not applied)"
    )
    lines = [
        f"embedder {result['embedder']} (fingerprint {result['fingerprint']})",
        f"data: {data['bundled']}; shared sets: {used}",
        f"rule: {result['rule']} (margin {result['margin']:g})",
        "",
        text_table(rows),
        "",
        f"chosen floor: {result['chosen']:.2f} (committed default: "
        f"{result['committed_default']:.2f})",
    ]
    if result["edge"]:
        lines.append("warning: the chosen floor is at the edge of the grid: extend it")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memkit eval calibrate",
        description=(__doc__ or "").split("\n\n")[0],
        epilog="rule: " + RULE,
    )
    p.add_argument("tunable", choices=["floor"], help="what to calibrate (the recall floor)")
    p.add_argument("--embedder", required=True, help="an embedder spec: wordllama, minilm, ...")
    p.add_argument(
        "--datasets",
        default="../shared/datasets",
        help="folder holding sts_b/ and mrpc/ (default %(default)s; 'none': bundled data only)",
    )
    p.add_argument("--step", type=float, default=STEP, help=f"grid step, >= {MIN_STEP:g}")
    p.add_argument("--top", type=float, default=TOP, help="highest floor tried, in (0, 1]")
    p.add_argument(
        "--margin", type=float, default=MARGIN, help="recall non-inferiority margin, in [0, 1)"
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    """Calibrate an embedder's default recall floor from data (bundled + paraphrase sets)."""
    a = _parser().parse_args(argv)
    datasets = None if a.datasets == "none" else a.datasets
    if datasets is not None and not Path(datasets).is_dir():
        print(f"memkit eval calibrate: {datasets!r} not found: bundled data only", file=sys.stderr)
        datasets = None
    result = calibrate(a.embedder, datasets=datasets, step=a.step, top=a.top, margin=a.margin)
    print(json.dumps(result, sort_keys=True) if a.json else render(result))
    return 0
