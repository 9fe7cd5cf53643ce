"""Reports people read (issue #23): the headline table first with direction marks and
the best system in bold, a line per system of what failed, markdown rendered in
the HTML, an honest git line, and the HTML checked in a real headless browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_eval_data import write_tiny_dataset

from evals.report import build_report
from memkit.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tiny = write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")
    out = tmp_path_factory.mktemp("r") / "run"
    argv = ["eval", "run", "--dataset", str(tiny), "--out", str(out), "--embedder", "hashing"]
    assert main([*argv, "--consolidator", "heuristic", "--resamples", "20", "--quiet"]) == 0
    return out


def test_headline_table_comes_first_with_directions_and_best(run):
    md = (run / "report.md").read_text()
    assert md.index("## Headline") < md.index("![")  # was: below ~1,300 px of plots
    head = md[md.index("## Headline") : md.index("## What failed")]
    rows = [r for r in head.splitlines() if r.startswith("| ")][1:]
    assert any(r.startswith("| recall_at_8 ↑ |") for r in rows)
    assert any(r.startswith("| budget_waste ↓ |") for r in rows)
    assert "**" in head  # the best system per metric is marked
    recall = next(r for r in rows if r.startswith("| recall_at_8"))
    cells = [c.strip() for c in recall.strip("|").split("|")[1:]]
    values = [float(c.strip("*").split()[0]) for c in cells]
    bold = [c.startswith("**") for c in cells]
    assert bold == [v == max(values) for v in values]


def test_a_line_per_system_of_what_failed(run):
    md = (run / "report.md").read_text()
    part = md[md.index("## What failed") :].split("\n## ")[0]
    lines = [x for x in part.splitlines() if x.startswith("- `")]
    assert [x.split("`")[1] for x in lines] == ["heuristic", "store"]  # short labels
    assert not any("provider failed" in x or "embedder failed" in x for x in lines)


def test_what_failed_is_not_claimed_without_the_row_files(run, tmp_path):
    d = tmp_path / "summary-only"
    shutil.copytree(run, d)
    for f in ("probes.jsonl", "attempts.jsonl"):
        (d / f).unlink()
    md = build_report(d)[0].read_text()
    part = md[md.index("## What failed") :].split("\n## ")[0]
    assert "nothing failed" not in part and "not checked" in part


def test_html_renders_markdown_no_literal_backticks(run):
    html = (run / "report.html").read_text()
    text = re.sub(r"<[^>]+>", "", re.sub(r"src=\"data:[^\"]+\"", "", html))
    assert "`" not in text and "**" not in text  # was: literal backticks in the HTML
    assert "<code>store</code>" in html and "<strong>" in html


def test_git_line_is_honest_without_a_revision(run, tmp_path):
    """Was: the sweep report said "git `None`"."""
    d = tmp_path / "copy"
    shutil.copytree(run, d)
    m = json.loads((d / "manifest.json").read_text())
    m["git_revision"] = None
    (d / "manifest.json").write_text(json.dumps(m))
    md = build_report(d)[0].read_text()
    assert "None" not in md.split("\n## ")[0] and "git revision unknown" in md


def test_embedder_banner_opens_the_report(run, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(run, d)
    m = json.loads((d / "manifest.json").read_text())
    m["embedder_errors"] = {"probes": 3, "probes_total": 5, "calls": 3, "last": "boom"}
    (d / "manifest.json").write_text(json.dumps(m))
    md_path, html_path = build_report(d)
    md = md_path.read_text()
    assert md.splitlines()[2].startswith("> **Warning: the embedder failed** on 3 of 5 probes")
    html = html_path.read_text()
    assert html.index('class="banner"') < html.index("<table")


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome", "headless_shell"):
        path = shutil.which(name)
        if path:
            return path
    return None


CHECK = """<script>
window.addEventListener("load", () => {
  const imgs = [...document.images];
  const rows = document.querySelectorAll("table#headline tbody tr").length;
  const h2 = [...document.querySelectorAll("h2")].map(h => h.textContent);
  const head = document.querySelector("table#headline");
  const plot = document.querySelector(".plots img");
  document.body.setAttribute("data-check", JSON.stringify({
    rows, h2, images: imgs.length,
    loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    viewport: [window.innerWidth, window.innerHeight],
    page_width: document.documentElement.scrollWidth,
    headline_width: head ? head.getBoundingClientRect().width : null,
    first_plot_top: plot ? plot.getBoundingClientRect().top + window.scrollY : null,
  }));
});
</script>"""


def _chromium_or_skip() -> str:
    """Skips only outside CI when no Chromium is installed (.ci/run installs it and sets
    CI=1, so there a missing browser fails)."""
    exe = _chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Chromium (.ci/run installs it): none found on PATH")
        pytest.skip("no Chromium on PATH (apt-get install chromium; .ci/run does this in CI)")
    return exe


def _chromium_run(page, tmp_path, size: tuple[int, int], *args: str) -> str:
    exe = _chromium_or_skip()
    r = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--window-size={size[0]},{size[1]}",
            "--virtual-time-budget=10000",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _browser_check(
    html: str, tmp_path, size: tuple[int, int] = (1366, 768), *, check: str = CHECK, where=None
) -> dict:
    """Render `html` in headless Chromium at a window `size` and return what the page's
    own `check` script saw. `where`: the folder the page is rendered from (its
    relative links resolve there; default tmp_path)."""
    page = (where or tmp_path) / "checked.html"
    page.write_text(html.replace("</body>", check + "</body>"))
    out = _chromium_run(page, tmp_path, size, "--dump-dom")
    m = re.search(r'data-check="([^"]+)"', out)
    assert m, f"the page's check did not run: {out[:500]}"
    return json.loads(m.group(1).replace("&quot;", '"'))


SCREENSHOTS = Path(__file__).resolve().parents[1] / "reports" / "screenshots"
"""Where the browser tests keep their screenshots (CI artifacts; .ci/run prints the path)."""


def _screenshot(page: Path, tmp_path, size: tuple[int, int], name: str) -> Path:
    """The first screen of `page` at `size`, saved under SCREENSHOTS as `name`."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / name
    shot.unlink(missing_ok=True)
    _chromium_run(page, tmp_path, size, f"--screenshot={shot}")
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return shot


def test_report_renders_in_headless_chromium(run, tmp_path):
    """The HTML report in a real browser: the headline table is in the DOM, first, and
    every image loaded."""
    got = _browser_check((run / "report.html").read_text(), tmp_path)
    assert got["rows"] >= 5
    assert got["h2"][0].startswith("Headline")
    assert got["images"] >= 3 and got["loaded"] == got["images"]


def test_the_browser_check_sees_a_broken_image_and_a_missing_table(run, tmp_path):
    """The check above could fail: one corrupted image and a headline table without its
    id are what the browser reports (so a pass means the page really rendered)."""
    html = (run / "report.html").read_text()
    assert html.count('id="headline"') == 1 and "data:image/png;base64," in html
    html = html.replace("data:image/png;base64,", "data:image/png;base64,AAAA", 1)
    got = _browser_check(html.replace('id="headline"', 'id="other"'), tmp_path)
    assert got["images"] >= 3 and got["loaded"] == got["images"] - 1
    assert got["rows"] == 0


def _bar_figures(run, tmp_path, rendered_figures) -> list:
    """The three bar plots of `run`'s report, as build_report draws them."""
    d = tmp_path / "run"
    shutil.copytree(run, d)
    build_report(d)
    bars = ("Recall quality", "Budget waste", "Proposal validity")
    figs = [f for f in rendered_figures if f.axes[0].get_title().startswith(bars)]
    assert len(figs) == 3
    return figs


def test_plot_tick_labels_never_overlap(run, tmp_path, rendered_figures):
    """Every bar plot of the report, as build_report draws it: no two x tick labels
    intersect."""
    import itertools

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figs = _bar_figures(run, tmp_path, rendered_figures)
    for fig in figs:
        canvas = FigureCanvasAgg(fig)  # the report closed it: draw it again
        canvas.draw()
        renderer = canvas.get_renderer()
        (ax,) = fig.axes
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        assert len(boxes) >= 3
        assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))


def test_notebook_04_op_mix_labels_do_not_overlap(monkeypatch):
    """Was: notebook 04's op-mix x labels (long system names) overlapped. The cell's own
    code is drawn with the notebook's five systems."""
    import itertools

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import nbformat
    import numpy as np
    import pandas as pd

    nb = nbformat.read(
        Path(__file__).resolve().parents[1] / "notebooks" / "04_comparing_consolidators.ipynb", 4
    )
    cell = next(c for c in nb.cells if c.cell_type == "code" and "Op mix" in c.source)
    systems = [
        "matcher",
        "pipeline:heuristic",
        "pipeline:litellm:openai/gpt-4o",
        "pipeline:litellm:openai/gpt-4o-mini",
        "pipeline:oracle",
    ]
    metrics = pd.DataFrame(
        [
            {"system": s, "metric": m, "value": 0.3}
            for s in systems
            for m in ("op_add", "op_merge", "op_retract", "changes_per_proposal")
        ]
    )
    monkeypatch.setattr(plt, "show", lambda: None)
    plt.close("all")
    exec(cell.source, {"metrics": metrics, "SYSTEMS": systems, "plt": plt, "np": np})
    fig = plt.gcf()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    ticks = next(
        t
        for t in (ax.get_xticklabels(), ax.get_yticklabels())
        if any("heuristic" in x.get_text() for x in t)
    )
    boxes = [t.get_window_extent(renderer) for t in ticks]
    assert len(boxes) == 5
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    plt.close(fig)


def test_report_ignores_a_comparison_of_systems_not_in_the_run(run, tmp_path):
    """Was: a rerun kept an earlier run's compare.csv and the report showed "Paired
    comparisons" for systems not in the run."""
    d = tmp_path / "copy"
    shutil.copytree(run, d)
    (d / "compare.csv").write_text(
        "metric,a,b,value,lo,hi,n,unit,definition\n"
        "p_at_1,pipeline:old,pipeline:gone,0.1,0.0,0.2,10,probe,x\n"
    )
    md = build_report(d)[0].read_text()
    assert "pipeline:old" not in md and "Paired comparisons" not in md


def test_a_statistic_with_no_spread_reads_no_spread_not_a_collapsed_interval(run):
    """Each pass takes exactly 1 attempt here: [1.000, 1.000] would read as certainty."""
    rows = json.loads((run / "metrics.json").read_text())["metrics"]
    flat = [r for r in rows if r["lo"] == r["value"] == r["hi"]]
    assert any(r["metric"] == "attempts_per_pass" for r in flat)  # metrics.json keeps the ends
    md = (run / "report.md").read_text()
    line = next(r for r in md.splitlines() if r.startswith("| attempts_per_pass"))
    assert "1.000 [no spread]" in line and "[1.000, 1.000]" not in line
    assert "[no spread]: every unit agreed" in md


def test_no_spread_is_only_an_interval_whose_ends_meet_its_value():
    from evals.stats import no_spread

    assert no_spread(1.0, 1.0, 1.0) and no_spread(0.0, 0.0, 0.0)
    assert not no_spread(0.0, 0.0, 0.01) and not no_spread(float("nan"), 0.0, 0.0)
    assert not no_spread(0.5, None, None)


def test_per_group_tables_and_estimates_say_no_spread_too():
    """#32 finding 6: per-group tables (the committed longmemeval-oracle report's
    relevant_shut_out) and `Estimate.fmt` (the notebooks) printed 0.000 [0.000, 0.000]."""
    from evals.groups import table_rows
    from evals.stats import Estimate

    base = {"system": "store", "n": 72, "clusters": 72, "method": "cluster-robust t"}
    rows = [
        {**base, "group": "g1", "metric": "relevant_shut_out", "value": 0.0, "lo": 0.0, "hi": 0.0},
        {**base, "group": "g2", "metric": "relevant_shut_out", "value": 0.1, "lo": 0.0, "hi": 0.2},
    ]
    ((_, _, body),) = table_rows(rows)
    assert body[0][1].startswith("0.000 [no spread]") and "[0.000, 0.000]" not in body[0][1]
    assert body[0][2].startswith("0.100 [0.000, 0.200]")
    assert Estimate(1.0, 1.0, 1.0, 5).fmt() == "1.000 [no spread]"
    assert Estimate(0.5, 0.4, 0.6, 5).fmt() == "0.500 [0.400, 0.600]"
    repo = Path(__file__).resolve().parents[1]
    lme = (repo / "reports" / "longmemeval-oracle" / "report.md").read_text()
    assert "0.000 [0.000, 0.000]" not in lme and "[no spread]" in lme


# --- a report that fits a screen (issue #33 item 1) -------------------------------------

SIZES = ((1366, 768), (1920, 1080))
FREE = "pipeline:replay:datasets/bundled/recordings/smollm2-135m-free.jsonl"


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """`make eval`'s run: five systems, two of them named by long recording paths."""
    out = tmp_path_factory.mktemp("b") / "bundled"
    assert main(["eval", "run", "--preset", "bundled", "--out", str(out), "--quiet"]) == 0
    return out


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_report_fits_a_screen(bundled, tmp_path, size):
    """Was: at 1,366 px the headline table was 1,592 px wide (a column off-screen) and the
    first plot sat below 18 tables. Now the headline fits the window, nothing scrolls
    sideways and the first plot is within the first two screens; the first screen is
    kept as a screenshot."""
    got = _browser_check((bundled / "report.html").read_text(), tmp_path, size)
    width, height = got["viewport"]
    assert width == size[0] and 0.75 * size[1] <= height <= size[1]  # less the window frame
    assert got["rows"] >= 15 and got["h2"][0].startswith("Headline")
    assert got["headline_width"] <= width
    assert got["page_width"] <= width
    assert got["first_plot_top"] is not None and got["first_plot_top"] <= 2 * height
    _screenshot(bundled / "report.html", tmp_path, size, f"report-{size[0]}x{size[1]}.png")


def test_the_screen_check_sees_a_table_too_wide_and_a_plot_too_far(bundled, tmp_path):
    """The measurements above could fail: a headline forced to 1,600 px and 3,000 px of
    text before the plots are what the browser reports."""
    html = (bundled / "report.html").read_text()
    html = html.replace("</style>", "#headline{width:1600px;max-width:none}</style>")
    html = html.replace(
        '<div class="plots">', '<div style="height:3000px"></div><div class="plots">'
    )
    got = _browser_check(html, tmp_path, (1366, 768))
    assert got["headline_width"] >= 1600 and got["page_width"] > 1366
    assert got["first_plot_top"] > 2 * 768


def test_systems_have_short_labels_with_the_full_spec_on_hover_and_in_a_legend(bundled):
    """Was: system names were whole recording paths in every header."""
    html = (bundled / "report.html").read_text()
    head = html[html.index('<table id="headline">') : html.index("</thead>")]
    assert FREE not in re.sub(r'title="[^"]*"', "", head)  # only on hover
    assert f'title="{FREE}">' in head and "smollm2-135m-free</th>" in head
    legend = html[html.index('<table id="systems">') :].split("</table>")[0]
    assert f"<code>{FREE}</code>" in legend and "smollm2-135m-free" in legend
    md = (bundled / "report.md").read_text()
    header = next(x for x in md.splitlines() if x.startswith("| metric |"))
    assert "recordings/" not in header and "| store |" in header
    assert f"| smollm2-135m-free | {FREE} |" in md


def test_one_colour_per_system_across_plots_and_legends_beside_the_bars(
    bundled, tmp_path, rendered_figures
):
    """Was: one system had different colours in different plots (a system missing from
    a plot shifted the others) and legends covered bars."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_hex

    figs = _bar_figures(bundled, tmp_path, rendered_figures)
    seen: dict[str, set[str]] = {}
    for fig in figs:
        (ax,) = fig.axes
        for c in ax.containers:
            if hasattr(c, "patches"):
                seen.setdefault(c.get_label(), set()).update(
                    to_hex(p.get_facecolor()) for p in c.patches
                )
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        legend = ax.get_legend().get_window_extent(canvas.get_renderer())
        assert not legend.overlaps(ax.get_window_extent(canvas.get_renderer()))
    assert all(len(c) == 1 for c in seen.values()), seen  # one colour per system
    assert len({next(iter(c)) for c in seen.values()}) == len(seen) == 5  # none shared
    # the free replay has no budget_waste: it is missing from that plot, colours unmoved
    waste = next(f for f in figs if f.axes[0].get_title().startswith("Budget"))
    assert "smollm2-135m-free" not in [c.get_label() for c in waste.axes[0].containers]


def test_details_are_collapsed_by_section_below_the_first_screen(bundled):
    """Was: 18 tables and 354 rows, all open. The headline, what failed, the plots and
    the systems legend are open; every other section is a closed <details>."""
    html = (bundled / "report.html").read_text()
    top = html[: html.index("<details>")]
    for part in ('id="headline"', "<h2>What failed</h2>", 'class="plots"', 'id="systems"'):
        assert part in top
    rest = html[html.index("<details>") :]
    assert rest.count("<details>") >= 8 and "<details open" not in html
    assert rest.count("<table") == rest.count("<details>")  # each table in a section


def test_what_failed_flags_a_metric_at_its_worst_value_and_an_undefined_headline(bundled):
    """Was: "nothing failed" for a replay whose strict_validity is 0.000."""
    md = (bundled / "report.md").read_text()
    part = md[md.index("## What failed") :].split("\n## ")[0]
    free = next(x for x in part.splitlines() if x.startswith("- `smollm2-135m-free`"))
    assert "nothing failed" not in free
    assert "strict_validity ↑ 0.000" in free and "recall_at_8 ↑ 0.000" in free
    assert "undefined headline: budget_waste ↓" in free
    schema = next(x for x in part.splitlines() if x.startswith("- `smollm2-135m-schema`"))
    assert "budget_waste ↓ 1.000" in schema  # lower is better: 1 is its worst
    assert "strict_validity" not in schema  # 0.799 is no failure


def _with_metric(run, tmp_path, system: str, metric: str, value) -> str:
    d = tmp_path / "copy"
    shutil.copytree(run, d)
    metrics = json.loads((d / "metrics.json").read_text())
    row = next(r for r in metrics["metrics"] if (r["system"], r["metric"]) == (system, metric))
    row.update(value=value, lo=value, hi=value)
    (d / "metrics.json").write_text(json.dumps(metrics))
    md = build_report(d)[0].read_text()
    return md[md.index("## What failed") :].split("\n## ")[0]


@pytest.mark.parametrize(
    ("metric", "value", "flagged"),
    [
        ("recall_at_8", 0.0, "recall_at_8 ↑ 0.000"),  # higher is better: 0 is the worst
        ("recall_at_8", 0.001, None),  # one step past it
        ("supersede_leakage", 1.0, "supersede_leakage ↓ 1.000"),  # a share: 1 is the worst
        ("supersede_leakage", 0.999, None),
        ("offtopic_bytes", 1e9, None),  # an unbounded count has no worst value
        ("recall_at_8", None, "undefined headline: recall_at_8 ↑"),
        ("recall_at_8_random", 0.0, None),  # a baseline at 0 is no failure of the system
        ("recall_at_8_full", 0.0, None),
    ],
)
def test_worst_value_bounds(run, tmp_path, metric, value, flagged):
    part = _with_metric(run, tmp_path, "store", metric, value)
    store = next(x for x in part.splitlines() if x.startswith("- `store`"))
    if flagged:
        assert flagged in store
    else:
        assert f"{metric} " not in store


def test_short_labels_are_stable_unique_and_bounded():
    from evals.labels import MAX_LABEL, colours, labels, short_label

    assert short_label("store") == "store"
    assert short_label("pipeline:heuristic") == "heuristic"
    assert short_label(FREE) == "smollm2-135m-free"
    assert short_label("pipeline:replay:reports/runs/gpt/") == "gpt"
    assert short_label("pipeline:litellm:openai/gpt-4o-mini") == "gpt-4o-mini"
    assert short_label("pipeline:litellm:hosted_vllm/org/m") == "m"
    at = "x" * MAX_LABEL
    assert short_label(f"pipeline:{at}") == at  # at the bound: kept
    past = short_label(f"pipeline:{at}y")  # one past: cut, marked
    assert len(past) == MAX_LABEL and past.endswith("…")
    two = labels(["pipeline:replay:a/m.jsonl", "pipeline:replay:b/m.jsonl", "pipeline:m"])
    assert list(two.values()) == ["m", "m #2", "m #3"]
    systems = [f"pipeline:s{i}" for i in range(11)]
    assert labels(systems) == labels(systems)  # stable
    c = colours(systems)
    assert len(set(list(c.values())[:10])) == 10 and c["pipeline:s10"] == c["pipeline:s0"]


# --- the index of runs (issue #33 item 2) ------------------------------------------------

INDEX_CHECK = """<script>
window.addEventListener("load", () => {
  const rows = () => [...document.querySelectorAll("table#runs tbody tr")];
  const th = [...document.querySelectorAll("table#runs th")];
  const col = th.findIndex(t => t.textContent.startsWith("recall_at_8"));
  const values = () => rows().map(r => r.children[col].dataset.v).filter(v => v !== "")
    .map(Number);
  th[col].click();
  const up = values();
  th[col].click();
  const down = values();
  const runs = [...new Set(rows().map(r => r.dataset.run))];
  document.body.setAttribute("data-check", JSON.stringify({
    runs, up, down, rows: rows().length,
    incomplete: [...new Set(rows().filter(r => r.dataset.status === "incomplete")
      .map(r => r.dataset.run))],
    links: new Set([...document.querySelectorAll("table#runs a")]
      .map(a => a.getAttribute("href"))).size,
    page_width: document.documentElement.scrollWidth, viewport: window.innerWidth,
  }));
});
</script>"""


def test_the_html_index_of_runs_opens_with_every_run_present(
    run, bundled, tmp_path, monkeypatch, capsys
):
    """`memkit eval list --html` writes one self-contained page of every run under
    reports/ (finished and incomplete), sortable by any column, each run linking its
    report; opened in headless Chromium, every run is there and sorting works."""
    from evals.runfolder import INCOMPLETE

    reports = tmp_path / "reports"
    shutil.copytree(bundled, reports / "latest")
    shutil.copytree(run, reports / "runs" / "a")
    shutil.copytree(run, reports / "runs" / "killed")
    (reports / "runs" / "killed" / INCOMPLETE).write_text('{"started_at": "x"}')
    (reports / "runs" / "early" / "units").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["eval", "list", "--html"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "index of 4 runs written to reports/index.html"
    )
    page = reports / "index.html"
    html = page.read_text()
    assert "src=" not in html and "<link" not in html  # self-contained
    for href in re.findall(r'href="([^"]+)"', html):  # every link resolves
        assert (page.parent / href).exists(), href
    got = _browser_check(html, tmp_path, check=INDEX_CHECK, where=reports)
    assert sorted(got["runs"]) == sorted(
        f"reports/{x}" for x in ("latest", "runs/a", "runs/killed", "runs/early")
    )
    assert sorted(got["incomplete"]) == ["reports/runs/early", "reports/runs/killed"]
    assert got["rows"] == 5 + 2 + 2 + 1  # one row per system; an empty run one row
    assert got["links"] == 4
    assert len(got["up"]) >= 7 and got["up"] == sorted(got["up"])
    assert got["down"] == sorted(got["up"], reverse=True)
    assert got["page_width"] <= got["viewport"]
    _screenshot(page, tmp_path, (1366, 768), "index-1366x768.png")


def test_a_baseline_marks_no_system_best():
    """The headline bolds the best system per metric; a full or random ranking's
    figure scores no system, so its row bolds none (it did once baselines joined)."""
    from evals.headline import best_in

    values = {"store": 0.56, "oracle": 0.59}
    assert best_in("recall_at_8", values) == {"oracle"}
    assert best_in("recall_at_8_random", values) == set()
    assert best_in("recall_at_8_full", values) == set()
