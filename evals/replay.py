"""Replay a dataset through memkit: store mode and pipeline mode.

Both modes walk each scope's transcripts in time order (`started_at`, then
`run_id`) on a simulated clock set to the run's start, and run each probe
right after its `after_run`: recall with the probe's query, then assembly.
They return typed run rows (`evals.rows`: one per probe, per write, per
attempt, per pass), which the runner writes to run files and the scorers score.

- **Store mode** (no model): each run writes the gold facts it establishes,
  the canonical content on a fact's first evidence and the next paraphrase on
  each restatement (as a live agent re-deriving it), through `remember` and
  so through fold-in. A fact that supersedes another is first written as an
  `update` of the old fact's row; a fact's `retracted_in` run retracts its
  row. Row → fact provenance is exact (we wrote the rows), so no matcher is
  involved. Several (recall, assembly) variants can be probed on the same
  replay: a floor or budget sweep costs one replay, not one per point.
- **Pipeline mode**: each run is staged (`stage_run`) and consolidation
  passes run with the chosen consolidator until nothing is pending or a pass
  fails (failed evidence waits for the scope's next run, as with the worker;
  a final drain runs after the scope's last run; a batch refused 3 times is
  parked by the store, and pass rows name what each pass parked). Rows are
  labelled with gold facts by `evals.matcher`.

Side effects stay here and in the store; everything scored is recorded.

Why over 600 lines: both replay modes share the per-scope walk in time
order, the simulated clock and the building of every run row (its shape lives
in `evals.rows`; what each field holds is decided here, beside the walk).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from evals.datasets import Dataset, GoldFact, Probe, Transcript
from evals.matcher import Matcher
from evals.rows import (
    Admitted,
    AttemptRow,
    EvidenceRow,
    ExtractionRow,
    LiveRow,
    PassRow,
    ProbeRow,
    Recalled,
    RolloutCounts,
    StageError,
    WriteRow,
    jsonable,
)
from memkit.errors import ConfigError, MemkitError, NotFound
from memkit.params import (
    AssemblyParams,
    ConsolidationParams,
    FoldParams,
    RecallParams,
    RedactionParams,
)
from memkit.text import truncate_bytes

MAX_DRAIN_PASSES = 64
"""Safety bound on passes per scope drain (each pass consumes >= 1 rollout)."""


def epoch(value: Any) -> float:
    """`started_at` (ISO 8601 string, datetime or epoch seconds) as epoch seconds."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    raise ConfigError(f"started_at must be ISO 8601 or epoch seconds, got {value!r}")


class SimClock:
    """A settable clock injected into the store: replay decides what 'now' is."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class CachingEmbedder:
    """Wrap an embedder so each distinct text is embedded once per embedder.

    Sweeps replay the same texts many times; the vectors never change, so a
    shared cache makes every replay after the first embedding-free.
    """

    def __init__(self, inner: Any):
        from memkit.embed import default_floor_of, fingerprint_of

        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.fingerprint = fingerprint_of(inner)
        self.default_floor = default_floor_of(inner)
        self._cache: dict[str, np.ndarray] = {}
        self.calls = 0
        self.errors = 0
        """Calls to the inner embedder that raised (the store then falls back quietly)."""
        self.last_error: str | None = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            self.calls += 1
            try:
                vecs = np.asarray(self.inner.embed(missing), dtype=np.float32)
            except Exception as e:
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {str(e)[:300]}"
                raise
            for t, v in zip(missing, vecs, strict=True):
                self._cache[t] = v
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])


# --- dataset views -----------------------------------------------------------------


@dataclass
class ScopeData:
    scope_id: str
    runs: list[Transcript]
    facts: list[GoldFact]
    probes: list[Probe]
    time: dict[str, float] = field(default_factory=dict)


def scopes_of(dataset: Dataset, scopes: Iterable[str] | None = None) -> list[ScopeData]:
    """Group a dataset by scope, runs in time order, probes by `after_run` order."""
    want = None if scopes is None else set(scopes)
    by: dict[str, ScopeData] = {}

    def get(sid: str) -> ScopeData:
        return by.setdefault(sid, ScopeData(sid, [], [], []))

    for t in dataset.transcripts:
        get(t.scope_id).runs.append(t)
    for f in dataset.facts:
        get(f.scope_id).facts.append(f)
    for p in dataset.probes:
        get(p.scope_id).probes.append(p)
    if want is not None:
        from evals.checks import check_names

        check_names("scope", sorted(want), sorted(by))
    out = []
    for sid in sorted(by):
        if want is not None and sid not in want:
            continue
        s = by[sid]
        s.runs.sort(key=lambda r: (epoch(r.started_at), r.run_id))
        s.time = {r.run_id: epoch(r.started_at) for r in s.runs}
        order = {rid: i for i, rid in enumerate(s.time)}
        for p in s.probes:
            if p.after_run not in order:
                raise ConfigError(
                    f"probe {p.probe_id!r}: after_run {p.after_run!r} is not a run of scope {sid!r}"
                )
        s.probes.sort(key=lambda p: (order[p.after_run], p.probe_id))
        out.append(s)
    return out


def stale_facts(scope: ScopeData, done_runs: set[str], written: set[str]) -> set[str]:
    """Gold facts retracted by a finished run or superseded by a written fact."""
    stale = set()
    for f in scope.facts:
        if f.retracted_in in done_runs:
            stale.add(f.fact_id)
        if f.superseded_by is not None and f.superseded_by in written:
            stale.add(f.fact_id)
    return stale


# --- probing (both modes) ------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One (recall, assembly) setting probed on a replay; `name` keys the rows."""

    name: str = "default"
    recall: RecallParams = RecallParams()
    assembly: AssemblyParams = AssemblyParams()


def probe_row(
    store: Any,
    probe: Probe,
    variant: Variant,
    label: Callable[[Any], str | None],
    stale: set[str],
    sessions: Mapping[str, str | None] | None = None,
) -> ProbeRow:
    """Recall + assemble for one probe and record everything scoring needs.

    Every probe also records `full`, the labels of `full_ranking` (the floor
    off), which the baseline metrics score. From the probe's `meta`: `group`
    (per-group tables), `undefined` (a reason the probe's relevance metrics
    are undefined, e.g. LoCoMo `unmapped`), `apart` (kept out of the overall
    pool, reported in its group), and `rank_all` (also record, as
    `[fact, session]` with `sessions` mapping fact -> session, the store's
    ranking without a limit but *at the floor* as `ranking` and the floor-off
    ranking as `ranking_full`, for LongMemEval's retrieval metrics).
    """
    from memkit.assemble import assemble_block

    scope = probe.scope_id
    embed_errors = getattr(store.embedder, "errors", 0)
    try:
        hits = store.recall(scope, probe.query, limit=variant.assembly.limit, params=variant.recall)
        error = None
    except Exception as exc:  # a failing store is a finding, not a crash
        hits, error = [], f"{type(exc).__name__}: {exc}"
    # why the keyword path answered (None: the vector path did); an embedder
    # error is recorded even when the keyword path then found nothing
    fallback = next((h.fallback for h in hits if h.fallback), None)
    if getattr(store.embedder, "errors", 0) > embed_errors:
        fallback = "embed_error"
    elif fallback is None and store.embedder is None:
        fallback = "no_embedder"
    block = assemble_block(hits, variant.assembly)
    acc = block.account
    labels = {h.id: label(h.memory) for h in hits}
    full = full_ranking(store, scope, probe.query, variant.recall)
    full_labels = None if full is None else tuple(label(h.memory) for h in full)
    removed = {rid for rid, _ in acc.removed_as_paraphrase}
    eb = variant.assembly.entry_bytes
    meta = probe.meta or {}
    ranking, ranking_full, relevant_sessions = _rankings(
        store, probe, variant, label, sessions or {}, full_labels
    )
    return ProbeRow(
        probe_id=probe.probe_id,
        scope_id=scope,
        after_run=probe.after_run,
        variant=variant.name,
        query=probe.query,
        relevant=tuple(sorted(probe.relevant)),
        distractors=tuple(sorted(probe.distractors)),
        stale=tuple(sorted(stale)),
        recalled=tuple(
            Recalled(
                id=h.id,
                fact=labels[h.id],
                score=round(float(h.score), 6),
                path=h.path,
                cosine=None if h.cosine is None else round(float(h.cosine), 6),
                bytes=len(truncate_bytes(h.content.strip(), eb).encode("utf-8")),
                removed=h.id in removed,
            )
            for h in hits
        ),
        admitted=tuple(
            Admitted(id=i, fact=labels.get(i), bytes=int(n))
            for i, n in zip(acc.admitted, acc.admitted_bytes, strict=True)
        ),
        stopped=tuple(acc.stopped_by_budget),
        account=acc.to_dict(),
        error=error,
        fallback=fallback,
        full=full_labels,
        group=meta.get("group") or None,
        undefined=meta.get("undefined") or None,
        apart=bool(meta.get("apart")),
        ranking=ranking,
        ranking_full=ranking_full,
        relevant_sessions=relevant_sessions,
    )


def full_ranking(store: Any, scope_id: str, query: str, params: RecallParams) -> list[Any] | None:
    """The baseline ranking: every live candidate of the scope, ranked by the
    same query and tunables with the floor off (-inf keeps negative cosines too).

    None when the vector path did not answer (no embedder, an embedding error, an
    empty query): a keyword list is not a ranking of the candidates, so baselines
    are then undefined rather than computed on the wrong list.
    """
    try:
        hits = store.recall(
            scope_id, query, limit=0, params=dataclasses.replace(params, floor=-math.inf)
        )
    except Exception:  # already recorded as the probe's error
        return None
    return hits if all(h.path in ("vector", "hybrid") for h in hits) else None


Ranked = tuple[tuple[str | None, str | None], ...]


def _rankings(
    store: Any,
    probe: Probe,
    variant: Variant,
    label: Callable[[Any], str | None],
    sessions: Mapping[str, str | None],
    full: Sequence[str | None] | None,
) -> tuple[Ranked | None, Ranked | None, tuple[str, ...]]:
    """A `rank_all` probe's (ranking, ranking_full, relevant_sessions); (None, None, ())
    for any other probe."""
    if not (probe.meta or {}).get("rank_all"):
        return None, None, ()
    try:
        hits = store.recall(probe.scope_id, probe.query, limit=0, params=variant.recall)
    except Exception:  # already recorded as the probe's error
        hits = []

    def ranked(facts: Iterable[str | None]) -> Ranked:
        return tuple((f, None if f is None else sessions.get(f)) for f in facts)

    ranking = ranked(label(h.memory) for h in hits)
    ranking_full = None if full is None else ranked(full)
    relevant = tuple(sorted({s for f in probe.relevant if (s := sessions.get(f)) is not None}))
    return ranking, ranking_full, relevant


# --- gold structure (both modes) ----------------------------------------------------------


def predecessors_of(facts: Iterable[GoldFact]) -> dict[str, list[str]]:
    """successor fact id -> every fact it supersedes (many-to-one: MSC merges several)."""
    out: dict[str, list[str]] = {}
    for f in facts:
        succ = f.superseded_by
        if succ:
            out.setdefault(succ, []).append(f.fact_id)
    return out


def writes_by_run(facts: Iterable[GoldFact]) -> dict[str, list[str]]:
    """run id -> the facts it establishes, in write order: by fact id, except that a
    fact comes after every fact of the same run it supersedes (a merged line after
    its own sources)."""
    facts = list(facts)
    preds = predecessors_of(facts)
    out: dict[str, list[str]] = {}
    for f in sorted(facts, key=lambda f: f.fact_id):
        for rid in f.established_in or ():
            out.setdefault(rid, []).append(f.fact_id)
    return {rid: _after_predecessors(fids, preds) for rid, fids in out.items()}


def _after_predecessors(fids: list[str], preds: Mapping[str, list[str]]) -> list[str]:
    """fids sorted by (depth among themselves in the supersede graph, id)."""
    here = set(fids)
    depth: dict[str, int] = {}

    def depth_of(fid: str, seen: frozenset[str] = frozenset()) -> int:
        if fid not in depth:
            ps = [p for p in preds.get(fid, ()) if p in here and p not in seen]
            depth[fid] = 1 + max((depth_of(p, seen | {fid}) for p in ps), default=-1)
        return depth[fid]

    return sorted(fids, key=lambda x: (depth_of(x), x))


def sessions_of(facts: Iterable[GoldFact]) -> dict[str, str | None]:
    """fact id -> the run (session) that first established it."""
    return {f.fact_id: (f.established_in or (None,))[0] for f in facts}


def fold_groups_of(facts: Iterable[GoldFact]) -> dict[str, str]:
    """fact id -> its labelled fold group (`meta["fold_group"]`, e.g. MSC merges); empty
    when the source labels none."""
    out = {}
    for f in facts:
        g = (f.meta or {}).get("fold_group")
        if g:
            out[f.fact_id] = g
    return out


# --- store mode ------------------------------------------------------------------------


def ingest(store: Any, scope_id: str, items: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Write items in order through fold-in: one `remember_many` transaction (one
    embedding call) when the store has it, else `remember` item by item; the fold
    decisions are the same either way."""
    if not items:
        return []
    many = getattr(store, "remember_many", None)
    if many is not None:
        return list(many(scope_id, items))
    return [store.remember(scope_id, **item) for item in items]


@dataclass
class StoreModeResult:
    probes: list[ProbeRow]
    writes: list[WriteRow]
    timing: dict[str, float] = field(default_factory=dict)
    """Wall-clock seconds spent writing (`ingest_s`, for `writes` writes) and
    probing (`probe_s`); kept out of every deterministic file."""

    def to_json(self) -> dict[str, Any]:
        """The rows as JSON (a unit file of the runner)."""
        return {
            "probes": [r.to_json() for r in self.probes],
            "writes": [r.to_json() for r in self.writes],
            "timing": self.timing,
        }


def _open_store(
    embedder: Any, clock: SimClock, fold: FoldParams, scope_id: str, url: str | None = None
) -> Any:
    """A fresh store on the simulated clock with deterministic row ids: in memory,
    or (`url` = postgresql://...) a schema of its own on that server, dropped on
    close (`memkit.store.backends.open_scratch_store`); both give the same results.

    Row ids appear in consolidation requests, so random ids would change every
    request hash and defeat the response cache; ids here are a hash of the
    scope and a counter, identical on every replay.
    """
    from memkit.store import open_scratch_store

    store = open_scratch_store(url, embedder=embedder, clock=clock, fold=fold)
    counter = itertools.count(1)

    def new_id() -> str:
        return hashlib.sha256(f"{scope_id}:{next(counter)}".encode()).hexdigest()[:16]

    if hasattr(store, "new_id"):
        store.new_id = new_id
    return store


CURATION = ("latest_row", "all_rows")
"""How store mode applies a gold supersede or retraction: to the fact's most
recently written row only (what an agent editing the row it recalled does; a
missed fold then leaves a stale twin live, and leakage shows it), or to every
row holding the fact (ideal curation; leakage then isolates the store)."""


def replay_store_scope(
    scope: ScopeData,
    *,
    embedder: Any,
    fold: FoldParams = FoldParams(),
    variants: Sequence[Variant] = (Variant(),),
    curation: str = "latest_row",
    store_url: str | None = None,
) -> StoreModeResult:
    """Store mode for one scope (see the module docstring); `store_url` as for
    `_open_store` (None: in memory)."""
    if curation not in CURATION:
        raise ConfigError(f"curation must be one of {CURATION}, got {curation!r}")
    clock = SimClock()
    store = _open_store(embedder, clock, fold, scope.scope_id, store_url)
    sid = scope.scope_id
    facts = {f.fact_id: f for f in scope.facts}
    predecessors = predecessors_of(scope.facts)
    by_run = writes_by_run(scope.facts)
    group = fold_groups_of(scope.facts)
    session_of = sessions_of(scope.facts)
    row_fact: dict[str, str] = {}
    fact_rows: dict[str, list[str]] = {}  # live rows per fact, latest last
    times_written: dict[str, int] = {}
    write_seq: dict[str, int] = {}  # row -> position of its latest write
    done: set[str] = set()
    writes: list[WriteRow] = []
    probes: list[ProbeRow] = []
    pending = list(scope.probes)

    def targets(fid: str) -> list[str]:
        rows = fact_rows.get(fid, [])
        return list(rows) if curation == "all_rows" else rows[-1:]

    def retire(fid: str, rows: Iterable[str]) -> None:
        for r in rows:
            with contextlib.suppress(NotFound):  # already not live: nothing to retract
                store.retract(sid, r)
            if r in fact_rows.get(fid, []):
                fact_rows[fid].remove(r)

    def record(fid: str, n: int, rid: str, row: str, folded: bool, updated: bool) -> None:
        before = row_fact.get(row) if folded else None
        if folded and before is not None and before != fid:
            fact_rows[before].remove(row)
        writes.append(
            WriteRow(
                scope_id=sid,
                run_id=rid,
                fact=fid,
                restatement=n > 0,
                row=row,
                folded=bool(folded),
                row_fact=before,
                update=updated,
                time=clock.now,
                group=group.get(fid, fid) if group else None,
                row_group=group.get(before, before) if group and before is not None else None,
            )
        )
        write_seq[row] = len(writes)
        row_fact[row] = fid
        rows = fact_rows.setdefault(fid, [])
        if row in rows:
            rows.remove(row)
        rows.append(row)
        times_written[fid] = n + 1

    batch: list[tuple[str, int, str, dict[str, Any]]] = []  # plain writes, in order

    timing = {"ingest_s": 0.0, "probe_s": 0.0}

    def flush() -> None:
        t0 = time.perf_counter()
        results = ingest(store, sid, [item for *_, item in batch])
        timing["ingest_s"] += time.perf_counter() - t0
        for (fid, n, rid, _), res in zip(batch, results, strict=True):
            record(fid, n, rid, res.id, res.folded, False)
        batch.clear()

    try:
        for run in scope.runs:
            rid = run.run_id
            clock.now = scope.time[rid]
            for fid in by_run.get(rid, ()):
                f = facts[fid]
                n = times_written.get(fid, 0)
                paras = list(f.paraphrases)
                text = f.content
                if n > 0 and paras:
                    text = paras[(n - 1) % len(paras)]
                if n == 0 and predecessors.get(fid):
                    flush()  # the predecessors' rows must exist before the successor
                    olds = [(r, o) for o in predecessors[fid] for r in targets(o)]
                    if olds:
                        # many-to-one: the latest predecessor row becomes the successor,
                        # every other predecessor row is retired
                        last = max(olds, key=lambda ro: write_seq.get(ro[0], -1))
                        try:
                            t0 = time.perf_counter()
                            row = store.update(sid, last[0], text)
                            timing["ingest_s"] += time.perf_counter() - t0
                        except NotFound:  # the old row is gone: write the new fact plainly
                            pass
                        else:
                            fact_rows[last[1]].remove(last[0])
                            for r, o in olds:
                                if r != last[0]:
                                    retire(o, [r])
                            record(fid, n, rid, row, False, True)
                            continue
                kind = f.kind or "fact"
                item = {"content": text, "kind": kind, "confidence": 0.7, "source_run_id": rid}
                batch.append((fid, n, rid, item))
            flush()
            for fid, f in sorted(facts.items()):
                if f.retracted_in == rid:
                    retire(fid, targets(fid))
            done.add(rid)
            t0 = time.perf_counter()
            while pending and pending[0].after_run == rid:
                p = pending.pop(0)
                stale = stale_facts(scope, done, set(times_written))
                for v in variants:
                    probes.append(
                        probe_row(store, p, v, lambda m: row_fact.get(m.id), stale, session_of)
                    )
            timing["probe_s"] += time.perf_counter() - t0
    finally:
        store.close()
    return StoreModeResult(probes, writes, {**timing, "writes": float(len(writes))})


def replay_store(
    dataset: Any,
    *,
    embedder: Any = "wordllama",
    fold: FoldParams = FoldParams(),
    variants: Sequence[Variant] = (Variant(),),
    scopes: Iterable[str] | None = None,
    curation: str = "latest_row",
    on_scope: Callable[[str], None] | None = None,
) -> StoreModeResult:
    """Store mode over every scope (or the named ones); rows in scope order.
    `on_scope(scope_id)` is called after each scope (progress)."""
    from memkit.embed import get_embedder

    emb = embedder if not isinstance(embedder, str) else get_embedder(embedder)
    out = StoreModeResult([], [])
    for s in scopes_of(dataset, scopes):
        r = replay_store_scope(s, embedder=emb, fold=fold, variants=variants, curation=curation)
        out.probes.extend(r.probes)
        out.writes.extend(r.writes)
        if on_scope is not None:
            on_scope(s.scope_id)
    return out


# --- pipeline mode -----------------------------------------------------------------------


@dataclass
class PipelineResult:
    probes: list[ProbeRow]
    attempts: list[AttemptRow]
    passes: list[PassRow]
    extraction: list[ExtractionRow]
    evidence: list[EvidenceRow] = field(default_factory=list)
    """Per staged run: the evidence bytes and messages the SPEC §7 bounds kept
    and what the unbounded evidence would have held (`evidence_account`)."""

    def to_json(self) -> dict[str, Any]:
        """The rows as JSON (a unit file of the runner)."""
        return {
            k: [r.to_json() for r in getattr(self, k)]
            for k in ("probes", "attempts", "passes", "extraction", "evidence")
        }


def evidence_account(
    run: Mapping[str, Any],
    rollout: Any,
    params: ConsolidationParams,
    redaction: Any,
    scope_id: str,
) -> EvidenceRow:
    """How much of a run the staged evidence keeps: the same staging code with every
    bound lifted gives what was offered (non-system messages, each with all its
    tool calls and full arguments), the rollout what the bounds kept."""
    from memkit.consolidate import evidence_messages

    unbounded = dataclasses.replace(
        params,
        evidence_messages=10**9,
        evidence_bytes=10**15,
        message_bytes=0,
        tool_calls_annotated=10**9,
        tool_name_bytes=0,
        tool_args_bytes=0,
    )
    offered = evidence_messages(run["messages"], unbounded, redaction)
    kept = list(rollout.messages)

    def size(ms: Sequence[Mapping[str, Any]]) -> int:
        return sum(len(str(m.get("content", "")).encode("utf-8")) for m in ms)

    return EvidenceRow(
        scope_id=scope_id,
        run_id=run["run_id"],
        messages_offered=len(offered),
        messages_kept=len(kept),
        bytes_offered=size(offered),
        bytes_kept=size(kept),
    )


def live_gold(scope: ScopeData, runs_done: set[str], staged_runs: set[str]) -> tuple[set, set]:
    """Gold facts that should be live (and those that are stale) after `runs_done`.

    Only evidence a consolidator could see counts: a fact is expected when
    one of its establishing runs was staged.
    """
    written = {f.fact_id for f in scope.facts if set(f.established_in or ()) & staged_runs}
    stale = stale_facts(scope, runs_done, written)
    return written - stale, stale


async def replay_pipeline_scope(
    scope: ScopeData,
    consolidator: Any,
    *,
    embedder: Any,
    matcher: Matcher,
    params: ConsolidationParams = ConsolidationParams(),
    fold: FoldParams = FoldParams(),
    variants: Sequence[Variant] = (Variant(),),
    semaphore: asyncio.Semaphore | None = None,
    on_pass: Callable[[PassRow], None] | None = None,
    replicate: int = 0,
    store_url: str | None = None,
) -> PipelineResult:
    """Pipeline mode for one scope (see the module docstring); `store_url` as for
    `_open_store` (None: in memory)."""
    from memkit.consolidate import run_pass, stage_run

    clock = SimClock()
    store = _open_store(embedder, clock, fold, scope.scope_id, store_url)
    out = PipelineResult([], [], [], [])
    pending = list(scope.probes)
    done: set[str] = set()
    staged: set[str] = set()
    errors: list[str] = []
    stage_errors: list[StageError] = []

    async def one_pass() -> Any:
        if semaphore is None:
            return await run_pass(store, scope.scope_id, consolidator, params, replicate=replicate)
        async with semaphore:
            return await run_pass(store, scope.scope_id, consolidator, params, replicate=replicate)

    async def drain() -> None:
        for _ in range(MAX_DRAIN_PASSES):
            t0 = time.perf_counter()
            res = await one_pass()
            wall = time.perf_counter() - t0
            if res.outcome == "nothing_pending":
                return
            prow = pass_row(res, scope.scope_id, len(out.passes), wall)
            out.passes.append(prow)
            out.attempts.extend(
                AttemptRow.of(
                    a,
                    scope_id=scope.scope_id,
                    snapshot_ids=res.snapshot_ids,
                    rollout_ids=res.rollout_ids,
                    pass_=prow.pass_,
                )
                for a in res.attempts
            )
            if on_pass:
                on_pass(prow)
            if res.outcome != "committed":
                errors.append(str(res.error_code))
                return

    def label(m: Any) -> str | None:
        return matcher.match(m.content, scope.scope_id).fact_id

    session_of = sessions_of(scope.facts)

    try:
        for run in scope.runs:
            rid = run.run_id
            clock.now = scope.time[rid]
            try:
                record = run.as_run()
                rollout = stage_run(store, record, params)
                if rollout is not None:
                    staged.add(rid)
                    redaction = getattr(store, "redaction", None) or RedactionParams()
                    out.evidence.append(
                        evidence_account(record, rollout, params, redaction, scope.scope_id)
                    )
            except MemkitError as exc:  # SPEC §7: a staging error never fails the run
                stage_errors.append(StageError(run_id=rid, error=f"{type(exc).__name__}: {exc}"))
            await drain()
            done.add(rid)
            while pending and pending[0].after_run == rid:
                p = pending.pop(0)
                _, stale = live_gold(scope, done, staged)
                for v in variants:
                    out.probes.append(probe_row(store, p, v, label, stale, session_of))
        await drain()
        expected, stale = live_gold(scope, done, staged)
        rows = store.live(scope.scope_id)
        out.extraction.append(
            ExtractionRow(
                scope_id=scope.scope_id,
                rows=tuple(LiveRow(id=m.id, fact=label(m), content=m.content) for m in rows),
                live_gold=tuple(sorted(expected)),
                stale_gold=tuple(sorted(stale)),
                staged_runs=tuple(sorted(staged)),
                stage_errors=tuple(stage_errors),
                rollouts=_rollout_counts(store, scope.scope_id),
                gold=bool(scope.facts),
            )
        )
    finally:
        store.close()
    return out


def pass_row(res: Any, scope_id: str, index: int, wall_s: float) -> PassRow:
    """One pass as a run-file row, with its view of the split (docs/behaviour.md "Parking"):
    whether it ran on a sub-batch of a failed one, and what it parked alone or
    together with others."""
    parked = len(res.parked)
    alone = len(res.rollout_ids) == 1
    return PassRow(
        scope_id=scope_id,
        pass_=index,
        outcome=res.outcome,
        error_code=res.error_code,
        request_hash=res.request_hash,
        rollout_ids=tuple(res.rollout_ids),
        snapshot_ids=tuple(res.snapshot_ids),
        changes=jsonable(list(res.changes)),
        parked=tuple(res.parked),
        isolation=bool(res.isolation),
        parked_alone=parked if alone else 0,
        parked_with_others=0 if alone else parked,
        request_bytes=res.request_bytes,
        excerpt_size=res.excerpt_size,
        request_budget=res.request_budget,
        wall_s=wall_s,
    )


def _rollout_counts(store: Any, scope_id: str) -> RolloutCounts:
    """Where the scope's staged evidence ended: consumed, still pending, or parked."""
    st = store.stats(scope_id)
    return RolloutCounts(
        **{k: int(st.get(f"rollouts_{k}", 0)) for k in ("consumed", "pending", "parked")}
    )


# --- the oracle's gold lookup -----------------------------------------------------------


def oracle_gold(dataset: Any, matcher: Matcher, *, max_changes: int = 16) -> Callable:
    """Build `gold(request) -> changes` for `get_consolidator("oracle", gold=...)`.

    For each rollout of the batch (by its `run_id`), in batch order: every
    gold fact the run establishes that no snapshot row already holds is
    added, or, when it supersedes a fact a snapshot row holds, merged into
    that row; every fact the run retracts is retracted if a snapshot row
    holds it. Snapshot rows are mapped to facts with the matcher. A row is
    named at most once, and at most `max_changes` changes are returned.
    """
    facts = {f.fact_id: f for f in dataset.facts}
    established = writes_by_run(facts.values())
    predecessors = predecessors_of(facts.values())
    retracted: dict[str, list[str]] = {}
    for fid in sorted(facts):
        f = facts[fid]
        if f.retracted_in:
            retracted.setdefault(f.retracted_in, []).append(fid)

    def entry(fid: str) -> dict[str, Any]:
        f = facts[fid]
        return {"kind": f.kind or "fact", "content": f.content}

    def gold(request: Any) -> list[dict[str, Any]]:
        scope = request.scope_id
        row_of: dict[str, str] = {}
        for m in request.snapshot:
            fid = matcher.match(m.content, scope).fact_id
            if fid is not None:
                row_of.setdefault(fid, m.id)
        used: set[str] = set()
        seen: set[str] = set()
        changes: list[dict[str, Any]] = []
        batch = {
            fid for r in request.rollouts for fid in established.get(getattr(r, "run_id", ""), ())
        }
        for r in request.rollouts:
            run = getattr(r, "run_id", "")
            for fid in established.get(run, ()):
                if fid in row_of or fid in seen or facts[fid].scope_id != scope:
                    continue
                seen.add(fid)
                if facts[fid].superseded_by in batch:
                    continue  # superseded within this batch: write only its successor
                ids = [
                    row_of[o]
                    for o in predecessors.get(fid, ())
                    if o in row_of and row_of[o] not in used
                ]
                used.update(ids)
                changes.append({"ids": ids, "entry": entry(fid)})
            for fid in retracted.get(run, ()):
                if fid in row_of and row_of[fid] not in used:
                    used.add(row_of[fid])
                    changes.append({"ids": [row_of[fid]], "entry": None})
        return changes[:max_changes]

    return gold
