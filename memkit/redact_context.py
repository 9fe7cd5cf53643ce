"""Secrets known by where they stand: command lines, credential files, sentences.

A password has no format; what gives it away is the place: after `mysql -p`,
`redis-cli -a`, `sshpass -p`, `openssl … pass:`, `sqlplus user/`, in `net use`,
`ConvertTo-SecureString`, `aws configure set … secret`, in a `.pgpass` or
`.netrc` line, after a config directive (`requirepass`), after a
single-dash password flag (`-Password`, `-storepass`), or in a sentence
("the wifi password is …"). Each rule replaces the value only and leaves
placeholders and code alone. Rules are (gate literals, pattern, replacement)
as in `memkit.redact`.
"""

from __future__ import annotations

import re

from memkit.redact_formats import Replace, Rule
from memkit.redact_values import REDACTED, credential_like, in_arn, is_code, is_placeholder

# A value as a shell word: quoted or bare.
_WORD = r"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`|;&<>\\]+)"


def _value(group: str = "value", *, loose: bool = False) -> Replace:
    """Replace group `group` (inside its quotes) unless it is a placeholder or code;
    `loose` values must also look like a credential (a word is not one)."""

    def repl(m: re.Match[str]) -> str:
        raw = m.group(group)
        q = raw[0] if raw[:1] in "\"'" and len(raw) > 1 and raw[-1] == raw[0] else ""
        inner = raw[1:-1] if q else raw
        if not inner or inner == REDACTED or is_placeholder(inner) or (not q and is_code(inner)):
            return m.group(0)
        if loose and not credential_like(inner):
            return m.group(0)
        s, e = m.start(group) - m.start(), m.end(group) - m.start()
        return m.group(0)[:s] + q + REDACTED + q + m.group(0)[e:]

    return repl


_MYSQL_P = re.compile(
    rf"(?i)\b(?:mysql\w*|mariadb\w*|mycli)\b[^\n|;&]*?(?<=\s)-p(?P<value>{_WORD})"
)
# Tools whose documented password flag is a short one, and that flag:
# redis-cli -a, sshpass -p, ldapsearch -w, zip -P, docker login -p, mongo -p.
_TOOL_FLAG = re.compile(
    r"(?i)\b(?:redis-cli\b[^\n|;&]*?(?<=\s)-a|sshpass[ \t]+-p"
    r"|ldap\w+\b[^\n|;&]*?(?<=\s)-w|(?-i:zip\b[^\n|;&]*?(?<=\s)-P)"
    r"|(?:docker|podman|buildah|helm|skopeo|oras|nerdctl)\b[^\n|;&]*?\blogin\b[^\n|;&]*?(?<=\s)-p"
    r"|mongo\w*\b[^\n|;&]*?(?<=\s)-p)"
    rf"[ \t]*(?P<value>{_WORD})"
)
# smbclient -U user%password, xfreerdp /p:password, 7z -pPASSWORD
_PERCENT_USER = re.compile(r"(?<![\w-])(?:-U|--user(?:name)?)[ \t=]+[^\s%]+%(?P<value>\S+)")
_SLASH_P = re.compile(r"(?i)(?<![\w/])/p(?:assword)?:(?P<value>\S+)")
# htpasswd -b [-c …] file user password
_HTPASSWD = re.compile(
    r"\bhtpasswd(?:[ \t]+-\w+)*[ \t]+-\w*b\w*(?:[ \t]+-\w+)*"
    rf"[ \t]+\S+[ \t]+\S+[ \t]+(?P<value>{_WORD})"
)
# echo PASSWORD | sudo -S …, echo PASSWORD | docker login --password-stdin
_ECHO_STDIN = re.compile(
    rf"\becho[ \t]+(?:-n[ \t]+)?(?P<value>{_WORD})[ \t]*\|[ \t]*[^\n|;&]*?"
    r"(?:\bsudo\b[^\n|;&]*?(?<=\s)-\w*S\b|--password-stdin\b)"
)
_OPENSSL_PASS = re.compile(rf"(?<![\w-])pass:(?P<value>{_WORD})")
_SQLPLUS = re.compile(
    r"(?i)\b(?:sqlplus|rman|expdp|impdp|exp|imp)\b(?:[ \t]+-\w+)*[ \t]+(?:userid=)?"
    r"[\w$#]+/(?P<value>[^\s@/]+)(?=@|\s|$)"
)
_NET_USE = re.compile(r"(?i)\bnet[ \t]+use\b(?P<args>[^\n|&]*)")
_SECURE_STRING = re.compile(
    r"(?i)\bConvertTo-SecureString[ \t]+(?:-String[ \t]+)?(?P<value>\"[^\"\n]*\"|'[^'\n]*')"
)
_AWS_SET = re.compile(
    r"(?i)\baws[ \t]+configure[ \t]+set[ \t]+(?:[\w.-]*\.)?"
    rf"(?:aws_secret_access_key|aws_session_token|[\w-]*secret[\w-]*)[ \t]+(?P<value>{_WORD})"
)
# host:port:database:user:password, one per line
_PGPASS = re.compile(
    r"(?<![^\s\"'`])(?:\*|(?=[\w.\[\]-]*[A-Za-z])[A-Za-z0-9._\[\]-]++):(?:\d+|\*):"
    r"[^:\s]+:[^:\s]+:(?P<value>[^\s\"'`\\]+)(?=[\s\"'`\\]|$)"
)
# .netrc: machine host login user password secret (on one line or several)
_NETRC = re.compile(
    r"(?i)\b(?:machine[ \t]+\S+|default)(?:\s+login\s+\S+)?(?:\s+account\s+\S+)?"
    r"\s+password[ \t]+(?P<value>\S+)"
)
# config directives that take a password: redis requirepass / masterauth
_DIRECTIVE = re.compile(rf"(?i)(?<![\w-])(?:requirepass|masterauth)[ \t]+(?P<value>{_WORD})")
# -Password x, -storepass x, -passin x (single-dash flags of PowerShell, keytool, openssl)
_DASH_FLAG = re.compile(
    r"(?i)(?<![\w-])-[a-z]*?(?=[psta])(?:pass(?:word|wd|phrase|in|out)?|pwd|secret|token|apikey)"
    rf"(?![\w-])[ \t]+(?P<value>(?!-){_WORD})"
)
# "the wifi password is X", "my password was 'X'", "api key: X", "passphrase 'X'"
_SENTENCE = re.compile(
    r"(?i)\b(?:password|passphrase|passcode|passwort|pin|api[ _-]key|secret|token)"
    r"(?:[ \t]+(?:is|was)[ \t]+(?:now[ \t]+)?|[ \t]*:[ \t]*|[ \t]+(?=[\"'`]))"
    r"(?P<value>\[REDACTED\]|\"[^\"\n]+\"|'[^'\n]+'|`[^`\n]+`|[^\s,;\"'`)\]}]+?)(?=[.,;:!?)\]}\"']*(?:\s|$))"
)


_SECRET_NAME = (
    r"[\w.:-]*(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|private[_-]?key|credentials?)"
)
# A key and its value as two fields: PHP define('DB_PASSWORD', 'x'), XML
# <add key="ApiSecret" value="x"/>, Kubernetes/ECS `name: DB_PASSWORD` + `value: x`.
_NAME_VALUE = re.compile(
    rf"(?i)(?:\bdefine[ \t]*\([ \t]*(?P<q>[\"']){_SECRET_NAME}(?P=q)[ \t]*,[ \t]*"
    rf"|\b(?:name|key)[\"']?[ \t]*[:=][ \t]*(?P<q2>[\"']?){_SECRET_NAME}(?P=q2)"
    r"[ \t]*,?[ \t]*(?:\r?\n[ \t]*(?:-[ \t]+)?)?[\"']?value[\"']?[ \t]*[:=][ \t]*)"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,;\"'}/>]+)"
)


def _sentence(m: re.Match[str]) -> str:
    raw = m.group("value")
    quoted = raw[0] in "\"'`" and raw[-1] == raw[0]
    inner = raw[1:-1] if quoted else raw
    if inner == REDACTED or is_placeholder(inner) or is_code(inner) or in_arn(m.string, m.start()):
        return m.group(0)
    if not (credential_like(inner) or (quoted and " " not in inner and len(inner) >= 6)):
        return m.group(0)
    q = raw[0] if quoted else ""
    s = m.start("value") - m.start()
    return m.group(0)[:s] + q + REDACTED + q


def _net_use(m: re.Match[str]) -> str:
    """`net use [drive:] \\\\server\\share [password | *] [/user:name] [/options]`:
    the one bare argument that is not a drive, share, `*` or option is the password."""
    args = m.group("args")
    out, done = [], False
    for tok in re.split(r"(\s+)", args):
        plain = tok and not tok.isspace()
        if plain and not done and not re.match(r"(?:\w:|\\\\|/|\*$)", tok):
            done = True  # the first such argument is the password, redacted or not
            tok = tok if is_placeholder(tok) else REDACTED
        out.append(tok)
    return m.group(0)[: m.start("args") - m.start()] + "".join(out)


RULES: tuple[Rule, ...] = (
    ((("mysql", "mariadb", "mycli"), ("-p",)), _MYSQL_P, _value()),
    (
        (("redis-cli", "sshpass", "ldap", "zip", "login", "mongo"), ("-",)),
        _TOOL_FLAG,
        _value(),
    ),
    ((("-u", "--user"), ("%",)), _PERCENT_USER, _value()),
    ((("/p",), (":",)), _SLASH_P, _value()),
    ((("htpasswd",),), _HTPASSWD, _value()),
    ((("echo",), ("|",), ("sudo", "--password-stdin")), _ECHO_STDIN, _value()),
    ((("define", "name", "key"), ("value", ",")), _NAME_VALUE, _value()),
    ((("pass:",),), _OPENSSL_PASS, _value()),
    ((("sqlplus", "rman", "expdp", "impdp", "exp", "imp"), ("/",)), _SQLPLUS, _value()),
    ((("net",), ("use",)), _NET_USE, _net_use),
    ((("convertto-securestring",),), _SECURE_STRING, _value()),
    ((("aws",), ("configure",)), _AWS_SET, _value()),
    (((":",),), _PGPASS, _value(loose=True)),
    ((("machine", "default"), ("password",)), _NETRC, _value()),
    ((("requirepass", "masterauth"),), _DIRECTIVE, _value()),
    ((("-",), ("pass", "pwd", "secret", "token", "apikey")), _DASH_FLAG, _value()),
    (
        (("password", "passphrase", "passcode", "passwort", "pin", "key", "secret", "token"),),
        _SENTENCE,
        _sentence,
    ),
)
