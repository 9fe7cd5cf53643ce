"""Record a finished run's real-model answers as a replayable recording.

`memkit eval record RUN --out FILE` (or `memkit eval run ... --record FILE`)
turns the attempts of one `litellm:<model>` system of a run folder into a
recording (`memkit.consolidate.recording`): per distinct request (hash,
replicate), in run order, the attempt sequence with its real tokens and
latency and the raw answer (or the rate-limit / server / timeout error it ended
in; a connection or configuration failure says nothing about the request and
is left out). The run's response cache made every repeat of a request the same
answer, so the first occurrence stands for all. `replay:<FILE>` then serves it
offline. Nothing here calls a model.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from evals.rows import AttemptRow, PassRow, rows_of
from memkit.consolidate import REPLAYABLE, write_recording
from memkit.errors import ConfigError

CALL_FIELDS = (
    "model",
    "outcome",
    "status",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "cost_note",
    "latency_s",
    "retry_after_s",
    "error",
    "response_format",
)
"""`memkit.llm.CallAttempt` fields, read back from attempt rows."""


def _system(manifest: dict[str, Any], system: str | None, where: Path) -> str:
    llms = [s for s in manifest.get("systems", ()) if s.startswith("pipeline:litellm:")]
    if system is None:
        if len(llms) != 1:
            raise ConfigError(
                f"{where}: name the system to record with --system "
                f"(litellm systems: {', '.join(llms) or 'none'})"
            )
        return llms[0]
    want = system if system.startswith("pipeline:") else f"pipeline:{system}"
    if want not in llms:
        raise ConfigError(
            f"{where}: {system!r} is not a litellm system of this run ({', '.join(llms) or 'none'})"
        )
    return want


def _call(row: AttemptRow, answered: bool) -> dict[str, Any]:
    call = {k: getattr(row, k) for k in CALL_FIELDS}
    if answered:  # a rejected answer was still an answer: the provider call was ok
        call["outcome"] = "ok"
    return call


SAME = ("system", "model", "options", "request_budget", "consolidation", "dataset")
"""Header fields every run of one recording must agree on (a recording may gather
runs of single scopes made apart, e.g. one `--scope` per run)."""


def _entries(
    rows: list[AttemptRow], seen: set[tuple[str, int]], left_out: Counter[str]
) -> list[dict[str, Any]]:
    """One entry per distinct (request hash, replicate) not in `seen`, in run order."""
    from evals.units import pass_units_in_order

    out: list[dict[str, Any]] = []
    for unit in pass_units_in_order(rows):
        h, rep = unit[0].request_hash, unit[0].replicate
        if (h, rep) in seen:
            continue
        last = unit[-1]
        answered = last.answered
        entry: dict[str, Any] = {"request_hash": h, "replicate": rep}
        if answered:
            entry["text"] = last.raw_response
        elif last.outcome in REPLAYABLE:
            entry["error"] = {
                "message": str(last.error or last.outcome),
                "kind": last.outcome,
                "status": last.status,
            }
        else:
            left_out[last.outcome] += 1
            continue
        entry["attempts"] = [_call(r, answered and r is last) for r in unit]
        out.append(entry)
        seen.add((h, rep))
    return out


def _header(d: Path, system: str | None) -> tuple[dict[str, Any], list[AttemptRow]]:
    """A run folder's recording header and its system's attempt rows."""
    from evals.runfolder import read_json

    if not (d / "manifest.json").is_file() or not (d / "attempts.jsonl").is_file():
        raise ConfigError(f"{str(d)!r} is not a finished run folder (manifest, attempts)")
    manifest = read_json(d / "manifest.json")
    sys_ = _system(manifest, system, d)
    spec = sys_.removeprefix("pipeline:")
    rows = [r for r in rows_of(d, AttemptRow) if r.system == sys_]
    passes = [r for r in rows_of(d, PassRow) if r.system == sys_]
    budgets = sorted({p.request_budget for p in passes if p.request_budget})
    if len(budgets) > 1:
        raise ConfigError(f"{d}: {sys_} shaped requests to several budgets {budgets}")
    config = manifest.get("config") or {}
    options = dict((config.get("model_options") or {}).get(spec) or {})
    for machine_specific in ("api_key", "api_key_env", "api_base"):
        options.pop(machine_specific, None)
    dataset = manifest.get("dataset") or {}
    header = {
        "system": sys_,
        "model": spec.removeprefix("litellm:"),
        "options": options,
        "request_budget": budgets[0] if budgets else None,
        "consolidation": config.get("consolidation") or {},
        # the split of failed batches (docs/behaviour.md "Parking") shapes the requests sent
        "isolate": bool((config.get("consolidation") or {}).get("isolate", True)),
        "replicates": config.get("replicates", 1),
        "dataset": {k: dataset.get(k) for k in ("name", "version", "fingerprint")},
        "source_runs": [manifest.get("name")],
        "recorded_at": manifest.get("started_at"),
        "git_revision": manifest.get("git_revision"),
        "llm": manifest.get("llm"),
    }
    return header, rows


def record_run(
    run_dirs: str | Path | list[str | Path],
    out: str | Path,
    *,
    system: str | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """Write the recording of one litellm system of one or several run folders to `out`;
    returns a summary (system, entries, answered, errors, left out by outcome, budget).

    Several folders (e.g. one run per scope) must agree on system, model, options
    (the api_base aside), request budget, consolidation tunables and dataset."""
    dirs = [Path(p) for p in (run_dirs if isinstance(run_dirs, list) else [run_dirs])]
    header: dict[str, Any] = {}
    entries: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    left_out: Counter[str] = Counter()
    for d in dirs:
        h, rows = _header(d, system)
        if not header:
            header = h
        else:
            differ = [k for k in SAME if h[k] != header[k]]
            if differ:
                raise ConfigError(
                    f"{d}: its {', '.join(differ)} differ from {dirs[0]}'s: one recording holds "
                    "one model, options, budget and dataset"
                )
            header["source_runs"] += h["source_runs"]
            header["recorded_at"] = min(str(header["recorded_at"]), str(h["recorded_at"]))
        entries += _entries(rows, seen, left_out)
    if not entries:
        raise ConfigError(f"{dirs[0]}: {header['system']} has no answered request to record")
    header["note"] = note
    n = write_recording(out, header, entries)
    return {
        "system": header["system"],
        "entries": n,
        "answered": sum(1 for e in entries if "text" in e),
        "errors": sum(1 for e in entries if "error" in e),
        "left_out": dict(left_out),
        "request_budget": header["request_budget"],
        "out": str(out),
    }
