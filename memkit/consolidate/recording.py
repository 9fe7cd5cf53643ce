"""Recordings: a real model's answers kept as a small JSON Lines file (memkit).

A recording lets a run against a live model be replayed offline, with no
server and no weights, byte-identical on every rerun: `replay:<file.jsonl>`
(`ReplayConsolidator`) answers each request by its hash. Line 1 is a header:

    {"kind": "memkit-recording", "version": 1, "model": "openai/smollm2",
     "system": "pipeline:litellm:openai/smollm2", "options": {...},
     "request_budget": 5860, "prompt_version": "memkit-native-1",
     "dataset": {"name": ..., "version": ..., "fingerprint": ...}, ...}

then one line per distinct request, in run order:

    {"request_hash": "<sha256>", "replicate": 0, "text": "<raw answer>",
     "attempts": [{"model": ..., "outcome": "ok", "input_tokens": 812,
                   "output_tokens": 97, "latency_s": 1.9, ...}]}

An entry is the response cache's (`memkit.consolidate.cache`): the whole
attempt sequence (real tokens and latency) and the answer, or the rate-limit /
server / timeout error it ended in (`"error"` instead of `"text"`). The
header's `request_budget` is the byte limit requests were shaped to, so a
replay shapes (and hashes) requests exactly as the recorded run did. This
module reads and writes the format; `evals.record` builds one from a run
folder. It holds no model and imports no LiteLLM.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonlines

from memkit.errors import ConfigError

RECORDING_KIND = "memkit-recording"
RECORDING_VERSION = 1

Key = tuple[str, int]
"""(request hash, replicate)."""


_BLANK = object()


def _loads(text: str | bytes) -> Any:
    return _BLANK if not text.strip() else json.loads(text)


def _dumps(obj: Any) -> str:
    """One line of a recording: sorted keys, UTF-8 as is (byte-stable reruns)."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def is_recording(path: str | os.PathLike[str]) -> bool:
    """A `.jsonl` file (a run folder is the other thing `replay:` reads)."""
    p = Path(path)
    return p.suffix == ".jsonl" and not p.is_dir()


def read_recording(
    path: str | os.PathLike[str],
) -> tuple[dict[str, Any], dict[Key, dict[str, Any]]]:
    """The header and the entries by (request hash, replicate); a ConfigError names
    the file and line of anything that is not a recording of this version."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"replay: no recording {str(p)!r}") from None
    # lines end at "\n" only: a model's answer may hold U+2028 raw (ensure_ascii=False),
    # which str.splitlines() would break a line at
    reader = jsonlines.Reader(data.split(b"\n"), loads=_loads)
    rows = []
    for n in itertools.count(1):  # blank lines are read too, so the n-th read is line n
        try:
            row = reader.read(skip_empty=False, allow_none=True)
        except EOFError:
            break
        except jsonlines.InvalidLineError as e:
            why = e.__cause__
            if isinstance(why, UnicodeDecodeError):
                raise ConfigError(f"replay: {p}:{e.lineno}: not UTF-8 ({why.reason})") from None
            raise ConfigError(f"replay: {p}:{e.lineno}: not JSON ({why})") from None
        if row is _BLANK:
            continue
        if not isinstance(row, dict):
            raise ConfigError(f"replay: {p}:{n}: a line must be a JSON object")
        rows.append((n, row))
    if not rows or rows[0][1].get("kind") != RECORDING_KIND:
        raise ConfigError(f"replay: {p}: line 1 is not a {RECORDING_KIND} header")
    header = rows[0][1]
    if header.get("version") != RECORDING_VERSION:
        raise ConfigError(
            f"replay: {p}: recording version {header.get('version')!r}, "
            f"this memkit reads {RECORDING_VERSION}"
        )
    entries: dict[Key, dict[str, Any]] = {}
    for n, row in rows[1:]:
        h, rep = row.get("request_hash"), row.get("replicate", 0)
        ok = isinstance(h, str) and len(h) == 64 and isinstance(rep, int)
        if not ok or not isinstance(row.get("attempts"), list) or not row["attempts"]:
            raise ConfigError(
                f"replay: {p}:{n}: an entry needs request_hash (64 hex), replicate and attempts"
            )
        if ("text" in row) == ("error" in row):
            raise ConfigError(f"replay: {p}:{n}: an entry holds either text or error")
        entries.setdefault((str(h), int(rep)), row)
    return header, entries


def write_recording(
    path: str | os.PathLike[str], header: Mapping[str, Any], entries: Iterable[Mapping[str, Any]]
) -> int:
    """Write header and entries atomically (temp file + rename); returns the entry count."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    head = {"kind": RECORDING_KIND, "version": RECORDING_VERSION, **header}
    body = [dict(e) for e in entries]
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f, jsonlines.Writer(f, dumps=_dumps) as out:
            out.write(head)
            out.write_all(body)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(body)
