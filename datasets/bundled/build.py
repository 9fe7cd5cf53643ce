#!/usr/bin/env python3
"""Build memkit's bundled dataset from the hand-written scope sources.

Sources are `src/<scope_id>.json` (one per scope, format in datasets/README.md).
The script validates every source, expands `$filler` placeholders into
deterministic oversized text, and writes the five files loaders read
(DESIGN.md "Dataset formats"): dataset.json, transcripts.jsonl, facts.jsonl,
probes.jsonl, pairs.jsonl. Output is deterministic: records are sorted,
JSON is written with `ensure_ascii=False`, and filler is drawn from a seeded
`random.Random`, so rebuilding unchanged sources gives identical bytes.

Usage:
    python datasets/bundled/build.py            # validate, then rewrite the outputs here
    python datasets/bundled/build.py --check    # validate only, print counts
    python datasets/bundled/build.py --out DIR  # validate, write the outputs to DIR
    python datasets/bundled/build.py --strict   # also fail on the dataset's count minimums

Errors are printed as `<file>: <json path>: message`, all of them, and the
exit status is 1. Stdlib only, so it runs without the project venv.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memkit.runs import INELIGIBLE_REASONS, RUN_STATUSES, ineligible_reasons

NAME = "memkit-bundled"
VERSION = "1.1.0"
LICENSE = "CC BY 4.0"
DESCRIPTION = (
    "memkit's own recorded-transcript dataset: agent runs in OpenAI chat format "
    "over simulated weeks in several scopes, with gold memories (five kinds, "
    "paraphrases, supersedes and retractions), recall probes and labelled pairs. "
    "Written by the memkit authors for memkit's evaluation suite."
)

HERE = Path(__file__).resolve().parent
KINDS = ("fact", "preference", "procedure", "learning", "outcome")
ROLES = ("system", "user", "assistant", "tool")
HARD_CASES = (
    "number",
    "date",
    "name",
    "negation",
    "non_english",
    "injection",
    "secret",
    "oversized",
)
FILLER_KINDS = ("log", "csv", "json", "prose")
PAIR_LABELS = ("paraphrase", "distinct")
MAX_FACT_CHARS = 256  # the native prompt's lesson ceiling (SPEC §7 pass 4)
MAX_FILLER_BYTES = 200_000

# Gold text must never carry a credential: these mirror the fake secrets the
# transcripts plant (AWS keys, live API keys, password assignments, URL creds).
SECRET_PATTERNS = (
    re.compile(r"AKIA[0-9A-Z]{12,}"),
    re.compile(r"\b(?:sk|pk|rk)[-_](?:live|test|proj)[-_][A-Za-z0-9]{6,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{16,}"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{8,}"),
    re.compile(r"(?i)\b(?:password|passwd|pwd|secret|token|api_key)\s*[=:]\s*\S{4,}"),
    re.compile(r"[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s/@]+@"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._-]{16,}"),
)

# Per-scope and whole-dataset minimums (issue 6); enforced with --strict.
SCOPE_MIN = {
    "eligible_runs": 11,
    "ineligible_runs": 2,
    "facts": 20,
    "changed_facts": 3,
    "probes": 33,
    "off_topic_probes": 3,
    "pairs": 6,
}
DATASET_MIN = {
    "scopes": 8,
    "root_runs": 80,
    "facts": 150,
    "changed_facts": 15,
    "probes": 250,
}


class Errors:
    """Collects `<file>: <json path>: message` lines so one run reports all problems."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.warnings: list[str] = []

    def add(self, file: str, path: str, msg: str) -> None:
        self.items.append(f"{file}: {path}: {msg}")

    def warn(self, file: str, path: str, msg: str) -> None:
        self.warnings.append(f"{file}: {path}: warning: {msg}")


# --------------------------------------------------------------------------- filler

_WORDS = (
    "request latency cache upstream worker queue retry timeout batch session "
    "handler config deploy shard replica index migration schema token user "
    "account invoice report metric event cohort funnel signup checkout payment "
    "release build pipeline job cluster node pod volume snapshot backup alert"
).split()
_SENTENCES = (
    "The {a} {b} was reviewed again after the {c} change last sprint.",
    "We saw roughly {n} percent more {b} traffic once the {a} rollout finished.",
    "Nobody has owned the {a} {c} since the reorg, which is part of the problem.",
    "In the meantime the {b} path keeps working, just slower than the {a} one.",
    "Action item: check whether the {c} limits still match what the {a} team expects.",
    "The notes from the {c} review say the {a} {b} issue was mitigated, not fixed.",
    "A follow-up ticket tracks the {c} cleanup; it is not blocking the {a} work.",
    "Several people asked why the {b} numbers differ from the {a} dashboard.",
    "For context, the {a} service talks to the {b} {c} through an internal queue.",
    "Open question: do we keep {n} days of {b} history or move it to cold storage?",
)
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "INFO", "ERROR", "INFO")
_PATHS = ("/api/v1/orders", "/api/v1/users/me", "/healthz", "/static/app.js", "/login", "/search")
_AGENTS = ("Mozilla/5.0 (X11; Linux x86_64)", "curl/8.5.0", "kube-probe/1.29", "python-httpx/0.27")


def _topic_words(topic: str) -> list[str]:
    words = [w for w in re.split(r"[^A-Za-z0-9]+", topic.lower()) if len(w) > 2]
    return words or ["service"]


def _log_line(rng: random.Random, topic: list[str], t: datetime) -> str:
    if "nginx" in topic or "access" in topic:
        ip = ".".join(str(rng.randint(1, 254)) for _ in range(4))
        status = rng.choice((200, 200, 200, 204, 301, 304, 404, 499, 502))
        return (
            f'{ip} - - [{t:%d/%b/%Y:%H:%M:%S} +0000] "GET {rng.choice(_PATHS)} HTTP/1.1" '
            f'{status} {rng.randint(120, 48000)} "-" "{rng.choice(_AGENTS)}" '
            f"rt={rng.uniform(0.001, 2.5):.3f}"
        )
    comp = rng.choice(topic)
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 8)))
    return (
        f"{t:%Y-%m-%dT%H:%M:%S}.{rng.randint(0, 999):03d}Z {rng.choice(_LEVELS):5} "
        f"[{comp}-{rng.randint(1, 9)}] {words} id={rng.getrandbits(32):08x} "
        f"dur_ms={rng.randint(1, 4000)}"
    )


def _lines_to_size(lines, size: int) -> str:
    """Join generated lines until `size` bytes; the last line is cut to fit exactly."""
    out: list[str] = []
    used = 0
    for line in lines:
        need = len(line) + 1
        if used + need <= size:
            out.append(line)
            used += need
            continue
        rest = size - used
        if rest > 0:
            out.append(line[: rest - 1] if rest > 1 else "")
            used = size
        break
    text = "\n".join(out)
    if not text.endswith("\n") and used == size and len(text) < size:
        text += "\n"
    return text


def expand_filler(spec: dict) -> str:
    """Deterministic realistic-looking ASCII text of exactly `bytes` bytes.

    Optional `head` and `tail` strings are hand-written text placed before and
    after the generated body (so a decisive line can sit at either end of a
    huge output); `bytes` is the size of the whole message. Filler is pure
    ASCII, so the byte count is exact unless head+tail alone exceed it.
    """
    kind = spec["kind"]
    size = int(spec["bytes"])
    rng = random.Random(spec.get("seed", 0))
    topic = _topic_words(spec.get("topic", ""))
    head = spec.get("head", "")
    tail = spec.get("tail", "")
    body_size = max(0, size - len(head.encode()) - len(tail.encode()))
    t0 = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)

    def gen_log():
        t = t0
        while True:
            t += timedelta(milliseconds=rng.randint(5, 4000))
            yield _log_line(rng, topic, t)

    def gen_csv():
        cols = ["date", *[f"{w}_count" for w in topic[:3]], "rate", "segment"]
        yield ",".join(cols)
        d = t0
        while True:
            d += timedelta(hours=rng.choice((1, 6, 24)))
            vals = [str(rng.randint(0, 50000)) for _ in topic[:3]]
            seg = rng.choice(("organic", "paid", "referral", "partner", "direct"))
            yield ",".join([f"{d:%Y-%m-%d %H:00}", *vals, f"{rng.random():.4f}", seg])

    def gen_prose():
        while True:
            sents = []
            for _ in range(rng.randint(3, 6)):
                a, b = rng.choice(topic), rng.choice(_WORDS)
                sents.append(
                    rng.choice(_SENTENCES).format(
                        a=a, b=b, c=rng.choice(_WORDS), n=rng.randint(2, 97)
                    )
                )
            yield " ".join(sents)
            yield ""

    if kind == "json":
        recs: list[str] = []
        used = 4  # "[\n" + "\n]"
        i = 0
        while True:
            rec = json.dumps(
                {
                    "id": f"{topic[0][:3]}_{rng.getrandbits(40):010x}",
                    "seq": i,
                    topic[0]: rng.choice(_WORDS),
                    "value": round(rng.uniform(0, 1000), 3),
                    "ok": rng.random() > 0.1,
                    "tags": rng.sample(_WORDS, 2),
                },
                sort_keys=True,
            )
            sep = 2 if recs else 0  # ",\n"
            if used + sep + len(rec) > body_size:
                break
            recs.append(rec)
            used += sep + len(rec)
            i += 1
        body = "[\n" + ",\n".join(recs) + " " * max(0, body_size - used) + "\n]"
        if body_size < 4:
            body = " " * body_size
    else:
        gen = {"log": gen_log, "csv": gen_csv, "prose": gen_prose}[kind]()
        body = _lines_to_size(gen, body_size)
        body = body + " " * (body_size - len(body))
    return head + body + tail


# --------------------------------------------------------------------------- validation


def _is_str(x) -> bool:
    return isinstance(x, str) and x.strip() != ""


def _parse_start(s) -> datetime | None:
    if not isinstance(s, str) or not s.endswith("Z"):
        return None
    try:
        return datetime.fromisoformat(s[:-1] + "+00:00")
    except ValueError:
        return None


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ineligible(run: dict, turns: int) -> tuple[str, ...]:
    """The SPEC §7 eligibility rules a run breaks (`memkit.runs`); () if none."""
    return ineligible_reasons(
        parent_run_id=run.get("parent"),
        status=run.get("status"),
        turns=turns,
        stop_reason=run.get("stop_reason"),
    )


def _secret_hit(text: str) -> str | None:
    for pat in SECRET_PATTERNS:
        m = pat.search(text)
        if m:
            return m.group(0)
    return None


def _check_content(err: Errors, f: str, p: str, content) -> None:
    if content is None or isinstance(content, str):
        return
    if isinstance(content, dict) and set(content) == {"$filler"}:
        spec = content["$filler"]
        if not isinstance(spec, dict):
            err.add(f, p, "$filler must be an object")
            return
        unknown = set(spec) - {"kind", "bytes", "seed", "topic", "head", "tail"}
        if unknown:
            err.add(f, p, f"$filler has unknown fields {sorted(unknown)}")
        if spec.get("kind") not in FILLER_KINDS:
            err.add(f, p, f"$filler kind {spec.get('kind')!r} not in {FILLER_KINDS}")
        b = spec.get("bytes")
        if not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= MAX_FILLER_BYTES:
            err.add(f, p, f"$filler bytes {b!r} must be an int in 1..{MAX_FILLER_BYTES}")
        for k in ("head", "tail", "topic"):
            if k in spec and not isinstance(spec[k], str):
                err.add(f, p, f"$filler {k} must be a string")
        return
    err.add(
        f, p, f"content must be a string, null or a $filler object, got {type(content).__name__}"
    )


def _check_messages(err: Errors, f: str, rp: str, run: dict, is_eligible: bool) -> None:
    msgs = run.get("messages")
    if not isinstance(msgs, list):
        err.add(f, f"{rp}.messages", "must be a list")
        return
    pending: dict[str, str] = {}
    seen_ids: set[str] = set()
    for i, m in enumerate(msgs):
        mp = f"{rp}.messages[{i}]"
        if not isinstance(m, dict):
            err.add(f, mp, "must be an object")
            continue
        unknown = set(m) - {"role", "content", "tool_calls", "tool_call_id", "name"}
        if unknown:
            err.add(f, mp, f"unknown fields {sorted(unknown)}")
        role = m.get("role")
        if role not in ROLES:
            err.add(f, f"{mp}.role", f"{role!r} not in {ROLES}")
            continue
        _check_content(err, f, f"{mp}.content", m.get("content"))
        calls = m.get("tool_calls")
        if calls is not None and role != "assistant":
            err.add(f, f"{mp}.tool_calls", "only assistant messages carry tool_calls")
        if role == "assistant":
            if calls is not None:
                if not isinstance(calls, list) or not calls:
                    err.add(f, f"{mp}.tool_calls", "must be a non-empty list when present")
                    calls = []
                for j, c in enumerate(calls):
                    cp = f"{mp}.tool_calls[{j}]"
                    if not isinstance(c, dict):
                        err.add(f, cp, "must be an object")
                        continue
                    cid = c.get("id")
                    fn = c.get("function") or {}
                    if not _is_str(cid):
                        err.add(f, f"{cp}.id", "must be a non-empty string")
                    elif cid in seen_ids:
                        err.add(f, f"{cp}.id", f"tool call id {cid!r} used twice in this run")
                    else:
                        seen_ids.add(cid)
                        pending[cid] = fn.get("name", "")
                    if c.get("type") != "function":
                        err.add(f, f"{cp}.type", "must be 'function'")
                    if not _is_str(fn.get("name")):
                        err.add(f, f"{cp}.function.name", "must be a non-empty string")
                    args = fn.get("arguments")
                    if not isinstance(args, str):
                        err.add(f, f"{cp}.function.arguments", "must be a JSON string")
                    else:
                        try:
                            json.loads(args)
                        except ValueError as e:
                            err.add(f, f"{cp}.function.arguments", f"not valid JSON: {e}")
            elif not isinstance(m.get("content"), str | dict):
                err.add(f, f"{mp}.content", "assistant message without tool_calls needs content")
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in pending:
                err.add(f, f"{mp}.tool_call_id", f"{cid!r} answers no open tool call of this run")
            else:
                name = pending.pop(cid)
                if m.get("name") != name:
                    err.add(f, f"{mp}.name", f"{m.get('name')!r} != called function {name!r}")
            if m.get("content") is None:
                err.add(f, f"{mp}.content", "tool result needs content")
        elif "tool_call_id" in m:
            err.add(f, f"{mp}.tool_call_id", "only tool messages carry tool_call_id")
        if role in ("user", "system") and not isinstance(m.get("content"), str | dict):
            err.add(f, f"{mp}.content", f"{role} message needs content")
    if pending and is_eligible:
        err.add(f, f"{rp}.messages", f"tool calls never answered: {sorted(pending)}")
    if is_eligible and msgs and msgs[-1].get("role") != "assistant":
        err.warn(f, f"{rp}.messages", "an eligible run should end with an assistant message")


def _text_of(run: dict) -> str:
    parts = []
    for m in run.get("messages") or []:
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, dict):
            spec = c.get("$filler") or {}
            parts.append(spec.get("head", "") + " " + spec.get("tail", ""))
        for call in m.get("tool_calls") or []:
            parts.append(str((call.get("function") or {}).get("arguments", "")))
    return "\n".join(parts)


def validate_source(err: Errors, f: str, src) -> dict | None:
    """Validate one scope source; return a normalised model or None when unusable."""
    if not isinstance(src, dict):
        err.add(f, "$", "source must be a JSON object")
        return None
    unknown = set(src) - {"scope_id", "agent", "start", "facts", "runs", "probes", "pairs", "notes"}
    if unknown:
        err.add(f, "$", f"unknown top-level fields {sorted(unknown)}")
    scope = src.get("scope_id")
    if not _is_str(scope) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", scope or ""):
        err.add(f, "$.scope_id", f"{scope!r} must be a lowercase slug")
        return None
    if Path(f).stem != scope:
        err.add(f, "$.scope_id", f"{scope!r} must match the file name {Path(f).name!r}")
    if not _is_str(src.get("agent")):
        err.add(f, "$.agent", "must be a non-empty string")
    start = _parse_start(src.get("start"))
    if start is None:
        err.add(f, "$.start", f"{src.get('start')!r} must be ISO 8601 UTC ending in Z")
        start = datetime(2026, 1, 1, tzinfo=UTC)
    for k in ("facts", "runs", "probes", "pairs"):
        if not isinstance(src.get(k), list):
            err.add(f, f"$.{k}", "must be a list")
            src[k] = []

    # facts
    facts: dict[str, dict] = {}
    for i, fa in enumerate(src["facts"]):
        fp = f"$.facts[{i}]"
        if not isinstance(fa, dict):
            err.add(f, fp, "must be an object")
            continue
        unknown = set(fa) - {
            "key",
            "kind",
            "content",
            "paraphrases",
            "superseded_by",
            "retracted_in",
            "hard_case",
            "note",
        }
        if unknown:
            err.add(f, fp, f"unknown fields {sorted(unknown)}")
        key = fa.get("key")
        if not _is_str(key):
            err.add(f, f"{fp}.key", "must be a non-empty string")
            continue
        if key in facts:
            err.add(f, f"{fp}.key", f"duplicate fact key {key!r}")
            continue
        facts[key] = fa
        fa["_path"] = fp
        if fa.get("kind") not in KINDS:
            err.add(f, f"{fp}.kind", f"{fa.get('kind')!r} not in {KINDS}")
        texts = [("content", fa.get("content"))]
        paras = fa.get("paraphrases")
        if not isinstance(paras, list) or len(paras) < 2:
            err.add(f, f"{fp}.paraphrases", "needs at least 2 paraphrases")
            paras = []
        texts += [(f"paraphrases[{j}]", p) for j, p in enumerate(paras)]
        seen_text: set[str] = set()
        for tp, t in texts:
            if not _is_str(t):
                err.add(f, f"{fp}.{tp}", "must be a non-empty string")
                continue
            if t.strip() != t:
                err.add(f, f"{fp}.{tp}", "has leading or trailing whitespace")
            if len(t) > MAX_FACT_CHARS:
                err.add(f, f"{fp}.{tp}", f"{len(t)} characters > {MAX_FACT_CHARS}")
            if t in seen_text:
                err.add(f, f"{fp}.{tp}", "repeats the content or another paraphrase")
            seen_text.add(t)
            hit = _secret_hit(t)
            if hit:
                err.add(f, f"{fp}.{tp}", f"gold text contains a secret-looking string {hit!r}")
        hc = fa.get("hard_case")
        if hc is not None and hc not in HARD_CASES:
            err.add(f, f"{fp}.hard_case", f"{hc!r} not in {HARD_CASES}")

    # runs
    runs: dict[str, dict] = {}
    for i, r in enumerate(src["runs"]):
        rp = f"$.runs[{i}]"
        if not isinstance(r, dict):
            err.add(f, rp, "must be an object")
            continue
        unknown = set(r) - {
            "key",
            "day",
            "hour",
            "status",
            "stop_reason",
            "parent",
            "task",
            "establishes",
            "restates",
            "retracts",
            "messages",
            "final_answer",
            "note",
        }
        if unknown:
            err.add(f, rp, f"unknown fields {sorted(unknown)}")
        key = r.get("key")
        if not _is_str(key):
            err.add(f, f"{rp}.key", "must be a non-empty string")
            continue
        if key in runs:
            err.add(f, f"{rp}.key", f"duplicate run key {key!r}")
            continue
        runs[key] = r
        r["_path"] = rp
        day, hour = r.get("day"), r.get("hour")
        if not isinstance(day, int) or isinstance(day, bool) or day < 0:
            err.add(f, f"{rp}.day", f"{day!r} must be an int >= 0")
            day = 0
        if not isinstance(hour, int | float) or isinstance(hour, bool) or not 0 <= hour < 24:
            err.add(f, f"{rp}.hour", f"{hour!r} must be a number in [0, 24)")
            hour = 0
        r["_t"] = start + timedelta(days=day, seconds=round(hour * 3600))
        if r.get("status") not in RUN_STATUSES:
            err.add(f, f"{rp}.status", f"{r.get('status')!r} not in {RUN_STATUSES}")
        if not isinstance(r.get("stop_reason"), str):
            err.add(f, f"{rp}.stop_reason", "must be a string")
        if not _is_str(r.get("task")):
            err.add(f, f"{rp}.task", "must be a non-empty string")
        if not isinstance(r.get("final_answer"), str):
            err.add(f, f"{rp}.final_answer", "must be a string (may be empty)")
        msgs = r.get("messages") if isinstance(r.get("messages"), list) else []
        r["_turns"] = sum(1 for m in msgs if isinstance(m, dict) and m.get("role") == "assistant")
        r["_eligible"] = not ineligible(r, r["_turns"])
        for k in ("establishes", "restates", "retracts"):
            v = r.get(k, [])
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                err.add(f, f"{rp}.{k}", "must be a list of fact keys")
                v = []
            if len(set(v)) != len(v):
                err.add(f, f"{rp}.{k}", "lists a fact twice")
            r[k] = v
            for x in v:
                if x not in facts:
                    err.add(f, f"{rp}.{k}", f"unknown fact key {x!r}")
            if v and not r["_eligible"]:
                err.add(f, f"{rp}.{k}", "a run that never consolidates cannot carry gold evidence")
        _check_messages(err, f, rp, r, r["_eligible"])
        if r["_eligible"] and not _is_str(r.get("final_answer")):
            err.add(f, f"{rp}.final_answer", "an eligible run needs a final answer")

    for key, r in runs.items():
        parent = r.get("parent")
        if parent is not None:
            if parent not in runs or parent == key:
                err.add(f, f"{r['_path']}.parent", f"unknown parent run {parent!r}")
            elif runs[parent]["_t"] > r["_t"]:
                err.add(f, f"{r['_path']}.parent", "child run starts before its parent")
    times = sorted((r["_t"], k) for k, r in runs.items())
    for (t1, k1), (t2, k2) in itertools.pairwise(times):
        if t1 == t2:
            err.add(f, "$.runs", f"runs {k1!r} and {k2!r} start at the same instant")

    # fact lifecycle: established once, restated/retracted/superseded later
    est: dict[str, list[str]] = {k: [] for k in facts}
    first: dict[str, str] = {}
    for key, r in sorted(runs.items(), key=lambda kv: kv[1]["_t"]):
        for x in r["establishes"]:
            if x in facts:
                if x in first:
                    err.add(
                        f, f"{r['_path']}.establishes", f"{x!r} already established in {first[x]!r}"
                    )
                else:
                    first[x] = key
                est.setdefault(x, []).append(key)
        for x in r["restates"]:
            if x in facts:
                if x not in first:
                    err.add(f, f"{r['_path']}.restates", f"{x!r} restated before it is established")
                est.setdefault(x, []).append(key)
                if x in r["establishes"]:
                    err.add(f, f"{r['_path']}.restates", f"{x!r} both established and restated")
    retracted_by_run: dict[str, str] = {}
    for key, r in runs.items():
        for x in r["retracts"]:
            if x in facts:
                if facts[x].get("retracted_in") != key:
                    err.add(
                        f,
                        f"{r['_path']}.retracts",
                        f"{x!r} has retracted_in {facts[x].get('retracted_in')!r}, not {key!r}",
                    )
                retracted_by_run[x] = key
    end_t: dict[str, datetime] = {}  # when a fact stops holding
    for key, fa in facts.items():
        fp = fa["_path"]
        if key not in first:
            err.add(f, fp, f"fact {key!r} is established in no run")
            continue
        t0 = runs[first[key]]["_t"]
        rin = fa.get("retracted_in")
        if rin is not None:
            if rin not in runs:
                err.add(f, f"{fp}.retracted_in", f"unknown run {rin!r}")
            else:
                if key not in runs[rin]["retracts"]:
                    err.add(f, f"{fp}.retracted_in", f"run {rin!r} does not list it in retracts")
                if runs[rin]["_t"] <= t0:
                    err.add(f, f"{fp}.retracted_in", "retracted before it was established")
                end_t[key] = runs[rin]["_t"]
        sup = fa.get("superseded_by")
        if sup is not None:
            if sup not in facts or sup == key:
                err.add(f, f"{fp}.superseded_by", f"unknown successor fact {sup!r}")
            elif sup in first:
                ts = runs[first[sup]]["_t"]
                if ts <= t0:
                    err.add(f, f"{fp}.superseded_by", f"{sup!r} is established no later than it")
                end_t[key] = min(end_t.get(key, ts), ts)
                if facts[sup].get("kind") != fa.get("kind"):
                    err.warn(f, f"{fp}.superseded_by", f"successor {sup!r} has another kind")
        for rk in est.get(key, []):
            if key in end_t and runs[rk]["_t"] >= end_t[key]:
                err.add(f, fp, f"restated in {rk!r} after it stopped holding")
        # numbers in the content should be visible in the first evidence
        ev = _text_of(runs[first[key]])
        for num in re.findall(r"\d+(?:[.,:]\d+)*", fa.get("content") or ""):
            if num not in ev:
                err.warn(
                    f,
                    f"{fp}.content",
                    f"number {num!r} not found in establishing run {first[key]!r}",
                )

    # probes
    probes: dict[str, dict] = {}
    for i, p in enumerate(src["probes"]):
        pp = f"$.probes[{i}]"
        if not isinstance(p, dict):
            err.add(f, pp, "must be an object")
            continue
        unknown = set(p) - {"key", "after_run", "query", "relevant", "distractors", "note"}
        if unknown:
            err.add(f, pp, f"unknown fields {sorted(unknown)}")
        key = p.get("key")
        if not _is_str(key):
            err.add(f, f"{pp}.key", "must be a non-empty string")
            continue
        if key in probes:
            err.add(f, f"{pp}.key", f"duplicate probe key {key!r}")
            continue
        probes[key] = p
        if not _is_str(p.get("query")):
            err.add(f, f"{pp}.query", "must be a non-empty string")
        ar = p.get("after_run")
        if ar not in runs:
            err.add(f, f"{pp}.after_run", f"unknown run {ar!r}")
            continue
        t = runs[ar]["_t"]
        rel = p.get("relevant")
        dis = p.get("distractors", [])
        for k, v in (("relevant", rel), ("distractors", dis)):
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                err.add(f, f"{pp}.{k}", "must be a list of fact keys")
                continue
            if len(set(v)) != len(v):
                err.add(f, f"{pp}.{k}", "lists a fact twice")
            for x in v:
                if x not in facts:
                    err.add(f, f"{pp}.{k}", f"unknown fact key {x!r}")
        if not isinstance(rel, list) or not isinstance(dis, list):
            continue
        for x in set(rel) & set(dis):
            err.add(f, f"{pp}.distractors", f"{x!r} is also relevant")
        for x in rel:
            if x not in first:
                continue
            if runs[first[x]]["_t"] > t:
                err.add(f, f"{pp}.relevant", f"{x!r} is not established until {first[x]!r}")
            elif x in end_t and end_t[x] <= t:
                err.add(f, f"{pp}.relevant", f"{x!r} no longer holds after {ar!r}")
        p["_t"] = t

    # pairs
    for i, pr in enumerate(src["pairs"]):
        pp = f"$.pairs[{i}]"
        if not isinstance(pr, dict):
            err.add(f, pp, "must be an object")
            continue
        unknown = set(pr) - {"a", "b", "label", "note"}
        if unknown:
            err.add(f, pp, f"unknown fields {sorted(unknown)}")
        if not _is_str(pr.get("a")) or not _is_str(pr.get("b")):
            err.add(f, pp, "a and b must be non-empty strings")
        elif pr["a"] == pr["b"]:
            err.add(f, pp, "a and b are identical")
        if pr.get("label") not in PAIR_LABELS:
            err.add(f, f"{pp}.label", f"{pr.get('label')!r} not in {PAIR_LABELS}")

    return {
        "scope_id": scope,
        "agent": src.get("agent"),
        "start": start,
        "facts": facts,
        "runs": runs,
        "probes": probes,
        "pairs": src["pairs"],
        "est": est,
        "first": first,
    }


# --------------------------------------------------------------------------- output


def _message_out(m: dict) -> dict:
    out: dict = {"role": m["role"]}
    c = m.get("content")
    out["content"] = expand_filler(c["$filler"]) if isinstance(c, dict) else c
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                },
            }
            for c in m["tool_calls"]
        ]
    if m["role"] == "tool":
        out["tool_call_id"] = m["tool_call_id"]
    if m.get("name") is not None:
        out["name"] = m["name"]
    return out


def build_records(model: dict) -> dict[str, list[dict]]:
    """Turn one validated scope into output records (DESIGN.md "Dataset formats")."""
    s = model["scope_id"]
    runs = model["runs"]

    def rid(k: str) -> str:
        return f"{s}:{k}"

    def fid(k: str) -> str:
        return f"{s}:{k}"

    transcripts = []
    for k, r in runs.items():
        transcripts.append(
            {
                "run_id": rid(k),
                "scope_id": s,
                "parent_run_id": rid(r["parent"]) if r.get("parent") else None,
                "status": r["status"],
                "stop_reason": r["stop_reason"],
                "turns": r["_turns"],
                "started_at": _iso(r["_t"]),
                "task": r["task"],
                "messages": [_message_out(m) for m in r["messages"]],
                "final_answer": r["final_answer"],
            }
        )
    facts = []
    for k, fa in model["facts"].items():
        chain = sorted(model["est"].get(k, []), key=lambda rk: runs[rk]["_t"])
        facts.append(
            {
                "fact_id": fid(k),
                "scope_id": s,
                "kind": fa["kind"],
                "content": fa["content"],
                "paraphrases": list(fa["paraphrases"]),
                "established_in": [rid(x) for x in chain],
                "retracted_in": rid(fa["retracted_in"]) if fa.get("retracted_in") else None,
                "superseded_by": fid(fa["superseded_by"]) if fa.get("superseded_by") else None,
                "hard_case": fa.get("hard_case"),
            }
        )
    probes = [
        {
            "probe_id": f"{s}:{k}",
            "scope_id": s,
            "after_run": rid(p["after_run"]),
            "query": p["query"],
            "relevant": [fid(x) for x in p["relevant"]],
            "distractors": [fid(x) for x in p.get("distractors", [])],
        }
        for k, p in model["probes"].items()
    ]
    pairs = [
        {"a": p["a"], "b": p["b"], "label": p["label"], "source": f"{s}:hand"}
        for p in model["pairs"]
    ]
    # Derived pairs: every paraphrase against its fact (paraphrase), and every
    # superseded fact against its successor (distinct: same topic, new truth).
    for fa in model["facts"].values():
        for para in fa["paraphrases"]:
            pairs.append(
                {"a": fa["content"], "b": para, "label": "paraphrase", "source": f"{s}:derived"}
            )
        sup = fa.get("superseded_by")
        if sup:
            pairs.append(
                {
                    "a": fa["content"],
                    "b": model["facts"][sup]["content"],
                    "label": "distinct",
                    "source": f"{s}:derived",
                }
            )
    return {"transcripts": transcripts, "facts": facts, "probes": probes, "pairs": pairs}


def scope_counts(model: dict) -> dict:
    runs = model["runs"].values()
    facts = model["facts"].values()
    probes = model["probes"].values()
    return {
        "runs": len(model["runs"]),
        "root_runs": sum(1 for r in runs if r.get("parent") is None),
        "eligible_runs": sum(1 for r in runs if r["_eligible"]),
        "ineligible_runs": sum(1 for r in runs if not r["_eligible"]),
        "facts": len(model["facts"]),
        "changed_facts": sum(
            1 for fa in facts if fa.get("superseded_by") or fa.get("retracted_in")
        ),
        "probes": len(model["probes"]),
        "off_topic_probes": sum(1 for p in probes if p.get("relevant") == []),
        "pairs": len(model["pairs"]),
        "days": max((r.get("day", 0) for r in runs), default=0),
    }


def dataset_counts(records: dict[str, list[dict]], models: list[dict], sizes: dict) -> dict:
    tr, fa, pr, pa = (records[k] for k in ("transcripts", "facts", "probes", "pairs"))

    def tally(items, key):
        out: dict[str, int] = {}
        for it in items:
            v = key(it)
            if v is not None:
                out[v] = out.get(v, 0) + 1
        return dict(sorted(out.items()))

    reasons = [
        ineligible_reasons(
            parent_run_id=t["parent_run_id"],
            status=t["status"],
            turns=t["turns"],
            stop_reason=t["stop_reason"],
        )
        for t in tr
    ]
    ineligible = {why: sum(why in r for r in reasons) for why in INELIGIBLE_REASONS}
    return {
        "scopes": len(models),
        "runs": len(tr),
        "root_runs": sum(1 for t in tr if t["parent_run_id"] is None),
        "eligible_runs": sum(1 for r in reasons if not r),
        "ineligible_by_reason": ineligible,
        "by_status": tally(tr, lambda t: t["status"]),
        "messages": sum(len(t["messages"]) for t in tr),
        "tool_calls": sum(len(m.get("tool_calls") or []) for t in tr for m in t["messages"]),
        "facts": len(fa),
        "facts_by_kind": tally(fa, lambda f: f["kind"]),
        "facts_by_hard_case": tally(fa, lambda f: f["hard_case"]),
        "paraphrases": sum(len(f["paraphrases"]) for f in fa),
        "restatements": sum(max(0, len(f["established_in"]) - 1) for f in fa),
        "superseded": sum(1 for f in fa if f["superseded_by"]),
        "retracted": sum(1 for f in fa if f["retracted_in"]),
        "superseded_or_retracted": sum(1 for f in fa if f["superseded_by"] or f["retracted_in"]),
        "probes": len(pr),
        "off_topic_probes": sum(1 for p in pr if not p["relevant"]),
        "pairs": len(pa),
        "pairs_by_label": tally(pa, lambda p: p["label"]),
        "hand_pairs": sum(1 for p in pa if p["source"].endswith(":hand")),
        "bytes": sizes,
    }


def _dump_jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def render(models: list[dict]) -> dict[str, str]:
    """All output files as text, deterministic for the given sources."""
    records: dict[str, list[dict]] = {"transcripts": [], "facts": [], "probes": [], "pairs": []}
    for m in models:
        for k, v in build_records(m).items():
            records[k].extend(v)
    records["transcripts"].sort(key=lambda t: (t["scope_id"], t["started_at"], t["run_id"]))
    records["facts"].sort(key=lambda f: f["fact_id"])
    records["probes"].sort(key=lambda p: p["probe_id"])
    records["pairs"].sort(key=lambda p: (p["source"], p["label"], p["a"], p["b"]))
    files = {f"{k}.jsonl": _dump_jsonl(v) for k, v in records.items()}
    sizes = {k: len(v.encode()) for k, v in sorted(files.items())}
    meta = {
        "name": NAME,
        "version": VERSION,
        "description": DESCRIPTION,
        "license": LICENSE,
        "scopes": [{"scope_id": m["scope_id"], "agent": m["agent"]} for m in models],
        "counts": dataset_counts(records, models, sizes),
    }
    files["dataset.json"] = json.dumps(meta, ensure_ascii=False, indent=2) + "\n"
    return files


def check_counts(err: Errors, models: list[dict], strict: bool) -> None:
    report = err.add if strict else err.warn
    totals: dict[str, int] = {k: 0 for k in DATASET_MIN}
    totals["scopes"] = len(models)
    kinds: set[str] = set()
    for m in models:
        c = scope_counts(m)
        f = f"src/{m['scope_id']}.json"
        for k, lo in SCOPE_MIN.items():
            if c[k] < lo:
                report(f, "$", f"{k} = {c[k]} < {lo}")
        if c["days"] < 14:
            report(f, "$.runs", f"runs span {c['days']} days; aim for 3-6 simulated weeks")
        for k in ("root_runs", "facts", "changed_facts", "probes"):
            totals[k] += c[k]
        kinds |= {fa.get("kind") for fa in m["facts"].values()}
    for k, lo in DATASET_MIN.items():
        if totals[k] < lo:
            report("src", "$", f"dataset {k} = {totals[k]} < {lo}")
    missing = set(KINDS) - kinds
    if missing:
        report("src", "$", f"no facts of kind {sorted(missing)}")


def load_all(src_dir: Path, err: Errors) -> list[dict]:
    models = []
    scopes_seen: dict[str, str] = {}
    for path in sorted(src_dir.glob("*.json")):
        rel = f"src/{path.name}"
        try:
            src = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            err.add(rel, "$", f"invalid JSON: {e}")
            continue
        model = validate_source(err, rel, src)
        if model is None:
            continue
        if model["scope_id"] in scopes_seen:
            err.add(rel, "$.scope_id", f"scope also defined in {scopes_seen[model['scope_id']]}")
            continue
        scopes_seen[model["scope_id"]] = rel
        models.append(model)
    return models


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="validate only; write nothing")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: beside this)")
    ap.add_argument("--src", type=Path, default=HERE / "src", help="folder of scope sources")
    ap.add_argument("--strict", action="store_true", help="fail on the count minimums too")
    ap.add_argument("-q", "--quiet", action="store_true", help="print errors only")
    args = ap.parse_args(argv)

    err = Errors()
    models = load_all(args.src, err)
    if not models and not err.items:
        err.add(str(args.src), "$", "no scope sources found")
    check_counts(err, models, args.strict)
    if not args.quiet:
        for w in err.warnings:
            print(w, file=sys.stderr)
    if err.items:
        for e in err.items:
            print(e, file=sys.stderr)
        print(f"{len(err.items)} error(s)", file=sys.stderr)
        return 1
    files = render(models)
    if not args.quiet:
        counts = json.loads(files["dataset.json"])["counts"]
        for m in models:
            print(m["scope_id"], json.dumps(scope_counts(m)))
        print("total", json.dumps(counts, ensure_ascii=False))
    if args.check:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_text(text, encoding="utf-8")
    if not args.quiet:
        print(f"wrote {len(files)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
