"""LoCoMo (`locomo10.json`, CC BY-NC 4.0, non-commercial: adapter only), read as published.

Mapping: one scope per conversation; each session is a run started at its
`session_N_date_time`; `speaker_a` -> user, `speaker_b` -> assistant (a
shared photo's BLIP caption is appended to the text); each observation is a
`fact` established in its session, keeping its dialog ids; each QA item is a
probe after the last session whose relevant facts are the observations citing
one of its evidence dialog ids.

Read as published: every probe carries its category as `meta["group"]`
(`CATEGORIES`: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
5 adversarial) so every probe metric gets a per-category table; category 5
is `apart` (its answers are adversarial: reported in its own table, kept out
of the overall numbers). A probe with evidence that no observation cites is
`unmapped`: its retrieval metrics are undefined (`meta["undefined"]`), it is
counted as such and never scored as an off-topic probe. A question with an
answer but no evidence at all (mostly open-domain) is its own category,
`no_evidence`: undefined the same way, never off-topic (it has an answer, so
something in the conversation is relevant; LoCoMo does not say what).

Normalisation (documented, counted in `info["normalised"]`): the same
observation recurs across sessions under different ids ("Gina lost her job
at Door Dash." in session 6 restating session 1's "... during the month of
the conversation."). Two observations of one speaker are one gold fact when
every word of the shorter (at least `REPEAT_MIN_WORDS`) is in the longer;
groups are closed transitively. The fact keeps the earliest observation's id
and text, the others become its paraphrases (restatements, written again in
their sessions by store mode), and it cites every member's dialog ids.
`Dataset.pairs` holds these repeats as paraphrase pairs and, as distinct
pairs, each member beside the other observation of its speaker sharing the
most words:
the matcher's measured figure on this source (a derived label, documented).

Left out: session and event summaries (generated upstream, not gold
memories of one turn), image URLs, and QA evidence ids that match no turn
(kept in `meta["unmatched_evidence"]`, never resolved).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

from evals.adapters.shared import (
    At,
    ambiguous_texts,
    check,
    each,
    equivalence_pairs,
    field,
    find_data,
    load_json,
    make_dataset,
    record_guard,
    root_run,
    utc_timestamp,
    words,
)
from evals.datasets import Dataset, GoldFact, Pair, Probe, Transcript
from memkit.errors import DatasetError

CATEGORIES = {
    1: "1 multi-hop",
    2: "2 temporal",
    3: "3 open-domain",
    4: "4 single-hop",
    5: "5 adversarial",
}
"""LoCoMo QA categories as the upstream `evaluation.py` reads them (3 and 4 as
commonly read); the probe's `meta["group"]`."""

REPEAT_MIN_WORDS = 3
"""Two observations of one speaker are one fact when every word of the shorter
(at least this many words) is in the longer."""

_ANSWER = (str, int, float)
"""An answer is text or a number (LoCoMo has integer answers such as years)."""
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
    file = find_data(path, "locomo", ["locomo10.json", "locomo*.json"], limit=limit)[0]
    data = load_json(file)
    if not isinstance(data, list):
        raise DatasetError(str(file), None, None, "expected a JSON list of conversations")
    transcripts: list[Transcript] = []
    facts: list[GoldFact] = []
    probes: list[Probe] = []
    merged = 0
    for n, conv in enumerate(data[:limit] if limit is not None else data, start=1):
        with record_guard(file, n):
            t, f, p, m = _locomo_conversation(conv, file, n)
        transcripts += t
        facts += f
        probes += p
        merged += m
    return make_dataset(
        "locomo",
        [file],
        "LoCoMo very long-term conversations (ACL 2024) via memkit's adapter: sessions as "
        "runs, observations as facts, QA as probes. Non-commercial use only.",
        "CC BY-NC 4.0",
        transcripts,
        facts,
        probes,
        pairs=_pairs(facts),
        info={
            "normalised": merged,
            "unmapped_probes": sum(bool(p.meta.get("unmapped")) for p in probes),
            "no_evidence_probes": sum(p.meta.get("undefined") == "no_evidence" for p in probes),
            "ambiguous_text": ambiguous_texts(facts),
        },
    )


def _pairs(facts: list[GoldFact]) -> list[Pair]:
    """Labelled pairs from the normalised repeats: each repeat and its fact's text is a
    paraphrase; each text of a merged fact and the other observation of the same
    speaker sharing the most words with it is distinct."""
    by: dict[tuple[str, str], list[GoldFact]] = {}
    for f in facts:
        by.setdefault((f.scope_id, f.meta["speaker"]), []).append(f)
    positives, negatives = [], []
    for f in facts:
        if not f.paraphrases:
            continue
        others = [o.content for o in by[(f.scope_id, f.meta["speaker"])] if o is not f]
        for text in (f.content, *f.paraphrases):
            if text != f.content:
                positives.append((text, f.content))
            negatives.append((text, others))
    return equivalence_pairs(positives, negatives, "locomo")


def _locomo_conversation(
    conv: Any, file: Path, n: int
) -> tuple[list[Transcript], list[GoldFact], list[Probe], int]:
    at = At(file, n)
    sample = field(conv, "sample_id", str, at)
    c = field(conv, "conversation", dict, at)
    cat = at["conversation"]
    scope = f"locomo:{sample}"
    roles = {field(c, "speaker_a", str, cat): "user", field(c, "speaker_b", str, cat): "assistant"}
    sessions = sorted((int(m.group(1)), k) for k in c if (m := re.fullmatch(r"session_(\d+)", k)))
    runs: list[Transcript] = []
    run_of: dict[int, str] = {}
    turn_ids: set[str] = set()
    for num, key in sessions:
        when = c.get(f"{key}_date_time")
        ts = utc_timestamp(when, _LOCOMO_DATE, file, n, f"conversation.{key}_date_time")
        messages, dias = [], []
        for j, turn in enumerate(each(c[key], dict, cat[key])):
            tat = cat[key][j]
            speaker = field(turn, "speaker", str, tat)
            if speaker not in roles:
                raise tat["speaker"].error(f"unknown speaker {speaker!r}")
            text = field(turn, "text", str, tat, default="")
            caption = field(turn, "blip_caption", str, tat, default=None)
            if caption:
                text = f"{text} [shares a photo: {caption}]"
            messages.append({"role": roles[speaker], "name": speaker, "content": text})
            dias.append(field(turn, "dia_id", str, tat, default=None))
        turn_ids.update(d for d in dias if d)
        run_id = f"{scope}:session_{num}"
        run_of[num] = run_id
        runs.append(root_run(run_id, scope, ts, messages, dia_ids=tuple(dias), date_time=when))

    facts: list[GoldFact] = []
    by_dia: dict[str, list[str]] = {}
    observations = field(conv, "observation", dict, at, default={})
    for key, per_speaker in observations.items():
        oat = at["observation"][key]
        m = re.fullmatch(r"session_(\d+)_observation", key)
        if not m or int(m.group(1)) not in run_of:
            raise oat.error("names no session")
        num = int(m.group(1))
        k = 0
        for speaker, items in check(per_speaker, dict, oat).items():
            for i, item in enumerate(each(items, list, oat[speaker])):
                iat = oat[speaker][i]
                if not item:
                    raise iat.error("expected [text, evidence], got an empty list")
                text = check(item[0], str, iat[0])
                raw = check(item[1], (str, list), iat[1]) if len(item) > 1 else []
                if isinstance(raw, list):
                    each(raw, str, iat[1])
                obs_dias = _dia_ids(raw)
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
                        meta=MappingProxyType({"speaker": speaker, "dia_ids": obs_dias}),
                    )
                )
    facts, merged = _normalise(facts, {r.run_id: k for k, r in enumerate(runs)})
    for f in facts:
        for d in f.meta["dia_ids"]:
            by_dia.setdefault(d, []).append(f.fact_id)

    last = max(runs, key=lambda r: r.started_ts).run_id
    probes: list[Probe] = []
    for i, qa in enumerate(each(field(conv, "qa", list, at, default=[]), dict, at["qa"])):
        qat = at["qa"][i]
        question = field(qa, "question", str, qat)
        raw = field(qa, "evidence", (str, list), qat, default=[])
        if isinstance(raw, list):
            each(raw, str, qat["evidence"])
        evidence = _dia_ids(raw)
        relevant = tuple(dict.fromkeys(f for d in evidence for f in by_dia.get(d, ())))
        answer = field(qa, "answer", _ANSWER, qat, default=None)
        if answer is None:
            answer = field(qa, "adversarial_answer", _ANSWER, qat, default=None)
        category = field(qa, "category", int, qat, default=None)
        meta = {
            "category": category,
            "answer": None if answer is None else str(answer),
            "adversarial": "adversarial_answer" in qa,
            "evidence": evidence,
            "unmatched_evidence": tuple(d for d in evidence if d not in turn_ids),
            # evidence exists but no observation cites it: not a true off-topic probe
            "unmapped": bool(evidence) and not relevant,
            "group": CATEGORIES.get(category, f"category {category}"),
        }
        if meta["unmapped"]:
            meta["undefined"] = "unmapped"
        elif not evidence and answer is not None and not meta["adversarial"]:
            # an answerable question that cites no evidence (mostly open-domain): what
            # would be relevant is unknown, so it is neither scored nor off-topic
            meta["undefined"] = "no_evidence"
        if category == 5:
            meta["apart"] = True
        probes.append(
            Probe(
                f"{scope}:qa:{i}",
                scope,
                last,
                question,
                relevant,
                (),
                meta=MappingProxyType(meta),
            )
        )
    return runs, facts, probes, merged


def _normalise(facts: list[GoldFact], order: dict[str, int]) -> tuple[list[GoldFact], int]:
    """Repeated observations of one fact become one gold fact (see the module docstring).

    Returns the facts and the number of observations merged into another.
    """
    wsets = [words(f.content) for f in facts]
    parent = list(range(len(facts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in itertools.combinations(range(len(facts)), 2):
        a, b = facts[i], facts[j]
        if a.meta["speaker"] != b.meta["speaker"]:
            continue
        short, long_ = sorted((wsets[i], wsets[j]), key=len)
        if len(short) >= REPEAT_MIN_WORDS and short <= long_:
            parent[root(j)] = root(i)
    groups: dict[int, list[GoldFact]] = {}
    for i, f in enumerate(facts):
        groups.setdefault(root(i), []).append(f)
    out = []
    for members in groups.values():
        members.sort(key=lambda f: (order[f.established_in[0]], _obs_index(f.fact_id)))
        head = members[0]
        if len(members) == 1:
            out.append(head)
            continue
        out.append(
            GoldFact(
                head.fact_id,
                head.scope_id,
                head.kind,
                head.content,
                tuple(dict.fromkeys(f.content for f in members[1:] if f.content != head.content)),
                tuple(dict.fromkeys(f.established_in[0] for f in members)),
                meta=MappingProxyType(
                    {
                        "speaker": head.meta["speaker"],
                        "dia_ids": tuple(
                            dict.fromkeys(d for f in members for d in f.meta["dia_ids"])
                        ),
                        "normalised": tuple(f.fact_id for f in members[1:]),
                    }
                ),
            )
        )
    out.sort(key=lambda f: (order[f.established_in[0]], _obs_index(f.fact_id)))
    return out, sum(len(g) - 1 for g in groups.values())


def _obs_index(fact_id: str) -> int:
    return int(fact_id.rsplit(":", 1)[1])
