"""Labelled paraphrase pairs: PAWS-Wiki, MRPC and STS-B, as lists of `Pair`.

Mapping: PAWS label 1 / MRPC Quality 1 -> paraphrase, 0 -> distinct; STS-B
scores are cut into paraphrase (>= `paraphrase_at`) and distinct
(<= `distinct_at`). Left out: STS-B pairs scoring in between (ambiguous),
and every column but the two sentences and the label or score.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

from evals.adapters.shared import find_data
from evals.datasets import Pair
from memkit.errors import ConfigError, DatasetError


def _tsv(file: Path, encoding: str = "utf-8") -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a tab-separated file with quoting off (quotes are text in these corpora);
    bytes that do not decode are a DatasetError at their line."""
    data = file.read_bytes()
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DatasetError(
            str(file), line, None, f"not {encoding}: byte {data[e.start]:#04x}"
        ) from None
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    for row in reader:
        yield reader.line_num, row


def _field(row: dict[str, str], key: str, file: Path, line: int) -> str:
    value = row.get(key)
    if value is None:
        raise DatasetError(str(file), line, key, "missing column value")
    return value


def _binary_pairs(
    file: Path,
    rows: Iterable[tuple[int, dict[str, str]]],
    cols: tuple[str, str, str],
    source: str,
    limit: int | None,
) -> list[Pair]:
    a_col, b_col, label_col = cols
    out: list[Pair] = []
    for line, row in rows:
        if limit is not None and len(out) >= limit:
            break
        label = _field(row, label_col, file, line).strip()
        if label not in ("0", "1"):
            raise DatasetError(str(file), line, label_col, f"expected 0 or 1, got {label!r}")
        out.append(
            Pair(
                _field(row, a_col, file, line),
                _field(row, b_col, file, line),
                "paraphrase" if label == "1" else "distinct",
                source,
            )
        )
    return out


def load_paws(path: str | Path, *, limit: int | None = None) -> list[Pair]:
    """PAWS-Wiki labelled pairs (label 1 = paraphrase, 0 = distinct), source "paws"."""
    file = find_data(path, "paws", ["paws_wiki_labeled_final_test.tsv", "*.tsv"], limit=limit)[0]
    return _binary_pairs(file, _tsv(file), ("sentence1", "sentence2", "label"), "paws", limit)


def load_mrpc(path: str | Path, *, limit: int | None = None) -> list[Pair]:
    """MRPC pairs (Quality 1 = paraphrase, 0 = distinct), source "mrpc"; the file has a BOM."""
    file = find_data(
        path, "mrpc", ["msr_paraphrase_test.txt", "msr_paraphrase_*.txt"], limit=limit
    )[0]
    rows = _tsv(file, encoding="utf-8-sig")
    return _binary_pairs(file, rows, ("#1 String", "#2 String", "Quality"), "mrpc", limit)


def load_stsb(
    path: str | Path,
    paraphrase_at: float = 4.0,
    distinct_at: float = 1.0,
    *,
    limit: int | None = None,
) -> list[Pair]:
    """STS-B graded pairs cut into labels: score >= `paraphrase_at` (default 4.0) is a
    paraphrase, score <= `distinct_at` (default 1.0) is distinct, and pairs scoring in
    between are dropped as ambiguous. Scores (0-5) are kept on each Pair; source "stsb".
    """
    if not distinct_at < paraphrase_at:
        raise ConfigError(
            f"STS-B cut-offs: distinct_at {distinct_at} must be below paraphrase_at {paraphrase_at}"
        )
    file = find_data(path, "sts_b", ["sts-b_glue_dev.tsv", "*.tsv"], limit=limit)[0]
    out: list[Pair] = []
    for line, row in _tsv(file):
        if limit is not None and len(out) >= limit:
            break
        raw = _field(row, "score", file, line)
        try:
            score = float(raw)
        except ValueError:
            raise DatasetError(str(file), line, "score", f"not a number: {raw!r}") from None
        if not math.isfinite(score):
            raise DatasetError(str(file), line, "score", f"not a finite number: {raw!r}")
        if score >= paraphrase_at:
            label = "paraphrase"
        elif score <= distinct_at:
            label = "distinct"
        else:
            continue
        out.append(
            Pair(
                _field(row, "sentence1", file, line),
                _field(row, "sentence2", file, line),
                label,
                "stsb",
                score,
            )
        )
    return out
