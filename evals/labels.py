"""Short, stable system labels and one colour per system, for every view of a run.

A system's full name is its whole spec (`pipeline:replay:datasets/.../x.jsonl`):
exact, but too wide for a table header or a plot legend. `labels` maps each name
to a short label that depends only on the name and the set it is shown with
(so the report, the terminal summary and `memkit eval list` agree), and
`colours` gives each system one colour that every plot of a report uses.
Pure functions; the full spec stays on hover and in the legend table.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

MAX_LABEL = 24
"""Characters of a label at most (a longer one ends in "…")."""
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
"""Matplotlib's tab10, in order; systems past the tenth reuse it (the label tells them apart)."""


def short_label(system: str) -> str:
    """The label of one system, before collisions are resolved: the consolidator without
    `pipeline:`, a recording's file name without `replay:` and its folders, a model
    without `litellm:` and its provider."""
    name = system.removeprefix("pipeline:")
    kind, sep, rest = name.partition(":")
    if sep and kind == "replay":
        path = PurePosixPath(rest.replace("\\", "/").rstrip("/"))
        name = path.name.removesuffix(".jsonl") or rest
    elif sep and kind == "litellm":
        name = rest.rsplit("/", 1)[-1] or rest
    if len(name) > MAX_LABEL:
        name = name[: MAX_LABEL - 1] + "…"
    return name or system


def labels(systems: Iterable[str]) -> dict[str, str]:
    """system -> short label, unique within `systems`: a label two systems share gets
    " #2", " #3", ... on the later ones (in the order given)."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for s in dict.fromkeys(systems):
        base = label = short_label(s)
        i = 1
        while label in used:
            i += 1
            label = f"{base} #{i}"
        used.add(label)
        out[s] = label
    return out


def colours(systems: Iterable[str]) -> dict[str, str]:
    """system -> hex colour, by position in `systems` (the report's sorted order)."""
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(dict.fromkeys(systems))}
