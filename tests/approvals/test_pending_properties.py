"""Property: a parked result survives ``to_dict`` -> JSON -> ``from_dict`` unchanged."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import managedloop as ml

text = st.text(max_size=12)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
inputs = st.dictionaries(text, json_value, max_size=3)
tool_uses = st.builds(
    ml.ToolUse, name=st.just("t"), id=text.filter(bool), input=inputs, thread_id=st.none() | text
)
decisions = st.one_of(st.builds(ml.Approve), st.builds(ml.Deny, text))
requests = st.builds(
    ml.ApprovalRequest,
    tool_use=tool_uses,
    source=st.sampled_from(["tool", "host"]),
    reason=st.none() | text,
    verdict=st.none() | st.just("ask"),
    evaluation=st.none() | st.dictionaries(text, json_value, max_size=2),
)
pending = st.builds(
    ml.Pending,
    approvals=st.lists(requests, max_size=3),
    tool_uses=st.lists(tool_uses, max_size=3),
    results=st.lists(
        st.builds(ml.ToolResult, tool_use_id=text, text=text, is_error=st.booleans()), max_size=3
    ),
    decisions=st.dictionaries(text, decisions, max_size=3),
    host_state=st.none() | st.dictionaries(text, json_value, max_size=2),
)


@pytest.mark.fuzz
@given(pending)
def test_a_parked_result_round_trips_through_json(state: ml.Pending) -> None:
    result = ml.SessionResult(
        terminal=ml.Terminal.REQUIRES_ACTION,
        reason="approval_required",
        session_id="s",
        pending=state,
    )
    assert ml.SessionResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
