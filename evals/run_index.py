"""`memkit eval list --html`: one self-contained, sortable page of every run.

One row per (run, system) with the run's status, start, dataset and the
`INDEX_METRICS` as "value [95% CI]", the run's name linking its report.html
(relative to the page, so the folder can move as a whole); an incomplete run
is one row marked so. Sorting is a few lines of inline script on each column
header (numbers by value, text by text); nothing is loaded from elsewhere.
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path
from typing import Any

from evals import registry
from evals.labels import labels
from evals.runs import FINISHED, read_run, status, summary

INDEX_METRICS = ("recall_at_8", "p_at_1", "budget_waste", "strict_validity", "extraction_recall")
"""The headline metrics the index shows per system."""

SCRIPT = """
document.querySelectorAll("table#runs th").forEach((th, col) => {
  th.addEventListener("click", () => {
    const body = th.closest("table").tBodies[0];
    const up = th.getAttribute("aria-sort") !== "ascending";
    th.closest("tr").querySelectorAll("th").forEach(h => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", up ? "ascending" : "descending");
    const key = tr => tr.children[col].dataset.v ?? tr.children[col].textContent.trim();
    const rows = [...body.rows].sort((a, b) => {
      const x = key(a), y = key(b);
      if (x === "" || y === "") return (x === "") - (y === "");  // blanks last
      const n = Number(x) - Number(y);
      return (isNaN(n) ? String(x).localeCompare(String(y)) : n) * (up ? 1 : -1);
    });
    body.append(...rows);
  });
});
"""
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1em;line-height:1.35}"
    "table{border-collapse:collapse;font-size:0.85em}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3;cursor:pointer;user-select:none}"
    "th[aria-sort=ascending]::after{content:' ▲'}th[aria-sort=descending]::after{content:' ▼'}"
    "tr.incomplete td{color:#a04000}.wrap{max-width:100%;overflow-x:auto}"
    "td[data-v]{white-space:nowrap}"
)


def _cell(r: dict[str, Any] | None) -> str:
    """A metric cell: the value (data-v, for sorting) and its interval."""
    v = None if r is None else r.get("value")
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return '<td data-v="">—</td>' if r is None else '<td data-v="">n/a</td>'
    assert r is not None  # a None row has no value, above
    lo, hi = r.get("lo"), r.get("hi")
    ci = "" if lo is None or hi is None else f" [{lo:.3f}, {hi:.3f}]"
    return f'<td data-v="{v!r}">{v:.3f}{ci}</td>'


def _rows(d: Path, page: Path) -> list[str]:
    info = summary(d)
    target = d / "report.html" if (d / "report.html").is_file() else d
    href = html.escape(Path(os.path.relpath(target, page.parent)).as_posix())
    state = info["status"]
    when = info["started"]
    first = (
        f'<td><a href="{href}" title="{html.escape(str(d))}">{html.escape(info["run"])}</a></td>'
        f'<td>{html.escape(state)}</td><td data-v="{html.escape(when)}">'
        f"{html.escape(when.replace('T', ' ')[:16])}</td>"
        f"<td>{html.escape(info['dataset'])}</td>"
    )
    attrs = f'data-run="{html.escape(str(d))}" data-status="{html.escape(state)}"'
    cls = "" if state == FINISHED else ' class="incomplete"'
    try:
        manifest, rows = read_run(d)
    except (OSError, ValueError, KeyError, TypeError):
        manifest, rows = {}, []
    systems = list(manifest.get("systems") or sorted({r["system"] for r in rows}))
    if not systems or not rows:
        blank = '<td data-v="">—</td>' * len(INDEX_METRICS)
        return [f"<tr {attrs}{cls}>{first}<td>—</td>{blank}</tr>"]
    name = labels(systems)
    at = {(r["system"], r["metric"]): r for r in rows}
    return [
        f"<tr {attrs}{cls}>{first}"
        f'<td title="{html.escape(s)}">{html.escape(name[s])}</td>'
        + "".join(_cell(at.get((s, m))) for m in INDEX_METRICS)
        + "</tr>"
        for s in systems
    ]


def write_index(runs: list[Path], page: Path) -> Path:
    """Write the index page of `runs` to `page` (its folder is made); returns it."""
    page.parent.mkdir(parents=True, exist_ok=True)
    head = ["run", "status", "started", "dataset", "system"]
    head += [f"{m} {registry.get(m).mark}" for m in INDEX_METRICS]
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(row for d in runs for row in _rows(d, page))
    done = sum(status(d) == FINISHED for d in runs)
    doc = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>memkit runs</title><style>{STYLE}</style></head><body>"
        f"<h1>memkit runs</h1><p>{len(runs)} runs ({done} finished, {len(runs) - done} "
        "incomplete or unreadable); click a column header to sort; values are "
        "value [95% CI]; a run's name opens its report.</p>"
        f'<div class="wrap"><table id="runs"><thead><tr>{th}</tr></thead>'
        f"<tbody>{body}</tbody></table></div><script>{SCRIPT}</script></body></html>\n"
    )
    page.write_text(doc, encoding="utf-8")
    return page
