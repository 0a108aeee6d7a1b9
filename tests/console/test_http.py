"""The console over plain HTTP (a real uvicorn server): the token on every request, CSRF on
every state change, the security headers, exactly one decision of many concurrent ones,
read-only mode, no secret rendered, the live stream, and the provisioning and webhook
pages reading the same store."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest

import managedloop as ml
from managedloop import console
from managedloop.providers import Local
from managedloop.stores import MemoryStore

from .conftest import TOKEN, Served
from .sessions import AGENT, RAN, park, parking_model

pytestmark = pytest.mark.timeout(120)

ROUTES = [
    "/",
    "/sessions/s1",
    "/sessions/s1/stream",
    "/approvals",
    "/provisioning",
    "/webhooks",
    "/static/console.js",
]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()


def make(
    serve: Callable[[Any], Served], record: ml.SessionRecord, model: Any = None, **kw: Any
) -> Served:
    provider = Local(model="m", chat=model or parking_model())
    app = console.app(
        record, token=TOKEN, resume_with=lambda p: (provider, AGENT), poll_interval=0.05, **kw
    )
    return serve(app)


def csrf_of(served: Served) -> str:
    token: str = served.app.state.console.csrf
    return token


def form(**fields: str) -> bytes:
    return urlencode(fields).encode()


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def test_every_request_needs_the_token(serve: Callable[[Any], Served]) -> None:
    served = make(serve, ml.SessionRecord(MemoryStore()))
    for path in ROUTES:
        for token in (None, "wrong-token-0123456789"):
            status, headers, body = served.get(path, token=token)
            assert status == 401, path
            assert "default-src 'none'" in headers["content-security-policy"]
            assert TOKEN not in body
        status, _, _ = served.get(path, token=None, headers={"Cookie": "ml_console=nope"})
        assert status == 401
    status, _, _ = served.request("POST", "/approvals/s/t", token=None, data=b"", headers=FORM)
    assert status == 401
    for path in ("/", "/approvals", "/static/console.js"):
        assert served.get(path)[0] == 200


def test_the_printed_url_trades_the_token_for_a_cookie(serve: Callable[[Any], Served]) -> None:
    served = make(serve, ml.SessionRecord(MemoryStore()))
    status, headers, _ = served.get(f"/approvals?token={TOKEN}&x=1", token=None)
    assert status == 303
    assert headers["location"] == "/approvals?x=1"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"ml_console={TOKEN};")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    status, _, _ = served.get("/", token=None, headers={"Cookie": f"ml_console={TOKEN}"})
    assert status == 200


def test_pages_carry_the_security_headers(serve: Callable[[Any], Served]) -> None:
    served = make(serve, ml.SessionRecord(MemoryStore()))
    status, headers, body = served.get("/")
    assert status == 200
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "'unsafe-inline'" not in csp
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in body  # no inline script: only <script src=...>
    assert TOKEN not in body


def test_a_state_change_needs_the_csrf_token(serve: Callable[[Any], Served]) -> None:
    record = ml.SessionRecord(MemoryStore())
    parked = park(record, parking_model())
    served = make(serve, record)
    (entry,) = record.parked()
    path = f"/approvals/{parked.session_id}/call_t"
    base = {"decision": "approve", "nonce": entry["nonce"]}
    for data, headers in (
        (form(**base), FORM),
        (form(**base, csrf="forged"), FORM),
        (form(**base, csrf=csrf_of(served)), {"Content-Type": "text/plain"}),
    ):
        status, _, body = served.request("POST", path, data=data, headers=headers)
        assert status == 403
        assert "CSRF" in body
    assert record.parked()[0]["decisions"] == {}  # nothing was decided
    status, headers, _ = served.request(
        "POST", path, data=form(**base, csrf=csrf_of(served)), headers=FORM
    )
    assert status == 303
    assert headers["location"] == f"/sessions/{parked.session_id}"


def test_concurrent_approvals_make_one_decision(serve: Callable[[Any], Served]) -> None:
    record = ml.SessionRecord(MemoryStore())
    parked = park(record, parking_model())
    served = make(serve, record)
    (entry,) = record.parked()
    data = form(decision="approve", nonce=entry["nonce"], csrf=csrf_of(served))
    barrier = threading.Barrier(8)
    answers: list[tuple[int, str]] = []

    def click() -> None:
        barrier.wait()
        status, _, body = served.request(
            "POST", f"/approvals/{parked.session_id}/call_t", data=data, headers=FORM
        )
        answers.append((status, body))

    threads = [threading.Thread(target=click) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(s for s, _ in answers) == [303] + [409] * 7
    for status, body in answers:
        if status == 409:
            assert "already approved by console" in body
    for _ in range(2000):  # bounded: the resume runs in the server
        summary = record.session(parked.session_id or "")
        if summary and summary["status"] == "done":
            break
        threading.Event().wait(0.01)
    assert record.session(parked.session_id or "")["terminal"] == "end_turn"  # type: ignore[index]
    assert RAN == ["transfer 5"]


def test_read_only_refuses_decisions(serve: Callable[[Any], Served]) -> None:
    record = ml.SessionRecord(MemoryStore())
    parked = park(record, parking_model())
    served = make(serve, record, read_only=True)
    (entry,) = record.parked()
    status, _, body = served.get("/approvals")
    assert status == 200
    assert "<form" not in body
    status, _, _ = served.request(
        "POST",
        f"/approvals/{parked.session_id}/call_t",
        data=form(decision="approve", nonce=entry["nonce"], csrf=csrf_of(served)),
        headers=FORM,
    )
    assert status == 403
    assert record.parked()[0]["decisions"] == {}


def test_no_secret_is_rendered(serve: Callable[[Any], Served]) -> None:
    record = ml.SessionRecord(MemoryStore())
    record.append(
        "s1",
        {
            "kind": "event",
            "type": "x",
            "data": {"authorization": "Bearer sk-live-1", "api_key": "k9"},
        },
    )
    record.store.put(
        "ml:agent:bank:0123abcd",
        {
            "handle": {"agent_id": "agent_1", "name": "bank-0123abcd", "digest": "0123abcd" * 8},
            "account": "acct",
            "secret": "whsec_hidden",
        },
    )
    served = make(serve, record)
    for path in ("/sessions/s1", "/provisioning"):
        status, _, body = served.get(path)
        assert status == 200
        for secret in ("sk-live-1", "k9", "whsec_hidden", TOKEN):
            assert secret not in body
    assert "[redacted]" in served.get("/sessions/s1")[2]


def test_the_stream_sends_new_entries(serve: Callable[[Any], Served]) -> None:
    record = ml.SessionRecord(MemoryStore())
    record.append("s1", {"kind": "prompt", "text": "first"})
    served = make(serve, record)
    req = urllib.request.Request(
        served.url + "/sessions/s1/stream?since=1", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        record.append("s1", {"kind": "prompt", "text": "<b>second</b>"})
        lines: list[str] = []
        for _ in range(200):  # bounded: until the new entry arrives
            line = resp.readline().decode()
            lines.append(line)
            if line.startswith("data: <li"):
                break
    assert "id: 1\n" in lines
    entry = lines[-1]
    assert "&lt;b&gt;second&lt;/b&gt;" in entry
    assert "first" not in "".join(lines)  # since=1: only what is new


def test_provisioning_and_webhooks_read_the_same_store(serve: Callable[[Any], Served]) -> None:
    store = MemoryStore()
    for digest in ("0123abcd", "89abcdef"):
        handle = {"agent_id": f"agent_{digest}", "name": f"bank-{digest}", "digest": digest * 8}
        store.put(f"ml:agent:bank:{digest}", {"handle": handle, "account": "acct"})
    store.put("ml:tags:agent:bank", {"tags": {"prod": "0123abcd" * 8}})
    store.put(
        "managedloop:webhooks:delivery:wh_1",
        {"state": "done", "session_id": "sesn_1", "at": 1000.0},
    )
    served = make(serve, ml.SessionRecord(store))
    _, _, body = served.get("/provisioning?keep=1")
    assert "bank-0123abcd" in body
    assert "bank-89abcdef" in body
    assert "prod" in body
    assert "1 untagged version(s)" in body
    _, _, body = served.get("/webhooks")
    assert "wh_1" in body
    assert "sesn_1" in body


def test_the_token_redirect_stays_on_the_console(serve: Callable[[Any], Served]) -> None:
    served = make(serve, ml.SessionRecord(MemoryStore()))
    status, headers, _ = served.get(f"//evil.example/x?token={TOKEN}", token=None)
    assert status == 303
    assert headers["location"] == "/evil.example/x"  # a path here, never another site


def test_a_huge_form_is_refused_before_it_is_read(serve: Callable[[Any], Served]) -> None:
    served = make(serve, ml.SessionRecord(MemoryStore()))
    big = b"csrf=" + b"x" * (65 * 1024)
    status, _, _ = served.request("POST", "/approvals/s/t", data=big, headers=FORM)
    assert status == 413


def test_damaged_record_entries_do_not_break_the_pages(serve: Callable[[Any], Served]) -> None:
    store = MemoryStore()
    record = ml.SessionRecord(store)
    record.append("good", {"kind": "prompt", "text": "fine"})
    store.put("ml:record:session:bad", {"session_id": "bad", "updated_at": "yesterday"})
    store.put("ml:record:events:bad:000000000", {"items": "not a list"})
    store.put("ml:record:events:good:000000001", {"items": [{"seq": "x"}, 3]})
    served = make(serve, record)
    status, _, body = served.get("/")
    assert status == 200
    assert body.index("good") < body.index(">bad<")  # the damaged one sorts last
    assert served.get("/sessions/bad")[0] == 200
    status, _, body = served.get("/sessions/good")
    assert status == 200
    assert "fine" in body


def test_a_failed_resume_is_shown_and_not_retried_blindly(serve: Callable[[Any], Served]) -> None:
    record = ml.SessionRecord(MemoryStore())
    parked = park(record, parking_model())

    def broken(entry: Any) -> Any:
        raise ml.ConfigError("no credentials here", key="api_key")

    served = serve(console.app(record, token=TOKEN, resume_with=broken))
    (entry,) = record.parked()
    status, _, _ = served.request(
        "POST",
        f"/approvals/{parked.session_id}/call_t",
        data=form(decision="approve", nonce=entry["nonce"], csrf=csrf_of(served)),
        headers=FORM,
    )
    assert status == 303
    for _ in range(2000):  # bounded: the resume task runs in the server
        if record.parked()[0].get("resume_error"):
            break
        threading.Event().wait(0.01)
    body = served.get(f"/sessions/{parked.session_id}")[2]
    assert "The resume failed: ConfigError" in body
    assert "Already approved by console" in body  # the decision stands; no second button
    assert RAN == []
