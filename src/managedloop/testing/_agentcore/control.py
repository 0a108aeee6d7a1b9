"""The emulated control plane (``bedrock-agentcore-control``): harnesses and their endpoints.

CreateHarness checks the name and role as the service does (a same-name live harness is a
``409 ConflictException``), ListHarnesses pages with ``nextToken``, and the create faults
(``create_status``, ``create_commits``) apply here; statuses progress over the emulator's
clock (:mod:`.state`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from managedloop.testing._agentcore.faults import AgentCoreFaults
from managedloop.testing._agentcore.responses import create_failure, error
from managedloop.testing._agentcore.state import Account, Endpoint, Harness, endpoint_view

__all__ = ["ControlPlane"]

# Applied with fullmatch, as the service does (``$`` would accept a trailing newline).
_HARNESS_NAME_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,39}")
_ENDPOINT_NAME_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,47}")
_ROLE_RE = re.compile(r"arn:aws(-[^:]+)?:iam::\d{12}:role/[\w+=,.@/-]+")


class ControlPlane:
    """The control-plane routes over one :class:`~.state.Account`; ``faults()`` gives the
    emulator's current faults (they can be replaced while it runs)."""

    def __init__(self, account: Account, faults: Callable[[], AgentCoreFaults]) -> None:
        self.account = account
        self.faults = faults

    def handle(
        self,
        request: web.Request,
        method: str,
        parts: list[str],
        body: dict[str, Any],
        *,
        now: float,
        record: Callable[[str], None],
    ) -> web.Response:
        """Answer one control-plane request (``parts``: its unquoted path segments);
        ``record(operation)`` is called once the operation is known."""
        n = len(parts)
        if n == 1 and method == "POST":
            record("CreateHarness")
            return self.create_harness(body, now)
        if n == 1 and method == "GET":
            record("ListHarnesses")
            return self.list_harnesses(request.query, now)
        with self.account.lock:
            harness = self.account.harnesses.get(parts[1]) if n > 1 else None
            if harness is not None and harness.status(now) is None:
                harness = None
        if n == 2:
            op = {"GET": "GetHarness", "DELETE": "DeleteHarness"}.get(method, "Unknown")
            record(op)
            if harness is None:
                return error(404, "ResourceNotFoundException", f"harness {parts[1]} not found")
            if method == "GET":
                return web.json_response({"harness": harness.view(now)})
            if method == "DELETE":
                with self.account.lock:
                    if harness.deleting_since is None:
                        harness.deleting_since = now
                        harness.delete_after = self.faults().delete_after
                        harness.delete_outcome = self.faults().delete_outcome
                return web.json_response({"harness": harness.view(now)})
        if n >= 3 and parts[2] == "endpoints":
            op = {
                ("GET", 3): "ListHarnessEndpoints",
                ("POST", 3): "CreateHarnessEndpoint",
                ("GET", 4): "GetHarnessEndpoint",
                ("DELETE", 4): "DeleteHarnessEndpoint",
            }.get((method, n), "Unknown")
            record(op)
            if harness is None:
                return error(404, "ResourceNotFoundException", f"harness {parts[1]} not found")
            if op == "CreateHarnessEndpoint":
                name = body.get("endpointName", "")
                if not isinstance(name, str) or not _ENDPOINT_NAME_RE.fullmatch(name):
                    return error(400, "ValidationException", "invalid endpointName")
                with self.account.lock:
                    if name in harness.endpoints:
                        return error(409, "ConflictException", f"endpoint {name} exists")
                    ep = Endpoint(
                        name=name,
                        created=now,
                        absent_for=0.0,
                        ready_after=self.faults().endpoint_ready_after,
                        outcome=self.faults().endpoint_outcome,
                    )
                    harness.endpoints[name] = ep
                return web.json_response({"endpoint": endpoint_view(harness, ep, now)}, status=201)
            if op == "ListHarnessEndpoints":
                views = [
                    endpoint_view(harness, ep, now)
                    for ep in harness.endpoints.values()
                    if ep.status(now) is not None
                ]
                return web.json_response({"endpoints": views})
            if n == 4:
                ep2 = harness.endpoints.get(parts[3])
                if ep2 is None or ep2.status(now) is None:
                    return error(404, "ResourceNotFoundException", f"endpoint {parts[3]} not found")
                if op == "DeleteHarnessEndpoint":
                    ep2.fixed = "DELETING"
                return web.json_response({"endpoint": endpoint_view(harness, ep2, now)})
        return error(404, "UnknownOperationException", f"no route for {method} {request.path}")

    def create_harness(self, body: dict[str, Any], now: float) -> web.Response:
        f = self.faults()
        failing = f.create_status is not None and f.create_failures != 0
        if failing and f.create_failures is not None:
            f.create_failures -= 1
        if failing and f.create_status is not None and not f.create_commits:
            return create_failure(f.create_status)
        name = body.get("harnessName")
        if not isinstance(name, str) or not _HARNESS_NAME_RE.fullmatch(name):
            return error(
                400,
                "ValidationException",
                f"1 validation error detected: Value '{name}' at 'harnessName' failed to "
                "satisfy constraint: Member must satisfy regular expression pattern: "
                "[a-zA-Z][a-zA-Z0-9_]{0,39}",
            )
        role = body.get("executionRoleArn")
        if not isinstance(role, str) or not _ROLE_RE.fullmatch(role):
            return error(
                400, "ValidationException", f"Value {role!r} at 'executionRoleArn' is invalid"
            )
        with self.account.lock:
            for h in self.account.harnesses.values():
                if h.name == name and h.status(now) is not None:
                    return error(409, "ConflictException", f"harness {name} already exists")
            hid = self.account.new_harness_id(name)
            harness = Harness(
                id=hid,
                name=name,
                arn=self.account.harness_arn(hid),
                body=body,
                created=now,
                ready_after=f.harness_ready_after,
                outcome=f.harness_outcome,
                delete_after=f.delete_after,
                delete_outcome=f.delete_outcome,
            )
            harness.endpoints["DEFAULT"] = Endpoint(
                name="DEFAULT",
                created=now,
                absent_for=f.endpoint_absent_for,
                ready_after=f.endpoint_ready_after,
                outcome=f.endpoint_outcome,
            )
            self.account.harnesses[hid] = harness
        if failing and f.create_status is not None:
            return create_failure(f.create_status)
        return web.json_response({"harness": harness.view(now)}, status=201)

    def list_harnesses(self, query: Mapping[str, str], now: float) -> web.Response:
        with self.account.lock:
            alive = [h for h in self.account.harnesses.values() if h.status(now) is not None]
        start = int(query.get("nextToken", "0") or 0)
        size = int(query.get("maxResults", "100") or 100)
        page = alive[start : start + size]
        out: dict[str, Any] = {
            "harnesses": [
                {
                    "harnessId": h.id,
                    "harnessName": h.name,
                    "arn": h.arn,
                    "status": h.status(now),
                    "createdAt": h.created_at,
                    "updatedAt": h.created_at,
                }
                for h in page
            ]
        }
        if start + size < len(alive):
            out["nextToken"] = str(start + size)
        return web.json_response(out)

    # ---------------------------------------------------------------- data plane: invoke
