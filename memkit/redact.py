"""Write-time redaction (SPEC §3.1): secrets on by default, PII opt-in.

A memory outlives the run that wrote it and is replayed into later prompts,
so a credential that slips into one would leak forever. `redact` is a pure,
idempotent function of (text, params); staging reuses it on evidence and the
request builder on everything it sends.

Three shapes of secret are recognised (README, "Behaviour notes"):
- tokens with a recognisable form, replaced whole: PEM private keys, JWTs,
  cloud and SaaS keys (AWS, GitHub, GitLab, Slack, OpenAI/Anthropic, Stripe,
  Google, npm, PyPI, Hugging Face, SendGrid, age), bearer tokens;
- credentials in context: URL userinfo, HTTP Basic, `curl -u`, `.netrc`;
- a value under a secret-sounding key, keeping the key: `password=`,
  `PGPASSWORD=`, `"api_key": "…"`, `{'token': '…'}`, YAML `secret: …`,
  `--password …`, `<password>…</password>`.

What it leaves alone is as deliberate: hashes, UUIDs, base64 blobs and prose
*about* passwords ("the secret: keep it simple") are not credentials. A bare
random string with no key and no known prefix cannot be told from a hash, so
it is not redacted. `tests/secret_corpus.py` measures both sides.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable

from memkit.params import RedactionParams

REDACTED = "[REDACTED]"

_TOKEN = r"[A-Za-z0-9._~+/=-]"

_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    # PEM private keys (RSA, EC, OPENSSH, PGP, ENCRYPTED ...), whole block.
    re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
        r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        re.DOTALL,
    ),
    # AWS access key ids.
    re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
    # GitHub (classic and fine-grained), GitLab, npm, PyPI, Hugging Face tokens.
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}\b"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"),
    re.compile(r"\bpypi-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    # Slack tokens and incoming-webhook URLs.
    re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}\b"),
    re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
    # Anthropic / OpenAI-style keys (sk-ant-..., sk-proj-..., sk-...).
    re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"),
    # Stripe-style live/test secret and restricted keys, webhook secrets.
    re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}"),
    re.compile(r"\bwhsec_[A-Za-z0-9]{20,}"),
    # Google API keys, OAuth access tokens and client secrets.
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
    re.compile(r"\bya29\.[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bGOCSPX-[A-Za-z0-9_-]{20,}"),
    # SendGrid keys; age secret keys.
    re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bAGE-SECRET-KEY-1[0-9A-Z]{50,}"),
    # JWTs (header.payload.signature; the header is base64url JSON, so "eyJ").
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*"),
    # Bearer credentials: with a digit, or long enough not to be a word.
    re.compile(rf"(?i)\bbearer[ \t]+(?:(?={_TOKEN}*\d){_TOKEN}{{8,}}|{_TOKEN}{{20,}})"),
)

_SECRET_LITERALS: tuple[tuple[str, ...], ...] = (
    ("-----begin ",),
    ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ("github_pat_",),
    ("glpat-",),
    ("npm_",),
    ("pypi-",),
    ("hf_",),
    ("xox",),
    ("hooks.slack.com",),
    ("sk-",),
    ("sk_", "rk_"),
    ("whsec_",),
    ("aiza",),
    ("ya29.",),
    ("gocspx-",),
    ("sg.",),
    ("age-secret-key-1",),
    ("eyj",),
    ("bearer",),
)
"""A lowercase literal each pattern above cannot match without (see `_RULES`)."""

# scheme://user:pass@host -> scheme://[REDACTED]@host (the user may be empty).
_URL_CREDS = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^\s/@:]*:[^\s/]+@", re.IGNORECASE)

# HTTP Basic: the base64 must decode to printable "user:password".
_BASIC = re.compile(r"(?i)(?<![\w-])(basic[ \t]+)([A-Za-z0-9+/]{8,}={0,2})(?![\w+/=])")

# curl -u user:pass, --user user:pass
_USER_FLAG = re.compile(r"(?<![\w-])((?:-u|--user)[ \t]*)([^\s:'\"]+:[^\s'\"]+)")

# .netrc: machine host login user password secret
_NETRC = re.compile(r"(?i)\b(machine[ \t]+\S+[ \t]+(?:login[ \t]+\S+[ \t]+)?password[ \t]+)(\S+)")

# A key whose value is a secret: it ends in one of these words.
_WORDS = (
    r"pass(?:word|wd|phrase)|pwd|secret|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|account[_-]?key|signing[_-]?key|master[_-]?key|encryption[_-]?key|token"
    r"|credentials?|authorization|auth|signature"
)
# Keys that also name a method or a topic: their value must look like a credential.
_AMBIGUOUS = ("auth", "authorization", "credential", "credentials", "signature")
_KEY = rf"(?P<key>[\w.-]*?(?:{_WORDS})(?:[_-]?key)?)(?![\w.-])"
_SCHEME = r"(?:(?:bearer|basic|token|digest|bot|negotiate|apikey|key)[ \t]+)?"
_VALUE = (
    r"(?P<value>"
    r"\\+\"[^\"\n]*?\\+\""  # \"...\" inside encoded JSON (at any depth)
    r"|[bBuUrRfF]{0,2}\"(?:[^\"\\\n]|\\.)*\""  # "..." (JSON, Python, YAML)
    r"|[bBuUrRfF]{0,2}'(?:[^'\\\n]|\\.)*'"  # '...'
    # bare, up to a separator; not a key of its own ("api_key: X-API-Key: ...")
    rf"|{_SCHEME}(?![{{(]|\[(?!REDACTED\]))[^\s,;\"'`]++(?<!:)(?![ \t]*[:=])"
    r")"
)
# password=..., "api_key": "...", {'token': '...'}, secret: ..., $env:API_KEY = "..."
_ASSIGNMENT = re.compile(
    rf"(?i)(?<![\w.-])(?P<q>\\*[\"']?){_KEY}(?P=q)(?P<sep>[ \t]*(?::=|=>|[:=])[ \t]*){_VALUE}"
)
# --password hunter2, --api-key abc (a flag and its separate value)
_FLAG = re.compile(
    rf"(?i)(?<![\w-])(?P<key>--[\w-]*?(?:{_WORDS}))(?![\w-])(?P<sep>[ \t]+)"
    r"(?P<value>(?!-)[^\s\"'`]+)"
)
# <password>...</password>
_XML = re.compile(rf"(?i)<(?P<tag>[\w.-]*?(?:{_WORDS}))>(?P<value>[^<\n]+)</(?P=tag)>")

# A value that names where a secret is, not the secret itself.
_PLACEHOLDER = re.compile(
    r"(?i)(?:none|null|nil|true|false|undefined|\*+|\$\w+|\$\{[^}]*\}|<[^>]*>|%\(\w+\)s"
    r"|\{\{[^}]*\}\}|" + re.escape(REDACTED) + ")"
)

_PII_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
    re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b"),
    # Phone numbers: optional +country, 9-15 digits with common separators.
    re.compile(r"(?<![\w.])\+?\d(?:[\s.-]?\(?\d\)?){8,14}(?![\w.])"),
)


def _unquote(value: str) -> tuple[str, str, str]:
    """(opening, inner, closing) of a value: quotes, escapes and a b/u/r/f prefix apart."""
    m = re.match(r"\\+\"|[bBuUrRfF]{0,2}([\"'])", value)
    if m is None:
        return "", value, ""
    if m.group(1) is None:  # \"...\" at some escaping depth
        close = re.search(r"\\+\"$", value[m.end() :])
        if close:
            return m.group(0), value[m.end() : m.end() + close.start()], close.group(0)
        return "", value, ""
    if len(value) > m.end() and value.endswith(m.group(1)):
        return value[: m.end()], value[m.end() : -1], m.group(1)
    return "", value, ""


def _prose(m: re.Match[str], inner: str) -> bool:
    """`secret: keep it simple` is a sentence, not an assignment: a bare word
    after a colon, followed on its line by more words."""
    if not inner.rstrip(".!?").isalpha():
        return False
    if inner[-1] in ".!?":
        return True
    rest = m.string[m.end() : m.end() + 2]
    return len(rest) == 2 and rest[0] == " " and rest[1].isalpha()


def _more_words(m: re.Match[str]) -> bool:
    """The value's line goes on with more text ("Credentials: 1Password, vault x")."""
    end = m.string.find("\n", m.end(), m.end() + 200)
    rest = m.string[m.end() : m.end() + 200 if end < 0 else end]
    return any(c.isalpha() for c in rest)


def _hide(m: re.Match[str], bare_colon_is_prose: bool) -> str:
    """The match with its value replaced, unless the value is no credential."""
    opening, inner, closing = _unquote(m.group("value"))
    if not inner.strip() or _PLACEHOLDER.fullmatch(inner.strip()):
        return m.group(0)
    key = m.group("key").lower()
    bare = not opening
    if bare:
        scheme = re.match(_SCHEME, inner, re.IGNORECASE)
        if scheme and scheme.end() < len(inner):
            opening, inner = scheme.group(0), inner[scheme.end() :]
        if inner == REDACTED or (bare_colon_is_prose and _prose(m, inner)):
            return m.group(0)
        if key.endswith("pwd") and inner[:1] in "/~.":
            return m.group(0)  # PWD=/home/alice is a working directory
    if key.endswith(_AMBIGUOUS) and (inner.isalpha() or (bare and not opening and _more_words(m))):
        return m.group(0)  # {"auth": "interactive"} names a method, not a credential
    start = m.start("value") - m.start()
    return m.group(0)[:start] + opening + REDACTED + closing


def _assignment(m: re.Match[str]) -> str:
    return _hide(m, bare_colon_is_prose=":" in m.group("sep") and "=" not in m.group("sep"))


def _flag(m: re.Match[str]) -> str:
    return _hide(m, bare_colon_is_prose=True)


def _xml(m: re.Match[str]) -> str:
    if _PLACEHOLDER.fullmatch(m.group("value").strip()):
        return m.group(0)
    tag = m.group("tag")
    return f"<{tag}>{REDACTED}</{tag}>"


def _basic(m: re.Match[str]) -> str:
    blob = m.group(2)
    try:
        decoded = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return m.group(0)
    if ":" in decoded and decoded.isprintable():
        return m.group(1) + REDACTED
    return m.group(0)


_Replace = Callable[[re.Match[str]], str]
_Rule = tuple[tuple[tuple[str, ...], ...], re.Pattern[str], _Replace]


def _whole(m: re.Match[str]) -> str:
    return REDACTED


def _after_prefix(m: re.Match[str]) -> str:
    return m.group(1) + REDACTED


_WORD_GATE = ("pass", "pwd", "secret", "key", "token", "credential", "auth", "signature")
_RULES: tuple[_Rule, ...] = (
    ((("://",), ("@",)), _URL_CREDS, lambda m: m.group(1) + REDACTED + "@"),
    *(
        ((tuple(lit),), pat, _whole)
        for lit, pat in zip(_SECRET_LITERALS, _SECRET_PATTERNS, strict=True)
    ),
    ((("basic",),), _BASIC, _basic),
    ((("-u",), (":",)), _USER_FLAG, _after_prefix),
    ((("machine",), ("password",)), _NETRC, _after_prefix),
    (((":", "="), _WORD_GATE), _ASSIGNMENT, _assignment),
    ((("--",), _WORD_GATE), _FLAG, _flag),
    ((("</",), _WORD_GATE), _XML, _xml),
)
"""(gate, pattern, replacement): a rule runs only when, for every group of its
gate, one of the group's literals is in the lowercased text. A match needs
those literals and "[REDACTED]" cannot complete one, so gating on the
original text skips only rules that could not have matched; a plain
sentence pays one `str.casefold` and one substring test per literal instead of ~30 scans."""


_LITERALS: tuple[str, ...] = tuple(
    sorted({lit for gate, _, _ in _RULES for group in gate for lit in group})
)
"""Every gate literal: a text is searched for each once, not once per rule."""

_GATED: tuple[tuple[tuple[frozenset[str], ...], re.Pattern[str], _Replace], ...] = tuple(
    (tuple(map(frozenset, gate)), pat, repl) for gate, pat, repl in _RULES
)


def _rules_for(lower: str) -> list[tuple[re.Pattern[str], _Replace]]:
    """The rules whose every gate group has a literal in `lower`, in order."""
    present = {lit for lit in _LITERALS if lit in lower}
    if not present:
        return []
    return [
        (pat, repl)
        for gate, pat, repl in _GATED
        if all(not present.isdisjoint(group) for group in gate)
    ]


def redact(text: str, params: RedactionParams = RedactionParams()) -> str:
    """Replace secrets (and, in PII mode, emails/IPv4/phones) with `[REDACTED]`.

    Idempotent: redacting a redacted text changes nothing, so evidence can be
    redacted again on its way to a provider without moving request hashes.
    """
    if not text:
        return text
    out = text
    if params.secrets:
        # casefold, and dotless i, match what the (?i) patterns match
        lower = text.casefold().replace("\u0131", "i")
        for pat, repl in _rules_for(lower):
            out = pat.sub(repl, out)
    if params.pii:
        for pat in _PII_PATTERNS:
            out = pat.sub(REDACTED, out)
    return out


def redact_ungated(text: str, params: RedactionParams = RedactionParams()) -> str:
    """`redact` without its literal pre-check: every rule scans every text.

    Slower, and the same answer by construction of the rules' gates (a rule is
    skipped only when the text lacks a literal every match needs): the
    reference to check that claim against, e.g. after adding or changing a rule.
    """
    if not text:
        return text
    out = text
    if params.secrets:
        for _, pat, repl in _RULES:
            out = pat.sub(repl, out)
    if params.pii:
        for pat in _PII_PATTERNS:
            out = pat.sub(REDACTED, out)
    return out
