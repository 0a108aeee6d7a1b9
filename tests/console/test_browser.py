"""The console in a real browser (Debian's Chromium through Playwright): the list, a live
session, Approve and Deny from the page, two people deciding at once, and a hostile tool
result shown as text. Each page's screenshot goes to docs/img (docs/console.md shows them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import managedloop as ml
from managedloop import console
from managedloop.providers import Local
from managedloop.stores import MemoryStore
from managedloop.testing import Reply, ScriptedChatModel, ToolCall, say

from .conftest import TOKEN, Served, screenshot
from .sessions import AGENT, GO, IMG, RAN, XSS, answer, in_thread, park, parking_model

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()
    GO.clear()


def open_console(
    serve: Callable[[Any], Served], record: ml.SessionRecord, model: ScriptedChatModel, **kw: Any
) -> Served:
    provider = Local(model="m", chat=model)
    app = console.app(
        record, token=TOKEN, resume_with=lambda parked: (provider, AGENT), poll_interval=0.05, **kw
    )
    return serve(app)


def login(page: Any, served: Served, path: str = "/") -> None:
    page.goto(f"{served.url}{path}?token={TOKEN}")
    assert "token=" not in page.url  # the token left the address bar for a cookie


def dialogs(page: Any) -> list[str]:
    seen: list[str] = []
    page.on("dialog", lambda d: (seen.append(d.message), d.dismiss()))
    return seen


def test_session_list_filters_and_searches(serve: Callable[[Any], Served], page: Any) -> None:
    record = ml.SessionRecord(MemoryStore())
    model = parking_model()

    async def runs() -> None:
        for name in ("greeter", "helper"):
            provider = Local(model="m", chat=ScriptedChatModel([say("hello")]))
            await ml.run(provider, agent=ml.AgentSpec(name=name), prompt="hi", record=record)
        await ml.run(Local(model="m", chat=model), agent=AGENT, prompt="pay", record=record)

    in_thread(runs)
    served = open_console(serve, record, model)
    login(page, served)
    rows = page.locator("table.sessions tbody tr")
    assert rows.count() == 3
    assert rows.first.locator("td").nth(2).inner_text() == "bank"  # most recent first
    assert "parked" in rows.first.inner_text()
    assert "10 in / 5 out" in page.locator("table.sessions").inner_text()
    screenshot(page, "sessions")
    page.fill("input[name=q]", "greet")
    page.click("button[type=submit]")
    assert rows.count() == 1
    assert "greeter" in rows.first.inner_text()
    page.select_option("select[name=status]", "parked")
    page.fill("input[name=q]", "")
    page.click("button[type=submit]")
    assert rows.count() == 1
    assert "bank" in rows.first.inner_text()


def test_a_live_session_shows_new_events_without_reload(
    serve: Callable[[Any], Served], page: Any
) -> None:
    record = ml.SessionRecord(MemoryStore())
    model = ScriptedChatModel(
        [Reply(tool_calls=[ToolCall(name="wait_for_go", id="call_w")]), say("all done")]
    )
    provider = Local(model="m", chat=model)
    seen = dialogs(page)
    box: list[Any] = []

    async def go() -> ml.SessionResult:
        return await ml.run(provider, agent=AGENT, prompt="wait", record=record)

    worker = threading.Thread(target=lambda: box.append(in_thread(go)))
    worker.start()
    try:
        for _ in range(2000):  # bounded: until the model's first turn is recorded
            sessions = record.sessions()
            if sessions and sessions[0].get("turns"):
                break
            threading.Event().wait(0.01)
        (summary,) = record.sessions()
        served = open_console(serve, record, model)
        login(page, served, f"/sessions/{summary['session_id']}")
        marker = page.evaluate("() => (window.__marker = Math.random())")
        assert page.locator("[data-status]").first.inner_text() == "running"
        assert page.locator("#timeline").get_by_text("all done").count() == 0
        screenshot(page, "session-live")
        GO.set()
        # The tool result and the last turn arrive over the stream, into this same page.
        page.locator("li.k-turn").get_by_text("all done").wait_for()
        page.locator("li.k-tool_results").get_by_text(IMG).wait_for()
        assert page.evaluate("() => window.__marker") == marker  # the same page: no reload
    finally:
        GO.set()
        worker.join(60)
    page.wait_for_function("() => document.querySelector('[data-status]').textContent === 'done'")
    page.locator("dl.facts dd").get_by_text("end_turn").wait_for()  # the summary, live too
    assert "20 in / 10 out" in page.locator("dl.facts").inner_text()
    assert page.evaluate("() => window.__marker") == marker
    assert box[0].terminal is ml.Terminal.END_TURN
    assert seen == []  # the hostile tool result was text, never markup
    screenshot(page, "session")


def test_approve_from_the_page_runs_the_tool_once_and_the_session_ends(
    serve: Callable[[Any], Served], page: Any
) -> None:
    record = ml.SessionRecord(MemoryStore())
    model = parking_model()
    parked = park(record, model)
    served = open_console(serve, record, model)
    login(page, served, "/approvals")
    card = page.locator(".card.approval")
    assert card.count() == 1
    assert "transfer" in card.inner_text()
    assert '"amount": 5' in card.inner_text()
    screenshot(page, "approvals")
    card.get_by_role("button", name="Approve").click()
    page.wait_for_url(f"**/sessions/{parked.session_id}")
    page.locator("li.k-terminal").wait_for()
    summary = record.session(parked.session_id or "")
    assert summary is not None
    assert summary["terminal"] == "end_turn"
    assert RAN == ["transfer 5"]  # once
    assert page.locator("li.k-turn").last.get_by_text("call_t=moved 5").count() == 1


def test_deny_with_a_reason_reaches_the_model(serve: Callable[[Any], Served], page: Any) -> None:
    record = ml.SessionRecord(MemoryStore())
    model = parking_model()
    parked = park(record, model)
    served = open_console(serve, record, model)
    login(page, served, f"/sessions/{parked.session_id}")
    page.fill("input[name=message]", "not today, bob")
    page.get_by_role("button", name="Deny").click()
    page.locator("li.k-terminal").wait_for()
    assert RAN == []  # the denied tool never ran
    told = model.requests[-1].tool_results
    assert [r.tool_use_id for r in told] == ["call_t"]
    assert "not today, bob" in told[0].text
    assert page.locator("li.k-decision").get_by_text("not today, bob").count() == 1


def test_two_people_approving_at_once_make_one_decision(
    serve: Callable[[Any], Served], browser: Any
) -> None:
    record = ml.SessionRecord(MemoryStore())
    model = parking_model()
    parked = park(record, model)
    served = open_console(serve, record, model)
    pages = []
    for _ in range(2):
        context = browser.new_context()
        p = context.new_page()
        p.set_default_timeout(20_000)
        login(p, served, "/approvals")
        pages.append(p)
    # Both saw the call waiting; both click.
    for p in pages:
        p.locator(".card.approval").get_by_role("button", name="Approve").click()
    texts = [p.locator("main").inner_text() for p in pages]
    assert f"Session {parked.session_id}" in texts[0]
    assert "already approved by console" in texts[1]
    assert "your decision was not applied" in texts[1]
    screenshot(pages[1], "already-decided")
    pages[0].locator("li.k-terminal").wait_for()
    assert RAN == ["transfer 5"]
    for p in pages:
        p.context.close()


def test_a_hostile_tool_result_is_text_and_no_dialog_opens(
    serve: Callable[[Any], Served], page: Any
) -> None:
    record = ml.SessionRecord(MemoryStore())
    model = ScriptedChatModel([Reply(tool_calls=[ToolCall(name="balance", id="b1")]), answer])

    async def go() -> ml.SessionResult:
        return await ml.run(Local(model="m", chat=model), agent=AGENT, prompt=IMG, record=record)

    result = in_thread(go)
    seen = dialogs(page)
    served = open_console(serve, record, model)
    login(page, served, f"/sessions/{result.session_id}")
    assert page.locator("li.k-tool_results pre.out").first.inner_text() == XSS
    assert page.locator("li.k-prompt").get_by_text(IMG).count() == 1
    assert page.locator("main script, main img").count() == 0
    assert seen == []


def test_read_only_hides_the_decision_buttons(serve: Callable[[Any], Served], page: Any) -> None:
    record = ml.SessionRecord(MemoryStore())
    model = parking_model()
    park(record, model)
    served = open_console(serve, record, model, read_only=True)
    login(page, served, "/approvals")
    assert page.locator(".card.approval").count() == 1
    assert page.locator("button").count() == 0
    assert page.locator(".badge.ro").inner_text() == "read-only"


def test_the_provisioning_view_shows_versions_tags_and_prune(
    serve: Callable[[Any], Served], page: Any
) -> None:
    store = MemoryStore()
    for digest in ("0123abcd", "89abcdef", "fedcba98"):
        handle = {"agent_id": f"agent_{digest}", "name": f"support-{digest}", "digest": digest * 8}
        store.put(f"ml:agent:support:{digest}", {"handle": handle, "account": "acct_1"})
    env = {"environment_id": "env_1", "name": "sandbox-0a0a0a0a", "digest": "0a" * 32}
    store.put("ml:environment:sandbox:0a0a0a0a", {"handle": env, "account": "acct_1"})
    store.put("ml:tags:agent:support", {"tags": {"prod": "0123abcd" * 8}})
    served = open_console(serve, ml.SessionRecord(store), parking_model())
    login(page, served, "/provisioning")
    rows = page.locator("table.provisioning").first.locator("tbody tr")
    assert rows.count() == 3
    assert "prod" in rows.filter(has_text="support-0123abcd").inner_text()
    assert "2 untagged version(s)" in page.locator("main").inner_text()
    assert page.locator("h2").all_inner_texts() == ["Agents", "Environments"]
    screenshot(page, "provisioning")
