"""What a value found in a secret's place is: a credential, a placeholder or code.

The rules of `memkit.redact` find where a secret may stand (after a key, a
flag, in a file line); these pure predicates decide whether what stands there
is one. `os.environ["X"]`, `get_token(session)`, `${{ secrets.X }}`, `None`
and `<token>` name a secret without holding it, and redacting them destroys
code an agent needs to read back.
"""

from __future__ import annotations

import itertools
import re

from memkit.secret_scanner import entropy

REDACTED = "[REDACTED]"

_PLACEHOLDER = re.compile(
    r"(?i)(?:none|null|nil|true|false|undefined|~|\*+|x{4,}|\.{3}|…"
    r"|\$\w+|\$\{[^}]*\}|\$\{\{.*|\{\{.*|\$\(.*|<[^>]*>|%\(\w+\)s|%\w+%"
    r"|(?:env|file|fd|stdin):\S*|your[\w.-]*|" + re.escape(REDACTED) + ")"
)

_CALL = re.compile(
    r"(?P<callee>[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)\s*(?P<open>[(\[]).*", re.DOTALL
)
# A call that fetches or makes a secret rather than holding one: a lookup
# (`get_token(…)`, `os.getenv(…)`, `getpass()`), a module that keeps secrets
# (`secrets.token_hex(…)`, `keyring.…`), or a class (`forms.CharField(…)`).
# Other calls stay redacted: the bundled data's `token = sign_session(…)` is
# one, and its recorded replays hash the request that hides it.
_LOOKUP = re.compile(
    r"(?:.*\.)?(?:(?i:get|read|load|fetch|lookup|find|prompt|input|ask|retrieve|resolve"
    r"|decrypt|env)\w*|\w*(?i:getpass|getenv|environ|input)|[A-Z]\w*)"
    r"|(?:os|secrets|getpass|keyring|vault|config|settings|env|process|self|this)\..*"
)
_DOTTED = re.compile(r"[A-Za-z_]+\d{0,2}(?:\.[A-Za-z_]+\d{0,2})+;?")
_CMDLET = re.compile(r"[A-Z][A-Za-z]+-[A-Z][A-Za-z]+")  # PowerShell Verb-Noun


def in_arn(text: str, pos: int) -> bool:
    """`pos` lies inside an ARN (`arn:aws:secretsmanager:…:secret:name`): the
    whitespace- or quote-delimited word around it starts with `arn:`."""
    start = max(text.rfind(c, 0, pos) for c in " \t\n\"'=") + 1
    return text.startswith("arn:", start) and start < pos


def is_placeholder(value: str) -> bool:
    """`None`, `${VAR}`, `${{ secrets.X }}`, `$(cmd)`, `<token>`, `****`, `YOUR_KEY`…"""
    return bool(_PLACEHOLDER.fullmatch(value.strip()))


_KEYWORDS = frozenset(
    "await new yield lambda function async typeof require import this self".split()
)


def is_code(value: str) -> bool:
    """A lookup call, an index or an attribute path: `getpass()`, `os.environ[`,
    `settings.SECRET_KEY`, a PowerShell cmdlet (`ConvertTo-SecureString`), or a
    keyword that starts an expression (`await getToken()`).
    A dotted part needs two letters, so `s.Xy9…` (a Vault token) is no
    attribute path."""
    v = value.strip()
    call = _CALL.fullmatch(v)
    if call and (call.group("open") == "[" or _LOOKUP.fullmatch(call.group("callee"))):
        return True
    if _CMDLET.fullmatch(v) or v in _KEYWORDS:
        return True
    return bool(_DOTTED.fullmatch(v)) and all(len(p) >= 2 for p in v.rstrip(";").split("."))


def _classes(text: str) -> list[int]:
    return [0 if c.islower() else 1 if c.isupper() else 2 for c in text if c.isalnum()]


def looks_random(token: str, min_len: int = 20) -> bool:
    """A machine-made token: long, of mixed character classes (lower, upper,
    digit) that change about as often as chance makes them (a random string
    at ~100% of the rate its class mix predicts, an identifier like
    `HTTPServer2Handler` at ~45%), and of high entropy."""
    cls = _classes(token)
    if len(cls) < min_len or len(set(cls)) < 2:
        return False
    changes = sum(a != b for a, b in itertools.pairwise(cls)) / (len(cls) - 1)
    expected = 1 - sum((cls.count(k) / len(cls)) ** 2 for k in set(cls))
    return changes >= 0.6 * expected and entropy(token) >= 3.0


def credential_like(value: str) -> bool:
    """Could be a password: 6+ characters, not a plain word, not code or a
    placeholder, and with a digit, a symbol or inner capitals."""
    v = value.strip()
    if len(v) < 6 or is_placeholder(v) or is_code(v) or (v.isalpha() and v[1:].islower()):
        return False
    has_digit = any(c.isdigit() for c in v)
    has_symbol = any(not c.isalnum() for c in v)
    inner_caps = any(c.isupper() for c in v[1:]) and any(c.islower() for c in v)
    return (has_digit or has_symbol or inner_caps) and entropy(v) >= 2.0
