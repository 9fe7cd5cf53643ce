"""Markdown + self-contained HTML report, built only from a run folder's files.

Reads `manifest.json`, `metrics.json`, `latency.json`, `spend.json`, `matcher.json` and
(when present) `sweep.csv` / `compare.csv`; writes `report.md`, `report.html`
(plots inlined as base64 PNG, no external assets) and the PNGs themselves.
Every number is "value [95% CI]" with the interval's method (a short code,
`METHOD_CODES`), n as units/clusters and "≈" when fewer than 10 clusters make
the interval approximate; every metric name carries its direction mark (↑
higher is better, ↓ lower is better, · neither) and the per-system tables its
definition. Every plot has a title, labelled axes with units and a legend when
it has more than one series. A metric name that is not registered is an error.

The parts: `fmt` (one number, one name, one table), `plots`, `first` (the first
screen: headline, what failed, systems), `sections` (one builder per section
below the plots, `BUILDERS`), `page` (markdown and HTML) and `text` (the
headline as plain text for a terminal).
"""

from __future__ import annotations

from pathlib import Path

from evals import registry
from evals.report.first import front
from evals.report.fmt import LEGEND, METHOD_CODES, usd
from evals.report.page import html_page, markdown
from evals.report.plots import RECALL_PLOT, VALIDITY_PLOT, WASTE_PARTS, draw
from evals.report.sections import BUILDERS, read
from evals.report.text import headline_text, sweep_text, text_table

__all__ = [
    "BUILDERS",
    "LEGEND",
    "METHOD_CODES",
    "RECALL_PLOT",
    "VALIDITY_PLOT",
    "WASTE_PARTS",
    "build_report",
    "headline_text",
    "sweep_text",
    "text_table",
    "usd",
]


def build_report(run_dir: str | Path) -> tuple[Path, Path]:
    """Write report.md and report.html for a run folder; returns their paths."""
    run = read(run_dir)
    for m in [*run.table["metric"], *RECALL_PLOT, *WASTE_PARTS, *VALIDITY_PLOT]:
        registry.get(m)  # a report names registered metrics only
    plots = draw(run)
    first = front(run)
    sections = [s for build in BUILDERS for s in build(run)]
    md_path, html_path = run.d / "report.md", run.d / "report.html"
    md_path.write_text(markdown(first, run.names, plots, sections), encoding="utf-8")
    html_path.write_text(html_page(first, run.systems, plots, sections), encoding="utf-8")
    return md_path, html_path
