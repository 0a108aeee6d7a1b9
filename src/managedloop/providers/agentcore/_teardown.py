"""Delete a harness (asynchronous on AWS: DELETING for a while).

Managed memory (``harness_config={"memory": {"managedMemoryConfiguration": ...}}``) is the
harness's conversation memory. DeleteHarness deletes it unless told otherwise, so teardown
always says: ``deleteManagedMemory`` is sent explicitly, ``False`` (keep) unless the caller
passes ``delete_managed_memory=True``, and the report states which (``managed_memory``:
``"kept"`` or ``"deleted"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from managedloop.errors import APIStatusError, InvalidOptionsError
from managedloop.providers.agentcore._ids import AgentCoreHandle, harness_id_of
from managedloop.providers.agentcore._waits import ControlPlane, WaitBudget, call

__all__ = ["teardown"]


async def teardown(
    provider: ControlPlane,
    handle: Any,
    *,
    timeout: float = 30.0,
    delete_managed_memory: bool = False,
) -> dict[str, Any]:
    """Delete the harness (asynchronous on AWS: DELETING for a while). A harness already
    gone counts as torn down. Returns ``{"harness_id", "status", "managed_memory"}``."""
    if not isinstance(delete_managed_memory, bool):
        raise InvalidOptionsError(
            "delete_managed_memory must be True or False", option="delete_managed_memory"
        )
    memory = "deleted" if delete_managed_memory else "kept"
    if isinstance(handle, AgentCoreHandle):
        hid = handle.harness_id
    elif isinstance(handle, Mapping) and isinstance(handle.get("harness_id"), str):
        hid = str(handle["harness_id"])
    elif isinstance(handle, Mapping) and isinstance(handle.get("harness_arn"), str):
        hid = harness_id_of(str(handle["harness_arn"]))
    elif isinstance(handle, str):
        hid = harness_id_of(handle) if handle.startswith("arn:") else handle
    elif isinstance(getattr(handle, "harness_id", None), str):  # a HarnessHandle
        hid = str(handle.harness_id)
    else:
        raise InvalidOptionsError(
            "teardown needs an AgentCoreHandle, a harness id or ARN", option="handle"
        )
    budget = WaitBudget.new(timeout)
    try:
        result = await call(
            provider,
            "delete_harness",
            budget,
            harnessId=hid,
            deleteManagedMemory=delete_managed_memory,
        )
    except APIStatusError as exc:
        if exc.status == 404:
            return {"harness_id": hid, "status": "absent", "managed_memory": "absent"}
        raise
    status = (result.get("harness") or {}).get("status")
    return {"harness_id": hid, "status": status, "managed_memory": memory}
