"""Getting started without help (issue #23): the documented dataset format is the one
the loader accepts, the example runs end to end, every adapter is documented, the
notebooks can be re-executed by hand, and `dir(memkit)` shows every export."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from memkit.cli import main

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "datasets.md"
EXAMPLE = REPO / "docs" / "example-dataset"


def test_example_dataset_loads_and_runs_end_to_end(tmp_path, capsys):
    from evals.datasets import load_dataset

    ds = load_dataset(EXAMPLE)
    assert (len(ds.transcripts), len(ds.facts), len(ds.probes)) == (2, 3, 3)
    out = tmp_path / "run"
    argv = ["eval", "run", "--dataset", str(EXAMPLE), "--out", str(out), "--embedder", "hashing"]
    assert main([*argv, "--consolidator", "heuristic", "--resamples", "20", "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dataset"]["name"] == "example"
    assert manifest["systems"] == ["store", "pipeline:heuristic"]


def test_documented_records_are_the_example_records():
    """The JSON shown in docs/datasets.md is copied from the example, line for line."""
    text = DOCS.read_text()
    shown = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S)]
    assert len(shown) == 2
    files = {
        "run_id": EXAMPLE / "transcripts.jsonl",
        "fact_id": EXAMPLE / "facts.jsonl",
    }
    for rec in shown:
        key = next(k for k in files if k in rec)
        rows = [json.loads(x) for x in files[key].read_text().splitlines()]
        assert rec in rows


def _checked_fields(tmp_path: Path) -> set[str]:
    """The fields the loader checks, found by what it refuses: each field of the
    example's dataset.json and of the first record of each record file, given a
    value of the wrong type, is an error naming that field."""
    import shutil

    from evals.datasets import load_dataset
    from memkit.errors import DatasetError

    checked = set()
    for name in ("dataset.json", "transcripts.jsonl", "facts.jsonl", "probes.jsonl"):
        lines = (EXAMPLE / name).read_text().splitlines()
        record = json.loads("\n".join(lines) if name.endswith(".json") else lines[0])
        for key, value in record.items():
            d = tmp_path / f"{name}-{key}"
            shutil.copytree(EXAMPLE, d)
            wrong = {**record, key: "text" if isinstance(value, dict) else {"wrong": 1}}
            rest = [] if name.endswith(".json") else lines[1:]
            (d / name).write_text("\n".join([json.dumps(wrong), *rest]) + "\n")
            try:
                load_dataset(d)
            except DatasetError as e:
                fields = {(x.field or "").split(".")[0].split("[")[0] for x in e.errors or [e]}
                checked |= fields & {key}
    return checked


def test_documented_fields_are_the_loaders_fields(tmp_path):
    """Every field the loader checks is named in the format table."""
    from evals.datasets import GoldFact, Probe, Transcript

    checked = _checked_fields(tmp_path)
    # the example shows every field of the three record types (the loader checks them all)
    for record in (Transcript, GoldFact, Probe):
        fields = {f.name for f in dataclasses.fields(record)} - {"meta", "started_ts"}
        assert fields <= checked, (record.__name__, sorted(fields - checked))
    assert {"name", "version", "description", "license", "counts"} <= checked  # dataset.json
    text = DOCS.read_text()
    missing = sorted(f for f in {*checked, "a", "b", "label", "source"} if f"`{f}`" not in text)
    assert missing == []


def test_every_adapter_is_documented_with_source_and_licence():
    from evals.runner import ADAPTERS

    text = DOCS.read_text()
    table = text[text.index("## Public benchmarks") : text.index("### The folder layout")]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ")][2:]  # no head, rule
    documented = {ln.split("`")[1] for ln in rows if ln.startswith("| `")}
    assert set(ADAPTERS) <= documented
    for ln in rows:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert len(cells) == 5 and all(cells), ln  # source and licence never blank


def test_dir_memkit_lists_every_export():
    """Was: dir(memkit) hid the lazily loaded exports."""
    import memkit

    assert set(memkit.__all__) <= set(dir(memkit))


def test_notebooks_can_be_reexecuted_by_hand():
    """Was: `make` installed no Jupyter/nbconvert. The dev extra has both and
    `make notebooks` re-executes every notebook in place."""
    import tomllib

    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[ ]", d)[0] for d in dev["dev"]}
    assert {"nbconvert", "notebook"} <= names
    make = (REPO / "Makefile").read_text()
    assert re.search(r"^notebooks: ", make, re.M)
    assert "jupyter nbconvert --to notebook --execute --inplace" in make
    assert "record_timing=False" in make  # no volatile timestamps in committed notebooks


def test_load_runs_is_shown_in_the_readme_and_notebook_02():
    """Issue #23 item 1: `load_runs` is documented where a researcher looks: the README
    and notebook 02 (which calls it on its own runs)."""
    import nbformat

    readme = (REPO / "README.md").read_text()
    assert "from evals.runs import load_runs" in readme and 'load_runs("reports/runs/*")' in readme
    nb = nbformat.read(REPO / "notebooks" / "02_tuning_recall.ipynb", 4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "from evals.runs import load_runs" in code and "load_runs(" in code


def test_committed_longmemeval_example_has_the_session_and_turn_tables():
    """Issue #18: a committed example report for LongMemEval oracle (store mode,
    WordLlama, the whole haystack) with the session/turn retrieval tables."""
    d = REPO / "reports" / "longmemeval-oracle"
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["systems"] == ["store"] and manifest["embedder"].startswith("wordllama")
    assert manifest["dataset"]["name"] == "longmemeval-oracle"
    assert manifest["config"]["limit"] is None  # all 500 questions
    assert json.loads((d / "ingest.json").read_text())["store"]["writes"] == 10960
    rows = json.loads((d / "metrics.json").read_text())["metrics"]
    at = {r["metric"]: r for r in rows}
    for level in ("session", "turn"):
        for k in (5, 10):
            for stat in ("recall_any", "recall_all", "ndcg_any"):
                assert at[f"{level}_{stat}_at_{k}"]["n"] == 470  # 500 less 30 abstention
    md = (d / "report.md").read_text()
    table = md[md.index("## LongMemEval retrieval") :]
    assert "| statistic | turn @5 | turn @10 | session @5 | session @10 |" in table
    # issue #31: each statistic beside the full ranking (floor off) and a random order
    for stat in ("recall_any", "recall_all", "ndcg_any"):
        assert f"| {stat} · full ranking |" in table and f"| {stat} · random order |" in table
    for level in ("session", "turn"):
        for k in (5, 10):
            for stat in ("recall_any", "recall_all", "ndcg_any"):
                for base in ("full", "random"):
                    assert at[f"{level}_{stat}_at_{k}_{base}"]["n"] == 470
    groups = md[md.index("## Per probe group") :]
    assert "| undefined_abstention |" in groups and "| session_recall_any_at_5 |" in groups


FREE = "pipeline:replay:datasets/bundled/recordings/smollm2-135m-free.jsonl"
SCHEMA = "pipeline:replay:datasets/bundled/recordings/smollm2-135m-schema.jsonl"
DECODING = (
    "strict_validity",
    "empty_proposal_share",
    "nonempty_valid",
    "valid_after_repair",
    "hallucinated_ids",
    "extraction_recall",
    "extraction_precision",
    "budget_waste",
    "tokens_per_pass",
)


def constrained_decoding_table(example: Path) -> str:
    """The example README's table of what constrained decoding changed for SmolLM2,
    built from the committed metrics.json and compare.csv (this test keeps them equal)."""
    import pandas as pd

    rows = json.loads((example / "metrics.json").read_text())["metrics"]
    val = {(r["system"], r["metric"]): r for r in rows}
    cmp = pd.read_csv(example / "compare.csv")
    pair = cmp[(cmp.a == FREE) & (cmp.b == SCHEMA)].set_index("metric")

    def one(r):
        if r is None or r["value"] is None:
            return "undefined"
        v = r["value"]
        if isinstance(v, float) and v != v:
            return "undefined"
        return f"{v:.3f} (n={r['n']})"

    out = [
        "| metric | free-form | schema-constrained | free − schema [95% CI] "
        "| pairs/clusters | interval |",
        "|---|---|---|---|---|---|",
    ]
    for m in DECODING:
        d = pair.loc[m]
        diff = (
            "undefined"
            if pd.isna(d.value)
            else f"{d.value:+.3f}" + ("" if pd.isna(d.lo) else f" [{d.lo:+.3f}, {d.hi:+.3f}]")
        )
        out.append(
            f"| {m} | {one(val.get((FREE, m)))} | {one(val.get((SCHEMA, m)))} | {diff} "
            f"| {int(d.n)}/{int(d.clusters)} | {d.method} |"
        )
    return "\n".join(out) + "\n"


def test_the_example_states_what_constrained_decoding_changed():
    """Issue #17: reports/example compares SmolLM2 free-form and schema-constrained
    (replayed recordings) with paired intervals; the README's table is the committed
    numbers, not a hand copy that can drift."""
    example = REPO / "reports" / "example"
    manifest = json.loads((example / "manifest.json").read_text())
    assert FREE in manifest["systems"] and SCHEMA in manifest["systems"]
    assert constrained_decoding_table(example) in (example / "README.md").read_text()


def test_licence_is_an_spdx_string_with_a_setuptools_that_reads_it():
    """Issue #33 item 7. Was: `license = {text = "MIT"}` made the first install print four
    setuptools deprecation warnings; the SPDX string needs setuptools >= 77 to build."""
    import tomllib

    py = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert py["project"]["license"] == "MIT"
    floor = [r for r in py["build-system"]["requires"] if r.startswith("setuptools")]
    assert floor and re.fullmatch(r"setuptools>=(\d+)", floor[0])
    assert int(re.fullmatch(r"setuptools>=(\d+)", floor[0])[1]) >= 77
