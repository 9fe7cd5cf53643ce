"""Static checks over the committed notebooks (the .ipynb JSON, no kernel).

nbval (`make test`) re-executes the notebooks and compares outputs; these
checks catch what nbval cannot: a notebook that states no question or no
answer, is not seeded, was committed without outputs or out of order, or
draws a plot a reader cannot interpret (no title, unlabelled axes, several
series without a legend).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
FIGURE_CALLS = {"subplots", "figure"}
SERIES_CALLS = {"plot", "scatter", "bar", "barh", "hist", "errorbar", "step", "fill_between"}
TITLE = {"set_title", "title", "suptitle"}
XLABEL = {"set_xlabel", "xlabel"}
YLABEL = {"set_ylabel", "ylabel"}
VOLATILE = [
    re.compile(r"0x[0-9a-f]{6,16}"),  # memory addresses
    re.compile(r"/(tmp|var|private|home|work)/\S+"),  # machine paths
    re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}"),  # wall-clock times
]


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def tags(cell: dict) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


# --- the checks (pure functions of the notebook JSON, tested below) -------------------


def question_problem(nb: dict) -> str | None:
    cells = nb["cells"]
    if not cells or cells[0]["cell_type"] != "markdown":
        return "first cell is not markdown"
    if "**Question:**" not in source(cells[0]):
        return "first cell does not state a **Question:**"
    return None


def answer_problem(nb: dict) -> str | None:
    cells = nb["cells"]
    if not cells or cells[-1]["cell_type"] != "markdown":
        return "last cell is not markdown"
    text = source(cells[-1]).strip()
    if not text.startswith("## Answer"):
        return "last cell does not start with '## Answer'"
    if len(text.removeprefix("## Answer").strip()) < 80:
        return "answer cell states no answer (too short)"
    return None


def seed_problem(nb: dict) -> str | None:
    code = "\n".join(source(c) for c in code_cells(nb))
    for needle in ("SEED =", "random.seed(SEED)", "np.random.seed(SEED)"):
        if needle not in code:
            return f"not seeded: missing {needle!r}"
    return None


def outputs_problem(nb: dict) -> str | None:
    cells = code_cells(nb)
    counts = [c.get("execution_count") for c in cells]
    if counts != list(range(1, len(cells) + 1)):
        return f"not executed top to bottom in one session: execution counts {counts}"
    if not any(c.get("outputs") for c in cells):
        return "no outputs committed"
    for i, c in enumerate(cells, start=1):
        for o in c.get("outputs", []):
            if o.get("output_type") == "error":
                return f"code cell {i} has an error output"
            if o.get("output_type") == "stream" and o.get("name") == "stderr":
                return f"code cell {i} writes to stderr (warnings or logs are volatile)"
    return None


def _text_outputs(cell: dict) -> str:
    parts = []
    for o in cell.get("outputs", []):
        text = o.get("text") or o.get("data", {}).get("text/plain", "")
        parts.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(parts)


def volatile_problem(nb: dict) -> str | None:
    """Compared outputs must not hold paths, addresses or times (nbval would flap)."""
    for i, c in enumerate(code_cells(nb), start=1):
        if "nbval-ignore-output" in tags(c):
            continue
        text = _text_outputs(c)
        for rx in VOLATILE:
            m = rx.search(text)
            if m:
                return f"code cell {i} prints volatile text {m.group(0)!r}"
    return None


def _called(node: ast.AST) -> list[tuple[str, ast.Call]]:
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            out.append((name, n))
    return out


def _plot_scopes(tree: ast.Module) -> list[ast.AST]:
    """Function bodies that draw, plus the top level (minus those functions)."""
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    top = ast.Module(
        body=[s for s in tree.body if not isinstance(s, ast.FunctionDef)], type_ignores=[]
    )
    return [*funcs, top]


def plot_problems(nb: dict) -> list[str]:
    """Every scope that creates a figure sets a title and both axis labels, and
    uses a legend when it draws more than one labelled series."""
    problems = []
    for i, c in enumerate(code_cells(nb), start=1):
        try:
            tree = ast.parse(source(c))
        except SyntaxError as exc:
            problems.append(f"code cell {i} does not parse: {exc}")
            continue
        for scope in _plot_scopes(tree):
            calls = _called(scope)
            names = {n for n, _ in calls}
            if not names & FIGURE_CALLS:
                continue
            where = f"code cell {i}" + (
                f" (function {scope.name})" if isinstance(scope, ast.FunctionDef) else ""
            )
            for need, what in ((TITLE, "a title"), (XLABEL, "an x label"), (YLABEL, "a y label")):
                if not names & need:
                    problems.append(f"{where}: plot without {what}")
            labelled = sum(
                1
                for n, call in calls
                if n in SERIES_CALLS and any(k.arg == "label" for k in call.keywords)
            )
            looped = any(isinstance(n, ast.For) for n in ast.walk(scope))
            if (labelled > 1 or (labelled and looped)) and "legend" not in names:
                problems.append(f"{where}: several series without a legend")
            if "show" not in names:
                problems.append(f"{where}: figure not closed with plt.show()")
    return problems


def ignore_problem(nb: dict) -> str | None:
    """Output comparison is skipped only for cells whose output depends on the
    environment (the shared public datasets), never to hide flaky output."""
    for i, c in enumerate(code_cells(nb), start=1):
        if "nbval-ignore-output" in tags(c) or "nbval-skip" in tags(c):
            text = source(c)
            if "public" not in text and "SHARED" not in text:
                return f"code cell {i} ignores its output but does not read shared datasets"
            if "nbval-skip" in tags(c):
                return f"code cell {i} is skipped by nbval (it must still execute)"
    return None


# --- the committed notebooks ---------------------------------------------------------


def test_the_five_notebooks_exist():
    names = [p.name for p in PATHS]
    assert len(names) == 5, names
    for prefix in ("01_", "02_", "03_", "04_", "05_"):
        assert any(n.startswith(prefix) for n in names), (prefix, names)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_notebook_structure(path: Path):
    nb = load(path)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    problems = [
        p
        for p in (
            question_problem(nb),
            answer_problem(nb),
            seed_problem(nb),
            outputs_problem(nb),
            volatile_problem(nb),
            ignore_problem(nb),
        )
        if p
    ]
    problems += plot_problems(nb)
    assert not problems, f"{path.name}: " + "; ".join(problems)


def drawing_helpers(nb: dict) -> set[str]:
    """Names of functions defined in the notebook that end in plt.show()."""
    out = set()
    for c in code_cells(nb):
        for f in ast.walk(ast.parse(source(c))):
            if isinstance(f, ast.FunctionDef) and "show" in {n for n, _ in _called(f)}:
                out.add(f.name)
    return out


def draws(cell: dict, helpers: set[str]) -> bool:
    """The cell itself shows a figure: it calls show or a drawing helper at top level
    (a cell that only defines a helper draws nothing)."""
    top = _plot_scopes(ast.parse(source(cell)))[-1]
    called = {n for n, _ in _called(top)}
    return "show" in called or bool(called & helpers)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_every_figure_is_committed_as_an_image(path: Path):
    nb = load(path)
    helpers = drawing_helpers(nb)
    for i, c in enumerate(code_cells(nb), start=1):
        if draws(c, helpers) and "nbval-ignore-output" not in tags(c):
            kinds = {k for o in c.get("outputs", []) for k in o.get("data", {})}
            assert "image/png" in kinds, f"{path.name} code cell {i}: plot output missing"


def test_sanitize_file_masks_paths_times_and_addresses():
    cfg = (NOTEBOOKS / "sanitize.cfg").read_text(encoding="utf-8")
    rules = re.findall(r"^regex: (.+)$", cfg, flags=re.M)
    samples = [
        "/tmp/memkit-nb04-abc123/metrics.json",
        "2026-12-02T19:58:44+00:00",
        "<object at 0x7f3a9c2b10d0>",
        "took 12.5 s",
    ]
    for s in samples:
        assert any(re.search(r, s) for r in rules), s


# --- the checks catch what they claim to ---------------------------------------------


def _nb(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {"kernelspec": {"name": "python3"}}}


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text: str, n: int | None = 1, outputs: list | None = None, tag: str | None = None):
    meta = {"tags": [tag]} if tag else {}
    return {
        "cell_type": "code",
        "metadata": meta,
        "source": text,
        "execution_count": n,
        "outputs": outputs if outputs is not None else [],
    }


SEEDED = "SEED = 0\nrandom.seed(SEED)\nnp.random.seed(SEED)\n"
ANSWER = "## Answer\n\n" + "The floor of 0.35 beats 0.25 on precision at equal recall. " * 2
GOOD_PLOT = (
    "fig, ax = plt.subplots()\n"
    "for s in S:\n    ax.plot(x, y, label=s)\n"
    "ax.set_title('t')\nax.set_xlabel('x (bytes)')\nax.set_ylabel('y (fraction)')\n"
    "ax.legend()\nplt.show()\n"
)


def test_checks_accept_a_good_notebook():
    out = [{"output_type": "stream", "name": "stdout", "text": "ok\n"}]
    nb = _nb(
        _md("# T\n\n**Question:** q?"), _code(SEEDED, 1, out), _code(GOOD_PLOT, 2), _md(ANSWER)
    )
    assert question_problem(nb) is None
    assert answer_problem(nb) is None
    assert seed_problem(nb) is None
    assert outputs_problem(nb) is None
    assert volatile_problem(nb) is None
    assert plot_problems(nb) == []


def test_missing_question_and_answer_are_reported():
    nb = _nb(_code(SEEDED), _md("## Answer\n\ntbd"))
    assert "first cell" in question_problem(nb)
    assert "too short" in answer_problem(nb)
    assert "last cell" in answer_problem(_nb(_md("**Question:** q"), _code(SEEDED)))


def test_unseeded_notebook_is_reported():
    nb = _nb(_code("SEED = 0\nrandom.seed(SEED)\n"))
    assert "np.random.seed(SEED)" in seed_problem(nb)


@pytest.mark.parametrize(
    "cells, fragment",
    [
        ([_code("x", None), _code("y", None)], "execution counts"),
        ([_code("x", 1), _code("y", 3)], "execution counts"),
        ([_code("x", 1)], "no outputs"),
        ([_code("x", 1, [{"output_type": "error", "ename": "E"}])], "error output"),
        ([_code("x", 1, [{"output_type": "stream", "name": "stderr", "text": "w"}])], "stderr"),
    ],
)
def test_output_problems_are_reported(cells, fragment):
    assert fragment in outputs_problem(_nb(*cells))


@pytest.mark.parametrize(
    "text",
    ["written to /tmp/abc/run", "at 0x7f3a9c2b10d0>", "started 2026-12-02 19:58:44"],
)
def test_volatile_output_is_reported_unless_ignored(text):
    out = [{"output_type": "stream", "name": "stdout", "text": text}]
    assert "volatile" in volatile_problem(_nb(_code("print(x)", 1, out)))
    ignored = _code("print(SHARED)", 1, out, tag="nbval-ignore-output")
    assert volatile_problem(_nb(ignored)) is None


@pytest.mark.parametrize(
    "drop, fragment",
    [
        ("ax.set_title('t')\n", "title"),
        ("ax.set_xlabel('x (bytes)')\n", "x label"),
        ("ax.set_ylabel('y (fraction)')\n", "y label"),
        ("ax.legend()\n", "legend"),
        ("plt.show()\n", "plt.show()"),
    ],
)
def test_plot_problems_are_reported(drop, fragment):
    problems = plot_problems(_nb(_code(GOOD_PLOT.replace(drop, ""))))
    assert any(fragment in p for p in problems), problems


def test_plot_checks_look_inside_plotting_functions():
    helper = "def draw(ax):\n    fig, ax = plt.subplots()\n    ax.plot(x)\n    plt.show()\n"
    problems = plot_problems(_nb(_code(helper)))
    assert any("function draw" in p and "title" in p for p in problems), problems


def test_a_cell_that_only_defines_a_plot_helper_draws_nothing():
    define = _code("def draw():\n    plt.show()\n")
    use = _code("draw()\n")
    nb = _nb(define, use)
    helpers = drawing_helpers(nb)
    assert helpers == {"draw"}
    assert not draws(define, helpers)
    assert draws(use, helpers)


def test_ignoring_output_needs_a_shared_dataset_reason():
    cell = _code("print(time.time())", 1, tag="nbval-ignore-output")
    assert "does not read shared datasets" in ignore_problem(_nb(cell))
    skipped = _code("print(SHARED)", 1, tag="nbval-skip")
    assert "skipped" in ignore_problem(_nb(skipped))
