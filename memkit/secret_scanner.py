"""The maintained secret scanner redaction builds on: Yelp's `detect-secrets`.

`detect-secrets` (Apache-2.0, pinned in pyproject.toml) keeps the token
formats of many vendors and a Shannon-entropy measure; memkit keeps the rules
about context (which key, flag or file line holds a secret). This module is the
one place that imports it, lazily: `import memkit` stays free, and a text is
scanned with the library's own compiled patterns, not copies of them.

Each plugin used here comes with literals every one of its matches contains
(lowercase), so `memkit.redact` can skip it on texts that cannot match; the
pin keeps that true, and `tests/test_redact.py` checks it against running every
pattern. Plugins that are left out: the keyword and high-entropy scanners
(memkit's context rules do that job, with placeholders and code told apart),
basic-auth URLs, npm and private keys (memkit's rules replace the value or the
whole block, not a header line), and the vendor-keyword assignment rules
(IBM, SoftLayer, Cloudant), which memkit's key rules cover.
"""

from __future__ import annotations

import functools
import re
from typing import Any

_PLUGINS: tuple[tuple[str, str, tuple[str, ...], tuple[int, ...] | None, int], ...] = (
    # (module, class, gate literals, which denylist patterns: None = all, and the
    # shortest whitespace-free run any match holds, read off the pinned patterns:
    # memkit skips a plugin on texts with no word that long; 0 for the short
    # Slack and JWT forms). Artifactory's patterns take their delimiters
    # themselves; the rest get bounds. Artifactory's second pattern (AP + 9
    # characters) is left out: it matches upper-case identifiers as well.
    ("aws", "AWSKeyDetector", ("a3t", "abia", "acca", "akia", "asia"), (0,), 20),
    ("azure_storage_key", "AzureStorageKeyDetector", ("accountkey=",), None, 99),
    ("artifactory", "ArtifactoryDetector", ("akc",), (0,), 13),
    ("discord", "DiscordBotTokenDetector", (".",), None, 59),
    ("github_token", "GitHubTokenDetector", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), None, 40),
    ("gitlab_token", "GitLabTokenDetector", ("gl", "gr1348941"), None, 25),
    ("jwt", "JwtTokenDetector", ("eyj",), None, 0),
    ("mailchimp", "MailchimpDetector", ("-us",), None, 36),
    ("openai", "OpenAIDetector", ("t3blbkfj",), None, 51),
    ("pypi_token", "PypiTokenDetector", ("pypi-",), None, 89),
    ("sendgrid", "SendGridDetector", ("sg.",), None, 69),
    ("slack", "SlackDetector", ("xox", "hooks.slack.com"), None, 0),
    ("square_oauth", "SquareOAuthDetector", ("sq0csp-",), None, 50),
    ("stripe", "StripeDetector", ("k_live_",), None, 32),
    ("telegram_token", "TelegramBotTokenDetector", (":",), None, 44),
    ("twilio", "TwilioKeyDetector", ("ac", "sk"), None, 34),
)

# A match must stand alone: a library pattern found inside a longer word
# (a hash, an identifier) is that word's substring, not a token.
_EDGE = "A-Za-z0-9"


@functools.cache
def token_formats() -> tuple[tuple[tuple[str, ...], re.Pattern[str], int], ...]:
    """(gate literals, pattern, shortest whitespace-free run of a match) for every
    vendor token format used from the library.

    Each pattern is the plugin's own, bounded so it cannot start or end inside
    a longer alphanumeric run; a match is the token plus, for plugins whose
    patterns take a delimiter (Artifactory), that delimiter.
    """
    import importlib

    out = []
    for module, cls, gate, which, run in _PLUGINS:
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), cls)()
        patterns = list(plugin.denylist)
        for i, pat in enumerate(patterns):
            if which is not None and i not in which:
                continue
            if module != "artifactory":
                pat = re.compile(rf"(?<![{_EDGE}])(?:{pat.pattern})(?![{_EDGE}])", pat.flags)
            out.append((gate, pat, run))
    return tuple(out)


@functools.cache
def _base64_plugin() -> Any:
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    return Base64HighEntropyString()


def entropy(text: str) -> float:
    """Shannon entropy (bits per character) of `text` over the base64 alphabet,
    as detect-secrets measures it: ~2-3 for words, 4+ for random tokens."""
    return float(_base64_plugin().calculate_shannon_entropy(text)) if text else 0.0
