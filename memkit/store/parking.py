"""Parking and the split of a failed batch: the rules, as pure functions.

memkit extension of SPEC §7.8 (docs/behaviour.md "Parking"). A pass *counts* against its
batch when the answer was invalid (a parse or validation code,
`ANSWER_CODES`) or the provider refused the request in a way that repeats
(`bad_request`: a 4xx other than 401/403/404/408/429; `timeout`). A counted
failure of several rollouts splits the batch in halves, retried first; a
failing half is halved again, down to single rollouts; a rollout is parked
only when a counted pass failed on it alone and it has `park_after` counted
failures of the same class. Parking it explains the split, so the other
rollouts still in it go back to the ordinary queue. The store applies a
`Plan` in the failed pass's own transaction (`SQLStore.record_failed_pass`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memkit.errors import ANSWER_CODES, ProposalError, ProviderError, RequestTooLarge
from memkit.params import ConsolidationParams

PROVIDER_CODES: tuple[str, ...] = ("bad_request", "timeout")
"""Provider outcomes that count toward parking: the same request gets the same
refusal again. A 401/403/404 says the key or model is wrong, and a 408, 429,
5xx or connection error that the provider is busy or down: those say nothing
about the evidence (counting them would park a whole queue on a bad key or an
outage), so they never count."""

_NOT_THE_REQUEST = frozenset({401, 403, 404, 408, 429})


def failure_class(code: str) -> str | None:
    """The class a counted code adds up in ("answer", "bad_request", "timeout"),
    or None when `code` never counts (a stale snapshot, a 5xx, ...)."""
    if code in ANSWER_CODES:
        return "answer"
    return code if code in PROVIDER_CODES else None


def counted_code(exc: BaseException) -> str | None:
    """The code a failed pass counts against its batch, or None (it does not count)."""
    if isinstance(exc, ProposalError):
        return exc.code if exc.code in ANSWER_CODES else None
    if isinstance(exc, RequestTooLarge) or not isinstance(exc, ProviderError):
        return None
    if exc.kind in PROVIDER_CODES:
        return exc.kind
    st = exc.status  # an unclassified 4xx (413, 409, ...) refuses the request too
    if exc.kind == "error" and st is not None and 400 <= st < 500 and st not in _NOT_THE_REQUEST:
        return "bad_request"
    return None


@dataclass(frozen=True)
class Plan:
    """What one counted failure does to its batch."""

    park: tuple[str, ...] = ()
    """Parked now, in batch order."""
    split: dict[str, int] = field(default_factory=dict)
    """Rollout id -> the size of the sub-batch it is retried in next."""
    release: bool = False
    """The rest of the scope's split goes back to the ordinary queue (counts kept)."""


def plan(batch: Sequence[tuple[str, int]], params: ConsolidationParams) -> Plan:
    """The consequence of a counted failure of `batch`: (rollout id, its failure
    count including this one) of every rollout still pending, in batch order."""
    if params.park_after <= 0 or not batch:
        return Plan()
    if not params.isolate:  # the whole batch counts and parks together
        return Plan(park=tuple(rid for rid, n in batch if n >= params.park_after))
    if len(batch) == 1:
        ((rid, n),) = batch
        if n >= params.park_after:
            return Plan(park=(rid,), release=True)
        return Plan(split={rid: 1})
    half = (len(batch) + 1) // 2
    first, rest = batch[:half], batch[half:]
    return Plan(
        split={**{rid: len(first) for rid, _ in first}, **{rid: len(rest) for rid, _ in rest}}
    )


def split_bound(batch: int, park_after: int) -> int:
    """The most passes isolating one poison rollout in a failed batch of `batch`
    can take after that first failure (every half tried; the poison alone
    until it has `park_after` failures): 2·ceil(log2(batch)), plus
    park_after - 1 - ceil(log2(batch)) solo retries when that is positive."""
    levels = max(0, (batch - 1).bit_length())
    return 2 * levels + max(0, park_after - 1 - levels)
