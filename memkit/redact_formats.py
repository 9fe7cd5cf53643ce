"""memkit's own token formats and multi-line secret blocks (beside detect-secrets').

The vendor formats detect-secrets does not know, written from the formats
public secret scanners document (prefix and body), plus one general rule for
the common shape `vendorprefix_<random body>`, and the blocks a key file
spans: PEM private keys, PuTTY `.ppk` private lines, and a PEM private key
that was base64-encoded once more (kubeconfig `client-key-data`, Kubernetes
`tls.key`). Each rule is (gate literals, pattern, replacement) as in
`memkit.redact`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable

from memkit.redact_values import REDACTED, looks_random

Replace = Callable[[re.Match[str]], str]
Rule = tuple[tuple[tuple[str, ...], ...], re.Pattern[str], Replace]
RunRule = tuple[int, tuple[tuple[str, ...], ...], re.Pattern[str], Replace]
"""(shortest whitespace-free run any match holds, gate, pattern, replacement)"""


def whole(m: re.Match[str]) -> str:
    return REDACTED


_TOKENS: tuple[tuple[tuple[str, ...], str], ...] = (
    # (lowercase literals every match holds, pattern): replaced whole.
    (
        ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"),
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b",
    ),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    (("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{30,}\b"),
    (("glpat-",), r"\bglpat-[A-Za-z0-9_-]{20,}"),
    (("npm_",), r"\bnpm_[A-Za-z0-9]{36}\b"),
    (("pypi-",), r"\bpypi-[A-Za-z0-9_-]{20,}"),
    (("hf_",), r"\bhf_[A-Za-z0-9]{30,}\b"),
    (("api_org_",), r"\bapi_org_[A-Za-z0-9]{30,}\b"),
    (("xox",), r"\bxox[abposre]-[A-Za-z0-9-]{10,}\b"),
    (("xapp-",), r"\bxapp-\d-[A-Za-z0-9-]{20,}"),
    (("hooks.slack.com",), r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
    (
        ("/api/webhooks/",),
        r"https://(?:\w+\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{20,}",
    ),
    (("sk-",), r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"),
    (("sk_", "rk_"), r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}"),
    (("whsec_",), r"\bwhsec_[A-Za-z0-9]{20,}"),
    (("aiza",), r"\bAIza[0-9A-Za-z_-]{35}\b"),
    (("ya29.",), r"\bya29\.[A-Za-z0-9_-]{20,}"),
    (("gocspx-",), r"\bGOCSPX-[A-Za-z0-9_-]{20,}"),
    (("sg.",), r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    (("age-secret-key-1",), r"\bAGE-SECRET-KEY-1[0-9A-Z]{50,}"),
    (("dckr_pat_",), r"\bdckr_pat_[A-Za-z0-9_-]{20,}"),
    (("_v1_",), r"\bdo[opr]_v1_[a-f0-9]{64}\b"),
    (("dapi",), r"\bdapi[a-f0-9]{32}(?:-\d)?\b"),
    (("hvs.", "hvb.", "hvr."), r"\bhv[sbr]\.[A-Za-z0-9_-]{24,}"),
    ((".atlasv1.",), r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}"),
    (("shpat_", "shpca_", "shppa_", "shpss_"), r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"),
    (("key-",), r"\bkey-[0-9a-z]{32}\b"),
    (("atatt3",), r"\bATATT3[A-Za-z0-9_=-]{100,}"),
    (("ltai",), r"\bLTAI[A-Za-z0-9]{20}\b"),
    (("atbb",), r"\bATBB[A-Za-z0-9_=.-]{32,}"),
    (("q~",), r"(?<![\w~.-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![\w~.-])"),
    ((":apa91b",), r"\bAAAA[A-Za-z0-9_-]{7}:APA91b[A-Za-z0-9_-]{100,}"),
    # JWTs (header.payload.signature; the header is base64url JSON, so "eyJ").
    (("eyj",), r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*"),
)

# vendorprefix_<body>: a short prefix (with up to two more short parts:
# `dop_v1_`, `sk-or-v1-`, `dp.st.prd.`) before a long random body.
_PREFIXED = re.compile(
    r"(?<![\w.+/=-])(?=[\w.-]{22})(?P<prefix>[A-Za-z][A-Za-z0-9]{0,11}(?:[_.-][a-z0-9]{1,8}){0,2}[_.-])"
    r"(?P<body>[A-Za-z0-9_-]{20,}={0,2})(?![\w.+/=-])"
)
_NOT_VENDOR = re.compile(r"(?i)(?:sha\d*|md5|blake\d*|crc\d*|xxh\d*|sri|integrity)[_.-]")


def _prefixed(m: re.Match[str]) -> str:
    """Redact `prefix_body` when the body is machine-made: random mixed-class
    text, or 32+ hex digits after an underscore prefix (`sbp_`, `shpat_`)."""
    prefix, body = m.group("prefix"), m.group("body")
    if _NOT_VENDOR.match(prefix):
        return m.group(0)  # sha512-<base64> is a checksum (SRI), not a credential
    hexy = len(body) >= 32 and prefix.endswith("_") and re.fullmatch(r"[0-9a-fA-F]+", body)
    if looks_random(body) or (hexy and any(c.isdigit() for c in body)):
        return REDACTED
    return m.group(0)


# PEM private keys (RSA, EC, OPENSSH, PGP, ENCRYPTED, SSH2 ...), whole block.
_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)

# PuTTY .ppk: "Private-Lines: N" and the base64 lines after it.
_PPK = re.compile(
    r"(?im)^(Private-Lines:[ \t]*\d+[ \t]*\r?\n)((?:[ \t]*[A-Za-z0-9+/=]+[ \t]*(?:\r?\n|\Z))+)"
)


def _ppk(m: re.Match[str]) -> str:
    end = "\n" if m.group(2).endswith("\n") else ""
    return m.group(1) + REDACTED + end


# base64("-----BEGIN") is "LS0tLS1CRUdJTi": a PEM block encoded once more.
_PEM_B64 = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/]*={0,2}")


def _pem_b64(m: re.Match[str]) -> str:
    """Redact the blob when its first line decodes to a private-key header."""
    head = m.group(0)[:80]
    try:
        decoded = base64.b64decode(head[: len(head) // 4 * 4]).decode("ascii", "replace")
    except (binascii.Error, ValueError):
        return m.group(0)
    return REDACTED if "PRIVATE KEY" in decoded.split("\n", 1)[0] else m.group(0)


RULES: tuple[RunRule, ...] = (
    (0, (("-----begin ",),), _PEM, whole),
    (14, (("private-lines",),), _PPK, _ppk),
    (14, (("ls0tls1crudjti",),), _PEM_B64, _pem_b64),
    # every token below is 12+ characters with no whitespace (a JWT: 3 + 5 + 1 + 2 + 1)
    *((12, (lits,), re.compile(pat), whole) for lits, pat in _TOKENS),
    (22, (("_", "-", "."),), _PREFIXED, _prefixed),
)
"""memkit's format rules: blocks first, then tokens, then the general prefix rule.
A rule's run lets `memkit.redact` skip it on a text with no such run (prose)."""
