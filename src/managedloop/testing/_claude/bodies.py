"""Request bodies checked against the ``anthropic`` SDK's own parameter types.

Why: the emulator's answers are checked by the SDK's strict response models, but a body
the library sends was only checked for the few keys a handler reads, so a body the real
service rejects could pass every test. Here each JSON body a route takes is validated
against the SDK's ``*Params`` TypedDict for that call (:data:`BODY_TYPES`, dotted names
under ``anthropic.types.beta``) with a pydantic-core validator, and a body that fails is
answered as the service answers it: ``400`` ``invalid_request_error`` naming the first
offending field (``tools.0.bogus: Extra inputs are not permitted``).

What "strict" means, and why each step is needed:

* **Unknown keys are refused.** A TypedDict ignores extra keys when validated, so every
  ``typed-dict`` node of the generated core schema is set to ``extra_behavior="forbid"``
  (except the few the SDK declares open with ``extra_items``, e.g. a tool's
  ``input_schema``, which carry an ``extras_schema``).
* **Every item is checked.** The SDK types arrays as ``Iterable[...]``, which pydantic
  validates lazily (a generator nobody consumes); those nodes become ``list`` nodes.
* **No coercion.** Bodies are validated as JSON in strict mode: ``"1"`` is not an
  ``int``, ``1`` is not a ``str``.
* **Header parameters are not body keys.** ``betas`` and ``workspace_id`` sit in the
  TypedDicts but travel as headers; in a body they are unknown keys.

A type the installed SDK lacks (an older release) is not guessed at: its route is listed
in :func:`unchecked_routes` and its bodies pass unchecked, so a test can see which.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["BODY_TYPES", "HEADER_PARAMS", "BodyError", "check_body", "unchecked_routes"]

BODY_TYPES: dict[tuple[str, str], str] = {
    ("POST", "/v1/agents"): "agent_create_params.AgentCreateParams",
    ("POST", "/v1/agents/{id}"): "agent_update_params.AgentUpdateParams",
    ("POST", "/v1/environments"): "environment_create_params.EnvironmentCreateParams",
    ("POST", "/v1/environments/{id}"): "environment_update_params.EnvironmentUpdateParams",
    ("POST", "/v1/sessions"): "session_create_params.SessionCreateParams",
    ("POST", "/v1/sessions/{id}"): "session_update_params.SessionUpdateParams",
    ("POST", "/v1/sessions/{id}/events"): "sessions.event_send_params.EventSendParams",
    ("POST", "/v1/sessions/{id}/resources"): "sessions.resource_add_params.ResourceAddParams",
    ("POST", "/v1/deployments"): "deployment_create_params.DeploymentCreateParams",
    ("POST", "/v1/deployments/{id}"): "deployment_update_params.DeploymentUpdateParams",
    (
        "POST",
        "/v1/environments/{env}/work/{work_id}",
    ): "environments.work_update_params.WorkUpdateParams",
    ("POST", "/v1/environments/{env}/work/{work_id}/heartbeat"): (
        "environments.work_heartbeat_params.WorkHeartbeatParams"
    ),
    ("POST", "/v1/environments/{env}/work/{work_id}/stop"): (
        "environments.work_stop_params.WorkStopParams"
    ),
}
"""``(method, route template)`` -> the SDK parameter type of its JSON body (relative to
``anthropic.types.beta``). Routes not listed take no JSON body (archive, run, delete)."""

PATH_PARAMS = {"environment_id": "env"}
"""Keys of the SDK's parameter types that travel in the URL path (the work endpoints'
``environment_id``): filled in from the route's match (its ``{env}``) before the body is
checked, and refused in the body itself."""

HEADER_PARAMS = ("betas", "workspace_id")
"""Keys of the SDK's parameter types that the SDK sends as headers, never in a body."""

_MAX_MESSAGE = 300  # characters of an error message: the field path and pydantic's words


class BodyError(Exception):
    """A body the service would refuse: ``message`` says which field and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _strict(node: Any) -> None:
    """Make a core schema strict in place (see the module docstring)."""
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "typed-dict" and "extras_schema" not in node:
            node["extra_behavior"] = "forbid"
        elif kind == "generator":
            node["type"] = "list"
        for value in node.values():
            _strict(value)
    elif isinstance(node, list):
        for value in node:
            _strict(value)


def _resolve(dotted: str) -> Any:
    """The SDK type named ``dotted`` under ``anthropic.types.beta``, or ``None``."""
    module_name, _, attr = dotted.rpartition(".")
    try:
        module = importlib.import_module(f"anthropic.types.beta.{module_name}")
    except ImportError:
        return None
    return getattr(module, attr, None)


@functools.cache
def _validator(dotted: str) -> Any:
    """A strict pydantic-core validator for the SDK type ``dotted`` (``None``: absent)."""
    from pydantic import TypeAdapter
    from pydantic_core import SchemaValidator

    params = _resolve(dotted)
    if params is None:
        return None
    schema = copy.deepcopy(TypeAdapter(params).core_schema)
    _strict(schema)
    return SchemaValidator(schema)


def unchecked_routes() -> list[tuple[str, str]]:
    """Routes of :data:`BODY_TYPES` whose type the installed SDK does not have."""
    return [route for route, dotted in BODY_TYPES.items() if _validator(dotted) is None]


def _path(body: Any, error: Mapping[str, Any]) -> list[str]:
    """The JSON path of an error's location. Pydantic's union-branch labels (a
    TypedDict's class name, ``str``...) are not keys of the body, so they are left out; a
    missing field is named although the body lacks it."""
    loc = tuple(error["loc"])
    parts: list[str] = []
    node = body
    for i, step in enumerate(loc):
        in_list = isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node)
        if in_list or (isinstance(node, Mapping) and step in node):
            parts.append(str(step))
            node = node[step]
        elif error["type"] == "missing" and i == len(loc) - 1:
            parts.append(str(step))
    return parts


def _relevant(body: Any, errors: list[Any]) -> tuple[list[str], Any]:
    """The error to report, with its path. A union tries every member: a member whose
    ``type`` literal did not match is the wrong branch, and of the others the one that
    got deepest into the body is the one the sender meant (a ``str | {id, version}``
    given an object fails as a string at the field itself, and as the object inside)."""
    wrong = {
        tuple(e["loc"][:-1])
        for e in errors
        if e["type"] == "literal_error" and e["loc"] and e["loc"][-1] == "type"
    }
    candidates = [
        e for e in errors if not any(tuple(e["loc"])[: len(w)] == w for w in wrong)
    ] or errors
    best = max(candidates, key=lambda e: len(_path(body, e)))  # the first of the deepest
    return _path(body, best), best


def check_body(method: str, route: str, body: Any, path: Mapping[str, str] | None = None) -> None:
    """Raise :class:`BodyError` when ``body`` is not a valid request of the route.

    Routes without a type in :data:`BODY_TYPES` (or whose type the SDK lacks) pass."""
    from pydantic_core import ValidationError

    dotted = BODY_TYPES.get((method, route))
    if dotted is None:
        return
    validator = _validator(dotted)
    if validator is None:
        return
    given = {} if body is None else body
    if isinstance(given, Mapping):
        in_path = {k: v for k, v in PATH_PARAMS.items() if "{" + v + "}" in route}
        for key in (*HEADER_PARAMS, *in_path):
            if key in given:
                raise BodyError(f"{key}: Extra inputs are not permitted")
        given = {**given, **{k: (path or {}).get(v, "") for k, v in in_path.items()}}
    try:
        validator.validate_json(json.dumps(given), strict=True)
    except ValidationError as exc:
        loc, error = _relevant(body, exc.errors(include_url=False))
        message = f"{'.'.join(loc) or 'body'}: {error['msg']}"
        raise BodyError(message[:_MAX_MESSAGE]) from None
