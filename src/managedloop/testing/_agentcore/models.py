"""The Bedrock model ids the emulator knows, and the ones Bedrock has retired.

Bedrock answers a retired or unknown model id with ``400 ValidationException`` "The
provided model identifier is invalid." (the same text for both). The emulator does too, for
``bedrockModelConfig.modelId`` on CreateHarness, UpdateHarness and InvokeHarness, with two
deliberate limits: it judges only ids shaped like Anthropic-on-Bedrock ids
(``[<geo>.]anthropic.<model>``), since other providers' ids and the emulator's own test
ids (``us.x``) are not its to judge — a bare Claude API id (``claude-sonnet-5-5``), which
Bedrock refuses, still passes here (the suite's shared specs name one for every host);
and the tables are small, kept by hand, each entry with its source. Dates are Bedrock's
own (they differ from Anthropic's; see https://docs.aws.amazon.com/bedrock/latest/userguide/model-lifecycle.html).
"""

from __future__ import annotations

import re

__all__ = ["ACTIVE", "INVALID_MODEL", "RETIRED", "model_problem"]

INVALID_MODEL = "The provided model identifier is invalid."

ACTIVE: frozenset[str] = frozenset(
    {
        # Claude Sonnet 4.5 (the id examples/agentcore_lifecycle.py uses): active, no EOL
        # date published (reference/host-surface-2026-12.md §4)
        "anthropic.claude-sonnet-4-5-20250929-v1:0",
        # Claude Sonnet 4.6: active (the emulator's own default model)
        "anthropic.claude-sonnet-4-6",
        # Claude Sonnet 4: the migration target named when 3.7 Sonnet reached EOL
        "anthropic.claude-sonnet-4-20250514-v1:0",
    }
)

RETIRED: dict[str, str] = {
    # id -> Bedrock EOL date. Source: a third-party account of the EOL (bitslovers.com,
    # "Amazon Bedrock Model Lifecycle"), which quotes Bedrock's ValidationException text;
    # not yet checked against the Bedrock lifecycle table itself.
    "anthropic.claude-3-7-sonnet-20250219-v1:0": "2026-04-28",
}

_GEO = re.compile(r"(?:[a-z]{2,6}\.)?(anthropic\.[A-Za-z0-9.:_-]+)")  # fullmatch


def model_problem(model_id: object) -> str | None:
    """Bedrock's refusal text for ``model_id``, or ``None`` when the emulator accepts it."""
    if not isinstance(model_id, str):
        return None  # botocore's own validation owns types
    match = _GEO.fullmatch(model_id)
    if match is None:
        return None
    base = match.group(1)
    if base in RETIRED or base not in ACTIVE:
        return INVALID_MODEL
    return None
