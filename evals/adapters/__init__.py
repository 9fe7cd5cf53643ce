"""Adapters from public benchmarks to memkit's dataset records.

Each adapter reads the data in place from a path the user gives (the file,
its folder, or the folder of all public datasets) and copies nothing into the
repository. The conversation adapters return the same `Dataset` the bundled
data loads into, so store mode and pipeline mode run on them unchanged; the
pair adapters return lists of `Pair`. One module per source, each stating its
mapping and what it leaves out; `shared` holds the little they have in common.
`check_dataset` passes on every result.
"""

from evals.adapters.locomo import load_locomo
from evals.adapters.longmemeval import load_longmemeval
from evals.adapters.msc import MSC_FOLD_MIN, MSC_SESSION3_START, load_msc
from evals.adapters.pairs import load_mrpc, load_paws, load_stsb
from evals.adapters.swe_agent import load_swe_agent
from evals.adapters.tau_bench import load_tau_bench
from evals.datasets import pairs_frame

__all__ = [
    "MSC_FOLD_MIN",
    "MSC_SESSION3_START",
    "load_locomo",
    "load_longmemeval",
    "load_mrpc",
    "load_msc",
    "load_paws",
    "load_stsb",
    "load_swe_agent",
    "load_tau_bench",
    "pairs_frame",
]
