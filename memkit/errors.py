"""One error tree for everything memkit raises on purpose.

    MemkitError
    ├── ConfigError            a bad parameter, embedder spec or path
    │   └── EmbedderMismatch   store opened with another embedder/dimension
    ├── NotFound               id missing, foreign or retracted ("not found in scope")
    ├── ToolError              a model-facing tool call was refused (names tool + argument)
    ├── ProposalError          a consolidation proposal failed; `.code` is stable (SPEC §7.6)
    │   ├── StaleSnapshot      code "stale_snapshot"
    │   └── AlreadyConsumed    code "consumed"
    ├── ProviderError          the model call failed (after our bounded retries)
    │   └── RequestTooLarge    shaping could not fit the request; no provider call made
    ├── TranscriptError        a malformed transcript handed to staging
    ├── DatasetError           a bad dataset record; names file, line and field
    ├── SubmitRefused          the consolidation worker was full or closed (evidence stays pending)
    ├── SchemaError            a database written by a newer memkit
    └── LocalServerError       the local model server (`memkit local-server`) failed to start/stop

Messages always name the offending value, so a log line is enough to act on.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest of `choices`, or '': for messages naming a typo."""
    best = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {best[0]}?)" if best else ""


class MemkitError(Exception):
    """Base of every error memkit raises deliberately."""


class ConfigError(MemkitError, ValueError):
    """An invalid parameter, embedder spec or path."""


class EmbedderMismatch(ConfigError):
    """The store was built with another embedder (name, dimension or fingerprint),
    or a `reembed` to another one is unfinished; the message names both."""


class MissingExtra(ConfigError):
    """An optional dependency is not installed; the message names the extra to install."""


class NotFound(MemkitError, KeyError):
    """An id that is missing, belongs to another scope, or is no longer live.

    A foreign id deliberately raises exactly what a missing id raises.
    """

    def __init__(self, memory_id: str, scope_id: str):
        self.memory_id = memory_id
        self.scope_id = scope_id
        super().__init__(f"memory {memory_id!r} not found in scope {scope_id!r}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ToolError(MemkitError, ValueError):
    """A model-facing tool call was refused; the message names tool and argument."""

    def __init__(self, tool: str, argument: str | None, message: str):
        self.tool = tool
        self.argument = argument
        where = f"{tool}.{argument}" if argument else tool
        super().__init__(f"{where}: {message}")


PROPOSAL_CODES: tuple[str, ...] = (
    "parse",
    "bounds",
    "rollout_ids",
    "snapshot_scope",
    "empty_change",
    "unknown_id",
    "scope_widening",
    "invalid_lesson",
    "stale_snapshot",
    "consumed",
)
"""Stable error codes of a rejected proposal (SPEC §7.5-7.7); `parse` covers §7.5."""

ANSWER_CODES: tuple[str, ...] = tuple(
    c for c in PROPOSAL_CODES if c not in ("stale_snapshot", "consumed")
)
"""Codes that judge the answer itself (parse and validation, SPEC §7.5-7.6), not
what changed under the store lock; only these count toward parking a rollout."""


class ProposalError(MemkitError, ValueError):
    """A consolidation proposal was rejected; nothing was mutated."""

    def __init__(self, code: str, message: str):
        if code not in PROPOSAL_CODES:
            raise ConfigError(f"unknown proposal error code {code!r}")
        self.code = code
        super().__init__(f"[{code}] {message}")


class StaleSnapshot(ProposalError):
    def __init__(self, message: str):
        super().__init__("stale_snapshot", message)


class AlreadyConsumed(ProposalError):
    def __init__(self, message: str):
        super().__init__("consumed", message)


class ProviderError(MemkitError, RuntimeError):
    """The consolidator's model call failed (timeouts included)."""

    def __init__(self, message: str, *, kind: str = "error", status: int | None = None):
        self.kind = kind  # "timeout", "rate_limit", "server", "bad_response", "error"
        self.status = status
        super().__init__(message)


class RequestTooLarge(ProviderError):
    """Even the smallest excerpt size leaves the request over the byte limit."""

    def __init__(self, message: str):
        super().__init__(message, kind="request_too_large")


class TranscriptError(MemkitError, ValueError):
    """A transcript handed to staging is malformed."""


class DatasetError(MemkitError, ValueError):
    """A dataset record is invalid; always names file, line and field."""

    def __init__(self, file: str, line: int | None, field: str | None, message: str):
        self.file = file
        self.line = line
        self.field = field
        loc = file if line is None else f"{file}:{line}"
        if field:
            loc = f"{loc}:{field}"
        super().__init__(f"{loc}: {message}")


class SubmitRefused(MemkitError):
    """The worker was full or closed; the scope's evidence stays pending."""

    def __init__(self, scope_id: str, rollout_id: str | None):
        self.scope_id = scope_id
        self.rollout_id = rollout_id
        super().__init__(
            f"consolidation worker refused scope {scope_id!r} (full or closed); "
            f"rollout {rollout_id!r} stays pending"
        )


class SchemaError(MemkitError, RuntimeError):
    """The database's schema is newer than this memkit knows (open it with a newer one)."""


class LocalServerError(MemkitError, RuntimeError):
    """The local model server could not start or stop: the `local` extra is missing,
    the port is taken, or the process died or never answered (the message says which)."""
