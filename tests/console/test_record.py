"""The session record (managedloop.session.record): what a run writes, the retention, the
exactly-once decision, and a resume from the record through the public ``ml.run``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

import managedloop as ml
from managedloop.providers import Local
from managedloop.session.record import CHUNK, approvals_of
from managedloop.stores import MemoryStore, open_store
from managedloop.testing import ModelRequest, Reply, ScriptedChatModel, ToolCall, say

pytestmark = pytest.mark.anyio

RAN: list[str] = []


@ml.tool(requires_approval=True)
def transfer(amount: int) -> str:
    """Move money."""
    RAN.append(f"transfer {amount}")
    return f"moved {amount}"


@ml.tool
def balance() -> str:
    """The balance."""
    RAN.append("balance")
    return "<script>alert(1)</script>"


AGENT = ml.AgentSpec(name="bank", tools=[transfer, balance])


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()


def answer(request: ModelRequest) -> Reply:
    return say("; ".join(f"{r.tool_use_id}={r.text}" for r in request.tool_results))


def script() -> ScriptedChatModel:
    calls = [
        ToolCall(name="transfer", input={"amount": 5}, id="call_t"),
        ToolCall(name="balance", input={}, id="call_b"),
    ]
    return ScriptedChatModel([Reply(tool_calls=calls), answer])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


async def test_a_parked_run_is_recorded_and_resumed_from_the_record() -> None:
    record = ml.SessionRecord(MemoryStore(), clock=Clock())
    model = script()
    provider = Local(model="m", chat=model)
    parked = await ml.run(provider, agent=AGENT, prompt="pay", record=record)
    assert parked.reason == "approval_required"
    sid = parked.session_id
    assert sid is not None
    (summary,) = record.sessions()
    assert summary["session_id"] == sid
    assert (summary["host"], summary["agent"], summary["model"]) == ("local", "bank", "m")
    assert summary["status"] == "parked"
    assert summary["pending"] == [
        {"id": "call_t", "name": "transfer", "reason": "requires_approval"}
    ]
    assert summary["usage"]["input_tokens"] == 10
    kinds = [e["kind"] for e in record.events(sid)]
    assert kinds[0] == "prompt"
    assert "turn" in kinds
    assert kinds[-1] == "pending"
    assert [e["seq"] for e in record.events(sid)] == list(range(len(kinds)))
    (entry,) = record.parked()
    # the resume state is a SessionResult.to_dict() that survives JSON
    json.dumps(entry)

    first = record.decide(sid, "call_t", ml.Approve(), nonce=entry["nonce"], by="ann")
    second = record.decide(sid, "call_t", ml.Deny("no"), nonce=entry["nonce"], by="bob")
    assert (first.taken, first.resume) == (True, True)
    assert (second.taken, second.resume) == (False, False)
    assert second.by == "ann"
    assert second.decision is not None
    assert second.decision["decision"] == "approve"

    (entry,) = record.parked()
    done = await ml.run(
        provider,
        agent=AGENT,
        resume=entry["result"],
        approvals=approvals_of(entry),
        record=record,
    )
    assert done.terminal is ml.Terminal.END_TURN
    assert RAN == ["balance", "transfer 5"]  # each tool once
    assert record.parked() == []
    summary = record.session(sid)
    assert summary is not None
    assert summary["status"] == "done"
    assert summary["terminal"] == "end_turn"
    assert summary["requests"] == 2
    assert summary["usage"]["input_tokens"] == 20  # summed over both requests
    kinds = [e["kind"] for e in record.events(sid)]
    assert "decision" in kinds
    assert kinds[-1] == "terminal"
    results = [e for e in record.events(sid) if e["kind"] == "tool_results"]
    assert {r["tool_use_id"]: r["text"] for r in results[-1]["results"]} == {
        "call_t": "moved 5",
        "call_b": "<script>alert(1)</script>",
    }


async def test_configure_records_every_run_and_record_none_opts_out() -> None:
    store = MemoryStore()
    ml.configure(record=store)
    provider = Local(model="m", chat=ScriptedChatModel([say("hi"), say("again")]))
    await ml.run(provider, agent=ml.AgentSpec(name="a"), prompt="x")
    await ml.run(provider, agent=ml.AgentSpec(name="b"), prompt="x", record=None)
    assert [s["agent"] for s in ml.SessionRecord(store).sessions()] == ["a"]


async def test_a_live_session_records_each_request() -> None:
    record = ml.SessionRecord(MemoryStore())
    provider = Local(model="m", chat=ScriptedChatModel([say("one"), say("two")]))
    async with ml.start(provider, agent=ml.AgentSpec(name="live"), record=record) as session:
        await session.send("first")
        await session.result()
        await session.send("second")
        await session.result()
        sid = session.session_id
    assert sid is not None
    summary = record.session(sid)
    assert summary is not None
    assert summary["requests"] == 2
    assert summary["status"] == "done"
    texts = [e.get("text") for e in record.events(sid) if e["kind"] == "prompt"]
    assert texts == ["first", "second"]


def test_retention_keeps_the_newest_entries_and_clips_strings() -> None:
    record = ml.SessionRecord(MemoryStore(), max_events=2 * CHUNK, max_chars=10)
    for i in range(5 * CHUNK + 7):
        record.append(
            "s1", {"kind": "event", "data": {"text": "x" * 50, "api_key": "sk-1"}, "i": i}
        )
    kept = record.events("s1")
    seqs = [e["seq"] for e in kept]
    assert seqs == list(range(seqs[0], 5 * CHUNK + 7))
    assert CHUNK <= len(kept) <= 2 * CHUNK
    assert kept[-1]["data"]["text"].startswith("x" * 10 + "…")
    assert kept[-1]["data"]["api_key"] == "[redacted]"
    assert record.events("s1", since=5 * CHUNK + 5) == kept[-2:]
    summary = record.session("s1")
    assert summary is not None
    assert summary["entries"] == 5 * CHUNK + 7


def test_concurrent_writers_lose_no_entry() -> None:
    record = ml.SessionRecord(MemoryStore())
    threads = [
        threading.Thread(
            target=lambda n=n: [record.append("s", {"kind": "event", "n": n}) for _ in range(50)]
        )
        for n in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = record.events("s")
    assert sorted(e["seq"] for e in got) == list(range(400))
    assert sorted(e["n"] for e in got) == sorted(n for n in range(8) for _ in range(50))


def test_concurrent_decisions_make_one() -> None:
    record = ml.SessionRecord(MemoryStore())
    parked: dict[str, Any] = {
        "session_id": "s",
        "nonce": "n1",
        "approvals": [{"id": "t1", "name": "transfer"}],
        "decisions": {},
        "result": {},
    }
    record.store.put(record.parked_key("s"), parked)
    barrier = threading.Barrier(8)
    outcomes: list[Any] = []

    def click(who: int) -> None:
        barrier.wait()
        outcomes.append(record.decide("s", "t1", ml.Approve(), nonce="n1", by=f"p{who}"))

    threads = [threading.Thread(target=click, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(o.taken for o in outcomes) == 1
    assert sum(o.resume for o in outcomes) == 1
    assert record.decide("s", "t1", ml.Approve(), nonce="stale", by="x").taken is False


def test_bad_record_options_are_refused_before_anything_runs() -> None:
    with pytest.raises(ml.InvalidOptionsError) as err:
        ml.run_sync(Local(model="m", chat=ScriptedChatModel([])), agent=AGENT, record=object())
    assert err.value.context["option"] == "record"
    with pytest.raises(ml.InvalidOptionsError):
        ml.SessionRecord(MemoryStore(), max_events=3)


WRITER = """
import sys
from managedloop.session.record import SessionRecord
from managedloop.stores import open_store

store = open_store(sys.argv[1])
record = SessionRecord(store)
for i in range(int(sys.argv[3])):
    record.append("shared", {"kind": "event", "writer": sys.argv[2], "i": i})
store.close()
"""


@pytest.mark.parametrize("suffix", [".sqlite3", ".json"], ids=["sqlite", "file"])
def test_processes_recording_one_session_at_once_lose_nothing(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"record{suffix}"
    writers, each = 4, 40
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(n), str(each)])
        for n in range(writers)
    ]
    for p in procs:
        assert p.wait(120) == 0
    store = open_store(str(path))
    try:
        record = ml.SessionRecord(store)
        got = record.events("shared")
        assert sorted(e["seq"] for e in got) == list(range(writers * each))
        assert sorted((e["writer"], e["i"]) for e in got) == sorted(
            (str(n), i) for n in range(writers) for i in range(each)
        )
        summary = record.session("shared")
        assert summary is not None
        assert summary["entries"] == writers * each
    finally:
        store.close()


async def test_a_failed_request_is_recorded_with_its_error() -> None:
    record = ml.SessionRecord(MemoryStore())
    provider = Local(model="m", chat=ScriptedChatModel([]))  # nothing to say: the host fails
    with pytest.raises(ml.ManagedLoopError) as err:
        await ml.run(provider, agent=ml.AgentSpec(name="mute"), prompt="x", record=record)
    (summary,) = record.sessions()
    assert summary["status"] == "failed"
    assert summary["error"]["code"] == err.value.code
    assert record.events(summary["session_id"])[-1]["kind"] == "error"


def test_forget_and_prune_drop_sessions_but_never_a_parked_one() -> None:
    clock = Clock()
    record = ml.SessionRecord(MemoryStore(), clock=clock)
    for sid in ("old", "parked", "new"):
        record.append(sid, {"kind": "prompt", "text": sid})
    record.summarize("parked", lambda s: {**s, "status": "parked"})
    clock.now += 1000
    record.append("new", {"kind": "prompt", "text": "again"})
    assert record.prune(older_than=500) == 1
    assert sorted(s["session_id"] for s in record.sessions()) == ["new", "parked"]
    assert record.events("old") == []
    record.forget("new")
    assert [s["session_id"] for s in record.sessions()] == ["parked"]
    assert record.store.scan("ml:record:events:new") == {}


async def test_a_store_that_fails_never_breaks_the_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(MemoryStore):
        def update(self, key: str, fn: Any) -> Any:
            raise ml.StoreError("disk on fire", code="store_unavailable")

    provider = Local(model="m", chat=ScriptedChatModel([say("still fine")]))
    result = await ml.run(provider, agent=ml.AgentSpec(name="a"), prompt="x", record=Broken())
    assert result.text == "still fine"
    assert "the session record could not be written" in caplog.text


async def test_a_timed_out_request_is_recorded_as_stopped() -> None:
    @ml.tool
    async def stall() -> str:
        """Never answers in time."""
        await anyio.sleep(3600)
        return "late"

    record = ml.SessionRecord(MemoryStore())
    model = ScriptedChatModel([Reply(tool_calls=[ToolCall(name="stall", id="s1")])])
    with pytest.raises(ml.SessionTimeoutError):
        await ml.run(
            Local(model="m", chat=model),
            agent=ml.AgentSpec(name="slow", tools=[stall]),
            prompt="x",
            timeout=0.5,
            record=record,
        )
    (summary,) = record.sessions()
    assert summary["status"] == "stopped"
    assert record.events(summary["session_id"])[-1]["code"] == "cancelled"
