"""DEBUG logs never carry a live client's literal credentials (hostile review, finding 2)."""

from __future__ import annotations

import gc
import json
import logging
import re
import weakref
from urllib.parse import quote, quote_plus

import pytest
from aiohttp import web

import managedloop as ml
from managedloop.providers.agentcore._redact import install_redaction

from ._peer import SECRET, TOKEN, Peer, provider_for

# ------------------------------------------------------------------ 2. DEBUG logs


def test_debug_logs_never_carry_the_literal_credentials(caplog: pytest.LogCaptureFixture) -> None:
    async def echo_back(request: web.Request) -> web.StreamResponse:
        token = request.headers.get("X-Amz-Security-Token", "")
        return web.json_response({"message": f"session token {token} secret {SECRET}"}, status=403)

    with Peer(echo_back) as server, caplog.at_level(logging.DEBUG):
        provider = provider_for(server.url)
        with pytest.raises(ml.AuthenticationError) as info:
            ml.run_sync(provider, agent=ml.AgentSpec(name="a"), prompt="x")
    assert server.requests  # the token did go out, and came back in the body
    assert TOKEN not in str(info.value)
    assert SECRET not in str(info.value)
    assert "Response body" in caplog.text  # botocore.parsers did log the echoed body
    assert TOKEN not in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    "form",
    [
        TOKEN,
        quote(TOKEN, safe=""),
        quote(TOKEN, safe="-_.~"),  # botocore's query-string quoting
        quote_plus(TOKEN),
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote(TOKEN, safe="")),
        TOKEN.replace("/", "\\/"),  # a JSON encoder that escapes solidus
        TOKEN.replace("/", "\\\\/"),  # the same, inside a bytes repr
        json.dumps(TOKEN)[1:-1],
    ],
)
def test_the_log_filter_masks_every_live_clients_secrets_in_any_form(
    form: str, caplog: pytest.LogCaptureFixture
) -> None:
    provider = provider_for("http://127.0.0.1:9")
    install_redaction()
    with caplog.at_level(logging.DEBUG, "botocore.parsers"):
        logging.getLogger("botocore.parsers").debug("Response body:\n%s", f"b'echo {form}'")
    assert "Response body" in caplog.text
    assert form not in caplog.text
    assert "<redacted>" in caplog.text
    del provider


def test_the_log_filter_does_not_keep_a_client_alive() -> None:
    from managedloop.providers.agentcore import _redact

    provider = provider_for("http://127.0.0.1:9")
    ref = weakref.ref(provider.clients)
    assert ref() in _redact.live_clients()
    del provider
    gc.collect()
    assert ref() is None


def test_a_logged_traceback_is_masked_too(caplog: pytest.LogCaptureFixture) -> None:
    provider = provider_for("http://127.0.0.1:9")
    install_redaction()
    with caplog.at_level(logging.DEBUG, "botocore.endpoint"):
        try:
            raise ValueError(f"the body said {SECRET}")
        except ValueError:
            logging.getLogger("botocore.endpoint").debug("failed", exc_info=True)
    assert "ValueError: the body said <redacted>" in caplog.text
    assert SECRET not in caplog.text
    del provider
