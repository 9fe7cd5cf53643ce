"""`memkit.store.pg_write`: one statement's rows handed back part by part, in the
shapes the three statements it replaced gave (hand-built rows, no server)."""

from __future__ import annotations

import pytest

from memkit.errors import SchemaError
from memkit.store import pg_write
from memkit.store.rows import COLS

NULLS = [None] * 19


def row(part, **cells):
    names = (
        "part seq ids change_seq rowid id scope_id kind content tags confidence "
        "source_run_id created_at seen_count last_seen_at superseded_by embedding lo hi"
    ).split()
    out = list(NULLS)
    out[0] = part
    for k, v in cells.items():
        out[names.index(k)] = v
    return tuple(out)


MEMORY = dict(
    rowid=7, id="m7", scope_id="s", kind="fact", content="c", tags="[]", confidence=0.5,
    source_run_id=None, created_at=1.0, seen_count=2, last_seen_at=3.0, superseded_by=None,
)  # fmt: skip


def test_each_part_comes_back_in_its_old_shape():
    rows = [
        row(0, seq=12, ids=[40]),
        row(0, change_seq=11, embedding="v", **MEMORY),
        row(1, **MEMORY),
        row(2, kind="fact", lo=3, hi=9, rowid=4, content="x"),
        row(2, kind="note", lo=5, hi=5),
    ]
    parts = pg_write.split(rows, listed=True)
    assert parts.head == (12, [40])
    assert parts.changed == [(11, *MEMORY.values(), "v")]
    assert len(parts.changed[0]) == 14  # change_seq, the Row's columns, the embedding
    assert parts.facts == [tuple(MEMORY.values())]
    assert len(parts.facts[0]) == len(COLS.split(","))
    assert parts.kept == [("fact", 3, 9, 4, "x"), ("note", 5, 5, None, None)]


def test_listed_kinds_not_read_are_none_and_read_but_empty_are_empty():
    assert pg_write.split([row(0, seq=1, ids=[])], listed=False).kept is None
    assert pg_write.split([row(0, seq=1, ids=[])], listed=True).kept == []


@pytest.mark.parametrize("rows", [[], [row(1, **MEMORY)], [row(0, change_seq=3, **MEMORY)]])
def test_an_answer_without_the_head_row_is_an_error(rows):
    with pytest.raises(SchemaError, match="head row"):
        pg_write.split(rows, listed=False)


def test_the_statement_reads_listed_kinds_only_when_asked():
    sql, args = pg_write.statement("s", 4, 1, True, 5001, [3, 1], None)
    assert sql == pg_write.LOCK_SQL and args == ("s", 4, 1, True, 5001, "{3,1}", None, None)
    sql, args = pg_write.statement("s", None, -2, False, 5001, None, 8)
    assert sql == pg_write.KEPT_SQL and args[:6] == ("s", None, 0, False, 5001, None)
    assert args[7] == 8 and args[6].startswith("{") and len(args[6].split(",")) == 5
