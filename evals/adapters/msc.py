"""MSC session 3 (`msc_dialogue_session_3_test.jsonl`; licence unclear: research use).

Mapping: one scope per episode; sessions 1-3 are runs (MSC gives only gaps,
so session 3 starts at `MSC_SESSION3_START` and earlier sessions at that
minus their `time_back`); `Speaker 1` -> user, `Speaker 2` -> assistant; each
per-session persona line is a fact established in that session's run; each
line of the merged top-level list is a fact established in session 2's run,
and every per-session fact that folds into it (`MSC_FOLD_MIN`) is superseded
by it: supersedes are many-to-one (fold-in gold, see `Dataset.fold_groups`;
every member carries `meta["fold_group"]`). No probes.

Normalisation (documented, counted in `info["normalised"]`): a per-session
line whose text equals its merged line (whitespace and case aside) is not a
separate fact superseded by an identical one, it *is* that fact: it is
dropped and the merged fact is established in the session that first said
it. A member line from a *later* session than that is a restatement of a
live fact, not an older fact it supersedes: it becomes one of the merged
fact's paraphrases, established in its session. Without this, a row holding
"I own a Jeep." could be neither the live nor the stale fact, and no
consolidator could be scored correct. What normalisation cannot fix is
listed in `info["ambiguous_text"]`: two facts of one episode with the same
text (mostly both speakers saying "I live in the U.S."), which a text
matcher cannot tell apart; they cap the oracle's extraction scores.

Labelled pairs for the matcher (`Dataset.pairs`): every non-identical
(per-session line, its merged line) is a paraphrase (restatements
included); each per-session line and the merged line of the same speaker
it does not fold into that shares the most words with it is distinct. The
fold assignment is this adapter's word-share rule, so these labels are a
documented derivation, not crowd labels.

Left out: blank persona lines (they state nothing), `init_personas` (the
PersonaChat personas the crowd workers were given, not what the dialogue
established) and the session-1 persona-summary file (per-turn extraction
gold, another mapping).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from evals.adapters.shared import (
    At,
    ambiguous_texts,
    each,
    equivalence_pairs,
    field,
    find_data,
    make_dataset,
    record_guard,
    root_run,
    words,
)
from evals.datasets import Dataset, GoldFact, Pair, Transcript, parse_json_line
from memkit.text import trigram_similarity

MSC_SESSION3_START = "2022-01-01T00:00:00+00:00"
"""Synthetic start of every MSC session 3; MSC records only the gaps between sessions."""

MSC_FOLD_MIN = 0.5
"""A per-session persona line folds into the merged line holding the largest share
of its words (accent-folded word sets); below this share it folds into none."""

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


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _persona_kind(text: str) -> str:
    """`preference` for first-person likes/dislikes ("I love hiking"), else `fact`."""
    return "preference" if _PREFERENCE.search(text) else "fact"


def _fold_target(text: str, merged: Sequence[str]) -> int | None:
    """Index of the merged line holding the largest share of text's words (>= MSC_FOLD_MIN);
    ties go to the higher trigram similarity, then to the earlier line."""
    w = words(text)
    if not w:
        return None
    best, best_key = None, None
    for k, m in enumerate(merged):
        share = len(w & words(m)) / len(w)
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
    file = find_data(
        path, "msc", ["msc_dialogue_session_3_*.jsonl", "msc_dialogue_session_*.jsonl"], limit=limit
    )[0]
    base = datetime.fromisoformat(MSC_SESSION3_START).timestamp()
    transcripts: list[Transcript] = []
    facts: list[GoldFact] = []
    with file.open("rb") as fh:
        for n, line in enumerate(fh, start=1):
            if limit is not None and n > limit:
                break
            if not line.strip():
                continue
            rec = parse_json_line(line, str(file), n)
            with record_guard(file, n):
                t, f = _msc_episode(rec, file, n, base)
            transcripts += t
            facts += f
    return make_dataset(
        "msc-session3",
        [file],
        "Multi-Session Chat session 3 (ParlAI msc_v0.1) via memkit's adapter: sessions as "
        "runs, per-session personas as facts, the merged personas as fold-in gold. "
        "Licence unclear: research use.",
        "unclear (research use)",
        transcripts,
        facts,
        [],
        pairs=_pairs(facts),
        info={
            "normalised": sum(len(f.meta.get("normalised", ())) for f in facts),
            "ambiguous_text": ambiguous_texts(facts),
        },
    )


def _pairs(facts: list[GoldFact]) -> list[Pair]:
    """Labelled pairs from the fold gold (see the module docstring)."""
    merged: dict[tuple[str, int], list[GoldFact]] = {}
    for f in facts:
        if f.meta.get("merged"):
            merged.setdefault((f.scope_id, f.meta["speaker"]), []).append(f)
    text = {f.fact_id: f.content for f in facts}
    positives, negatives = [], []
    for f in facts:
        others = merged.get((f.scope_id, f.meta["speaker"]), [])
        if f.meta.get("merged"):  # restatements normalised into the merged fact
            for p in f.paraphrases:
                positives.append((p, f.content))
                negatives.append((p, [m.content for m in others if m.fact_id != f.fact_id]))
            continue
        if f.superseded_by is not None:
            positives.append((f.content, text[f.superseded_by]))
        negatives.append((f.content, [m.content for m in others if m.fact_id != f.superseded_by]))
    return equivalence_pairs(positives, negatives, "msc")


def _msc_messages(dialog: list[Any], at: At) -> list[dict[str, Any]]:
    out = []
    for j, turn in enumerate(each(dialog, dict, at)):
        text = field(turn, "text", str, at[j])
        speaker = field(turn, "id", str, at[j], default=None)
        if speaker == "Speaker 1":
            role = "user"
        elif speaker == "Speaker 2":
            role = "assistant"
        else:  # previous sessions carry no ids; turns alternate from Speaker 1
            role = "user" if j % 2 == 0 else "assistant"
        out.append({"role": role, "content": text})
    return out


def _persona_lines(value: Any, at: At) -> list[list[str]]:
    """Personas: one list of string lines per speaker (errors name the line)."""
    for spk, lines in enumerate(each(value, list, at)):
        each(lines, str, at[spk])
    return value


def _msc_episode(
    rec: Any, file: Path, n: int, base: float
) -> tuple[list[Transcript], list[GoldFact]]:
    at = At(file, n)
    meta = field(rec, "metadata", dict, at)
    scope = f"msc:{field(meta, 'initial_data_id', str, at['metadata'], default=n)}"
    previous = each(field(rec, "previous_dialogs", list, at), dict, at["previous_dialogs"])
    merged = _persona_lines(field(rec, "personas", list, at), at["personas"])
    runs: list[Transcript] = []
    facts: list[GoldFact] = []
    session_facts: list[tuple[int, GoldFact]] = []  # (speaker, fact)
    for i, prev in enumerate(previous):
        pat = at["previous_dialogs"][i]
        time_back = field(prev, "time_back", str, pat)
        try:
            ts = base - _gap_seconds(time_back)
        except ValueError as e:
            raise pat["time_back"].error(str(e)) from None
        run_id = f"{scope}:s{i + 1}"
        msgs = _msc_messages(field(prev, "dialog", list, pat, default=[]), pat["dialog"])
        runs.append(root_run(run_id, scope, ts, msgs, session=i + 1, time_back=time_back))
        personas = _persona_lines(field(prev, "personas", list, pat, default=[]), pat["personas"])
        for spk, lines in enumerate(personas):
            for j, text in enumerate(lines):
                if not text.strip():
                    continue  # a blank persona line states nothing
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
    msgs = _msc_messages(field(rec, "dialog", list, at), at["dialog"])
    runs.append(root_run(cur, scope, base, msgs, session=len(previous) + 1))

    merged_run = runs[-2].run_id if len(runs) > 1 else cur
    order = {r.run_id: k for k, r in enumerate(runs)}
    folded: dict[str, list[GoldFact]] = {}
    target: dict[str, str] = {}
    for spk, fact in session_facts:
        lines = merged[spk] if spk < len(merged) else []
        k = _fold_target(fact.content, lines)
        if k is not None:
            mid = f"{scope}:merged:p{spk + 1}:{k}"
            target[fact.fact_id] = mid
            folded.setdefault(mid, []).append(fact)
    same: set[str] = set()  # per-session lines that are their merged fact (normalised away)
    merged_facts: list[GoldFact] = []
    for spk, lines in enumerate(merged):
        for k, text in enumerate(lines):
            if not text.strip():
                continue
            mid = f"{scope}:merged:p{spk + 1}:{k}"
            members = folded.get(mid, [])
            twins = [f for f in members if _norm(f.content) == _norm(text)]
            first = min((order[f.established_in[0]] for f in twins), default=order[merged_run])
            later = [f for f in members if order[f.established_in[0]] > first and f not in twins]
            same.update(f.fact_id for f in twins + later)
            runs_of = sorted(
                {runs[first].run_id, *(f.established_in[0] for f in twins + later)},
                key=order.__getitem__,
            )
            merged_facts.append(
                GoldFact(
                    mid,
                    scope,
                    _persona_kind(text),
                    text,
                    tuple(dict.fromkeys(f.content for f in later)),
                    tuple(runs_of),
                    meta=MappingProxyType(
                        {
                            "speaker": spk + 1,
                            "merged": True,
                            "folded_from": tuple(f.fact_id for f in members),
                            "normalised": tuple(f.fact_id for f in twins + later),
                            "fold_group": mid,
                        }
                    ),
                )
            )
    for _, fact in session_facts:
        into = target.get(fact.fact_id)
        if fact.fact_id in same:
            continue
        if into is not None:
            fact = GoldFact(
                fact.fact_id,
                scope,
                fact.kind,
                fact.content,
                (),
                fact.established_in,
                None,
                into,
                meta=MappingProxyType({**fact.meta, "fold_group": into}),
            )
        facts.append(fact)
    facts += merged_facts
    return runs, facts
