"""LoCoMo (`locomo10.json`, CC BY-NC 4.0, non-commercial: adapter only).

Mapping: one scope per conversation; each session is a run started at its
`session_N_date_time`; `speaker_a` -> user, `speaker_b` -> assistant (a
shared photo's BLIP caption is appended to the text); each observation is a
`fact` established in its session, keeping its dialog ids; each QA item is a
probe after the last session whose relevant facts are the observations citing
one of its evidence dialog ids.

Left out: session and event summaries (generated upstream, not gold
memories of one turn), image URLs, and QA evidence ids that match no turn
(kept in `meta["unmatched_evidence"]`, never resolved).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from evals.adapters.shared import find_data, load_json, make_dataset, require, root_run
from evals.datasets import Dataset, GoldFact, Probe, Transcript
from memkit.errors import DatasetError

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
    file = find_data(path, "locomo", ["locomo10.json", "locomo*.json"])[0]
    data = load_json(file)
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
    return make_dataset(
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
    sample = require(conv, "sample_id", str, file, n)
    c = require(conv, "conversation", dict, file, n)
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
        runs.append(root_run(run_id, scope, ts, messages, dia_ids=tuple(dias), date_time=when))

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
