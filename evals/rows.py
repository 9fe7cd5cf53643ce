"""The typed rows of a run folder: one frozen dataclass per line of each run file.

`evals.replay` builds these rows; `evals.runner` writes them (`to_json`) and every
reader (scorers, aggregate, groups, report, record, compare) takes them back
through `read_rows`, which parses each line into its type. A renamed or missing
field is then a `RowError` naming file, line and field, never a quiet default.

    probes.jsonl      ProbeRow (recalled: Recalled, admitted: Admitted)
    writes.jsonl      WriteRow
    attempts.jsonl    AttemptRow (memkit's `Attempt.to_dict()` + where it ran)
    passes.jsonl      PassRow
    extraction.jsonl  ExtractionRow (rows: LiveRow, stage_errors: StageError)
    evidence          EvidenceRow (summed into `evidence.json`)

Versions: every line carries `version` (`ROW_VERSION`). A newer version is
refused; an older one goes through `MIGRATIONS` (none yet: every row memkit
has written is version 1). Within version 1, a few fields came later than the
first rows; an older row lacking one reads as that field's stated default
(`later=True` below: e.g. a probe without `full` has undefined baselines).

Each field says how it is read (`conv`), its JSON key when that is not the
field name (`key`), and when it is left out of the JSON (`omit`): optional
fields are left out rather than written as null, so the files stay as they
were before the rows were typed (the example reports are byte-identical).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import jsonlines

from memkit.errors import ConfigError

ROW_VERSION = 1
"""Version of every run-file row; bump (and add a migration) on an incompatible change."""

MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""version v -> a function turning a version-v row dict into a version v+1 one."""


class RowError(ConfigError):
    """A run-file row that does not parse: the message names file, line and field."""


# --- field readers: each checks one JSON value and returns it typed -------------------


class _Bad(ValueError):
    """A value of the wrong type; `RowType.from_json` adds where it was."""


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise _Bad(f"expected a string, got {v!r}")
    return v


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(f"expected an integer, got {v!r}")
    return v


def _num(v: Any) -> float:
    """A JSON number, kept as read (an int stays an int, so rows round-trip)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _Bad(f"expected a number, got {v!r}")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Bad(f"expected true or false, got {v!r}")
    return v


def _opt(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else conv(v)


def _tuple(conv: Callable[[Any], Any]) -> Callable[[Any], tuple[Any, ...]]:
    def read(v: Any) -> tuple[Any, ...]:
        if not isinstance(v, list | tuple):
            raise _Bad(f"expected a list, got {v!r}")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(conv(x))
            except _Bad as e:
                raise _Bad(f"[{i}]: {e}") from None
        return tuple(out)

    return read


def _mapping(v: Any) -> dict[str, Any]:
    if not isinstance(v, Mapping):
        raise _Bad(f"expected an object, got {v!r}")
    return dict(v)


def _any(v: Any) -> Any:
    """JSON kept as it is (proposed changes, the block account)."""
    return v


def _label(v: Any) -> str | None:
    return None if v is None else _str(v)


def _group(v: Any) -> str | int:
    if isinstance(v, bool) or not isinstance(v, str | int):
        raise _Bad(f"expected a string or an integer, got {v!r}")
    return v


def _ranked(v: Any) -> tuple[str | None, str | None]:
    pair = _tuple(_label)(v)
    if len(pair) != 2:
        raise _Bad(f"expected [fact, session], got {v!r}")
    return (pair[0], pair[1])


def col(
    conv: Callable[[Any], Any],
    *,
    key: str | None = None,
    default: Any = dataclasses.MISSING,
    omit: Callable[[Any], bool] | None = None,
    later: bool = False,
) -> Any:
    """A row field: read by `conv`, named `key` in JSON, left out of the JSON when
    `omit(row)`; `later`: version-1 rows written before it existed lack it (read as
    `default`). A field with `omit` is optional when read, too."""
    meta = {"conv": conv, "key": key, "omit": omit, "later": later}
    if isinstance(default, list | dict | tuple) and default:
        raise TypeError("use an empty or immutable default")
    return dataclasses.field(default=default, metadata=meta)


def _untagged(row: Any) -> bool:
    return row.system is None


def _system() -> Any:
    """`system`: set by the runner when a unit's rows go into a run file."""
    return col(_opt(_str), default=None, omit=_untagged)


def _replicate() -> Any:
    """`replicate`: set with `system` (attempt rows carry their own)."""
    return col(_int, default=0, omit=_untagged)


_T = TypeVar("_T", bound="RowType")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RowType:
    """Base of every run-file row: generic `to_json` / `from_json` from the fields."""

    FILE: ClassVar[str] = ""
    """The run file (without `.jsonl`) these rows live in; "" for nested rows."""

    def to_json(self) -> dict[str, Any]:
        """The row as its JSON line (nested rows included; tuples as lists)."""
        out: dict[str, Any] = {"version": ROW_VERSION} if self.FILE else {}
        for f in dataclasses.fields(self):
            omit = f.metadata.get("omit")
            if omit is not None and omit(self):
                continue
            out[f.metadata.get("key") or f.name] = _json(getattr(self, f.name))
        return out

    @classmethod
    def from_json(cls: type[_T], obj: Any, where: str = "row") -> _T:
        """Parse one JSON object; a missing, unknown or ill-typed field raises RowError
        naming `where` (file:line) and the field."""
        if not isinstance(obj, Mapping):
            raise RowError(f"{where}: expected an object, got {obj!r}")
        obj = dict(obj)
        if cls.FILE:
            obj = _migrated(obj, where)
        known = {"version"} if cls.FILE else set()
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            key = f.metadata.get("key") or f.name
            known.add(key)
            if key not in obj:
                optional = f.metadata.get("omit") is not None or f.metadata.get("later")
                if optional and f.default is not dataclasses.MISSING:
                    continue
                raise RowError(f"{where}: field {key!r} is missing ({cls.__name__})")
            try:
                kwargs[f.name] = f.metadata["conv"](obj[key])
            except _Bad as e:
                raise RowError(f"{where}: field {key!r}: {e}") from None
            except RowError as e:
                raise RowError(f"{where}: field {key!r}: {e}") from None
        unknown = sorted(set(obj) - known)
        if unknown:
            raise RowError(
                f"{where}: unknown field {unknown[0]!r} ({cls.__name__} has no such field)"
            )
        return cls(**kwargs)

    @classmethod
    def reader(cls: type[_T]) -> Callable[[Any], _T]:
        """A field reader for this row nested in another (its errors name the path)."""

        def read(v: Any) -> _T:
            try:
                return cls.from_json(v, cls.__name__)
            except RowError as e:
                raise _Bad(str(e)) from None

        return read


def _json(v: Any) -> Any:
    if isinstance(v, RowType):
        return v.to_json()
    if isinstance(v, list | tuple):
        return [_json(x) for x in v]
    if isinstance(v, Mapping):
        return {k: _json(x) for k, x in v.items()}
    return v


def _migrated(obj: dict[str, Any], where: str) -> dict[str, Any]:
    v = obj.get("version")
    if isinstance(v, bool) or not isinstance(v, int):
        raise RowError(f"{where}: field 'version' is missing or not an integer ({v!r})")
    if v > ROW_VERSION:
        raise RowError(
            f"{where}: row version {v} is newer than this memkit reads ({ROW_VERSION}); "
            "upgrade memkit"
        )
    while v < ROW_VERSION:
        if v not in MIGRATIONS:
            raise RowError(f"{where}: row version {v} has no migration to {v + 1}")
        obj = MIGRATIONS[v](obj)
        v += 1
        obj["version"] = v
    return obj


def jsonable(v: Any) -> Any:
    """A value made of dataclasses, mappings and sequences as plain JSON (floats
    rounded to 9 digits, anything else as its str): proposed changes in a row."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {k: jsonable(x) for k, x in dataclasses.asdict(v).items()}
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, float):
        return round(v, 9)
    if isinstance(v, str | int | bool) or v is None:
        return v
    return str(v)


# --- probes ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recalled(RowType):
    """One recalled memory of a probe, in the store's order."""

    id: str = col(_str)
    fact: str | None = col(_label)
    """The gold fact its row holds (None: no gold fact)."""
    score: float = col(_num)
    path: str = col(_str)
    cosine: float | None = col(_opt(_num))
    bytes: int = col(_int)
    """Its entry's bytes after the per-entry clamp."""
    removed: bool = col(_bool, default=False, later=True)
    """The assembler dropped it as a paraphrase."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Admitted(RowType):
    """One entry the block admitted, in block order."""

    id: str = col(_str)
    fact: str | None = col(_label)
    bytes: int = col(_int)


def _no_ranking(row: Any) -> bool:
    return row.ranking is None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProbeRow(RowType):
    """One probe answered by one system (and variant): what recall returned, what the
    block admitted, and the gold it is scored against (see `evals.replay.probe_row`)."""

    FILE: ClassVar[str] = "probes"

    probe_id: str = col(_str)
    scope_id: str = col(_str)
    after_run: str = col(_str)
    variant: str = col(_str)
    query: str = col(_str)
    relevant: tuple[str, ...] = col(_tuple(_str))
    distractors: tuple[str, ...] = col(_tuple(_str))
    stale: tuple[str, ...] = col(_tuple(_str), default=(), later=True)
    """Gold facts retracted or superseded at probe time."""
    recalled: tuple[Recalled, ...] = col(_tuple(Recalled.reader()))
    admitted: tuple[Admitted, ...] = col(_tuple(Admitted.reader()))
    stopped: tuple[Any, ...] = col(_tuple(_any), default=(), later=True)
    """What the byte budget stopped (the assembler's `stopped_by_budget`)."""
    account: Mapping[str, Any] = col(_mapping)
    error: str | None = col(_opt(_str), default=None, later=True)
    """The store's error when recall raised (a finding, not a crash)."""
    fallback: str | None = col(_opt(_str), default=None, later=True)
    """Why the keyword path answered (None: the vector path did)."""
    full: tuple[str | None, ...] | None = col(_opt(_tuple(_label)), default=None, later=True)
    """Labels of the full ranking (floor off); None: not recorded, baselines undefined."""
    group: str | int | None = col(_opt(_group), default=None, omit=lambda r: r.group is None)
    undefined: str | None = col(_opt(_str), default=None, omit=lambda r: r.undefined is None)
    """Why the probe's relevance metrics are undefined (LoCoMo `unmapped`, ...)."""
    apart: bool = col(_bool, default=False, omit=lambda r: not r.apart)
    """Kept out of the overall pool, reported in its group only."""
    ranking: tuple[tuple[str | None, str | None], ...] | None = col(
        _opt(_tuple(_ranked)), default=None, omit=_no_ranking
    )
    """`rank_all` probes (LongMemEval): the ranking at the floor, `[fact, session]`."""
    ranking_full: tuple[tuple[str | None, str | None], ...] | None = col(
        _opt(_tuple(_ranked)), default=None, omit=_no_ranking
    )
    relevant_sessions: tuple[str, ...] = col(_tuple(_str), default=(), omit=_no_ranking)
    system: str | None = _system()
    replicate: int = _replicate()

    @property
    def labels(self) -> list[str | None]:
        return [r.fact for r in self.recalled]


# --- store-mode writes ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class WriteRow(RowType):
    """One store-mode write of a gold fact and where it landed (fold-in)."""

    FILE: ClassVar[str] = "writes"

    scope_id: str = col(_str)
    run_id: str = col(_str)
    fact: str = col(_str)
    restatement: bool = col(_bool)
    """Not the fact's first evidence (its row should absorb this write)."""
    row: str = col(_str)
    folded: bool = col(_bool)
    row_fact: str | None = col(_label)
    """The fact the row held before this write (None for a fresh insert)."""
    update: bool = col(_bool)
    """Written as the `update` of a predecessor's row (a supersede)."""
    time: float = col(_num)
    group: str | None = col(_opt(_str), default=None, omit=lambda r: r.group is None)
    """The fact's labelled fold group (MSC merges), when the source labels them."""
    row_group: str | None = col(_opt(_str), default=None, omit=lambda r: r.group is None)
    system: str | None = _system()
    replicate: int = _replicate()


# --- pipeline mode --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttemptRow(RowType):
    """One consolidation attempt: memkit's `Attempt.to_dict()` fields, plus the scope,
    snapshot, rollouts and pass it belonged to (DESIGN "Run outputs")."""

    FILE: ClassVar[str] = "attempts"

    model: str = col(_str)
    consolidator: str = col(_str)
    request_hash: str = col(_str)
    replicate: int = col(_int)
    index: int = col(_int)
    outcome: str = col(_str)
    status: int | None = col(_opt(_int))
    raw_response: str | None = col(_opt(_str))
    parse_mode: str | None = col(_opt(_str))
    parse_error: str | None = col(_opt(_str))
    validation_code: str | None = col(_opt(_str))
    strict_code: str | None = col(_opt(_str))
    lenient_code: str | None = col(_opt(_str))
    parsed_changes: Any = col(_any)
    input_tokens: int = col(_int)
    output_tokens: int = col(_int)
    cost_usd: float = col(_num)
    cost_note: str | None = col(_opt(_str))
    latency_s: float = col(_num)
    retry_after_s: float | None = col(_opt(_num))
    cached: bool = col(_bool)
    error: str | None = col(_opt(_str))
    response_format: str | None = col(_opt(_str))
    scope_id: str = col(_str)
    snapshot_ids: tuple[str, ...] = col(_tuple(_str))
    rollout_ids: tuple[str, ...] = col(_tuple(_str))
    pass_: int = col(_int, key="pass")
    system: str | None = _system()

    @property
    def answered(self) -> bool:
        return self.raw_response is not None

    @classmethod
    def of(
        cls,
        attempt: Any,
        *,
        scope_id: str,
        snapshot_ids: Sequence[str],
        rollout_ids: Sequence[str],
        pass_: int,
    ) -> AttemptRow:
        """The row of one `memkit.consolidate.Attempt` (its `to_dict()` fields, read
        once; nothing is re-parsed)."""
        d = attempt.to_dict()
        d.pop("version", None)  # memkit's ATTEMPT_VERSION: this row carries ROW_VERSION
        d["parsed_changes"] = jsonable(d.get("parsed_changes"))
        d.update(
            scope_id=scope_id,
            snapshot_ids=list(snapshot_ids),
            rollout_ids=list(rollout_ids),
            **{"pass": pass_},
            version=ROW_VERSION,
        )
        return cls.from_json(d, f"attempt of {scope_id!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PassRow(RowType):
    """One consolidation pass and its outcome (docs/behaviour.md "Parking" for the split)."""

    FILE: ClassVar[str] = "passes"

    scope_id: str = col(_str)
    pass_: int = col(_int, key="pass")
    outcome: str = col(_str)
    error_code: str | None = col(_opt(_str))
    request_hash: str | None = col(_opt(_str))
    rollout_ids: tuple[str, ...] = col(_tuple(_str))
    snapshot_ids: tuple[str, ...] = col(_tuple(_str))
    changes: Any = col(_any)
    parked: tuple[str, ...] = col(_tuple(_str))
    isolation: bool = col(_bool)
    parked_alone: int = col(_int)
    parked_with_others: int = col(_int)
    request_bytes: int | None = col(_opt(_int))
    excerpt_size: int | None = col(_opt(_int))
    request_budget: int | None = col(_opt(_int))
    wall_s: float = col(_num)
    """Wall-clock seconds (kept out of every deterministic file)."""
    system: str | None = _system()
    replicate: int = _replicate()


@dataclasses.dataclass(frozen=True, kw_only=True)
class LiveRow(RowType):
    """A live memory at the end of a scope, matched to a gold fact."""

    id: str = col(_str)
    fact: str | None = col(_label)
    content: str = col(_str)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageError(RowType):
    """A run whose staging raised (SPEC §7: it never fails the run)."""

    run_id: str = col(_str)
    error: str = col(_str)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutCounts(RowType):
    """Where a scope's staged evidence ended."""

    consumed: int = col(_int)
    pending: int = col(_int)
    parked: int = col(_int)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExtractionRow(RowType):
    """A scope's live rows at its end, against the gold that should be live."""

    FILE: ClassVar[str] = "extraction"

    scope_id: str = col(_str)
    rows: tuple[LiveRow, ...] = col(_tuple(LiveRow.reader()))
    live_gold: tuple[str, ...] = col(_tuple(_str))
    stale_gold: tuple[str, ...] = col(_tuple(_str))
    staged_runs: tuple[str, ...] = col(_tuple(_str))
    stage_errors: tuple[StageError, ...] = col(_tuple(StageError.reader()))
    rollouts: RolloutCounts | None = col(_opt(RolloutCounts.reader()), default=None, later=True)
    gold: bool = col(_bool, default=True, later=True)
    """False when the source has no gold memory for the scope: row metrics undefined."""
    system: str | None = _system()
    replicate: int = _replicate()


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvidenceRow(RowType):
    """Per staged run: the evidence the SPEC §7 bounds kept vs what was offered."""

    FILE: ClassVar[str] = "evidence"

    scope_id: str = col(_str)
    run_id: str = col(_str)
    messages_offered: int = col(_int)
    messages_kept: int = col(_int)
    bytes_offered: int = col(_int)
    bytes_kept: int = col(_int)
    system: str | None = _system()


TABLE_ROWS: dict[str, Any] = {
    t.FILE: t for t in (ProbeRow, WriteRow, AttemptRow, PassRow, ExtractionRow)
}
"""Run file (without `.jsonl`) -> its row type."""


# --- files -----------------------------------------------------------------------------


def read_rows(path: str | Path, row_type: type[_T]) -> list[_T]:
    """Every row of a run file, typed ([] when the file is absent); a bad line raises
    RowError naming file:line (and the field)."""
    p = Path(path)
    if not p.is_file():
        return []
    out = []
    with jsonlines.open(p) as lines:  # no empty line is skipped: line n is row n
        try:
            for n, obj in enumerate(lines.iter(allow_none=True), start=1):
                out.append(row_type.from_json(obj, f"{p}:{n}"))
        except jsonlines.InvalidLineError as e:
            raise RowError(f"{p}:{e.lineno}: {e}") from None
    return out


def rows_of(run_dir: str | Path, row_type: type[_T]) -> list[_T]:
    """The rows of `row_type`'s file in a run folder."""
    return read_rows(Path(run_dir) / f"{row_type.FILE}.jsonl", row_type)


def tagged(rows: Iterable[Mapping[str, Any]], system: str, replicate: int) -> list[dict]:
    """A unit's JSON rows tagged with the system and replicate that made them."""
    return [{**r, "system": system, "replicate": replicate} for r in rows]


def by_system(rows: Iterable[_T]) -> dict[str, list[_T]]:
    """Typed rows grouped by their system (rows without one are refused)."""
    out: dict[str, list[_T]] = {}
    for r in rows:
        system = getattr(r, "system", None)
        if system is None:
            raise RowError(
                f"{type(r).__name__} of scope {getattr(r, 'scope_id', '?')!r} "
                "has no system (rows get one when written to a run file)"
            )
        out.setdefault(system, []).append(r)
    return out
