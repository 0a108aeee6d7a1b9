"""Error answers as the AgentCore REST API sends them (``x-amzn-ErrorType`` + JSON body)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["STATUS_CODES", "create_failure", "error"]

STATUS_CODES = {
    400: "ValidationException",
    402: "ServiceQuotaExceededException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    409: "ConflictException",
    424: "RuntimeClientError",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def create_failure(status: int) -> web.Response:
    return error(
        status, STATUS_CODES.get(status, "InternalServerException"), "emulated create failure"
    )


def error(status: int, code: str, message: str) -> web.Response:
    body: dict[str, Any] = {"message": message}
    if code == "ValidationException":
        body["reason"] = "FieldValidationFailed"
    return web.json_response(body, status=status, headers={"x-amzn-ErrorType": code})
