"""Fault and timing knobs of the AgentCore emulator (:class:`AgentCoreFaults`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AgentCoreFaults"]


@dataclass(kw_only=True)
class AgentCoreFaults:
    """Faults and timings. Data-plane faults hit ``times`` invokes after ``skip`` clean ones.

    Frame indices count the frames of one invoke response from 0 (``messageStart``).
    """

    truncate_after: int | None = None
    """Send only the first N frames, then end the HTTP stream cleanly (no ``messageStop``)."""
    cut_mid_frame: bool = False
    """With ``truncate_after``: also send the first half of frame N before ending."""
    drop_after: int | None = None
    """Send N frames, then abort the TCP connection."""
    corrupt_frame: int | None = None
    """Send frame N with a wrong message CRC."""
    exception_at: int | None = None
    """Replace frame N (and the rest) by an exception frame."""
    exception_type: str = "internalServerException"
    exception_message: str = "emulated failure"
    stall_at: int | None = None
    """Sleep ``stall_seconds`` before frame N (``math.inf``: until :meth:`AgentCoreEmulator.
    release_stalls` or until the client goes away, which counts as a disconnect)."""
    stall_seconds: float = 0.0
    chunk_delay: float = 0.0
    """Sleep this long before every frame (a slow but live stream)."""
    status: int | None = None
    """Answer the invoke with this HTTP error before any frame (429: ThrottlingException)."""
    reuse_block_index: bool = False
    """Put every tool block of a turn at ``contentBlockIndex`` 0 (observed live)."""
    duplicate_frame: int | None = None
    """Send frame N twice in a row (a replaying proxy). The client got a corrupted turn,
    so a retry with the same body is served the same turn again."""
    duplicate_every_frame: bool = False
    """Send every frame twice in a row."""
    raw_tool_input: str | None = None
    """Stream this text as every tool block's input instead of the call's JSON (e.g.
    ``"null"`` or ``'{"city": '``): what a model emitting invalid arguments sends."""
    skip: int = 0
    times: int | None = 1
    """How many invokes (after ``skip``) the data-plane faults hit; ``None``: all."""
    # --- control plane -------------------------------------------------------------------
    harness_ready_after: float = 0.05
    harness_outcome: str = "READY"
    """Status a new harness reaches after ``harness_ready_after`` (e.g. ``CREATE_FAILED``)."""
    endpoint_absent_for: float = 0.0
    """Seconds after the harness is created during which its DEFAULT endpoint is a 404."""
    endpoint_ready_after: float = 0.05
    endpoint_outcome: str = "READY"
    delete_after: float = 0.05
    delete_outcome: str | None = None
    """``None``: a deleted harness disappears; else it sticks at this status."""
    control_latency: float = 0.0
    """Seconds each control-plane request waits before answering."""
    create_status: int | None = None
    """Answer CreateHarness with this HTTP error (e.g. 500, 402)."""
    create_commits: bool = False
    """With ``create_status``: create the harness anyway, then answer the error (a 5xx
    whose create went through)."""
    create_failures: int | None = None
    """With ``create_status``: answer only this many creates so, then create as usual
    (``None``: every create). ``create_status=409, create_failures=1`` plays a namesake
    that finished deleting between the 409 and the client's lookup."""
    create_latency: float = 0.0
    """Seconds CreateHarness waits *after* creating the harness before answering (a client
    that times out first leaves a harness it never heard of)."""
    # --- commands ---------------------------------------------------------------------------
    command_exception: str | None = None
    """Answer every command with this exception frame after ``contentStart``."""
    command_stall: float = 0.0
    """Seconds to wait after ``contentStart`` before running a command (``math.inf``: until
    released or the client goes away)."""
