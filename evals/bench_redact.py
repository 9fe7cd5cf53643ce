"""`memkit bench redact`: redaction's speed, and what it costs `remember`.

Times are CPU seconds of this process (`time.process_time`), not wall
time: on a shared machine other work then counts far less.

* microseconds per KB of `redact` (secrets mode, the default) on three
  shapes of text, generated from a seed: prose (the store bench's synthetic
  memories), config and code (key/value lines, JSON, shell commands with
  placeholders and env lookups: every gate opens) and the same config with
  fabricated secrets in it (the rules replace);
* `remember` throughput with redaction on (the default) beside the same store
  with it off (`RedactionParams(secrets=False)`), in rounds of the same fresh
  texts (a third each of the three shapes) written to a new store per mode,
  alternating which goes first, twice: with the default WordLlama embedder
  (end to end) and with the hashing embedder (the store's own cost, where
  redaction weighs most). on/off (the median of the rounds' ratios) is
  redaction's whole share of a write.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from memkit import SQLiteStore, redact
from memkit.params import RedactionParams

_CONFIG = (
    "DATABASE_HOST=db-{i}.internal\nDATABASE_PASSWORD=${{DB_PASSWORD}}\n",
    '{{"service": "api-{i}", "token": null, "retries": {i}, "auth": "oauth2"}}',
    'api_key = os.environ["API_KEY_{i}"]\ntoken = get_token(session_{i})',
    "curl -H 'Authorization: Bearer $TOKEN' https://api.example.com/v{i}/items?page={i}",
    "mysql -u app -p shop_{i} -e 'select 1'\nkubectl logs web-{i}-x2k9p -n prod",
    "commit 3f786850e387550fdab836ed7e6dc881de23{i:03d} fixed the deploy script",
)
_SECRET = (
    "DATABASE_PASSWORD=Sup3r-{i}-S3cret\n",
    '{{"api_key": "k-{i}-19a8b7c6d5e4", "token": "t0k3n-{i}-value"}}',
    "mysql -u app -pMyR00t{i} shop",
    "aws ghp_abcdefghijklmnopqrstuvwxyz0123{i:06d} here",
    "redis-cli -a R3dis{i}Pw ping && sshpass -p 'Ssh!{i}' ssh web1",
)


def texts(shape: str, n: int, seed: int) -> list[str]:
    """`n` distinct texts of one shape (prose, config, secrets)."""
    from evals.bench_store import synthetic_texts

    rng = random.Random(seed)
    if shape == "prose":
        return [f"{t} ({i})" for i, t in enumerate(synthetic_texts(rng, n))]
    forms = _CONFIG if shape == "config" else _CONFIG + _SECRET
    return ["\n".join(rng.choice(forms).format(i=i * 7 + k) for k in range(4)) for i in range(n)]


def us_per_kb(sample: list[str], repeat: int) -> float:
    """Microseconds `redact` takes per KB (1,000 UTF-8 bytes) of `sample`."""
    size = sum(len(t.encode()) for t in sample) * repeat
    t0 = time.process_time()
    for _ in range(repeat):
        for t in sample:
            redact(t)
    return (time.process_time() - t0) * 1e6 / (size / 1000)


def remember_rates(embedder: str, writes: int, rounds: int, seed: int) -> dict[str, float]:
    """Writes/s of `remember` with redaction on and off: each round writes the same
    fresh texts into a new store per mode (after one untimed write), one mode
    right after the other, alternating which goes first. The on/off ratio is
    the median of the rounds' own ratios (each pair ran seconds apart, so a
    busy machine moves both), with its quartiles."""
    pool = texts("config", writes * rounds, seed) + texts("secrets", writes * rounds, seed + 1)
    pool += texts("prose", writes * rounds, seed + 2)
    random.Random(seed).shuffle(pool)
    spent = {"on": 0.0, "off": 0.0}
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            batch = pool[r * writes : (r + 1) * writes]
            took: dict[str, float] = {}
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                store = SQLiteStore.open(
                    Path(tmp) / f"{mode}-{r}.db",
                    embedder=embedder,
                    redaction=RedactionParams(secrets=mode == "on"),
                )
                store.remember("bench", "an untimed first write")
                t0 = time.process_time()
                for t in batch:
                    store.remember("bench", t)
                took[mode] = time.process_time() - t0
                store.close()
            ratios.append(took["off"] / took["on"])
            for mode, secs in took.items():
                spent[mode] += secs
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return {
        "on": writes * rounds / spent["on"],
        "off": writes * rounds / spent["off"],
        "ratio_on_off": statistics.median(ratios),
        "ratio_q1": q1,
        "ratio_q3": q3,
    }


def run(n: int, repeat: int, writes: int, rounds: int, seed: int) -> dict:
    redact("warm-up: password=x1y2z3")  # loads detect-secrets' patterns once
    speed = {shape: us_per_kb(texts(shape, n, seed), repeat) for shape in _SHAPES}
    remember = {}
    for embedder in ("wordllama", "hashing"):
        remember[embedder] = remember_rates(embedder, writes, rounds, seed)
    return {"us_per_kb": speed, "remember_per_s": remember}


_SHAPES = ("prose", "config", "secrets")


def _print(res: dict) -> None:
    print("redact, microseconds per KB (secrets mode):")
    for shape, v in res["us_per_kb"].items():
        print(f"  {shape:8} {v:8.1f}")
    print("remember/s, redaction on vs off (same run, paired rounds; on/off: median, quartiles):")
    for emb, r in res["remember_per_s"].items():
        print(
            f"  {emb:9} on {r['on']:8.0f}  off {r['off']:8.0f}  on/off {r['ratio_on_off']:.3f}"
            f" ({r['ratio_q1']:.3f}-{r['ratio_q3']:.3f})"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="memkit bench redact", description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=300, help="texts per shape (default 300)")
    ap.add_argument("--repeat", type=int, default=5, help="passes over them (default 5)")
    ap.add_argument("--writes", type=int, default=150, help="remembers per round (default 150)")
    ap.add_argument("--rounds", type=int, default=16, help="paired rounds (default 16)")
    ap.add_argument("--seed", type=int, default=7, help="seed of the texts (default 7)")
    ap.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    args = ap.parse_args(argv)
    for name in ("texts", "repeat", "writes", "rounds"):
        if getattr(args, name) < (2 if name == "rounds" else 1):
            ap.error(f"--{name} {getattr(args, name)} is too small")
    res = run(args.texts, args.repeat, args.writes, args.rounds, args.seed)
    _print(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
