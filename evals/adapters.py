"""Adapters from public benchmarks to memkit's dataset records.

Each adapter reads the data in place from a path the user gives (the file,
its folder, or the folder of all public datasets) and copies nothing into the
repository. The conversation adapters return the same `Dataset` the bundled
data loads into, so store mode and pipeline mode run on them unchanged; the
pair adapters return lists of `Pair`.

Mappings (all documented choices; `check_dataset` passes on every result):

- LoCoMo (CC BY-NC 4.0, non-commercial: adapter only): one scope per
  conversation; each session is a run started at its `session_N_date_time`;
  `speaker_a` -> user, `speaker_b` -> assistant (a shared photo's BLIP
  caption is appended to the text); each observation is a `fact` established
  in its session, keeping its dialog ids; each QA item is a probe after the
  last session whose relevant facts are the observations citing one of its
  evidence dialog ids.
- LongMemEval (oracle split or S): one scope per question (haystacks are
  independent); each haystack session is a run at its date; every turn marked
  `has_answer` becomes a fact (`preference` for single-session-preference
  questions); the question is a probe after the latest session. For
  knowledge-update questions whose answer turns span several sessions, every
  answer fact from an earlier session is superseded by the last answer turn
  of the latest session, and appears as a distractor instead of as relevant.
- MSC session 3: one scope per episode; sessions 1-3 are runs (MSC gives
  only gaps, so session 3 starts at `MSC_SESSION3_START` and earlier sessions
  at that minus their `time_back`); `Speaker 1` -> user, `Speaker 2` ->
  assistant; each per-session persona line is a fact established in that
  session's run; each line of the merged top-level list is a fact established
  in session 2's run, and every per-session fact that folds into it is
  superseded by it (fold-in gold, see `Dataset.fold_groups`). No probes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from evals.datasets import (
    Dataset,
    GoldFact,
    Pair,
    Probe,
    Transcript,
    compute_counts,
    iso_utc,
    pairs_frame,
)
from memkit.errors import ConfigError, DatasetError
from memkit.text import trigram_similarity, word_set

__all__ = [
    "MSC_FOLD_MIN",
    "MSC_SESSION3_START",
    "load_locomo",
    "load_longmemeval",
    "load_mrpc",
    "load_msc",
    "load_paws",
    "load_stsb",
    "pairs_frame",
]

MSC_SESSION3_START = "2022-01-01T00:00:00+00:00"
"""Synthetic start of every MSC session 3; MSC records only the gaps between sessions."""

MSC_FOLD_MIN = 0.5
"""A per-session persona line folds into the merged line holding the largest share
of its words (accent-folded word sets); below this share it folds into none."""


# --- helpers -------------------------------------------------------------------


def _find(path: str | Path, folder: str, patterns: Sequence[str]) -> list[Path]:
    """The data files at path: the file itself, or matches in path or path/folder."""
    p = Path(path)
    if p.is_file():
        return [p]
    for d in (p, p / folder):
        if d.is_dir():
            for pattern in patterns:
                hits = sorted(d.glob(pattern))
                if hits:
                    return hits
    raise DatasetError(str(p), None, None, f"no {' or '.join(patterns)} found here or in {folder}/")


def _digest(files: Iterable[Path]) -> str:
    """Short content hash of the source files: the adapter dataset's version."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return "sha256:" + h.hexdigest()[:16]


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        line = getattr(e, "lineno", None)
        raise DatasetError(str(path), line, None, f"invalid JSON: {e}") from None


def _run(
    run_id: str,
    scope_id: str,
    ts: float,
    messages: list[dict[str, Any]],
    **meta: Any,
) -> Transcript:
    """A succeeded root run; turns = assistant messages, task = the first user message."""
    first_user = next((m["content"] for m in messages if m["role"] == "user"), "")
    last_assistant = next(
        (m["content"] for m in reversed(messages) if m["role"] == "assistant"), ""
    )
    return Transcript(
        run_id=run_id,
        scope_id=scope_id,
        parent_run_id=None,
        status="succeeded",
        stop_reason="stop",
        turns=sum(m["role"] == "assistant" for m in messages),
        started_at=iso_utc(ts),
        started_ts=ts,
        task=first_user,
        messages=tuple(messages),
        final_answer=last_assistant,
        meta=MappingProxyType(meta),
    )


def _dataset(
    name: str,
    files: Sequence[Path],
    description: str,
    license: str,
    transcripts: list[Transcript],
    facts: list[GoldFact],
    probes: list[Probe],
) -> Dataset:
    ds = Dataset(
        name=name,
        version=_digest(files),
        description=description,
        license=license,
        counts={},
        transcripts=tuple(transcripts),
        facts=tuple(facts),
        probes=tuple(probes),
        path=str(files[0].parent),
    )
    return replace(ds, counts=compute_counts(ds))


def _require(rec: Any, key: str, types: type | tuple[type, ...], file: Path, n: int) -> Any:
    """rec[key] of the expected type, else a DatasetError naming file, record and field."""
    if not isinstance(rec, dict):
        raise DatasetError(str(file), n, None, f"expected an object, got {type(rec).__name__}")
    if key not in rec:
        raise DatasetError(str(file), n, key, "required field is missing")
    value = rec[key]
    if not isinstance(value, types):
        raise DatasetError(str(file), n, key, f"unexpected {type(value).__name__} {value!r:.60}")
    return value


# --- LoCoMo ----------------------------------------------------------------------

_LOCOMO_DATE = "%I:%M %p on %d %B, %Y"
_DIA = re.compile(r"D:?(\d+):(\d+)")


def _dia_ids(raw: Any) -> tuple[str, ...]:
    """Normalised dialog ids from an evidence string or list ("D8:6; D9:17", "D:11:26")."""
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out += [f"D{a}:{b}" for a, b in _DIA.findall(item)]
    return tuple(dict.fromkeys(out))


def load_locomo(path: str | Path, *, limit: int | None = None) -> Dataset:
    """LoCoMo (`locomo10.json`) as a Dataset; `limit` keeps the first conversations.

    Record lines in errors are 1-based conversation positions. QA evidence ids
    that match no turn (upstream typos) are kept in the probe's
    `meta["unmatched_evidence"]`; each probe also keeps `answer`, `category`,
    `evidence` and `unmapped` (it has evidence, but no observation cites it, so
    its empty `relevant` does not make it an off-topic probe).
    """
    file = _find(path, "locomo", ["locomo10.json", "locomo*.json"])[0]
    data = _load_json(file)
    if not isinstance(data, list):
        raise DatasetError(str(file), None, None, "expected a JSON list of conversations")
    transcripts: list[Transcript] = []
    facts: list[GoldFact] = []
    probes: list[Probe] = []
    for n, conv in enumerate(data[:limit] if limit is not None else data, start=1):
        t, f, p = _locomo_conversation(conv, file, n)
        transcripts += t
        facts += f
        probes += p
    return _dataset(
        "locomo",
        [file],
        "LoCoMo very long-term conversations (ACL 2024) via memkit's adapter: sessions as "
        "runs, observations as facts, QA as probes. Non-commercial use only.",
        "CC BY-NC 4.0",
        transcripts,
        facts,
        probes,
    )


def _locomo_conversation(
    conv: Any, file: Path, n: int
) -> tuple[list[Transcript], list[GoldFact], list[Probe]]:
    sample = _require(conv, "sample_id", str, file, n)
    c = _require(conv, "conversation", dict, file, n)
    scope = f"locomo:{sample}"
    roles = {c.get("speaker_a"): "user", c.get("speaker_b"): "assistant"}
    sessions = sorted((int(m.group(1)), k) for k in c if (m := re.fullmatch(r"session_(\d+)", k)))
    runs: list[Transcript] = []
    run_of: dict[int, str] = {}
    turn_ids: set[str] = set()
    for num, key in sessions:
        when = c.get(f"{key}_date_time")
        try:
            ts = datetime.strptime(when, _LOCOMO_DATE).replace(tzinfo=UTC).timestamp()
        except (TypeError, ValueError):
            raise DatasetError(
                str(file), n, f"conversation.{key}_date_time", f"unparsable date {when!r}"
            ) from None
        messages, dias = [], []
        for j, turn in enumerate(c[key]):
            speaker = turn.get("speaker")
            if speaker not in roles:
                raise DatasetError(
                    str(file), n, f"conversation.{key}[{j}].speaker", f"unknown speaker {speaker!r}"
                )
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text = f"{text} [shares a photo: {turn['blip_caption']}]"
            messages.append({"role": roles[speaker], "name": speaker, "content": text})
            dias.append(turn.get("dia_id"))
        turn_ids.update(d for d in dias if d)
        run_id = f"{scope}:session_{num}"
        run_of[num] = run_id
        runs.append(_run(run_id, scope, ts, messages, dia_ids=tuple(dias), date_time=when))

    facts: list[GoldFact] = []
    by_dia: dict[str, list[str]] = {}
    for key, per_speaker in (conv.get("observation") or {}).items():
        m = re.fullmatch(r"session_(\d+)_observation", key)
        if not m or int(m.group(1)) not in run_of:
            raise DatasetError(str(file), n, f"observation.{key}", "names no session")
        num = int(m.group(1))
        k = 0
        for speaker, items in per_speaker.items():
            for item in items:
                text, dias = item[0], _dia_ids(item[1] if len(item) > 1 else [])
                fid = f"{scope}:obs:{num}:{k}"
                k += 1
                facts.append(
                    GoldFact(
                        fid,
                        scope,
                        "fact",
                        text,
                        (),
                        (run_of[num],),
                        meta=MappingProxyType({"speaker": speaker, "dia_ids": dias}),
                    )
                )
                for d in dias:
                    by_dia.setdefault(d, []).append(fid)

    last = max(runs, key=lambda r: r.started_ts).run_id
    probes: list[Probe] = []
    for i, qa in enumerate(conv.get("qa") or []):
        evidence = _dia_ids(qa.get("evidence") or [])
        relevant = tuple(dict.fromkeys(f for d in evidence for f in by_dia.get(d, ())))
        answer = qa.get("answer", qa.get("adversarial_answer"))
        meta = {
            "category": qa.get("category"),
            "answer": None if answer is None else str(answer),
            "adversarial": "adversarial_answer" in qa,
            "evidence": evidence,
            "unmatched_evidence": tuple(d for d in evidence if d not in turn_ids),
            # evidence exists but no observation cites it: not a true off-topic probe
            "unmapped": bool(evidence) and not relevant,
        }
        probes.append(
            Probe(
                f"{scope}:qa:{i}",
                scope,
                last,
                qa["question"],
                relevant,
                (),
                meta=MappingProxyType(meta),
            )
        )
    return runs, facts, probes


# --- LongMemEval -------------------------------------------------------------------

_LME_DATE = "%Y/%m/%d (%a) %H:%M"
_LME_PART = re.compile(r"\.part(\d+)of(\d+)\.json$")


def _lme_files(path: str | Path, variant: str) -> list[Path]:
    """The oracle split ships as `longmemeval_oracle.partKofN.json`: N complete JSON
    lists that join by concatenation in part order (1..N, all required)."""
    if variant == "oracle":
        files = _find(
            path, "longmemeval", ["longmemeval_oracle.part*of*.json", "longmemeval_oracle*.json"]
        )
    elif variant == "s":
        files = _find(path, "longmemeval", ["longmemeval_s.json", "longmemeval_s_*.json"])
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
    parts. Probes keep `question_type`, `answer` (as a string),
    `question_date`, `answer_session_ids` and `abstention` in `meta`.
    """
    files = _lme_files(path, variant)
    transcripts: list[Transcript] = []
    facts: list[GoldFact] = []
    probes: list[Probe] = []
    n = 0
    for file in files:
        data = _load_json(file)
        if not isinstance(data, list):
            raise DatasetError(str(file), None, None, "expected a JSON list of questions")
        for rec in data:
            if limit is not None and n >= limit:
                break
            n += 1
            t, f, p = _lme_question(rec, file, n)
            transcripts += t
            facts += f
            probes.append(p)
    return _dataset(
        f"longmemeval-{variant}",
        files,
        f"LongMemEval ({variant}) via memkit's adapter: haystack sessions as runs, answer "
        "turns as facts, questions as probes, knowledge updates as supersedes.",
        "MIT",
        transcripts,
        facts,
        probes,
    )


def _lme_question(rec: Any, file: Path, n: int) -> tuple[list[Transcript], list[GoldFact], Probe]:
    qid = _require(rec, "question_id", str, file, n)
    qtype = _require(rec, "question_type", str, file, n)
    question = _require(rec, "question", str, file, n)
    sids = _require(rec, "haystack_session_ids", list, file, n)
    dates = _require(rec, "haystack_dates", list, file, n)
    sessions = _require(rec, "haystack_sessions", list, file, n)
    if not len(sids) == len(dates) == len(sessions):
        raise DatasetError(
            str(file),
            n,
            "haystack_sessions",
            f"{len(sessions)} sessions, {len(sids)} ids, {len(dates)} dates",
        )
    scope = f"lme:{qid}"
    kind = "preference" if qtype == "single-session-preference" else "fact"
    runs: list[Transcript] = []
    facts: list[GoldFact] = []
    used: set[str] = set()
    for i, (sid, date, turns) in enumerate(zip(sids, dates, sessions, strict=True)):
        try:
            ts = datetime.strptime(date, _LME_DATE).replace(tzinfo=UTC).timestamp()
        except (TypeError, ValueError):
            raise DatasetError(
                str(file), n, f"haystack_dates[{i}]", f"unparsable date {date!r}"
            ) from None
        run_id = f"{scope}:{sid}" if sid not in used else f"{scope}:{sid}#{i}"
        used.add(sid)
        messages = []
        for j, turn in enumerate(turns):
            role = turn.get("role") if isinstance(turn, dict) else None
            if role not in ("user", "assistant") or not isinstance(turn.get("content"), str):
                raise DatasetError(
                    str(file),
                    n,
                    f"haystack_sessions[{i}][{j}]",
                    "expected a user/assistant turn with string content",
                )
            messages.append({"role": role, "content": turn["content"]})
            if turn.get("has_answer"):
                facts.append(
                    GoldFact(
                        f"{run_id}:{j}",
                        scope,
                        kind,
                        turn["content"],
                        (),
                        (run_id,),
                        meta=MappingProxyType({"session_id": sid, "turn": j, "role": role}),
                    )
                )
        runs.append(_run(run_id, scope, ts, messages, session_id=sid, date=date))

    start = {r.run_id: r.started_ts for r in runs}
    if qtype == "knowledge-update":
        facts = _supersede_updates(facts, start)
    last = max(range(len(runs)), key=lambda k: (runs[k].started_ts, k))
    answer = rec.get("answer")
    probe = Probe(
        f"{scope}:q",
        scope,
        runs[last].run_id,
        question,
        tuple(f.fact_id for f in facts if f.superseded_by is None),
        tuple(f.fact_id for f in facts if f.superseded_by is not None),
        meta=MappingProxyType(
            {
                "question_type": qtype,
                "answer": None if answer is None else str(answer),
                "question_date": rec.get("question_date"),
                "answer_session_ids": tuple(rec.get("answer_session_ids") or ()),
                "abstention": qid.endswith("_abs"),
            }
        ),
    )
    return runs, facts, probe


def _supersede_updates(facts: list[GoldFact], start: dict[str, float]) -> list[GoldFact]:
    """Answer facts of earlier sessions are superseded by the last answer turn of the
    latest session; with answers in a single session nothing changes."""
    sessions = {f.established_in[0] for f in facts}
    if len(sessions) < 2:
        return facts
    latest_ts = max(start[s] for s in sessions)
    latest = [f for f in facts if start[f.established_in[0]] == latest_ts]
    successor = latest[-1].fact_id
    out = []
    for f in facts:
        if start[f.established_in[0]] < latest_ts:
            f = GoldFact(
                f.fact_id,
                f.scope_id,
                f.kind,
                f.content,
                f.paraphrases,
                f.established_in,
                None,
                successor,
                meta=f.meta,
            )
        out.append(f)
    return out


# --- MSC ---------------------------------------------------------------------------

_GAP = re.compile(r"(\d+)\s*(minute|hour|day|week|month|year)s?", re.I)
_UNIT_S = {
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 7 * 86400,
    "month": 30 * 86400,
    "year": 365 * 86400,
}
_PREFERENCE = re.compile(
    r"^\s*(I|My)\b.*\b(like|likes|love|loves|enjoy|enjoys|prefer|prefers|hate|hates|"
    r"dislike|dislikes|favou?rite)\b",
    re.I,
)


def _gap_seconds(text: str) -> float:
    """'5 days 1 hour ago' -> seconds (months are 30 days, years 365)."""
    found = _GAP.findall(text or "")
    if not found:
        raise ValueError(f"unparsable time gap {text!r}")
    return float(sum(int(k) * _UNIT_S[u.lower()] for k, u in found))


def _persona_kind(text: str) -> str:
    """`preference` for first-person likes/dislikes ("I love hiking"), else `fact`."""
    return "preference" if _PREFERENCE.search(text) else "fact"


def _fold_target(text: str, merged: Sequence[str]) -> int | None:
    """Index of the merged line holding the largest share of text's words (>= MSC_FOLD_MIN);
    ties go to the higher trigram similarity, then to the earlier line."""
    w = word_set(text)
    if not w:
        return None
    best, best_key = None, None
    for k, m in enumerate(merged):
        share = len(w & word_set(m)) / len(w)
        if share < MSC_FOLD_MIN:
            continue
        key = (share, trigram_similarity(text, m))
        if best_key is None or key > best_key:
            best, best_key = k, key
    return best


def load_msc(path: str | Path, *, limit: int | None = None) -> Dataset:
    """MSC session-3 episodes (`msc_dialogue_session_3_test.jsonl`) as a Dataset.

    `limit` keeps the first episodes; error lines are file lines. Merged facts
    carry `meta["folded_from"]` (the per-session fact ids folded into them);
    `Dataset.fold_groups()` gives the same mapping.
    """
    file = _find(path, "msc", ["msc_dialogue_session_3_*.jsonl", "msc_dialogue_session_*.jsonl"])[0]
    base = datetime.fromisoformat(MSC_SESSION3_START).timestamp()
    transcripts: list[Transcript] = []
    facts: list[GoldFact] = []
    with file.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if limit is not None and n > limit:
                break
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(str(file), n, None, f"invalid JSON: {e.msg}") from None
            t, f = _msc_episode(rec, file, n, base)
            transcripts += t
            facts += f
    return _dataset(
        "msc-session3",
        [file],
        "Multi-Session Chat session 3 (ParlAI msc_v0.1) via memkit's adapter: sessions as "
        "runs, per-session personas as facts, the merged personas as fold-in gold. "
        "Licence unclear: research use.",
        "unclear (research use)",
        transcripts,
        facts,
        [],
    )


def _msc_messages(dialog: list[Any], file: Path, n: int, at: str) -> list[dict[str, Any]]:
    out = []
    for j, turn in enumerate(dialog):
        if not isinstance(turn, dict) or not isinstance(turn.get("text"), str):
            raise DatasetError(str(file), n, f"{at}[{j}]", "expected a turn with string text")
        speaker = turn.get("id")
        if speaker == "Speaker 1":
            role = "user"
        elif speaker == "Speaker 2":
            role = "assistant"
        else:  # previous sessions carry no ids; turns alternate from Speaker 1
            role = "user" if j % 2 == 0 else "assistant"
        out.append({"role": role, "content": turn["text"]})
    return out


def _msc_episode(
    rec: Any, file: Path, n: int, base: float
) -> tuple[list[Transcript], list[GoldFact]]:
    meta = _require(rec, "metadata", dict, file, n)
    scope = f"msc:{meta.get('initial_data_id', n)}"
    previous = _require(rec, "previous_dialogs", list, file, n)
    merged = _require(rec, "personas", list, file, n)
    runs: list[Transcript] = []
    facts: list[GoldFact] = []
    session_facts: list[tuple[int, GoldFact]] = []  # (speaker, fact)
    for i, prev in enumerate(previous):
        at = f"previous_dialogs[{i}]"
        try:
            ts = base - _gap_seconds(prev.get("time_back", ""))
        except ValueError as e:
            raise DatasetError(str(file), n, f"{at}.time_back", str(e)) from None
        run_id = f"{scope}:s{i + 1}"
        msgs = _msc_messages(prev.get("dialog") or [], file, n, f"{at}.dialog")
        runs.append(_run(run_id, scope, ts, msgs, session=i + 1, time_back=prev["time_back"]))
        for spk, lines in enumerate(prev.get("personas") or []):
            for j, text in enumerate(lines):
                fact = GoldFact(
                    f"{run_id}:p{spk + 1}:{j}",
                    scope,
                    _persona_kind(text),
                    text,
                    (),
                    (run_id,),
                    meta=MappingProxyType({"speaker": spk + 1, "session": i + 1}),
                )
                session_facts.append((spk, fact))
    cur = f"{scope}:s{len(previous) + 1}"
    msgs = _msc_messages(_require(rec, "dialog", list, file, n), file, n, "dialog")
    runs.append(_run(cur, scope, base, msgs, session=len(previous) + 1))

    merged_run = runs[-2].run_id if len(runs) > 1 else cur
    merged_ids: dict[tuple[int, int], str] = {}
    folded: dict[str, list[str]] = {}
    target: dict[str, str] = {}
    for spk, fact in session_facts:
        lines = merged[spk] if spk < len(merged) else []
        k = _fold_target(fact.content, lines)
        if k is not None:
            mid = merged_ids.setdefault((spk, k), f"{scope}:merged:p{spk + 1}:{k}")
            target[fact.fact_id] = mid
            folded.setdefault(mid, []).append(fact.fact_id)
    for _, fact in session_facts:
        mid = target.get(fact.fact_id)
        if mid is not None:
            fact = GoldFact(
                fact.fact_id,
                scope,
                fact.kind,
                fact.content,
                (),
                fact.established_in,
                None,
                mid,
                meta=fact.meta,
            )
        facts.append(fact)
    for spk, lines in enumerate(merged):
        for k, text in enumerate(lines):
            mid = f"{scope}:merged:p{spk + 1}:{k}"
            facts.append(
                GoldFact(
                    mid,
                    scope,
                    _persona_kind(text),
                    text,
                    (),
                    (merged_run,),
                    meta=MappingProxyType(
                        {
                            "speaker": spk + 1,
                            "merged": True,
                            "folded_from": tuple(folded.get(mid, ())),
                        }
                    ),
                )
            )
    return runs, facts


# --- labelled pairs ------------------------------------------------------------------


def _tsv(file: Path, encoding: str = "utf-8") -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a tab-separated file with quoting off (quotes are text in these corpora)."""
    with file.open(encoding=encoding, newline="") as fh:
        reader = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
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
    file = _find(path, "paws", ["paws_wiki_labeled_final_test.tsv", "*.tsv"])[0]
    return _binary_pairs(file, _tsv(file), ("sentence1", "sentence2", "label"), "paws", limit)


def load_mrpc(path: str | Path, *, limit: int | None = None) -> list[Pair]:
    """MRPC pairs (Quality 1 = paraphrase, 0 = distinct), source "mrpc"; the file has a BOM."""
    file = _find(path, "mrpc", ["msr_paraphrase_test.txt", "msr_paraphrase_*.txt"])[0]
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
    file = _find(path, "sts_b", ["sts-b_glue_dev.tsv", "*.tsv"])[0]
    out: list[Pair] = []
    for line, row in _tsv(file):
        if limit is not None and len(out) >= limit:
            break
        raw = _field(row, "score", file, line)
        try:
            score = float(raw)
        except ValueError:
            raise DatasetError(str(file), line, "score", f"not a number: {raw!r}") from None
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
