"""Encrypted workflow histories: a payload codec for durable sessions, and its codec server.

A durable session's history holds what its activities carried: the prompt, the model's
text, every tool input and result, and (with the default inline transcripts) the whole
conversation. Temporal stores it in plain JSON unless the client encodes payloads with a
``PayloadCodec``. :class:`AesGcmCodec` is one: AES-256-GCM with a random nonce per
payload, the key named by an id in each payload's metadata so keys can rotate (old ids
stay readable while new payloads use the current key). Memo values (the pending
approvals) go through the same codec.

Use it on every client that starts, reads or works sessions — the workers' too, since a
worker uses its client's converter::

    from temporalio.client import Client
    from managedloop.contrib.temporal.codec import AesGcmCodec, data_converter

    codec = AesGcmCodec({"2026-12": key_bytes})          # 32 bytes from your KMS
    client = await Client.connect("temporal:7233", data_converter=data_converter(codec))

People still read histories through the *codec server* pattern: :func:`codec_app` is an
aiohttp application answering Temporal's ``/decode`` (and ``/encode``) requests, which
``temporal workflow show --codec-endpoint http://127.0.0.1:8888`` and the Temporal UI's
"codec server" setting call. Serve it where only the people allowed to read histories
reach it (it decrypts for whoever can call it): on loopback, or behind your own
authentication (the CLI sends ``--codec-auth`` as the ``Authorization`` header, which
``codec_app(..., authorization=...)`` checks).

Needs the ``cryptography`` package (``pip install cryptography``), imported when a codec is
made.
"""

from __future__ import annotations

import dataclasses
import hmac
import os
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import DataConverter, PayloadCodec

from managedloop.config import Secret
from managedloop.errors import ConfigError

__all__ = ["ENCODING", "AesGcmCodec", "codec_app", "data_converter"]

ENCODING = b"binary/managedloop-aesgcm"
"""The ``encoding`` metadata of an encrypted payload (anything else passes through)."""
_KEY_ID = "encryption-key-id"
_NONCE = 12


class AesGcmCodec(PayloadCodec):
    """AES-256-GCM over each whole payload (metadata and data), keyed by id.

    ``keys`` maps a key id to its 32 raw bytes; new payloads use ``current`` (default: the
    last id given). Decoding a payload whose key id is unknown raises ``ValueError``, and
    one whose ciphertext was altered ``cryptography``'s ``InvalidTag``: an unreadable
    history is never silently read as empty.
    """

    def __init__(self, keys: Mapping[str, bytes], *, current: str | None = None) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:  # pragma: no cover - exercised only without the package
            raise ConfigError(
                "AesGcmCodec needs the cryptography package: pip install cryptography",
                code="missing_dependency",
            ) from exc
        if not keys:
            raise ConfigError("AesGcmCodec needs at least one key", code="invalid_configuration")
        self._ciphers: dict[str, Any] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not key_id:
                raise ConfigError("a key id is a non-empty str", code="invalid_configuration")
            if not isinstance(key, bytes) or len(key) != 32:
                raise ConfigError(
                    f"key {key_id!r} must be 32 bytes (AES-256)", code="invalid_configuration"
                )
            self._ciphers[key_id] = AESGCM(key)
        self.current = current if current is not None else list(keys)[-1]
        if self.current not in self._ciphers:
            raise ConfigError(f"no key with id {self.current!r}", code="invalid_configuration")

    def __repr__(self) -> str:  # the keys never appear
        return f"AesGcmCodec(key_ids={sorted(self._ciphers)!r}, current={self.current!r})"

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self.current]
        out = []
        for p in payloads:
            nonce = os.urandom(_NONCE)
            sealed = cipher.encrypt(nonce, p.SerializeToString(), self.current.encode())
            out.append(
                Payload(
                    metadata={"encoding": ENCODING, _KEY_ID: self.current.encode()},
                    data=nonce + sealed,
                )
            )
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCODING:
                out.append(p)  # written before the codec was on, or by another converter
                continue
            key_id = p.metadata.get(_KEY_ID, b"").decode()
            cipher = self._ciphers.get(key_id)
            if cipher is None:
                raise ValueError(f"payload encrypted with unknown key id {key_id!r}")
            plain = cipher.decrypt(p.data[:_NONCE], p.data[_NONCE:], key_id.encode())
            out.append(Payload.FromString(plain))
        return out


def data_converter(codec: PayloadCodec) -> DataConverter:
    """Temporal's default data converter with ``codec`` on every payload (and memo)."""
    return dataclasses.replace(DataConverter.default, payload_codec=codec)


def codec_app(codec: PayloadCodec, *, authorization: str | Secret | None = None) -> Any:
    """An ``aiohttp.web.Application``: the codec server Temporal's CLI and UI call.

    ``POST /decode`` and ``POST /encode`` take and return ``{"payloads": [...]}`` in
    protobuf JSON. With ``authorization``, a request without exactly that
    ``Authorization`` header is ``401``. Run it with ``aiohttp.web.run_app(app,
    host="127.0.0.1", port=8888)``.
    """
    from aiohttp import web

    expected = authorization.reveal() if isinstance(authorization, Secret) else authorization

    async def handle(request: web.Request, decode: bool) -> web.Response:
        if expected is not None and not hmac.compare_digest(
            request.headers.get("Authorization", ""), expected
        ):
            return web.json_response({"error": "unauthorized"}, status=401)
        try:
            given = json_format.Parse(await request.text(), Payloads())
        except json_format.ParseError:
            return web.json_response({"error": "body is not a Payloads message"}, status=400)
        try:
            done = await (codec.decode if decode else codec.encode)(list(given.payloads))
        except ValueError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(json_format.MessageToDict(Payloads(payloads=done)))

    async def decode(request: web.Request) -> web.Response:
        return await handle(request, True)

    async def encode(request: web.Request) -> web.Response:
        return await handle(request, False)

    async def preflight(request: web.Request) -> web.Response:
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/decode", decode)
    app.router.add_post("/encode", encode)
    app.router.add_route("OPTIONS", "/{tail:.*}", preflight)
    return app
