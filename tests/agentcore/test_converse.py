"""Converse decoding, normalize and request building (pure, no server).

§9 lines covered: conformance/agentcore_inbound (all three goldens); agent_core/converse_test
(inline_function shape, accumulation across deltas, text, resume pair + error status, cases
A/B/C, no bleed on a reused index, metadata usage); providers/bedrock_agent_core_test
"normalize / invocation" (usage, tool_use -> requires_action, text after messageStop,
terminal mapping, reused index, unknown blocks, text_delta, kickoff/user input, strict
resume pair). Changed on purpose: ``kickoff_input``'s "Begin." default lives in the core
session loop, not here; ``server_tool_uses`` is always empty by design (§3.5).
"""

from __future__ import annotations

from typing import Any

import pytest

from managedloop import Terminal, ToolResult, ToolUse, Usage
from managedloop.providers.agentcore import _converse as cv
from managedloop.tools import ToolDefinition


def start(i: int, uid: str, name: str, kind: str | None = "tool_use") -> dict[str, Any]:
    tu: dict[str, Any] = {"toolUseId": uid, "name": name}
    if kind is not None:
        tu["type"] = kind
    return {"contentBlockStart": {"contentBlockIndex": i, "start": {"toolUse": tu}}}


def frag(i: int, text: str) -> dict[str, Any]:
    return {"contentBlockDelta": {"contentBlockIndex": i, "delta": {"toolUse": {"input": text}}}}


def text(t: str, i: int = 0) -> dict[str, Any]:
    return {"contentBlockDelta": {"contentBlockIndex": i, "delta": {"text": t}}}


def stop(reason: str) -> dict[str, Any]:
    return {"messageStop": {"stopReason": reason}}


def meta(i: int, o: int) -> dict[str, Any]:
    return {"metadata": {"usage": {"inputTokens": i, "outputTokens": o, "totalTokens": i + o}}}


def test_golden_end_turn() -> None:
    events = [
        {"messageStart": {"role": "assistant"}},
        text("Hello, "),
        text("world!"),
        {"contentBlockStop": {"contentBlockIndex": 0}},
        stop("end_turn"),
        meta(1, 2),
    ]
    tr = cv.normalize(events)
    assert (tr.terminal, tr.stop_reason, tr.text) == (
        Terminal.END_TURN,
        "end_turn",
        "Hello, world!",
    )
    assert tr.events == events
    assert tr.custom_tool_uses == []


def test_golden_tool_use_split_across_deltas() -> None:
    events = [
        start(0, "tooluse_abc123", "get_weather"),
        frag(0, '{"loca'),
        frag(0, 'tion":"NYC"}'),
        stop("tool_use"),
    ]
    tr = cv.normalize(events)
    assert tr.terminal is Terminal.REQUIRES_ACTION
    assert tr.text == ""
    assert tr.custom_tool_uses == [
        ToolUse(id="tooluse_abc123", name="get_weather", input={"location": "NYC"})
    ]
    assert tr.server_tool_uses == []


def test_golden_max_tokens_is_terminated_with_raw_stop_reason() -> None:
    tr = cv.normalize([text("partial"), stop("max_tokens")])
    assert (tr.terminal, tr.stop_reason) == (Terminal.TERMINATED, "max_tokens")


@pytest.mark.parametrize(
    ("raw", "terminal"),
    [
        ("end_turn", Terminal.END_TURN),
        ("stop_sequence", Terminal.END_TURN),
        ("tool_use", Terminal.REQUIRES_ACTION),
        ("max_tokens", Terminal.TERMINATED),
        ("content_blocked", Terminal.TERMINATED),
        ("hook_stopped", Terminal.TERMINATED),
        (None, Terminal.TERMINATED),
    ],
)
def test_terminal_mapping(raw: str | None, terminal: Terminal) -> None:
    assert cv.terminal(raw) is terminal


def test_usage_from_metadata_last_wins() -> None:
    tr = cv.normalize([stop("end_turn"), meta(1, 1), meta(12, 7)])
    assert tr.usage == Usage(
        input_tokens=12, output_tokens=7, raw=[meta(12, 7)["metadata"]["usage"]]
    )
    assert cv.normalize([stop("end_turn")]).usage is None


def test_text_after_message_stop_is_kept() -> None:
    assert cv.normalize([stop("end_turn"), text("done.")]).text == "done."


def test_a_distinct_indices_and_ids_give_two_tools_in_order() -> None:
    p = cv.parse([start(0, "A", "a"), frag(0, "{}"), start(1, "B", "b"), frag(1, "{}")])
    assert [u.id for u in p.tool_uses] == ["A", "B"]


def test_b_reused_index_with_distinct_ids_recovers_both_in_first_seen_order() -> None:
    events = [
        start(0, "A", "a"),
        frag(0, '{"n": 1}'),
        start(0, "B", "b"),
        frag(0, '{"n": 2}'),
        start(1, "C", "c"),
        frag(1, '{"n": 3}'),
        stop("tool_use"),
    ]
    uses = cv.normalize(events).custom_tool_uses
    assert [(u.id, u.input) for u in uses] == [("A", {"n": 1}), ("B", {"n": 2}), ("C", {"n": 3})]


def test_c_same_id_at_two_indices_is_deduped_to_one() -> None:
    uses = cv.parse(
        [start(0, "A", "a"), frag(0, '{"x"'), start(1, "A", "a"), frag(1, ":1}")]
    ).tool_uses
    assert uses == [ToolUse(id="A", name="a", input={"x": 1})]


def test_deltas_route_to_the_block_active_at_their_index_no_bleed() -> None:
    events = [start(0, "A", "a"), frag(0, '{"v": "a"}'), start(0, "B", "b"), frag(0, '{"v": "b"}')]
    uses = cv.parse(events).tool_uses
    assert [u.input for u in uses] == [{"v": "a"}, {"v": "b"}]


def test_delta_without_an_open_block_is_ignored() -> None:
    assert cv.parse([frag(3, '{"x":1}')]).tool_uses == []


@pytest.mark.parametrize(
    ("raw", "expected"), [("", {}), ("{not json", {}), ("[1]", {}), ('{"a":1}', {"a": 1})]
)
def test_accumulated_input_decoding(raw: str, expected: dict[str, Any]) -> None:
    events = [start(0, "A", "a")] + ([frag(0, raw)] if raw else [])
    assert cv.parse(events).tool_uses[0].input == expected


def test_server_and_unknown_blocks_never_become_custom_tool_uses() -> None:
    events = [
        start(0, "S", "shell", kind="server_tool_use"),
        frag(0, '{"cmd": "ls"}'),
        {
            "contentBlockStart": {
                "contentBlockIndex": 1,
                "start": {"toolResult": {"toolUseId": "S"}},
            }
        },
        {
            "contentBlockStart": {
                "contentBlockIndex": 2,
                "start": {"SDK_UNKNOWN_MEMBER": {"name": "x"}},
            }
        },
        stop("end_turn"),
    ]
    tr = cv.normalize(events)
    assert tr.custom_tool_uses == []
    assert [u.id for u in tr.server_tool_uses] == ["S"]  # observe-only, kept for the record


def test_a_tool_block_without_a_type_is_an_inline_function() -> None:
    assert cv.parse([start(0, "t1", "lookup", kind=None), frag(0, '{"text":"hi"}')]).tool_uses == [
        ToolUse(id="t1", name="lookup", input={"text": "hi"})
    ]


def test_tool_use_stop_with_no_parsable_block_is_requires_action_with_no_uses() -> None:
    tr = cv.normalize([text("hmm"), stop("tool_use")])
    assert tr.terminal is Terminal.REQUIRES_ACTION
    assert tr.custom_tool_uses == []


def test_text_delta() -> None:
    assert cv.text_delta(text("hi")) == "hi"
    assert cv.text_delta(frag(0, "{}")) is None
    assert cv.text_delta(stop("end_turn")) is None
    assert cv.text_delta({"contentBlockDelta": "weird"}) is None


def test_stream_deltas_name_each_fragment_by_the_block_open_at_its_index() -> None:
    """Text and the input fragments of the tools asked for become live items; a reused
    index names the tool started there last (as parse assigns fragments); other tools,
    server tools, indices with no tool and odd envelopes give none."""
    from managedloop.hosts import TextDelta, ToolInputDelta

    events = [
        {"messageStart": {"role": "assistant"}},
        text("hi"),
        start(1, "tu_a", "get_weather"),
        frag(1, '{"city": '),
        frag(1, '"Paris"}'),
        start(1, "tu_b", "final_result"),  # the same index, another tool, no stop between
        frag(1, "{}"),
        {"contentBlockStop": {"contentBlockIndex": 1}},
        start(2, "tu_s", "search", kind="server_tool_use"),
        frag(2, '{"q": 1}'),
        start(4, "tu_o", "other"),  # a custom tool the loop does not read
        frag(4, "{}"),
        frag(3, "{}"),  # no block open there
        {"contentBlockDelta": "weird"},
        "not an envelope",
        stop("tool_use"),
    ]
    deltas = cv.StreamDeltas(frozenset({"get_weather", "final_result", "search"}))
    items = [item for e in events if (item := deltas.feed(e)) is not None]
    assert items == [
        TextDelta("hi"),
        ToolInputDelta("tu_a", "get_weather", '{"city": '),
        ToolInputDelta("tu_a", "get_weather", '"Paris"}'),
        ToolInputDelta("tu_b", "final_result", "{}"),
    ]
    ends = cv.parse([*events[:-1], stop("tool_use")])  # the pieces are the inputs parse reads
    assert [(u.id, u.input) for u in ends.tool_uses] == [
        ("tu_a", {"city": "Paris"}),
        ("tu_b", {}),
        ("tu_o", {}),
    ]
    nothing = cv.StreamDeltas()  # the default: no tool's input
    assert [d for e in events if (d := nothing.feed(e)) is not None] == [TextDelta("hi")]


def test_user_message_shape() -> None:
    assert cv.user_message("hello") == [{"role": "user", "content": [{"text": "hello"}]}]


def test_resume_messages_assistant_tool_use_then_user_tool_result() -> None:
    uses = [ToolUse(id="t1", name="lookup", input={"q": 1}), ToolUse(id="t2", name="fail")]
    results = [
        ToolResult(tool_use_id="t1", text="ok"),
        ToolResult(tool_use_id="t2", text="boom", is_error=True),
    ]
    assistant, user = cv.resume_messages(uses, results)
    assert assistant == {
        "role": "assistant",
        "content": [
            {
                "toolUse": {
                    "toolUseId": "t1",
                    "name": "lookup",
                    "input": {"q": 1},
                    "type": "tool_use",
                }
            },
            {"toolUse": {"toolUseId": "t2", "name": "fail", "input": {}, "type": "tool_use"}},
        ],
    }
    assert user == {
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": "t1", "content": [{"text": "ok"}], "status": "success"}},
            {"toolResult": {"toolUseId": "t2", "content": [{"text": "boom"}], "status": "error"}},
        ],
    }


def test_resume_messages_never_repeat_an_id_and_answer_every_use() -> None:
    uses = [ToolUse(id="t1", name="a"), ToolUse(id="t1", name="a"), ToolUse(id="t2", name="b")]
    assistant, user = cv.resume_messages(uses, [ToolResult(tool_use_id="t1", text="x")])
    ids = [b["toolUse"]["toolUseId"] for b in assistant["content"]]
    rids = [b["toolResult"]["toolUseId"] for b in user["content"]]
    assert ids == rids == ["t1", "t2"]
    assert user["content"][1]["toolResult"]["status"] == "error"


def test_resume_echoes_the_last_assistant_text_and_reasoning() -> None:
    events = [
        {"messageStart": {"role": "assistant"}},
        {
            "contentBlockDelta": {
                "contentBlockIndex": 0,
                "delta": {"reasoningContent": {"text": "think"}},
            }
        },
        {
            "contentBlockDelta": {
                "contentBlockIndex": 0,
                "delta": {"reasoningContent": {"signature": "sig"}},
            }
        },
        text("Let me check.", 1),
        start(2, "t1", "a"),
        stop("tool_use"),
    ]
    content = cv.parse(events).assistant_content
    assert content == [
        {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig"}}},
        {"text": "Let me check."},
    ]
    assistant, _ = cv.resume_messages([ToolUse(id="t1", name="a")], [], content)
    assert assistant["content"][:2] == content


def test_inline_function_shape() -> None:
    d = ToolDefinition(
        name="get_weather",
        description="Weather.",
        input_schema={
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    )
    assert cv.inline_function(d) == {
        "type": "inline_function",
        "name": "get_weather",
        "config": {"inlineFunction": {"description": "Weather.", "inputSchema": d.input_schema}},
    }


def test_merge_tools_keeps_harness_tools_and_client_wins_on_name() -> None:
    harness = [
        {"type": "agentcore_browser", "name": "browser"},
        {
            "type": "inline_function",
            "name": "get_weather",
            "config": {"inlineFunction": {"description": "old", "inputSchema": {}}},
        },
    ]
    merged = cv.merge_tools(harness, [ToolDefinition(name="get_weather", description="new")])
    assert [t["name"] for t in merged] == ["browser", "get_weather"]
    assert merged[1]["config"]["inlineFunction"]["description"] == "new"
