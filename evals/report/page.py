"""The report as a page: markdown, and self-contained HTML laid out for a screen (the
headline compact enough for 1,366 px, short labels with the full spec on hover, every
table below the plots a collapsed <details>)."""

from __future__ import annotations

import base64
import html

from evals.labels import colours, labels
from evals.report.first import Front
from evals.report.fmt import LEGEND, html_table, inline, md_table

HEADLINE_TITLE = "Headline: which system is better on what (value [95% CI]; best in bold)"


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1800px;margin:1em auto;padding:0 1em;"
    "line-height:1.35}"
    "h1{font-size:1.5em;margin:0.3em 0}h2{font-size:1.15em;margin:0.8em 0 0.3em}"
    "table{border-collapse:collapse;margin:0.4em 0;font-size:0.85em}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}img{max-width:100%}"
    "#headline{max-width:100%}#headline td,#headline th{overflow-wrap:anywhere}"
    "#headline span,#headline small{white-space:nowrap}"
    "@media (max-width:1700px){#headline small{display:none}}"
    "#headline small,.note,.meta{color:#555}.note,.meta{font-size:0.85em;margin:0.3em 0}"
    ".sw{display:inline-block;width:0.8em;height:0.8em;margin-right:0.3em;"
    "vertical-align:baseline;border:1px solid #0003}"
    ".plots{display:flex;flex-wrap:wrap;gap:0.5em}.plots figure{margin:0;flex:0 1 650px}"
    "details{margin:0.2em 0}summary{cursor:pointer}summary h2{display:inline;font-size:1em}"
    ".wrap{max-width:100%;overflow-x:auto}"
    ".banner{background:#fde2e1;border:2px solid #c0392b;padding:0.6em 1em}"
)


def md_cells(cells: list[list[tuple[str, str, bool]]]) -> list[list[str]]:
    def one(main: str, sub: str, bold: bool) -> str:
        text = f"{main} {sub}".strip()
        return f"**{text}**" if bold else text

    return [[one(*c) for c in row] for row in cells]


def _swatch(colour: str) -> str:
    return f'<span class="sw" style="background:{colour}"></span>'


def html_headline(cells: list[list[tuple[str, str, bool]]], systems: list[str]) -> str:
    """The headline table: short labels (full spec on hover) over a colour swatch each,
    a value [CI] line and a small method/n line per cell, so it fits a 1,366 px screen."""
    name, colour = labels(systems), colours(systems)
    th = "<th>metric</th>" + "".join(
        f'<th title="{html.escape(s)}">{_swatch(colour[s])}{html.escape(name[s])}</th>'
        for s in systems
    )

    def td(main: str, sub: str, bold: bool) -> str:
        approx = "≈" if "≈" in sub else ""  # fewer than 10 clusters: always in sight
        text = inline(main) + approx
        text = f"<strong>{text}</strong>" if bold else text
        if not sub:
            return f"<td>{text}</td>"
        sub = sub.replace("≈", "")
        return (
            f'<td title="{html.escape(sub)}"><span>{text}</span> <small>{inline(sub)}</small></td>'
        )

    trs = "".join("<tr>" + "".join(td(*c) for c in row) + "</tr>" for row in cells)
    return f'<table id="headline"><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>'


def html_legend(legend: list[list[str]], systems: list[str]) -> str:
    colour = colours(systems)
    rows = "".join(
        f"<tr><td>{_swatch(colour[s])}{html.escape(label)}</td><td><code>"
        f"{html.escape(s)}</code></td><td>{inline(what)}</td></tr>"
        for (label, s, what) in legend
    )
    head = "<tr><th>label</th><th>system (full spec)</th><th>what it is</th></tr>"
    return f'<table id="systems"><thead>{head}</thead><tbody>{rows}</tbody></table>'


Plot = tuple[str, str, bytes]
"""(file name, caption, PNG bytes)."""


def markdown(front: Front, names: dict[str, str], plots: list[Plot], sections: list) -> str:
    """report.md: the first screen, the plots, the systems legend, then every section."""
    md = ["# memkit evaluation report", ""]
    md += [f"> {b}\n" for b in front.banner]
    md += [*front.lines, ""]
    if front.cells:
        md += [
            f"## {HEADLINE_TITLE}",
            "",
            md_table(md_cells(front.cells), ["metric", *names.values()]),
        ]
        md += ["", LEGEND, ""]
    md += ["## What failed", "", *(f"- {x}" for x in front.failed), ""]
    for name, caption, _ in plots:
        md += [f"![{caption}]({name})", ""]
    md += ["## Systems", "", md_table(front.legend, ["label", "system", "what it is"]), ""]
    for title, h, rows in sections:
        md += [f"## {title}", "", md_table(rows, h), ""]
    return "\n".join(md)


def html_page(front: Front, systems: list[str], plots: list[Plot], sections: list) -> str:
    """report.html, self-contained: plots inlined, every section a collapsed <details>."""
    body = ["<h1>memkit evaluation report</h1>"]
    body += [f'<p class="banner" role="alert">{inline(b)}</p>' for b in front.banner]
    body += [f'<p class="meta">{inline(x)}</p>' for x in front.lines]
    if front.cells:
        body.append(f"<h2>{inline(HEADLINE_TITLE)}</h2>")
        body.append(html_headline(front.cells, systems))
        body.append(
            f'<p class="note">{inline(LEGEND)} Headline cells show their interval code and n '
            "beside the value on a wide screen and on hover on any screen.</p>"
        )
    failed = "".join(f"<li>{inline(x)}</li>" for x in front.failed)
    body.append(f"<h2>What failed</h2><ul>{failed}")
    body.append('</ul><div class="plots">')
    for _, caption, png in plots:
        b64 = base64.b64encode(png).decode("ascii")
        body.append(
            f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{b64}"></figure>'
        )
    body.append("</div><h2>Systems</h2>" + html_legend(front.legend, systems))
    for title, h, rows in sections:
        body.append(
            f"<details><summary><h2>{inline(title)}</h2> <small>({len(rows)} rows)</small>"
            f'</summary><div class="wrap">{html_table(rows, h)}</div></details>'
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>memkit evaluation report</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
