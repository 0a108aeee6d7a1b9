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
from managedloop.testing._agentcore.models import model_problem
from managedloop.testing._agentcore.responses import create_failure, error
from managedloop.testing._agentcore.state import Account, Endpoint, Harness, endpoint_view

__all__ = ["ControlPlane", "body_model_problem"]

# Applied with fullmatch, as the service does (``$`` would accept a trailing newline).
_HARNESS_NAME_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,39}")
_ENDPOINT_NAME_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,47}")
_ROLE_RE = re.compile(r"arn:aws(-[^:]+)?:iam::\d{12}:role/[\w+=,.@/-]+")


def body_model_problem(body: Mapping[str, Any]) -> str | None:
    """Bedrock's refusal of the body's ``bedrockModelConfig.modelId`` (:mod:`.models`)."""
    model = body.get("model")
    config = model.get("bedrockModelConfig") if isinstance(model, Mapping) else None
    return model_problem(config.get("modelId")) if isinstance(config, Mapping) else None


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
            op = {"GET": "GetHarness", "DELETE": "DeleteHarness", "PATCH": "UpdateHarness"}.get(
                method, "Unknown"
            )
            record(op)
            if harness is None:
                return error(404, "ResourceNotFoundException", f"harness {parts[1]} not found")
            if method == "GET":
                version = request.query.get("harnessVersion")
                if version is not None and harness.body_of(version) is None:
                    return error(404, "ResourceNotFoundException", f"no version {version}")
                return web.json_response({"harness": harness.view(now, version)})
            if method == "PATCH":
                return self.update_harness(harness, body, now)
            if method == "DELETE":
                with self.account.lock:
                    if harness.deleting_since is None:
                        harness.deleting_since = now
                        harness.delete_after = self.faults().delete_after
                        harness.delete_outcome = self.faults().delete_outcome
                return web.json_response({"harness": harness.view(now)})
        if n == 3 and parts[2] == "versions" and method == "GET":
            record("ListHarnessVersions")
            if harness is None:
                return error(404, "ResourceNotFoundException", f"harness {parts[1]} not found")
            return web.json_response({"harnessVersions": self.versions(harness, now)})
        if n >= 3 and parts[2] == "endpoints":
            op = {
                ("GET", 3): "ListHarnessEndpoints",
                ("POST", 3): "CreateHarnessEndpoint",
                ("GET", 4): "GetHarnessEndpoint",
                ("DELETE", 4): "DeleteHarnessEndpoint",
                ("PATCH", 4): "UpdateHarnessEndpoint",
            }.get((method, n), "Unknown")
            record(op)
            if harness is None:
                return error(404, "ResourceNotFoundException", f"harness {parts[1]} not found")
            if op == "CreateHarnessEndpoint":
                name = body.get("endpointName", "")
                if not isinstance(name, str) or not _ENDPOINT_NAME_RE.fullmatch(name):
                    return error(400, "ValidationException", "invalid endpointName")
                target = body.get("targetVersion")
                if target is not None and harness.body_of(str(target)) is None:
                    return error(400, "ValidationException", f"no harness version {target}")
                with self.account.lock:
                    if name in harness.endpoints:
                        return error(409, "ConflictException", f"endpoint {name} exists")
                    ep = Endpoint(
                        name=name,
                        created=now,
                        absent_for=0.0,
                        ready_after=self.faults().endpoint_ready_after,
                        outcome=self.faults().endpoint_outcome,
                        target_version=str(target) if target is not None else harness.version,
                        description=body.get("description"),
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
                if op == "UpdateHarnessEndpoint":
                    target = body.get("targetVersion")
                    if target is not None and harness.body_of(str(target)) is None:
                        return error(400, "ValidationException", f"no harness version {target}")
                    with self.account.lock:
                        if target is not None:
                            ep2.target_version = str(target)
                        if body.get("description") is not None:
                            ep2.description = body["description"]
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
        problem = body_model_problem(body)
        if problem is not None:
            return error(400, "ValidationException", problem)
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
                tags=dict(body.get("tags") or {}),
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

    def update_harness(self, harness: Harness, body: dict[str, Any], now: float) -> web.Response:
        """A new version: the given members replace the latest's (``optionalValue``
        wrappers unwrapped; an empty wrapper clears the member)."""
        status = harness.status(now)
        if status != "READY":
            return error(409, "ConflictException", f"harness is {status}")
        problem = body_model_problem(body)
        if problem is not None:
            return error(400, "ValidationException", problem)
        role = body.get("executionRoleArn")
        if role is not None and not (isinstance(role, str) and _ROLE_RE.fullmatch(role)):
            return error(400, "ValidationException", f"Value {role!r} at 'executionRoleArn'")
        with self.account.lock:
            new = dict(harness.body)
            for key, value in body.items():
                if key in ("clientToken", "harnessId"):
                    continue
                if isinstance(value, Mapping) and set(value) <= {"optionalValue"}:
                    if "optionalValue" in value:
                        new[key] = value["optionalValue"]
                    else:
                        new.pop(key, None)
                else:
                    new[key] = value
            harness.versions.append(harness.body)
            harness.body = new
            ready_after = self.faults().harness_ready_after
            harness.updating_until = now + ready_after if ready_after else None
        return web.json_response({"harness": harness.view(now)})

    def versions(self, harness: Harness, now: float) -> list[dict[str, Any]]:
        count = len(harness.versions) + 1
        return [
            {
                "harnessId": harness.id,
                "harnessName": harness.name,
                "arn": harness.arn,
                "harnessVersion": str(v),
                "status": "READY" if v < count else harness.status(now),
                "createdAt": harness.created_at,
                "updatedAt": harness.created_at,
            }
            for v in range(count, 0, -1)
        ]

    def tags(
        self, method: str, arn: str, body: dict[str, Any], record: Callable[[str], None]
    ) -> web.Response:
        """TagResource / ListTagsForResource on a harness ARN."""
        record({"POST": "TagResource", "GET": "ListTagsForResource"}.get(method, "Unknown"))
        with self.account.lock:
            harness = next((h for h in self.account.harnesses.values() if h.arn == arn), None)
            if harness is None:
                return error(404, "ResourceNotFoundException", f"resource {arn} not found")
            if method == "POST":
                harness.tags.update(body.get("tags") or {})
                return web.Response(status=204)
            return web.json_response({"tags": dict(harness.tags)})

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
