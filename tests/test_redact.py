"""SPEC §3.1: secrets redacted by default, PII opt-in; a pure function."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memkit.params import RedactionParams
from memkit.redact import REDACTED, redact, redact_ungated

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----"

SECRETS = [
    ("key:\n" + PEM + "\ndone", "MIIEpAIBAAKCAQEA"),
    ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    ("gh ghp_abcdefghijklmnopqrstuvwxyz0123456789 tok", "ghp_abcdefghij"),
    ("slack xoxb-123456789012-abcdefghijkl", "xoxb-1234"),
    ("openai sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdef"),
    ("anthropic sk-ant-api03-abcdefghijklmnopqrstuv", "sk-ant-api03"),
    ("Authorization: Bearer eyJhbGciOi.JIUzI1NiJ9.x", "eyJhbGciOi"),
    ("password=hunter22 then", "hunter22"),
    ("secret: 's3cr3t value'", "s3cr3t value"),
    ('API_KEY = "abcd1234"', "abcd1234"),
    ("db_password:pa55", "pa55"),
    ("clone https://alice:pa55w0rd@git.example.com/repo.git", "pa55w0rd"),
]


@pytest.mark.parametrize("text, secret", SECRETS)
def test_secrets_redacted(text, secret):
    out = redact(text)
    assert secret not in out and REDACTED in out


def test_assignment_keeps_the_name_and_url_keeps_the_host():
    assert redact("password=hunter22") == "password=[REDACTED]"
    assert redact("https://u:p@host.io/x") == "https://[REDACTED]@host.io/x"


def test_ordinary_text_untouched():
    for text in (
        "The deploy script is ops/deploy.sh",
        "Reset your password via the portal",
        "Visit https://example.com/docs",
        "Call at 10:30, task id 42",
        "alice@example.com wrote 10.0.0.1",
    ):
        assert redact(text) == text


@pytest.mark.parametrize(
    "text, pii",
    [
        ("mail alice.smith@example.co.uk now", "alice.smith@example.co.uk"),
        ("host 192.168.1.20 down", "192.168.1.20"),
        ("call +1 415 555 0100 today", "415 555 0100"),
        ("call (028) 3822-1234", "3822-1234"),
    ],
)
def test_pii_is_opt_in(text, pii):
    assert redact(text) == text
    out = redact(text, RedactionParams(pii=True))
    assert pii not in out and REDACTED in out


def test_secrets_can_be_disabled():
    assert redact("password=x1", RedactionParams(secrets=False)) == "password=x1"


def test_empty():
    assert redact("") == ""


@pytest.mark.parametrize(
    "text, secret",
    [
        ("use bearer abcdefgh12345 for it", "abcdefgh12345"),
        (PEM.replace("RSA ", ""), "MIIEpAIBAAKCAQEA"),
        ("google AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA123"),
        ("pat github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "11ABCDEFG"),
    ],
)
def test_secrets_without_colon_or_equals_still_found(text, secret):
    assert ":" not in text and "=" not in text
    assert secret not in redact(text)


_FRAGMENTS = [
    "AKIA",
    "ASIA",
    "IOSFODNN7EXAMPLE",
    "ghp_",
    "github_pat_",
    "xoxb-",
    "sk-",
    "sk-ant-",
    "AIza",
    "bearer ",
    "Bearer\t",
    "-----BEGIN ",
    "RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "password",
    "api_key",
    "token",
    "=",
    ":",
    "://",
    "@",
    " ",
    "\n",
    "a",
    "Z9",
    "0123456789abcdefghij",
    "é",
    '"',
    "'",
    "eyJ",
    "eyJhbGciOi.",
    "Basic ",
    "YWxpY2U6cHc=",
    "PGPASSWORD",
    "--password ",
    "<password>",
    "</password>",
    "machine h login u password ",
    "-u ",
    "sk_live_",
    "ſ",
    "ı",
    "K",
    "[REDACTED]",
    "ɑuth",
    "Authorization",
    "Token ",
]


@given(
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=6)), max_size=14),
    st.booleans(),
)
@settings(max_examples=400, deadline=None)
def test_hint_skip_changes_nothing(parts, pii):
    """Skipping a rule whose literals are absent is exact: the result equals
    running every rule unconditionally."""
    text, params = "".join(parts), RedactionParams(pii=pii)
    assert redact(text, params) == redact_ungated(text, params)


# --- the corpus (tests/secret_corpus.py) ----------------------------------------

from secret_corpus import LOOKALIKES, SECRETS  # noqa: E402

FALSE_POSITIVE_MAX = 0.02


def test_corpus_size():
    assert len(SECRETS) >= 60 and len(LOOKALIKES) >= 30
    assert len({n for n, _, _ in SECRETS}) == len(SECRETS)
    assert len({n for n, _ in LOOKALIKES}) == len(LOOKALIKES)


@pytest.mark.parametrize("name, text, secret", SECRETS, ids=[s[0] for s in SECRETS])
def test_corpus_secret_redacted(name, text, secret):
    assert secret in text
    out = redact(text)
    assert secret not in out and REDACTED in out
    assert redact(out) == out  # idempotent


def test_corpus_lookalike_false_positive_rate():
    changed = [name for name, text in LOOKALIKES if redact(text) != text]
    rate = len(changed) / len(LOOKALIKES)
    assert rate <= FALSE_POSITIVE_MAX, f"{rate:.1%} of look-alikes redacted: {changed}"


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"password": "x1y2"}', '{"password": "[REDACTED]"}'),
        ("{'api_key': 'k9'}", "{'api_key': '[REDACTED]'}"),
        ("PGPASSWORD=pw1 psql", "PGPASSWORD=[REDACTED] psql"),
        ("Authorization: Basic YWxpY2U6czNjcjN0", "Authorization: Basic [REDACTED]"),
        ("redis://:pw9@cache:6379", "redis://[REDACTED]@cache:6379"),
        ("<password>x1</password>", "<password>[REDACTED]</password>"),
    ],
)
def test_key_kept_value_hidden(text, expected):
    assert redact(text) == expected


@given(
    st.lists(
        st.one_of(
            st.sampled_from([t for _, t, _ in SECRETS] + [t for _, t in LOOKALIKES]),
            st.sampled_from(_FRAGMENTS),
            st.text(max_size=4),
        ),
        max_size=8,
    )
)
@settings(max_examples=300, deadline=None)
def test_redact_is_idempotent(parts):
    """Evidence is redacted at staging and again in the request: the second pass
    must not move a byte (request hashes, cache keys and replays depend on it)."""
    once = redact(" ".join(parts))
    assert redact(once) == once
