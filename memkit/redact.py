"""Write-time redaction (SPEC §3.1): secrets on by default, PII opt-in.

A memory outlives the run that wrote it and is replayed into later prompts,
so a credential that slips into one would leak forever. `redact` is a pure,
idempotent function of (text, params); staging reuses it on evidence and the
request builder on everything it sends.

Three shapes of secret are recognised (docs/behaviour.md):
- tokens with a recognisable form, replaced whole: the vendor formats of
  detect-secrets (`memkit.secret_scanner`) and memkit's own
  (`memkit.redact_formats`: more vendors, `prefix_<random body>`, PEM and
  PuTTY key blocks, base64-encoded PEM keys), JWTs, bearer tokens;
- credentials in context: URL userinfo, HTTP Basic, `curl -u`, and the
  command lines, credential files and sentences of `memkit.redact_context`;
- a value under a secret-sounding key, keeping the key: `password=`,
  `PGPASSWORD=`, `"api_key": "…"`, `{'token': '…'}`, YAML `secret: …`,
  `--password …`, `<password>…</password>`; under a looser key (`DB_PASS`,
  `psk`, `sig`, `sessionid`) only a value that looks like a credential.

What it leaves alone is as deliberate: hashes, UUIDs, ARNs, base64 blobs,
placeholders (`${{ secrets.X }}`, `<token>`, `None`), code that names a secret
(`os.environ[...]`, `getpass()`) and prose *about* passwords ("the secret:
keep it simple") are not credentials (`memkit.redact_values`). A bare random
string with no key and no known prefix cannot be told from a hash, so it is
not redacted. `tests/secret_corpus.py` and `tests/secret_corpus_heldout.py`
measure both sides.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import json
import re

from memkit import redact_context, redact_formats, secret_scanner
from memkit.params import RedactionParams
from memkit.redact_formats import Replace, Rule, RunRule, whole
from memkit.redact_values import REDACTED, credential_like, in_arn, is_code, is_placeholder

__all__ = ["REDACTED", "redact", "redact_ungated"]

_TOKEN = r"[A-Za-z0-9._~+/=-]"

# Bearer credentials: with a digit, or long enough not to be a word.
_BEARER = re.compile(rf"(?i)\bbearer[ \t]+(?:(?={_TOKEN}*\d){_TOKEN}{{8,}}|{_TOKEN}{{20,}})")

# scheme://user:pass@host -> scheme://[REDACTED]@host (the user may be empty).
_URL_CREDS = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^\s/@:]*:[^\s/]+@", re.IGNORECASE)

# HTTP Basic: the base64 must decode to printable "user:password".
_BASIC = re.compile(r"(?i)(?<![\w-])(basic[ \t]+)([A-Za-z0-9+/]{8,}={0,2})(?![\w+/=])")

# curl -u user:pass, --user user:pass
_USER_FLAG = re.compile(r"(?<![\w-])((?:-u|--user)[ \t]*)([^\s:'\"]+:[^\s'\"]+)")

# A key whose value is a secret: it ends in one of these words.
_STRICT = (
    r"pass(?:word|wd|phrase)|pwd|secret|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|account[_-]?key|signing[_-]?key|master[_-]?key|encryption[_-]?key|key[_-]?data|token"
    r"|credentials?|authorization|auth|signature"
)
# Looser words (`DB_PASS`, `MAIL_PW`, Wi-Fi `psk`, a SAS `sig`, session cookies):
# also the names of other things, so their value must look like a credential.
_LOOSE = r"pass|pw|psk|sig|sessid|session(?:[_-]?id)?|sid"
_WORDS = rf"{_STRICT}|{_LOOSE}"
_LOOSE_KEY = re.compile(rf"(?i)(?<![a-z])(?:{_LOOSE})(?:[_-]?key)?$")
_STRICT_KEY = re.compile(rf"(?i)(?:{_STRICT})(?:[_-]?key)?$")
# Keys that also name a method or a topic: their value must look like a credential.
_AMBIGUOUS = ("auth", "authorization", "credential", "credentials", "signature")

# (the look-ahead for a word's first letter lets the lazy run skip most offsets fast)
_KEY = rf"(?P<key>[\w.-]*?(?=[pPsSaAkKtTcCmMeE])(?:{_WORDS})(?:[_-]?key)?)(?![\w.-])"
_SCHEME = r"(?:(?:bearer|basic|token|digest|bot|negotiate|apikey|key)[ \t]+)?"
_VALUE = (
    r"(?P<value>"
    r"\\+\"[^\"\n]*?\\+\""  # \"...\" inside encoded JSON (at any depth)
    r"|[bBuUrRfF]{0,2}\"(?:[^\"\\\n]|\\.)*\""  # "..." (JSON, Python, YAML)
    r"|[bBuUrRfF]{0,2}'(?:[^'\\\n]|\\.)*'"  # '...'
    # bare, up to a separator; not a key of its own ("api_key: X-API-Key: ...")
    # (nor `NAME=` before a quote: that is the key of the next assignment)
    rf"|{_SCHEME}(?![{{(]|\[(?!REDACTED\])|[A-Za-z_][\w.-]*=[\"'])"
    r"[^\s,;\"'`]++(?<!:)(?![ \t]*[:=])"
    r")"
)
# password=..., "api_key": "...", {'token': '...'}, secret: ..., $env:API_KEY = "..."
# Any key and its value; `_assignment` keeps those whose key ends in a secret
# word (one check of the whole key, not a try of every word at every offset).
_ASSIGNMENT = re.compile(
    r"(?i)(?<![\w.-])(?P<q>\\*[\"']?)(?P<key>[\w.-]++)(?P=q)"
    rf"(?P<sep>[ \t]*(?::=|=>|[:=])[ \t]*){_VALUE}"
)
_SECRET_KEY = re.compile(rf"(?i)(?:{_WORDS})(?:[_-]?key)?\Z")
# --password hunter2, --api-key abc (a flag and its separate value)
_FLAG = re.compile(
    rf"(?i)(?<![\w-])(?P<key>--[\w-]*?(?:{_WORDS}))(?![\w-])(?P<sep>[ \t]+)"
    r"(?P<value>(?!-)[^\s\"'`]+)"
)
# <password>...</password>
_XML = re.compile(rf"(?i)<(?P<tag>[\w.-]*?(?:{_WORDS}))>(?P<value>[^<\n]+)</(?P=tag)>")

_PII_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
    re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b"),
    # Phone numbers: optional +country, 9-15 digits with common separators.
    re.compile(r"(?<![\w.])\+?\d(?:[\s.-]?\(?\d\)?){8,14}(?![\w.])"),
)


_OPEN_QUOTE = re.compile(r"\\+\"|[bBuUrRfF]{0,2}([\"'])")
_CLOSE_ESCAPED = re.compile(r"\\+\"$")
_SCHEME_RE = re.compile(_SCHEME, re.IGNORECASE)


def _unquote(value: str) -> tuple[str, str, str]:
    """(opening, inner, closing) of a value: quotes, escapes and a b/u/r/f prefix apart."""
    m = _OPEN_QUOTE.match(value)
    if m is None:
        return "", value, ""
    if m.group(1) is None:  # \"...\" at some escaping depth
        close = _CLOSE_ESCAPED.search(value, m.end())
        if close:
            return m.group(0), value[m.end() : close.start()], close.group(0)
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


def _closers(value: str) -> str:
    """The unbalanced `)]}` a bare value ends with: `null}` in `{"password": null}`."""
    n = 0
    for c in reversed(value):
        if c not in ")]}" or value.count(c) <= value.count({")": "(", "]": "[", "}": "{"}[c]):
            break
        n += 1
    return value[len(value) - n :]


def _hide(m: re.Match[str], bare_colon_is_prose: bool) -> str:
    """The match with its value replaced, unless the value is no credential."""
    opening, inner, closing = _unquote(m.group("value"))
    key = m.group("key").lower()
    bare = not opening
    if bare:
        tail = _closers(inner)
        inner, closing = inner[: len(inner) - len(tail)], tail
        scheme = _SCHEME_RE.match(inner)
        if scheme and scheme.end() < len(inner):
            opening, inner = scheme.group(0), inner[scheme.end() :]
        if inner == REDACTED or (bare_colon_is_prose and _prose(m, inner)) or is_code(inner):
            return m.group(0)
        if key.endswith("pwd") and inner[:1] in "/~.":
            return m.group(0)  # PWD=/home/alice is a working directory
    if not inner.strip() or is_placeholder(inner) or in_arn(m.string, m.start()):
        return m.group(0)
    if key.endswith(_AMBIGUOUS) and (
        inner.isalpha()
        or (bare and not opening and ":" in m.group("sep") and _more_words(m))
        or len(inner) < 8
        or not any(c.isdigit() or c in "=+/" for c in inner)
    ):
        return m.group(0)  # {"auth": "interactive"}, `auth: oauth2` name a method
    if _LOOSE_KEY.search(key) and not _STRICT_KEY.search(key) and not credential_like(inner):
        return m.group(0)  # `bypass: true`, `session: 3`, `sig=fig`
    start = m.start("value") - m.start()
    end = m.end("value") - m.start()
    return m.group(0)[:start] + opening + REDACTED + closing + m.group(0)[end:]


def _assignment(m: re.Match[str]) -> str:
    """Hide the value of a secret key; under any other key, look inside the value
    (`url: password=x` holds an assignment of its own), unless it is an ARN's."""
    if not _SECRET_KEY.search(m.group("key")):
        if m.group("key").lower() == "arn":
            return m.group(0)
        value = m.group("value")
        if ":" not in value and "=" not in value:
            return m.group(0)  # no assignment can be inside
        start = m.start("value") - m.start()
        return m.group(0)[:start] + _ASSIGNMENT.sub(_assignment, value)
    return _hide(m, bare_colon_is_prose=":" in m.group("sep") and "=" not in m.group("sep"))


def _flag(m: re.Match[str]) -> str:
    return _hide(m, bare_colon_is_prose=True)


def _xml(m: re.Match[str]) -> str:
    if is_placeholder(m.group("value")):
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


def _after_prefix(m: re.Match[str]) -> str:
    return m.group(1) + REDACTED


def _edges(m: re.Match[str]) -> str:
    """A library match, keeping the delimiter a pattern takes at either end."""
    text = m.group(0)
    core = text.strip(' \t\r\n=:"')
    if not core:
        return text
    i = text.index(core)
    return text[:i] + REDACTED + text[i + len(core) :]


_WORD_GATE: tuple[str, ...] = ("pass", "pwd", "pw", "psk", "sig", "sess", "sid", "secret", "key")
_WORD_GATE += ("token", "credential", "auth", "signature")
_KEY_RULES: tuple[Rule, ...] = (
    ((("basic",),), _BASIC, _basic),
    ((("-u",), (":",)), _USER_FLAG, _after_prefix),
    (((":", "="), _WORD_GATE), _ASSIGNMENT, _assignment),
    ((("--",), _WORD_GATE), _FLAG, _flag),
    ((("</",), _WORD_GATE), _XML, _xml),
)


@functools.cache
def _rules() -> tuple[RunRule, ...]:
    """Every rule in order: URL credentials, token formats (detect-secrets', then
    memkit's blocks and tokens), bearer, context, then keys.

    (run, gate, pattern, replacement): a rule runs only when the text has a
    whitespace-free run of `run` characters (its every match holds one) and,
    for every group of its gate, one of the group's literals is in the
    lowercased text. A match needs those literals and "[REDACTED]" cannot
    complete one, so gating on the original text skips only rules that could
    not have matched; a sentence pays one `str.split`, one `str.casefold` and a
    substring test per literal of the rules its longest word allows, instead of
    a scan per rule. Built on first use: the library loads then.
    """
    library = tuple(
        (run, (gate,), pat, _edges) for gate, pat, run in secret_scanner.token_formats()
    )
    return (
        (0, (("://",), ("@",)), _URL_CREDS, lambda m: m.group(1) + REDACTED + "@"),
        *library,
        *redact_formats.RULES,
        (0, (("bearer",),), _BEARER, whole),
        *((0, *rule) for rule in redact_context.RULES),
        *((0, *rule) for rule in _KEY_RULES),
    )


_Tier = tuple[tuple[str, ...], tuple[str, ...], dict[str, tuple[int, ...]]]


@functools.cache
def _gated() -> tuple[
    tuple[int, ...],
    tuple[_Tier, ...],
    tuple[tuple[tuple[frozenset[str], ...], re.Pattern[str], Replace], ...],
]:
    """The distinct runs of the rules, and for each, the tier of rules a text
    whose longest word is at least that long may match: the gate literals of
    its rules without a run (searched in the whole text) and of its token
    rules (searched only in the text's long words, where their matches lie),
    and the rules whose first gate group holds each literal; then every
    rule's further gate groups as sets."""
    rules = _rules()
    runs = tuple(sorted({run for run, _, _, _ in rules}))
    anywhere = {lit for run, gate, _, _ in rules if run == 0 for group in gate for lit in group}
    tiers = []
    for limit in runs:
        live = [i for i, (run, _, _, _) in enumerate(rules) if run <= limit]
        literals = {lit for i in live for group in rules[i][1] for lit in group}
        index = {lit: tuple(i for i in live if lit in rules[i][1][0]) for lit in literals}
        index = {lit: rs for lit, rs in index.items() if rs}
        tiers.append(
            (tuple(sorted(literals & anywhere)), tuple(sorted(literals - anywhere)), index)
        )
    gated = tuple((tuple(map(frozenset, g[1:])), pat, repl) for _, g, pat, repl in rules)
    return runs, tuple(tiers), gated


def _rules_for(text: str) -> list[tuple[re.Pattern[str], Replace]]:
    """The rules `text` may match, in order: those its longest whitespace-free
    run allows, whose every gate group has a literal in the lowercased text
    (a token rule's literal in the text's words of 12+ characters)."""
    runs, tiers, gated = _gated()
    words = text.split()
    longest = max(map(len, words), default=0)
    anywhere, in_long, index = tiers[bisect.bisect_right(runs, longest) - 1]
    shortest = runs[1] if len(runs) > 1 else 0  # the shortest run of a token rule
    # casefold, and dotless i, match what the (?i) patterns match
    lower = text.casefold().replace("\u0131", "i")
    present = {lit for lit in anywhere if lit in lower}
    if in_long:
        long = " ".join(w for w in words if len(w) >= shortest)
        long = long.casefold().replace("\u0131", "i")
        present.update(lit for lit in in_long if lit in long)
    if not present:
        return []
    first = sorted({i for lit in present for i in index.get(lit, ())})
    return [
        (gated[i][1], gated[i][2])
        for i in first
        if all(not present.isdisjoint(g) for g in gated[i][0])
    ]


_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def _escaped_strings(text: str, params: RedactionParams) -> str:
    """JSON string literals with escapes inside (`\\n`, `\\"`), redacted as what they
    decode to: a tool call's arguments hold a `.pgpass` line or a PuTTY block as
    one escaped string, where line and quote rules cannot see them. A literal
    is re-encoded only when its decoded text had a secret."""

    def repl(m: re.Match[str]) -> str:
        if "\\" not in m.group(0):
            return m.group(0)
        try:
            decoded = json.loads(m.group(0))
        except ValueError:
            return m.group(0)
        red = redact(decoded, params)
        return m.group(0) if red == decoded else json.dumps(red, ensure_ascii=False)

    return _JSON_STRING.sub(repl, text)


def _secrets(
    text: str, rules: list[tuple[re.Pattern[str], Replace]], params: RedactionParams
) -> str:
    for pat, repl in rules:
        text = pat.sub(repl, text)
    return _escaped_strings(text, params) if "\\" in text else text


def redact(text: str, params: RedactionParams = RedactionParams()) -> str:
    """Replace secrets (and, in PII mode, emails/IPv4/phones) with `[REDACTED]`.

    Idempotent: redacting a redacted text changes nothing, so evidence can be
    redacted again on its way to a provider without moving request hashes.
    """
    if not text:
        return text
    out = text
    if params.secrets:
        out = _secrets(out, _rules_for(text), params)
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
        out = _secrets(out, [(pat, repl) for _, _, pat, repl in _rules()], params)
    if params.pii:
        for pat in _PII_PATTERNS:
            out = pat.sub(REDACTED, out)
    return out
