"""SigV4 verification for the emulator, with botocore's own signer.

The emulator recomputes each request's signature with ``botocore.auth.SigV4Auth`` from
exactly what arrived (method, raw path and query, the headers named in ``SignedHeaders``,
the body bytes, the ``X-Amz-Date``) and compares it with the ``Authorization`` header in
constant time. Nothing here signs outgoing requests; clients sign with botocore as usual.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping

__all__ = ["SignatureError", "verify"]

_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<akid>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[^,]+), ?"
    r"Signature=(?P<sig>[0-9a-f]{64})$"
)


class SignatureError(Exception):
    """Why a request's signature was refused (the text goes into the 403 body)."""

    def __init__(self, message: str, *, code: str = "InvalidSignatureException") -> None:
        super().__init__(message)
        self.code = code


def verify(
    *,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    keys: Mapping[str, str],
    service: str,
    region: str,
) -> str:
    """Check a SigV4 request; return the access key id or raise :class:`SignatureError`."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    lower = {k.lower(): v for k, v in headers.items()}
    match = _AUTH.match(lower.get("authorization", ""))
    if match is None:
        raise SignatureError(
            "missing or malformed SigV4 Authorization header", code="MissingAuthenticationToken"
        )
    akid = match["akid"]
    if akid not in keys:
        raise SignatureError(
            "The security token included in the request is invalid.",
            code="UnrecognizedClientException",
        )
    if match["service"] != service:
        raise SignatureError(f"credential scope service must be {service!r}")
    if match["region"] != region:
        raise SignatureError(f"credential scope region must be {region!r}")
    stamp = lower.get("x-amz-date", "")
    if not stamp.startswith(match["date"]):
        raise SignatureError("X-Amz-Date does not match the credential scope date")
    signed = match["signed"].split(";")
    if "host" not in signed:
        raise SignatureError("the host header must be signed")
    missing = [h for h in signed if h not in lower]
    if missing:
        raise SignatureError(f"signed header(s) not present: {', '.join(missing)}")
    request = AWSRequest(method=method, url=url, data=body, headers={h: lower[h] for h in signed})
    request.context["timestamp"] = stamp
    signer = SigV4Auth(
        Credentials(akid, keys[akid], lower.get("x-amz-security-token")), service, region
    )
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(expected, match["sig"]):
        # AWS's own wording, which echoes the canonical request (signed headers included,
        # so a session token too) and the string to sign: clients must scrub it.
        string_to_sign = signer.string_to_sign(request, canonical)
        raise SignatureError(
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method. Consult the service "
            "documentation for details.\n\nThe Canonical String for this request should have "
            f"been\n'{canonical}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n",
            code="InvalidSignatureException",
        )
    return akid
