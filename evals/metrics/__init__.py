"""Every reported metric, registered once by the module of its family.

- `probe`: ranking metrics with their two baselines, the block (waste, leakage,
  off-topic silence, shut-out, clamp);
- `fold`: fold-in (writes, labelled fold groups) and paraphrase dedup in the block;
- `pipeline`: consolidation attempts and passes (validity, op mix, tokens,
  cost), extraction and rollouts, and the names computed outside a unit
  (latency, the matcher's accuracy).

`evals.registry.METRIC_MODULES` imports them in this order, which is the order
every table lists metrics in. A new metric is one registration in its family's
module (see CONTRIBUTING, "Adding a metric").
"""
