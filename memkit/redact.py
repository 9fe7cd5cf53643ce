"""Write-time redaction (SPEC §3.1): secrets on by default, PII opt-in.

A memory outlives the run that wrote it and is replayed into later prompts,
so a credential that slips into one would leak forever. `redact` is a pure
function of (text, params); consolidation reuses it on evidence.
"""

from __future__ import annotations

import re

from memkit.params import RedactionParams

REDACTED = "[REDACTED]"

_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    # PEM private keys (RSA, EC, OPENSSH, PGP ...), whole block.
    re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
        r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        re.DOTALL,
    ),
    # AWS access key ids.
    re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
    # GitHub tokens (classic and fine-grained).
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}\b"),
    # Slack tokens.
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    # Anthropic / OpenAI-style keys (sk-ant-..., sk-proj-..., sk-...).
    re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"),
    # Google API keys.
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
    # Bearer credentials.
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
)

# `password=...`, `secret: ...`, `api_key = "..."`: keep the name, hide the value.
_ASSIGNMENT = re.compile(
    r"(?i)\b((?:[a-z0-9_-]*_)?(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key"
    r"|secret[_-]?key|private[_-]?key|auth[_-]?token|access[_-]?token|token)\b)"
    r"(\s*[:=]\s*)"
    r"(\"[^\"]*\"|'[^']*'|[^\s,;]+)"
)

# scheme://user:pass@host -> scheme://[REDACTED]@host
_URL_CREDS = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^\s/@:]+:[^\s/@]+@", re.IGNORECASE)

# A literal every secret match above must contain (URL credentials hold ":"):
# text with none of them cannot change, so most writes pay one scan, not ten.
_SECRET_HINT = re.compile(
    r"-----BEGIN |A(?:KIA|SIA|GPA|IDA|ROA|NPA|NVA|IPA)|gh[pousr]_|github_pat_"
    r"|xox[abposr]-|sk-|AIza|[:=]|(?i:bearer)"
)

_PII_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
    re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b"),
    # Phone numbers: optional +country, 9-15 digits with common separators.
    re.compile(r"(?<![\w.])\+?\d(?:[\s.-]?\(?\d\)?){8,14}(?![\w.])"),
)


def redact(text: str, params: RedactionParams = RedactionParams()) -> str:
    """Replace secrets (and, in PII mode, emails/IPv4/phones) with `[REDACTED]`."""
    if not text:
        return text
    out = text
    if params.secrets and _SECRET_HINT.search(out):
        out = _URL_CREDS.sub(lambda m: m.group(1) + REDACTED + "@", out)
        for pat in _SECRET_PATTERNS:
            out = pat.sub(REDACTED, out)
        out = _ASSIGNMENT.sub(
            lambda m: (
                m.group(1) + m.group(2) + (m.group(3) if m.group(3) == REDACTED else REDACTED)
            ),
            out,
        )
    if params.pii:
        for pat in _PII_PATTERNS:
            out = pat.sub(REDACTED, out)
    return out
