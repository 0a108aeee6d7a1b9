"""The Bedrock model ids the emulator knows, and the ones Bedrock has retired.

Bedrock answers a retired or unknown model id with ``400 ValidationException`` "The
provided model identifier is invalid." (the same text for both). The emulator does too, for
``bedrockModelConfig.modelId`` on CreateHarness, UpdateHarness and InvokeHarness:

* a bare Claude API id (``claude-sonnet-5-5``, ``claude-haiku-4-5@20251001``) is refused:
  Bedrock names Anthropic models ``[<geo>.]anthropic.claude-…``, never the API's ids;
* an id of a provider the tables below cover (``[<geo>.]<provider>.<model>``, provider
  ``anthropic``, ``amazon``, ``meta`` or ``ai21``) must be in them (a geo prefix such as
  ``us.``, ``eu.``, ``apac.``, ``global.`` names a cross-region inference profile of the same
  model);
* any other id passes: other providers' ids and the emulator's own test ids (``us.x``)
  are not its to judge.

The tables are small, kept by hand, each entry with its source, as of 2026-12-03. An id
Bedrock added after that is refused here until it is added (say so in an issue). Dates are
Bedrock's own (they differ from Anthropic's; see
https://docs.aws.amazon.com/bedrock/latest/userguide/model-lifecycle.html).
"""

from __future__ import annotations

import re

__all__ = ["ACTIVE", "INVALID_MODEL", "JUDGED_PROVIDERS", "OTHER", "RETIRED", "model_problem"]

INVALID_MODEL = "The provided model identifier is invalid."

_CLAUDE_ON_BEDROCK = (
    "platform.claude.com/docs/en/build-with-claude/claude-on-amazon-bedrock-legacy, "
    "model table 'Base Bedrock model ID'"
)
_ID_FORMAT = (
    "platform.claude.com/docs/en/about-claude/models/model-ids-and-versions (Bedrock: "
    "anthropic.claude-{name}-{major}-{minor} from 4.6 on; before it "
    "anthropic.claude-{name}-{major}-{minor}-{YYYYMMDD}-v1:0)"
)
_BEDROCK_MODELS = "docs.aws.amazon.com/bedrock/latest/userguide/models-supported.html"
_FINE_TUNING = (
    "docs.aws.amazon.com/bedrock/latest/userguide/custom-model-fine-tuning.html (the base "
    "id before the ':<context>' suffix)"
)

ACTIVE: dict[str, str] = {
    # Anthropic on Bedrock: id -> source
    "anthropic.claude-opus-4-7": _ID_FORMAT + " (its own example)",
    "anthropic.claude-opus-4-6-v1": _CLAUDE_ON_BEDROCK,
    "anthropic.claude-sonnet-4-6": _CLAUDE_ON_BEDROCK + " (the emulator's default model)",
    "anthropic.claude-sonnet-4-5-20250929-v1:0": _CLAUDE_ON_BEDROCK
    + " (examples/agentcore_lifecycle.py uses it)",
    "anthropic.claude-opus-4-5-20251101-v1:0": _CLAUDE_ON_BEDROCK,
    "anthropic.claude-haiku-4-5-20251001-v1:0": _ID_FORMAT
    + " applied to claude-haiku-4-5-20251001; Bedrock's Haiku 4.5 card: active, EOL no "
    "sooner than 2026-10-01",
    "anthropic.claude-sonnet-4-20250514-v1:0": _CLAUDE_ON_BEDROCK
    + " (marked with a warning there: nearing its end of life)",
}
"""Anthropic ids Bedrock serves. Not listed for want of a source giving their Bedrock id:
the 5.x generation (``claude-sonnet-5-5`` ... on the Claude API) and Opus 4.8."""

OTHER: dict[str, str] = {
    # Other providers' models a harness may name: id -> source
    "amazon.nova-micro-v1:0": _BEDROCK_MODELS,
    "amazon.nova-lite-v1:0": _BEDROCK_MODELS,
    "amazon.nova-pro-v1:0": _FINE_TUNING,
    "amazon.nova-2-lite-v1:0": _FINE_TUNING,
    "ai21.jamba-1-5-large-v1:0": _BEDROCK_MODELS,
    "ai21.jamba-1-5-mini-v1:0": _BEDROCK_MODELS,
    "meta.llama3-1-8b-instruct-v1:0": _FINE_TUNING,
    "meta.llama3-1-70b-instruct-v1:0": _FINE_TUNING,
    "meta.llama3-2-1b-instruct-v1:0": _FINE_TUNING,
    "meta.llama3-2-3b-instruct-v1:0": _FINE_TUNING,
    "meta.llama3-2-11b-instruct-v1:0": _FINE_TUNING,
}

RETIRED: dict[str, str] = {
    # id -> Bedrock EOL date. Source: a third-party account of the EOL (bitslovers.com,
    # "Amazon Bedrock Model Lifecycle"), which quotes Bedrock's ValidationException text;
    # not yet checked against the Bedrock lifecycle table itself.
    "anthropic.claude-3-7-sonnet-20250219-v1:0": "2026-04-28",
}

JUDGED_PROVIDERS = frozenset(i.split(".", 1)[0] for i in (*ACTIVE, *OTHER))

_BARE_CLAUDE = re.compile(r"claude-[A-Za-z0-9.:@_-]+")  # fullmatch: a Claude API id
_GEO = re.compile(r"(?:[a-z]{2,6}\.)?(([a-z0-9]+)\.[A-Za-z0-9.:_-]+)")  # fullmatch


def model_problem(model_id: object) -> str | None:
    """Bedrock's refusal text for ``model_id``, or ``None`` when the emulator accepts it."""
    if not isinstance(model_id, str):
        return None  # botocore's own validation owns types
    if _BARE_CLAUDE.fullmatch(model_id):
        return INVALID_MODEL
    match = _GEO.fullmatch(model_id)
    if match is None:
        return None
    base, provider = match.group(1), match.group(2)
    if provider not in JUDGED_PROVIDERS:
        return None
    if base in RETIRED or (base not in ACTIVE and base not in OTHER):
        return INVALID_MODEL
    return None
