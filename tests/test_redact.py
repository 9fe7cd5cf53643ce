"""SPEC §3.1: secrets redacted by default, PII opt-in; a pure function."""

from __future__ import annotations

import importlib
import re
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memkit.params import RedactionParams
from memkit.redact import REDACTED, redact

redact_module = importlib.import_module("memkit.redact")  # the package re-exports the function

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
]


@given(
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=6)), max_size=14),
    st.booleans(),
)
@settings(max_examples=400, deadline=None)
def test_hint_skip_changes_nothing(parts, pii):
    """Skipping the secret patterns when the hint finds nothing is exact: the
    result equals running every pattern unconditionally."""
    text, params = "".join(parts), RedactionParams(pii=pii)
    fast = redact(text, params)
    with mock.patch.object(redact_module, "_SECRET_HINT", re.compile("")):
        assert redact(text, params) == fast
