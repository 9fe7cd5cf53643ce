"""The heuristic consolidator: an honest, deterministic, model-free baseline.

It reads user and tool messages sentence by sentence, keeps sentences with a
cue ("I prefer…", "always/never…", "we use…", "the X is Y", "remember
that…", "to deploy, run…", and a few Vietnamese equivalents), classifies the
kind from the cue, skips questions, injected instructions and anything that
redaction touched, and merges with the snapshot by trigram similarity. What
it cannot do (judge stability, generality or relevance) is exactly what an
LLM consolidator must beat.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from memkit.consolidate.reply import Reply, local_reply
from memkit.consolidate.request import ConsolidationRequest
from memkit.redact import REDACTED
from memkit.text import trigram_similarity

_I = re.IGNORECASE

PREFERENCE_CUES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bI(?:'d| would)? (?:really )?(?:prefer|like|want|rather)\b", _I),
    re.compile(r"\b(?:always|never|don't ever|do not ever|no exceptions)\b", _I),
    re.compile(r"\b(?:we|you) (?:must|should|don't|do not)\b|\bmust (?:not |never )?be\b", _I),
    re.compile(r"\bnothing [\w ]{1,30} without\b", _I),
    re.compile(r"\bmy (?:favou?rite|preferred)\b", _I),
    re.compile(r"\b(?:tôi|mình|em|anh|chị) (?:thích|muốn|ưu tiên)\b", _I),
    re.compile(r"\b(?:luôn luôn|luôn|không bao giờ|đừng bao giờ)\b", _I),
)
PROCEDURE_CUES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bto [\w -]{2,40}, (?:just )?(?:run|use|call|execute|type|open)\b", _I),
    re.compile(r"\b(?:first|step 1)\b.*\bthen\b", _I),
    re.compile(r"\b(?:the way to|the command (?:to|for)|you (?:need|have) to run)\b", _I),
    re.compile(r"\bđể [\w ]{2,40},? (?:hãy )?(?:chạy|dùng|gõ)\b", _I),
)
LEARNING_CUES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\b(?:the lesson|lesson learned|rule of thumb|turns out|the trick is)\b", _I),
    re.compile(r"\b(?:bài học|kinh nghiệm là)\b", _I),
)
OUTCOME_CUES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\b(?:was caused by|root cause|was fixed by|we fixed it by|post-?mortem)\b", _I),
)
FACT_CUES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bremember (?:that )?", _I),
    re.compile(r"\bwe (?:use|run|deploy|host|store|keep)\b", _I),
    re.compile(r"\bour [\w -]{1,40} (?:is|are|uses|runs|lives)\b", _I),
    re.compile(r"\bthe [\w./-]+(?: [\w./-]+){0,5} (?:is|are|lives in|runs on|uses)\b", _I),
    re.compile(
        r"\b(?:is|are) now\b|\b(?:moved|migrated|switched) to\b|\bnew [\w -]{1,30} is\b", _I
    ),
    re.compile(r"\b(?:hãy nhớ|nhớ rằng|chúng tôi dùng|chúng tôi sử dụng|bọn mình dùng)\b", _I),
)
_BARE_REMEMBER = re.compile(
    r"^(?:please )?(?:remember|note|hãy nhớ|nhớ)(?: that| this| điều này)?\W*$", _I
)
INJECTION_CUES: tuple[re.Pattern[str], ...] = (
    re.compile(
        r"\b(?:ignore|disregard|forget) (?:all |any )?(?:the )?(?:previous|prior|above|your)\b", _I
    ),
    re.compile(r"\b(?:system prompt|you are now|new instructions|developer mode)\b", _I),
    re.compile(r"\b(?:scope_id|another scope|other scope)\b", _I),
    re.compile(r"\bbỏ qua (?:mọi|tất cả|các) (?:hướng dẫn|chỉ dẫn)\b", _I),
)
_REMEMBER_PREFIX = re.compile(
    r"^(?:please )?(?:always )?remember (?:that )?|^(?:hãy nhớ|nhớ rằng) ", _I
)
_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_TOOL_NOTE = re.compile(r"^Tool call ")

MIN_CHARS = 12
MAX_SENTENCE_CHARS = 400
LESSON_CHARS = 256


@dataclass(frozen=True)
class Candidate:
    kind: str
    content: str


def classify(sentence: str) -> str | None:
    """The kind a cue suggests, or None when the sentence carries no cue."""
    if any(p.search(sentence) for p in OUTCOME_CUES):
        return "outcome"
    if any(p.search(sentence) for p in LEARNING_CUES):
        return "learning"
    if any(p.search(sentence) for p in PROCEDURE_CUES):
        return "procedure"
    if any(p.search(sentence) for p in PREFERENCE_CUES):
        return "preference"
    if any(p.search(sentence) for p in FACT_CUES):
        return "fact"
    return None


def _clean(sentence: str) -> str:
    s = _REMEMBER_PREFIX.sub("", sentence.strip().strip("-*• ").strip())
    s = s[:1].upper() + s[1:]
    return s[:LESSON_CHARS].rstrip()


def _usable(s: str) -> bool:
    return not (
        len(s) < MIN_CHARS
        or len(s) > MAX_SENTENCE_CHARS
        or s.endswith("?")
        or REDACTED in s
        or "…[" in s  # a truncation marker: the sentence is not whole
        or _TOOL_NOTE.match(s)
        or any(p.search(s) for p in INJECTION_CUES)
    )


def _cued(text: str) -> list[Candidate]:
    """Cue-bearing sentences of one message; a bare "remember that." points back."""
    found: list[Candidate] = []
    prev = ""
    for raw in _SPLIT.split(text):
        s = raw.strip()
        if not s:
            continue
        kind = None
        if _BARE_REMEMBER.match(s) and prev:
            s, kind = prev, classify(prev) or "fact"
        elif _usable(s):
            kind = classify(s)
        prev = s
        if kind is not None and _usable(s):
            found.append(Candidate(kind, _clean(s)))
    return found


def extract(request: ConsolidationRequest) -> list[Candidate]:
    """Cue-bearing sentences of user and tool messages, oldest first, near-duplicates folded."""
    out: list[Candidate] = []
    for rollout in request.rollouts:
        for m in rollout.messages:
            if m.get("role") not in ("user", "tool"):
                continue
            for cand in _cued(str(m.get("content") or "")):
                # newest wording wins among near-duplicates (and a re-stated sentence)
                out = [c for c in out if trigram_similarity(c.content, cand.content) < 0.65]
                out.append(cand)
    return out


class HeuristicConsolidator:
    """Cue-pattern extraction merged with the snapshot by trigram similarity."""

    def __init__(self, *, merge_threshold: float = 0.65, max_changes: int = 4):
        self.name = "heuristic"
        self.merge_threshold = merge_threshold
        self.max_changes = max_changes

    def changes(self, request: ConsolidationRequest) -> list[dict[str, Any]]:
        """The proposal as a list of change objects (pure, deterministic)."""
        used: set[str] = set()
        changes: list[dict[str, Any]] = []
        for cand in extract(request)[-self.max_changes :] if self.max_changes else []:
            best_id, best = None, 0.0
            for mem in request.snapshot:
                sim = trigram_similarity(cand.content, mem.content)
                if sim > best:
                    best_id, best = mem.id, sim
            entry = {"kind": cand.kind, "content": cand.content, "tags": []}
            if best_id is not None and best >= self.merge_threshold:
                if best_id in used:
                    continue
                used.add(best_id)
                changes.append({"ids": [best_id], "entry": entry})
            else:
                changes.append({"ids": [], "entry": entry})
        return changes

    async def propose(self, request: ConsolidationRequest) -> Reply:
        t0 = time.perf_counter()
        text = json.dumps({"changes": self.changes(request)}, ensure_ascii=False)
        return local_reply(self.name, text, t0)
