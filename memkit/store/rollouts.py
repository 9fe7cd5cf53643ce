"""The store side of consolidation (SPEC §7): the rollout queue and its commit.

Staging a rollout (redacted, id checked), the queues a pass reads (pending,
the next batch of a split, parked), counting a failed pass and parking
(`memkit.store.parking` plans it), the snapshot a consolidator sees, and
`commit_pass`, which checks and applies one validated pass in one write
(SPEC §7.7): any failure mutates nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from memkit import checks as ck
from memkit.errors import ANSWER_CODES, AlreadyConsumed, ConfigError, ProposalError, StaleSnapshot
from memkit.params import ConsolidationParams
from memkit.proposal import Proposal, validate_proposal
from memkit.redact import redact
from memkit.store import rows as sql
from memkit.store.index import LiveRow
from memkit.store.parking import PROVIDER_CODES, failure_class, plan
from memkit.store.reads import Reads
from memkit.store.write_txn import Write
from memkit.text import trigrams
from memkit.types import Change, CommitResult, Memory, Rollout

_ROLLOUT_ID = re.compile(r"[0-9a-f]{64}")


class RolloutQueue(Reads):
    """The rollout queue and its commit (SPEC §7): staging, the pending and
    parked queues, failed passes and parking, the snapshot, `commit_pass`."""

    # -- consolidation, store side (SPEC §7) --------------------------------------------

    def stage_rollout(self, rollout: Rollout) -> bool:
        """Persist a rollout; False (no change) when that id is already staged.

        Message contents and the final answer are redacted with the store's
        settings here too (idempotent after `stage_run`), so a rollout a host
        builds itself cannot bring a secret into the file. A rollout whose id
        is not 64 lowercase hex (SPEC §7 staging) is refused too: it could
        never pass validation, so it must never reach the queue (memkit).
        """
        messages_json, final = self._check_rollout(rollout)
        with self._lock:
            staged_at = rollout.staged_at if rollout.staged_at is not None else float(self.clock())
            cur = self._conn.execute(
                "INSERT INTO rollouts (id, scope_id, run_id, messages, final, staged_at, "
                "consumed_at) VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (id) DO NOTHING",
                (
                    rollout.id,
                    rollout.scope_id,
                    rollout.run_id,
                    messages_json,
                    final,
                    staged_at,
                ),
            )
            return bool(cur.rowcount == 1)

    def _check_rollout(self, rollout: Rollout) -> tuple[str, str]:
        """The rollout's checked, redacted messages (as JSON) and final answer."""
        ck.check_type(rollout, "rollout", Rollout)
        ck.check_id(rollout.id, "rollout.id")
        if not _ROLLOUT_ID.fullmatch(rollout.id):
            raise ConfigError(
                f"rollout.id={rollout.id!r:.80}: must be 64 lowercase hex (a SHA-256 of "
                "the transcript, see memkit.consolidate.rollout_id)"
            )
        ck.check_scope(rollout.scope_id, "rollout.scope_id")
        ck.check_optional_id(rollout.run_id, "rollout.run_id")
        final = ck.check_text(rollout.final, "rollout.final", blank=True)
        st = rollout.staged_at
        if st is not None and (isinstance(st, bool) or not isinstance(st, int | float)):
            raise ConfigError(f"rollout.staged_at={st!r:.80}: must be a number or None")
        if not isinstance(rollout.messages, list | tuple):
            raise ConfigError(f"rollout.messages={rollout.messages!r:.80}: must be a list")
        messages = []
        for i, m in enumerate(rollout.messages):
            if not isinstance(m, Mapping):
                raise ConfigError(f"rollout.messages[{i}]={m!r:.80}: must be a mapping")
            m = dict(m)
            for key in ("content", "tool_calls"):  # text, or parts / calls holding text
                if key in m:
                    m[key] = self._redact_deep(m[key], f"rollout.messages[{i}].{key}")
            messages.append(m)
        try:
            text = json.dumps(messages, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise ConfigError(f"rollout.messages: not JSON-serialisable ({e})") from None
        ck.check_text(text, "rollout.messages", blank=True)
        return text, redact(final, self.redaction)

    def _redact_deep(self, value: Any, name: str) -> Any:
        """Every string inside `value` redacted (a hand-built rollout's content parts
        and tool-call arguments: `build_rollout` flattens them into text, a Rollout
        made by hand keeps them, and they reached the table unredacted)."""

        def walk(v: Any) -> Any:
            if isinstance(v, str):
                return redact(v, self.redaction)
            if isinstance(v, list | tuple):
                return [walk(x) for x in v]
            if isinstance(v, Mapping):
                return {k: walk(x) for k, x in v.items()}
            return v

        try:
            return walk(value)
        except RecursionError:
            raise ConfigError(f"{name}: nested too deeply") from None

    def _rollouts(self, where: str, args: Sequence[Any]) -> list[Rollout]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, scope_id, messages, final, staged_at, consumed_at, run_id, "
                f"failed_passes, parked_at, split_size, parked_batch FROM rollouts WHERE {where}",
                tuple(args),
            ).fetchall()
        return [
            Rollout(
                id=r[0],
                scope_id=r[1],
                messages=tuple(json.loads(r[2])),
                final=r[3],
                staged_at=r[4],
                consumed_at=r[5],
                run_id=r[6],
                failed_passes=r[7],
                parked_at=r[8],
                split_size=r[9],
                parked_batch=r[10],
            )
            for r in rows
        ]

    def pending_rollouts(self, scope_id: str, limit: int = 4) -> list[Rollout]:
        """Unconsumed, unparked rollouts of a scope, oldest first."""
        ck.check_scope(scope_id)
        ck.check_int(limit, "limit")
        return self._rollouts(
            "scope_id = ? AND consumed_at IS NULL AND parked_at IS NULL "
            "ORDER BY staged_at, seq LIMIT ?",
            (scope_id, max(limit, 0)),
        )

    def next_batch(self, scope_id: str, limit: int = 4) -> list[Rollout]:
        """(memkit) The rollouts the next pass takes: while a failed batch is being
        split, its next sub-batch (the oldest rollouts in the split, as many as
        the first one's `split_size`, at most `limit`); else `pending_rollouts`."""
        ck.check_scope(scope_id)
        ck.check_int(limit, "limit")
        split = self._rollouts(
            "scope_id = ? AND consumed_at IS NULL AND parked_at IS NULL "
            "AND split_size IS NOT NULL ORDER BY staged_at, seq LIMIT ?",
            (scope_id, max(limit, 0)),
        )
        if split:
            return split[: max(1, split[0].split_size or 1)]
        return self.pending_rollouts(scope_id, limit)

    def parked_rollouts(self, scope_id: str) -> list[Rollout]:
        """(memkit) Rollouts parked after repeated invalid answers, oldest first."""
        ck.check_scope(scope_id)
        return self._rollouts(
            "scope_id = ? AND consumed_at IS NULL AND parked_at IS NOT NULL "
            "ORDER BY staged_at, seq",
            (scope_id,),
        )

    def requeue(self, scope_id: str, rollout_id: str) -> None:
        """(memkit) Put a parked rollout back in the pending queue, its failures forgotten.

        Raises ConfigError unless `rollout_id` is parked in `scope_id`.
        """
        ck.check_scope(scope_id)
        ck.check_id(rollout_id, "rollout_id")
        with self._write(scope_id) as w:
            cur = w.conn.execute(
                "UPDATE rollouts SET parked_at = NULL, failed_passes = 0, failed_as = NULL, "
                "parked_batch = NULL, split_size = NULL WHERE id = ? "
                "AND scope_id = ? AND consumed_at IS NULL AND parked_at IS NOT NULL",
                (rollout_id, scope_id),
            )
            if cur.rowcount != 1:
                raise ConfigError(f"rollout {rollout_id!r:.80} is not parked in scope {scope_id!r}")

    def record_failed_pass(
        self,
        scope_id: str,
        rollout_ids: Sequence[str],
        code: str,
        params: ConsolidationParams = ConsolidationParams(),
    ) -> tuple[str, ...]:
        """(memkit) Count a failed pass against its rollouts; split the batch or park.

        `code` must count (`memkit.store.parking.failure_class`: a parse or
        validation code, or the provider's `bad_request` / `timeout`; a 5xx,
        a rate limit or a stale snapshot is not the evidence's fault). In one
        write transaction, every named rollout still pending in the scope gets
        one more failed pass (restarting at 1 when its last counted failure
        was of another class), then `memkit.store.parking.plan` decides: split the
        batch in halves, park a rollout that failed alone at `park_after`
        (releasing the rest of the split), or, with `params.isolate` off, park
        every rollout at `park_after`. So a crash records the failure with
        its consequence or neither. Returns the ids parked by this call, in
        batch order.
        """
        ck.check_scope(scope_id)
        ck.check_type(params, "params", ConsolidationParams)
        kind = failure_class(code)
        if kind is None:
            raise ConfigError(
                f"record_failed_pass: {code!r} does not count (want one of "
                f"{', '.join((*ANSWER_CODES, *PROVIDER_CODES))})"
            )
        ids = list(dict.fromkeys(rollout_ids))
        if not ids:
            return ()
        ph = ",".join("?" * len(ids))
        mine = f"id IN ({ph}) AND scope_id = ? AND consumed_at IS NULL AND parked_at IS NULL"
        with self._write(scope_id) as w:
            w.conn.execute(
                "UPDATE rollouts SET failed_passes = CASE WHEN COALESCE(failed_as, 'answer') = ? "
                f"THEN failed_passes + 1 ELSE 1 END, failed_as = ? WHERE {mine}",
                (kind, kind, *ids, scope_id),
            )
            counts = dict(
                w.conn.execute(
                    f"SELECT id, failed_passes FROM rollouts WHERE {mine}", (*ids, scope_id)
                )
            )
            batch = [(i, counts[i]) for i in ids if i in counts]
            todo = plan(batch, params)
            if todo.park:
                dph = ",".join("?" * len(todo.park))
                w.conn.execute(
                    "UPDATE rollouts SET parked_at = ?, parked_batch = ?, split_size = NULL "
                    f"WHERE id IN ({dph})",
                    (float(self.clock()), len(batch), *todo.park),
                )
            if todo.release:
                w.conn.execute(
                    "UPDATE rollouts SET split_size = NULL WHERE scope_id = ? "
                    "AND consumed_at IS NULL AND parked_at IS NULL AND split_size IS NOT NULL",
                    (scope_id,),
                )
            for size in sorted(set(todo.split.values())):
                part = [i for i, n in todo.split.items() if n == size]
                w.conn.execute(
                    f"UPDATE rollouts SET split_size = ? WHERE id IN ({','.join('?' * len(part))})",
                    (size, *part),
                )
        return todo.park

    def snapshot(
        self, scope_id: str, limit: int = 32, *, policy: str = "recent", query: str = ""
    ) -> list[Memory]:
        """Live memories shown to a consolidator. "recent" (reference): the `limit`
        most recently confirmed. "relevant": recalled against `query`, padded with
        recent rows up to `limit`."""
        ck.check_scope(scope_id)
        ck.check_int(limit, "limit")
        ck.check_choice(policy, "policy", ("recent", "relevant"))
        ck.check_query(query)
        if policy == "recent" or not query.strip() or limit <= 0:
            return self.live(scope_id, limit=max(limit, 0))
        picked: dict[str, Memory] = {}
        for hit in self.recall(scope_id, query, limit=limit):
            picked.setdefault(hit.id, hit.memory)
        if len(picked) < limit:
            for m in self.live(scope_id, limit=limit + len(picked)):
                if len(picked) >= limit:
                    break
                picked.setdefault(m.id, m)
        return list(picked.values())[:limit]

    def commit_pass(
        self,
        scope_id: str,
        rollout_ids: Sequence[str],
        snapshot: Sequence[Memory],
        changes: Any,
        params: ConsolidationParams = ConsolidationParams(),
    ) -> CommitResult:
        """Apply one validated consolidation pass atomically (SPEC §7.7).

        `changes` is a `memkit.proposal.Proposal` validated for exactly this
        pass, or the raw parsed changes list (validated here, once, before the
        lock). In one write: every rollout must exist in this scope unconsumed
        and unparked (else AlreadyConsumed), every snapshot row must still be
        live and unchanged (else StaleSnapshot), then a validation failure is
        raised (so its code ranks after these two, as before); adds insert
        (they do not fold, as in the reference), merges insert and retire the
        named rows to the new id, retracts point rows at themselves, and
        exactly these rollouts are marked consumed. Any failure mutates
        nothing. Returns what was applied, typed changes included.
        """
        self._check_commit(scope_id, rollout_ids, snapshot, params)
        rollout_ids = list(rollout_ids)
        snapshot = list(snapshot)
        invalid: ProposalError | None = None
        typed: tuple[Change, ...] = ()
        if isinstance(changes, Proposal):
            if not changes.is_for(scope_id, rollout_ids, snapshot, params):
                raise ConfigError(
                    "commit_pass: the proposal was validated for another pass "
                    "(scope, rollouts, snapshot or params differ)"
                )
            typed = changes.changes
        else:
            try:
                typed = validate_proposal(scope_id, rollout_ids, snapshot, changes, params).changes
            except ProposalError as e:
                invalid = e
        entries = [
            (ch.entry, *self._redact(ch.entry.content, ch.entry.tags))
            for ch in typed
            if ch.entry is not None
        ]
        vecs = iter(self._embed([content for _e, content, _t in entries]))
        new_rows = iter(entries)
        with self._write(scope_id) as w:
            self._check_pass(w, scope_id, rollout_ids, snapshot)
            if invalid is not None:
                raise invalid
            live_rows = {  # every one is live: _check_pass just said so
                m.id: r for m in snapshot if (r := sql.live_row(w.conn, scope_id, m.id)) is not None
            }
            now = float(self.clock())
            added: list[str] = []
            retired: list[str] = []
            for ch in typed:
                new_id = None
                if ch.entry is not None:
                    ent, content, tag_list = next(new_rows)
                    vec = next(vecs)
                    new_id = self.new_id()
                    grams = trigrams(content)
                    rowid = sql.insert(
                        w.conn, new_id, scope_id, ent.kind, content, tag_list, ent.confidence, None,
                        now, vec, len(grams), w.seq,
                    )  # fmt: skip
                    added.append(new_id)
                    w.put(
                        LiveRow(
                            scope_id,
                            ent.kind,
                            rowid,
                            content,
                            tag_list,
                            vec,
                            ent.confidence,
                            now,
                            now,
                            grams,
                        )
                    )
                for mid in ch.ids:
                    r = live_rows[mid]
                    sql.retire(w.conn, r.rowid, new_id or mid, w.seq)
                    retired.append(mid)
                    w.drop(scope_id, r.kind, r.rowid)
            if rollout_ids:
                ph = ",".join("?" * len(rollout_ids))
                w.conn.execute(
                    f"UPDATE rollouts SET consumed_at = ? WHERE id IN ({ph})", (now, *rollout_ids)
                )
        return CommitResult(
            added=tuple(added), retired=tuple(retired), consumed=tuple(rollout_ids), changes=typed
        )

    @staticmethod
    def _check_commit(scope_id: Any, rollout_ids: Any, snapshot: Any, params: Any) -> None:
        """commit_pass's argument types (values are the proposal rules' business)."""
        ck.check_scope(scope_id)
        if not isinstance(rollout_ids, list | tuple):
            raise ConfigError(f"rollout_ids={rollout_ids!r:.80}: must be a list of ids")
        for rid in rollout_ids:
            if not isinstance(rid, str):
                raise ProposalError("rollout_ids", f"rollout id {rid!r:.80} is not a string")
            if problem := ck.utf8_problem(rid):  # SQLite and psycopg would raise on it
                raise ProposalError("rollout_ids", f"rollout id {rid!r:.80} is {problem}")
        if not isinstance(snapshot, list | tuple) or not all(
            isinstance(m, Memory)
            and isinstance(m.id, str)
            and isinstance(m.scope_id, str)
            and not ck.utf8_problem(m.id)
            for m in snapshot
        ):
            raise ConfigError(f"snapshot={snapshot!r:.80}: must be a list of Memory rows")
        ck.check_type(params, "params", ConsolidationParams)

    @staticmethod
    def _check_pass(
        w: Write, scope_id: str, rollout_ids: list[str], snapshot: list[Memory]
    ) -> None:
        """What can change under the lock: consumption or parking, then snapshot currency."""
        for rid in rollout_ids:
            r = w.conn.execute(
                "SELECT consumed_at, parked_at FROM rollouts WHERE id = ? AND scope_id = ?",
                (rid, scope_id),
            ).fetchone()
            if r is None:
                raise AlreadyConsumed(f"rollout {rid!r} is not staged in scope {scope_id!r}")
            if r[0] is not None:
                raise AlreadyConsumed(f"rollout {rid!r} was already consumed")
            if r[1] is not None:  # another connection parked it after this pass read it
                raise AlreadyConsumed(f"rollout {rid!r} was parked")
        for m in snapshot:
            if m.scope_id != scope_id:
                continue  # validation rejects it as snapshot_scope
            r = sql.live_row(w.conn, scope_id, m.id)
            if r is None:
                raise StaleSnapshot(f"snapshot memory {m.id!r} is no longer live")
            if (
                r.content != m.content
                or tuple(r.tag_list) != tuple(m.tags)
                or r.confidence != m.confidence
                or r.seen_count != m.seen_count
                or r.last_seen_at != m.last_seen_at
            ):
                raise StaleSnapshot(f"snapshot memory {m.id!r} changed since the snapshot")
