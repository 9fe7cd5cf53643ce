"""A model's request budget: how many bytes a shaped request may have (memkit
extension of SPEC §7.3).

The SPEC shapes every request to 60,000 bytes (`ConsolidationParams.request_bytes`).
A model with a small context (SmolLM2-135M: 8,192 tokens) cannot take that
much, so a model may lower it: by a byte budget given outright
(`max_request_bytes`), or by its context in tokens (`context_tokens`, else
LiteLLM's model map), converted to bytes at BYTES_PER_TOKEN after the answer's
`max_tokens`, the chat template and the system prompt are set aside. Pure;
it never raises the SPEC's limit and never touches ids (shaping does the rest).
"""

from __future__ import annotations

import math

from memkit.errors import RequestTooLarge
from memkit.text import byte_len

BYTES_PER_TOKEN = 1.25
"""Bytes assumed per token when a context is given in tokens: deliberately low.

Measured with SmolLM2's own tokenizer (byte-level BPE read from its GGUF,
digits split one per token) on all 260 requests of the bundled dataset's
heuristic and oracle runs, unshaped and at every excerpt size: 2.3-2.7 bytes
per token in the median, **1.37 at the worst** (hex ids cost one token per
character); the system prompt is 4.0. 1.25 stays under every measured request.
A byte-level BPE token is never shorter than one byte, so `max_request_bytes`
computed at 1.0 is a guarantee for any such tokenizer."""

TEMPLATE_TOKENS = 32
"""Tokens a chat template adds around the two messages and the answer's prefix
(ChatML, as SmolLM2 uses: about 15)."""


def request_budget(
    request_bytes: int,
    *,
    output_tokens: int,
    system_prompt: str,
    max_request_bytes: int | None = None,
    context_tokens: int | None = None,
) -> int:
    """The byte limit for a model's shaped user message: the least of the SPEC's
    `request_bytes`, `max_request_bytes` and what `context_tokens` leaves.

    The context holds the system prompt, the user message, the template and the
    answer (`output_tokens`); both messages are counted at BYTES_PER_TOKEN.
    Raises RequestTooLarge when the context leaves no room at all (before any
    provider call: the pass fails like an oversize request).
    """
    budget = request_bytes
    if max_request_bytes is not None:
        budget = min(budget, max_request_bytes)
    if context_tokens is not None:
        tokens = context_tokens - output_tokens - TEMPLATE_TOKENS
        room = math.floor(tokens * BYTES_PER_TOKEN) - byte_len(system_prompt)
        if room < 1:
            raise RequestTooLarge(
                f"a {context_tokens}-token context leaves no room for a request: "
                f"{output_tokens} answer tokens, {TEMPLATE_TOKENS} template tokens and a "
                f"{byte_len(system_prompt)}-byte system prompt at {BYTES_PER_TOKEN} bytes/token"
            )
        budget = min(budget, room)
    return budget
