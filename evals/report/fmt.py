"""How the report writes one number, one metric name and one table: "value [95% CI]"
with the interval's method code and n, money in significant figures, the direction
mark on every metric name, markdown and HTML tables."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

from evals import registry
from evals.stats import NO_SPREAD, WORST_COVERAGE, approximate, fmt_interval, no_spread


def named(metric: str) -> str:
    """A metric name with its direction mark; an unregistered name is an error."""
    return f"{metric} {registry.get(metric).mark}"


def load(run_dir: Path, name: str) -> Any:
    p = run_dir / name
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def usd(x: float) -> str:
    """Dollars with three significant figures, never rounded to zero: $0.000289, $1.50."""
    if not x:
        return "$0"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"${x:,.{decimals}f}"


def fmt_metric(metric: str, v: Any, lo: Any, hi: Any, digits: int = 3) -> str:
    """`fmt`, with money in significant figures (a cost shown as 0.000 hides it)."""
    if registry.get(metric).family != "usd" or v is None or v != v:
        return fmt(v, lo, hi, digits)
    if lo is None or hi is None or lo != lo:
        return usd(v)
    if no_spread(v, lo, hi):
        return f"{usd(v)} [{NO_SPREAD}]"
    return f"{usd(v)} [{usd(lo)}, {usd(hi)}]"


METHOD_CODES: dict[str, str] = {
    "Wilson": "W",
    "Wilson, design effect": "Wd",
    "cluster-robust t": "t",
    "cluster-robust t, log scale": "lt",
    "paired cluster-robust t": "pt",
    "paired MOVER (Wilson, design effect)": "M",
    "percentile bootstrap": "B",
    "no interval (1 cluster)": "no CI",
    "undefined (no unit defines it)": "undefined",
}


LEGEND = (
    "Intervals are 95%, chosen per metric (evals/stats.py): "
    + ", ".join(f"{c} = {m}" for m, c in METHOD_CODES.items())
    + ". n is units/clusters (units: probes, attempts, ...; clusters: scopes, the independent "
    "draws; one number: independent units); ≈ marks an approximate interval (fewer than 10 "
    "clusters, or a clustered share below 0.1 or above 0.9), whose simulated coverage fell to "
    f"{WORST_COVERAGE:.3f} in the hardest regime (docs/coverage.md). [no spread]: every unit "
    "agreed, so there is no interval to draw (metrics.json keeps its ends, equal to the value)."
)


def n_text(r: Any) -> str:
    """Method code, n as units/clusters and the approximate mark of one row."""
    get = r.get if isinstance(r, dict) else (lambda k, d=None: getattr(r, k, d))
    method, n, k = get("method", ""), get("n", None), get("clusters", None)
    if n is None or (isinstance(n, float) and math.isnan(n)) or int(n) == 0:
        return ""
    code = METHOD_CODES.get(str(method), str(method) if method else "")
    k = None if k is None or (isinstance(k, float) and math.isnan(k)) else int(k)
    size = f"{int(n)}" if not k or k == int(n) else f"{int(n)}/{k}"
    approx = "≈" if approximate(str(method), get("value", None), k) else ""
    return " ".join(x for x in (code, f"n={size}{approx}") if x)


def cell(r: Any, digits: int = 3) -> str:
    get = r.get if isinstance(r, dict) else (lambda k, d=None: getattr(r, k, d))
    metric = get("metric")
    v, lo, hi = get("value"), get("lo"), get("hi")
    text = fmt_metric(metric, v, lo, hi, digits) if metric else fmt(v, lo, hi, digits)
    return f"{text} {n_text(r)}".strip()


def fmt(v: Any, lo: Any, hi: Any, digits: int = 3) -> str:
    return fmt_interval(v, lo, hi, digits)


def ci(m: dict[str, Any], key: str) -> tuple[Any, Any, Any]:
    ci = m.get(f"{key}_ci") or {}
    return m.get(key), ci.get("lo"), ci.get("hi")


def md_table(rows: list[list[str]], head: list[str]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def html_table(rows: list[list[str]], head: list[str], id_: str | None = None) -> str:
    th = "".join(f"<th>{inline(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in rows)
    attr = f' id="{id_}"' if id_ else ""
    return f"<table{attr}><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def inline(text: str) -> str:
    """HTML for one line of the report's markdown: escaped, `code` and **bold** rendered."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def point_text(p: Any) -> str:
    """A grid point as tables and titles show it: `0.25` for a number, the name
    itself for a categorical value (`relevant`)."""
    try:
        return f"{float(p):g}"
    except (TypeError, ValueError):
        return str(p)
