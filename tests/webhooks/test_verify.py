"""``managedloop.webhooks.verify``: Standard Webhooks signatures, checked against the
``standardwebhooks`` package and the SDK's ``client.beta.webhooks.unwrap`` (code we did not
write), with an injected clock; every refusal is a named error."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import anthropic
import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook

import managedloop.webhooks as mw
from managedloop.config import Secret
from managedloop.errors import InvalidOptionsError, WebhookVerificationError
from managedloop.testing._claude.webhooks import sign_delivery

KEY = b"0123456789abcdef0123456789abcdef"
SECRET = "whsec_" + base64.b64encode(KEY).decode()
NOW = 1_900_000_000
BODY = json.dumps(
    {
        "id": "wevt_1",
        "type": "event",
        "created_at": "2030-03-17T17:46:40Z",
        "data": {
            "id": "sesn_1",
            "type": "session.requires_action",
            "organization_id": "o",
            "workspace_id": "w",
        },
    }
).encode()


def _headers(signature: str, *, wid: str = "msg_1", stamp: int = NOW) -> dict[str, str]:
    return {"webhook-id": wid, "webhook-timestamp": str(stamp), "webhook-signature": signature}


def _verify(body: bytes, headers: Any, secret: Any = SECRET, **kw: Any) -> mw.WebhookEvent:
    return mw.verify(body, headers, secret, clock=lambda: float(NOW), **kw)


def test_a_valid_delivery_parses() -> None:
    event = _verify(BODY, _headers(mw.sign(SECRET, "msg_1", NOW, BODY)))
    assert (event.webhook_id, event.id, event.type, event.subject_id) == (
        "msg_1",
        "wevt_1",
        "session.requires_action",
        "sesn_1",
    )
    # The same key as raw bytes, as a Secret, without the prefix; ASGI byte pairs.
    sig = mw.sign(KEY, "msg_1", NOW, BODY)
    pairs = [(k.encode(), v.encode()) for k, v in _headers(sig).items()]
    for secret in (KEY, Secret(SECRET), SECRET.removeprefix("whsec_")):
        assert _verify(BODY, pairs, secret).id == "wevt_1"


def test_one_matching_entry_among_several_is_enough() -> None:
    old = mw.sign(b"the old key", "msg_1", NOW, BODY)
    good = mw.sign(SECRET, "msg_1", NOW, BODY)
    header = f"v1a,AAAA {old} junk v1,%%% {good}"  # other schemes and junk are skipped
    assert _verify(BODY, _headers(header)).id == "wevt_1"


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "malformed_webhook"),
        (_headers("v1,x", wid=""), "malformed_webhook"),
        (_headers("v1,x", wid="id with spaces"), "malformed_webhook"),
        ({**_headers("v1,x"), "webhook-timestamp": "1.9e9"}, "malformed_webhook"),
        ({**_headers("v1,x"), "webhook-timestamp": "nan"}, "malformed_webhook"),
        (_headers(" ".join(["v1,AAAA"] * 17)), "malformed_webhook"),
        (_headers("v1,AAAA", stamp=NOW - 301), "stale_webhook"),
        (_headers("v1,AAAA", stamp=NOW + 301), "stale_webhook"),
        (_headers("v1,AAAA"), "bad_signature"),
        (_headers("v2," + mw.sign(SECRET, "msg_1", NOW, BODY)[3:]), "bad_signature"),
        (_headers(mw.sign(SECRET, "msg_2", NOW, BODY)), "bad_signature"),  # another id
        (_headers(mw.sign(SECRET, "msg_1", NOW - 1, BODY)), "bad_signature"),  # another time
        (_headers(mw.sign(b"other", "msg_1", NOW, BODY)), "bad_signature"),
    ],
)
def test_refusals_are_named(headers: dict[str, str], code: str) -> None:
    with pytest.raises(WebhookVerificationError) as info:
        _verify(BODY, headers)
    assert info.value.code == code
    assert SECRET not in str(info.value)
    assert SECRET not in repr(info.value.context)


def test_a_tampered_or_malformed_body_is_refused() -> None:
    sig = mw.sign(SECRET, "msg_1", NOW, BODY)
    with pytest.raises(WebhookVerificationError) as info:
        _verify(BODY + b" ", _headers(sig))
    assert info.value.code == "bad_signature"
    for body in (b"not json", b"[]", b'{"id": "x"}', b'{"id": 1, "data": {"type": "t"}}', b"\xff"):
        with pytest.raises(WebhookVerificationError) as info:
            _verify(body, _headers(mw.sign(SECRET, "msg_1", NOW, body)))
        assert info.value.code == "malformed_webhook"


def test_a_duplicated_signing_header_is_refused() -> None:
    sig = mw.sign(SECRET, "msg_1", NOW, BODY)
    pairs = [*_headers(sig).items(), ("Webhook-Id", "msg_2")]
    with pytest.raises(WebhookVerificationError) as info:
        _verify(BODY, pairs)
    assert info.value.code == "malformed_webhook"


def test_the_tolerance_and_the_secret_are_checked() -> None:
    sig = mw.sign(SECRET, "msg_1", NOW - 1000, BODY)
    assert _verify(BODY, _headers(sig, stamp=NOW - 1000), tolerance=1000).id == "wevt_1"
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(InvalidOptionsError):
            _verify(BODY, _headers(sig), tolerance=bad)
    for secret in ("whsec_***", "", b"", 42):
        with pytest.raises(InvalidOptionsError) as info:
            _verify(BODY, _headers(sig), secret)
        assert info.value.context["option"] == "secret"
    hooks = mw.Webhooks(lambda: None, agent="agent_1", secret=SECRET)  # type: ignore[arg-type,return-value]
    assert SECRET not in repr(hooks)
    assert SECRET.removeprefix("whsec_") not in repr(hooks)


def test_agrees_with_standardwebhooks_and_the_sdk_unwrap() -> None:
    # Real time here: standardwebhooks and unwrap read the wall clock (5-minute window),
    # and these checks are about signatures, so the timestamp is simply now.
    now = int(time.time())
    theirs = Webhook(SECRET).sign(
        "msg_1", __import__("datetime").datetime.fromtimestamp(now), BODY.decode()
    )
    ours = mw.sign(SECRET, "msg_1", now, BODY)
    assert ours == theirs
    assert mw.verify(BODY, _headers(theirs, stamp=now), SECRET).id == "wevt_1"
    assert Webhook(SECRET).verify(BODY, _headers(ours, stamp=now))["id"] == "wevt_1"
    client = anthropic.Anthropic(api_key="sk-unused", webhook_key=SECRET)
    event = client.beta.webhooks.unwrap(BODY.decode(), headers=_headers(ours, stamp=now))
    assert (event.id, event.data.type, event.data.id) == (
        "wevt_1",
        "session.requires_action",
        "sesn_1",
    )
    # The emulator's independent signer agrees too.
    assert sign_delivery(SECRET, "msg_1", now, BODY) == ours


@pytest.mark.fuzz
@given(
    body=st.binary(max_size=200),
    headers=st.dictionaries(
        st.sampled_from(["webhook-id", "webhook-timestamp", "webhook-signature", "x"]),
        st.text(max_size=60),
    ),
)
def test_any_input_is_verified_or_refused_by_name(body: bytes, headers: dict[str, str]) -> None:
    codes = set()
    try:
        _verify(body, headers)
    except WebhookVerificationError as exc:  # nothing else may escape
        codes.add(exc.code)
    assert codes <= {"malformed_webhook", "stale_webhook", "bad_signature"}


@pytest.mark.fuzz
@given(body=st.binary(max_size=200), wid=st.from_regex(r"[A-Za-z0-9_]{1,20}", fullmatch=True))
def test_whatever_is_signed_verifies_and_a_flipped_bit_does_not(body: bytes, wid: str) -> None:
    sig = mw.sign(KEY, wid, NOW, body)
    codes = set()
    try:
        _verify(body, _headers(sig, wid=wid), KEY)
    except WebhookVerificationError as exc:
        codes.add(exc.code)
    assert codes <= {"malformed_webhook"}  # signed; at most not an event object
    raw = bytearray(base64.b64decode(sig[3:]))
    raw[0] ^= 1
    flipped = "v1," + base64.b64encode(bytes(raw)).decode()
    with pytest.raises(WebhookVerificationError) as info:
        _verify(body, _headers(flipped, wid=wid), KEY)
    assert info.value.code == "bad_signature"
