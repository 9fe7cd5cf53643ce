"""LongMemEval (oracle split or S; MIT), as its authors score retrieval.

Mapping: one scope per question (haystacks are independent); each haystack
session is a run at its date; **every turn** of every haystack session is a
gold fact (`fact`, established in its session, `meta` keeping the session
id, turn index, role and `has_answer`), so store mode writes the whole
haystack in time order, one row per turn, at the session's timestamp. The
question is a probe after the latest session whose relevant facts are the
turns marked `has_answer`; it asks (`meta["rank_all"]`) for the store's
ranking without a limit, which is *at the floor* (rows below it are not
ranked), and for the full ranking with the floor off, so session- and
turn-level `recall_any@k`, `recall_all@k` and `ndcg_any@k` are computed as in
the authors' `src/retrieval/eval_utils.py` on both, beside a random order of
the same turns (see `evals.retrieval`; turn level is the headline). Abstention questions
(`_abs`) are kept out of those metrics (`meta["undefined"] = "abstention"`),
as the authors do; `meta["group"]` is the question type.

Deviations from the authors, documented: the authors index user turns only;
memkit writes every turn (user and assistant), which is what an agent's
store would hold, and which gives single-session-assistant questions
(answers in assistant turns) defined turn-level scores. Knowledge-update
questions keep their earlier answer turns relevant, as the authors score
them (nothing is superseded).

Left out: LongMemEval_M (not in the shared data), the answer text as gold
for a reader model (kept in probe meta only).
"""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

from evals.adapters.shared import (
    At,
    check_limit,
    each,
    field,
    find_data,
    load_json,
    make_dataset,
    record_guard,
    root_run,
    utc_timestamp,
)
from evals.datasets import Dataset, GoldFact, Probe, Transcript
from memkit.errors import ConfigError, DatasetError

_LME_DATE = "%Y/%m/%d (%a) %H:%M"
_LME_PART = re.compile(r"\.part(\d+)of(\d+)\.json$")


def _lme_files(path: str | Path, variant: str) -> list[Path]:
    """The oracle split ships as `longmemeval_oracle.partKofN.json`: N complete JSON
    lists that join by concatenation in part order (1..N, all required)."""
    if variant == "oracle":
        files = find_data(
            path,
            "longmemeval",
            ["longmemeval_oracle.part*of*.json", "longmemeval_oracle*.json"],
        )
    elif variant == "s":
        files = find_data(path, "longmemeval", ["longmemeval_s.json", "longmemeval_s_*.json"])
    else:
        raise ConfigError(f"LongMemEval variant {variant!r}: expected 'oracle' or 's'")
    parts = [(_LME_PART.search(f.name), f) for f in files]
    if not any(m for m, _ in parts):
        return files[:1]
    nums = sorted((int(m.group(1)), int(m.group(2)), f) for m, f in parts if m)
    total = nums[0][1]
    if [k for k, _, _ in nums] != list(range(1, total + 1)) or {t for _, t, _ in nums} != {total}:
        names = ", ".join(f.name for _, _, f in nums)
        raise DatasetError(
            str(files[0].parent),
            None,
            None,
            f"oracle parts incomplete: need part1..part{total}of{total}, have {names}",
        )
    return [f for _, _, f in nums]


def load_longmemeval(
    path: str | Path, variant: str = "oracle", *, limit: int | None = None
) -> Dataset:
    """LongMemEval oracle (joined from its parts) or S, as a Dataset.

    `limit` keeps the first questions (in file order: by type, then id).
    Record lines in errors are 1-based question positions across the joined
    parts. Probes keep `question_type` (also as `group`), `answer` (as a
    string), `question_date`, `answer_session_ids` and `abstention` in `meta`.
    """
    check_limit(limit)
    files = _lme_files(path, variant)
    transcripts: list[Transcript] = []
    facts: list[GoldFact] = []
    probes: list[Probe] = []
    n = 0
    for file in files:
        data = load_json(file)
        if not isinstance(data, list):
            raise DatasetError(str(file), None, None, "expected a JSON list of questions")
        for rec in data:
            if limit is not None and n >= limit:
                break
            n += 1
            with record_guard(file, n):
                t, f, p = _lme_question(rec, file, n)
            transcripts += t
            facts += f
            probes.append(p)
    return make_dataset(
        f"longmemeval-{variant}",
        files,
        f"LongMemEval ({variant}) via memkit's adapter: haystack sessions as runs, every "
        "turn as a fact (the whole haystack is written), questions as probes whose "
        "relevant turns are those marked has_answer.",
        "MIT",
        transcripts,
        facts,
        probes,
        info={
            "abstention_probes": sum(p.meta["abstention"] for p in probes),
            "matcher": "LongMemEval labels no equivalent texts, so the matcher has no "
            "measured figure here; store mode needs none (row provenance is exact). "
            "Closest measured sets: MSC fold groups and LoCoMo repeated observations "
            "(see their runs' matcher.json).",
        },
    )


def _lme_question(rec: Any, file: Path, n: int) -> tuple[list[Transcript], list[GoldFact], Probe]:
    at = At(file, n)
    qid = field(rec, "question_id", str, at)
    qtype = field(rec, "question_type", str, at)
    question = field(rec, "question", str, at)
    sids = each(field(rec, "haystack_session_ids", list, at), str, at["haystack_session_ids"])
    dates = field(rec, "haystack_dates", list, at)
    sessions = each(field(rec, "haystack_sessions", list, at), list, at["haystack_sessions"])
    if not len(sids) == len(dates) == len(sessions):
        raise DatasetError(
            str(file),
            n,
            "haystack_sessions",
            f"{len(sessions)} sessions, {len(sids)} ids, {len(dates)} dates",
        )
    scope = f"lme:{qid}"
    runs: list[Transcript] = []
    facts: list[GoldFact] = []
    used: set[str] = set()
    for i, (sid, date, turns) in enumerate(zip(sids, dates, sessions, strict=True)):
        ts = utc_timestamp(date, _LME_DATE, file, n, f"haystack_dates[{i}]")
        run_id = f"{scope}:{sid}" if sid not in used else f"{scope}:{sid}#{i}"
        used.add(sid)
        messages = []
        for j, turn in enumerate(turns):
            tat = at["haystack_sessions"][i][j]
            role = field(turn, "role", str, tat)
            if role not in ("user", "assistant"):
                raise tat["role"].error(f"expected user or assistant, got {role!r:.60}")
            content = field(turn, "content", str, tat)
            has_answer = field(turn, "has_answer", bool, tat, default=False)
            messages.append({"role": role, "content": content})
            facts.append(
                GoldFact(
                    f"{run_id}:{j}",
                    scope,
                    "fact",
                    content,
                    (),
                    (run_id,),
                    meta=MappingProxyType(
                        {
                            "session_id": sid,
                            "turn": j,
                            "role": role,
                            "has_answer": has_answer,
                        }
                    ),
                )
            )
        runs.append(root_run(run_id, scope, ts, messages, session_id=sid, date=date))

    last = max(range(len(runs)), key=lambda k: (runs[k].started_ts, k))
    answer = field(rec, "answer", (str, int, float), at, default=None)
    answer_sids = field(rec, "answer_session_ids", list, at, default=[])
    abstention = qid.endswith("_abs")
    meta = {
        "question_type": qtype,
        "group": qtype,
        "answer": None if answer is None else str(answer),
        "question_date": field(rec, "question_date", str, at, default=None),
        "answer_session_ids": tuple(each(answer_sids, str, at["answer_session_ids"])),
        "abstention": abstention,
        "rank_all": True,
    }
    if abstention:
        meta["undefined"] = "abstention"
    probe = Probe(
        f"{scope}:q",
        scope,
        runs[last].run_id,
        question,
        tuple(f.fact_id for f in facts if f.meta["has_answer"]),
        (),
        meta=MappingProxyType(meta),
    )
    return runs, facts, probe
