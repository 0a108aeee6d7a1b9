"""Validation of session options, done before anything is opened or sent."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TypedDict

from managedloop import _validate, config
from managedloop.errors import InvalidOptionsError
from managedloop.hosts import OpenRequest, Provider
from managedloop.outcome import Outcome
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec
from managedloop.results import Approve, Deny, Pending, SessionResult, fast_builder
from managedloop.session import output as _output
from managedloop.session.approvals import Confirm, check_approvals
from managedloop.session.machine import GuardInput, LoopOptions, TurnGuard
from managedloop.session.record import SessionRecord, as_record
from managedloop.tools import ToolDefinition, Toolset

__all__ = ["DEFAULTS", "Prepared", "SessionOptions", "prepare"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Prepared:
    provider: Provider
    handler: Any
    open_request: OpenRequest
    loop: LoopOptions
    max_concurrent_tools: int
    tool_timeout: float | None
    caller: dict[str, Any] = field(default_factory=dict)
    info_metadata: dict[str, Any] = field(default_factory=dict)
    approvals: Mapping[str, Approve | Deny] = field(default_factory=dict)
    confirm: Confirm | None = None
    # The agent spec's model: what telemetry names until the host reports the model it
    # sends (the connection's ``model``; see managedloop.hosts.ConnectionBase).
    model: str | None = None
    agent_meta: dict[str, Any] = field(default_factory=dict)
    record: SessionRecord | None = None  # the session record (managedloop.session.record)
    output: _output.OutputPlan | None = None
    """With ``output=``: how the typed output is asked for and checked."""


# What ``isinstance(x, Provider)`` checks, without a runtime-checkable Protocol's
# attribute scan (the slowest isinstance there is) on every run.
_PROVIDER_ATTRS = ("name", "supports_outcomes", "supports_raw_events", "open")


def _is_provider(value: Any) -> bool:
    return (  # _PROVIDER_ATTRS, spelled out: no generator frame per run
        hasattr(value, "name")
        and hasattr(value, "supports_outcomes")
        and hasattr(value, "supports_raw_events")
        and hasattr(value, "open")
        and callable(value.open)
    )


def coerce_outcome(value: Any) -> Outcome | None:
    if value is None or isinstance(value, Outcome):
        return value
    if isinstance(value, Mapping) and {"description", "rubric"} <= set(value):
        extra = set(value) - {"description", "rubric", "max_iterations"}
        if not extra:
            return Outcome(**value)
    raise InvalidOptionsError(
        "outcome must be an Outcome or a mapping with description and rubric", option="outcome"
    )


def _budget_guard(
    user: TurnGuard | None, total: int | None, inp: int | None, out: int | None
) -> TurnGuard | None:
    if total is None and inp is None and out is None:
        return user

    def guard(state: GuardInput) -> str | None:
        u = state.usage
        if (
            (total is not None and u.total_tokens > total)
            or (inp is not None and u.input_tokens > inp)
            or (out is not None and u.output_tokens > out)
        ):
            return "token_budget"
        return user(state) if user is not None else None

    return guard


class SessionOptions(TypedDict, total=False):
    """The loop options ``run`` and ``start`` share (defaults in ``DEFAULTS``)."""

    handler: Any
    """Serves tool calls: any object with ``handle_tool_call`` (default: the agent's tools)."""
    resume: SessionResult | Mapping[str, Any] | str | None
    """A previous result (or its ``to_dict()``, or a session id) to reattach to."""
    approvals: Mapping[str, Approve | Deny] | None
    """Decisions for the pending approvals of ``resume=``, by tool-use id."""
    confirm: Confirm | None
    """Called with each :class:`~managedloop.ApprovalRequest` as it comes up (sync or
    async): ``ml.Approve()``, ``ml.Deny("why")``, or ``None`` to leave it pending."""
    outcome: Outcome | Mapping[str, Any] | None
    """Kick off with an outcome instead of a prompt (hosts with outcome support)."""
    environment: Any
    """Where the session runs, on hosts with environments (Claude): an environment handle
    (``ml.ensure_environment``), its dict, or an id; over the provider's own."""
    max_turns: int
    turn_guard: Callable[[GuardInput], str | None] | None
    max_total_tokens: int | None
    max_input_tokens: int | None
    max_output_tokens: int | None
    require_terminal_tool: bool
    terminal_tool: str | None
    max_reprompts: int
    max_concurrent_tools: int
    tool_timeout: float | None
    telemetry_metadata: Mapping[str, Any] | None
    record: Any
    """Keep this session in a session record (:mod:`managedloop.session.record`): a
    :class:`~managedloop.stores.Store` or an ``ml.SessionRecord``; default
    ``ml.configure(record=...)``, else none. ``None`` records nothing."""
    output: Any
    """The type of the typed result (``result.output``): a pydantic model, a dataclass, a
    ``TypedDict``, a union or list of them, a scalar type (:mod:`managedloop.session.output`)."""
    output_strategy: str | None
    """``"tool"``, ``"native"`` (Local) or ``"text"``; ``None`` chooses per host."""
    output_retries: int
    """How often an invalid output goes back to the model before ``output_invalid``."""
    output_validator: Callable[[Any], Any] | Sequence[Callable[[Any], Any]] | None
    """Checks run on the validated output (sync or async); raise ``ml.ModelRetry("why")``
    to send it back to the model; return a replacement or ``None`` to keep it."""


DEFAULTS: SessionOptions = {
    "handler": None,
    "resume": None,
    "approvals": None,
    "confirm": None,
    "outcome": None,
    "environment": None,
    "max_turns": 50,
    "turn_guard": None,
    "max_total_tokens": None,
    "max_input_tokens": None,
    "max_output_tokens": None,
    "require_terminal_tool": False,
    "terminal_tool": None,
    "max_reprompts": 2,  # the reference's default: two nudges, then give up
    "max_concurrent_tools": 8,  # enough parallelism for a turn; bounds a runaway fan-out
    "tool_timeout": None,
    "telemetry_metadata": None,
    "record": None,
    "output": None,
    "output_strategy": None,
    "output_retries": 2,  # as max_reprompts: two chances to fix it, then output_invalid
    "output_validator": None,
}
_DEFAULT_OPTIONS = SimpleNamespace(**DEFAULTS)  # prepare reads options, never writes them


def _check_agent(agent: Any) -> None:
    """An :class:`AgentSpec`, or what a managed host takes as a handle: a non-empty id
    string, a mapping, or a handle object. The host checks the handle's contents; numbers,
    bytes, sequences and blank strings are never one."""
    if agent is None:
        raise InvalidOptionsError("agent= is required (an AgentSpec or a handle)", option="agent")
    if isinstance(agent, AgentSpec):
        return
    if isinstance(agent, int | float | complex | bytes | bytearray | list | tuple | set) or (
        isinstance(agent, str) and not agent.strip()
    ):
        raise InvalidOptionsError(
            f"agent must be an AgentSpec or a provisioned handle (an id string, a mapping or "
            f"a handle object), got {agent!r}",
            option="agent",
        )


def _check_environment(environment: Any) -> None:
    """``None``, or what a host takes as an environment handle: a non-empty id string, a
    mapping, or a handle object (a spec must be built first: ``ml.ensure_environment``)."""
    if environment is None:
        return
    if isinstance(environment, EnvironmentSpec):
        raise InvalidOptionsError(
            "environment= takes a built environment (ml.ensure_environment's handle, its "
            "dict or an id), not an EnvironmentSpec",
            option="environment",
        )
    if isinstance(environment, int | float | complex | bytes | bytearray | list | tuple | set) or (
        isinstance(environment, str) and not environment.strip()
    ):
        raise InvalidOptionsError(
            f"environment must be an environment handle, its dict or an id, got {environment!r}",
            option="environment",
        )


def _check_resume(
    resume: Any,
) -> tuple[str | None, list[dict[str, Any]] | None, Pending | None]:
    if resume is None:
        return None, None, None
    if isinstance(resume, Mapping):  # a result's to_dict(), e.g. read back from JSON
        resume = _result_from_dict(resume)
    if isinstance(resume, SessionResult):
        if resume.session_id is None and resume.transcript is None:
            raise InvalidOptionsError(
                "resume= needs a result with a session_id or a transcript", option="resume"
            )
        pending = resume.pending if isinstance(resume.pending, Pending) else None
        return resume.session_id, resume.transcript, pending
    if isinstance(resume, str):
        if not resume.strip():  # '' must not silently start a new session
            raise InvalidOptionsError(
                f"resume= needs a session id, got {resume!r}",
                code="invalid_session_id",
                option="resume",
            )
        return resume, None, None
    raise InvalidOptionsError(
        "resume= takes a SessionResult (or its to_dict()) or a session id string",
        option="resume",
    )


def _result_from_dict(data: Mapping[str, Any]) -> SessionResult:
    """A :class:`SessionResult` from its ``to_dict()``; what resuming reads is checked."""
    try:
        result = SessionResult.from_dict(data)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise InvalidOptionsError(
            f"resume= got a mapping that is not a SessionResult.to_dict(): {exc}",
            option="resume",
        ) from None
    sid, transcript, pending = result.session_id, result.transcript, result.pending
    if (
        (sid is not None and not isinstance(sid, str))
        or (transcript is not None and not isinstance(transcript, list))
        or (pending is not None and not isinstance(pending, Pending))
    ):
        raise InvalidOptionsError(
            "resume= got a mapping whose session_id, transcript or pending is not what a "
            "SessionResult.to_dict() holds",
            option="resume",
        )
    return result


def prepare(
    provider: Any,
    *,
    agent: Any,
    options: Mapping[str, Any],
    timeout: float | None = None,
    prompt: Any = None,
) -> tuple[Prepared, Outcome | None]:
    """Check every option; raise :class:`InvalidOptionsError` on the first bad one.

    Every loop option is type-checked here, before anything is opened or sent: counts are
    integers (``bool`` refused), durations finite seconds > 0 (NaN and infinity refused;
    ``None`` means no bound), ``prompt`` a non-empty string, ``resume`` a result or a
    non-empty id, ``terminal_tool`` a non-empty string. The checks run in this order, so
    the first bad option named is always the same one.
    """
    o = _with_defaults(options)
    _check_provider(provider)
    _check_turn_guard(o.turn_guard)
    _check_agent(agent)
    _check_environment(o.environment)
    spec = agent if isinstance(agent, AgentSpec) else None
    if prompt is not None:
        _validate.text("prompt", prompt)
    terminal_tool = _terminal_tool(o.require_terminal_tool, o.terminal_tool, spec)
    outcome = _check_outcome(provider, o.outcome)
    _check_counts(o)
    tool_timeout = _validate.duration("tool_timeout", o.tool_timeout)
    _validate.duration("timeout", timeout)
    _check_telemetry_metadata(o.telemetry_metadata)
    handler, tools = _handler_and_tools(o.handler, spec)
    session_id, transcript, pending = _check_resume(o.resume)
    approvals = check_approvals(o.approvals, o.confirm, pending)
    record = as_record(o.record if "record" in options else config.resolve("record"))
    plan = None
    host_spec = spec
    if o.output is not None:
        plan, host = _output.plan_and_spec(
            o.output,
            strategy=o.output_strategy,
            retries=o.output_retries,
            validators=o.output_validator,
            provider=provider,
            spec=spec,
            tools=tools,
        )
        if plan.tool is not None and plan.tool.name not in {t.name for t in tools}:
            tools = [*tools, plan.tool]
        if host is not None:
            host_spec = host

    info_metadata = _info_metadata(o.telemetry_metadata, spec)
    # Built with their slots set directly (see managedloop.results on the builders): once
    # per run, three frozen dataclass __init__s of 5-12 keyword fields cost more than all
    # the checks above.
    loop: Any = _LoopB()
    loop.max_turns = o.max_turns
    loop.turn_guard = _budget_guard(
        o.turn_guard, o.max_total_tokens, o.max_input_tokens, o.max_output_tokens
    )
    loop.terminal_tool = terminal_tool
    loop.require_terminal_tool = o.require_terminal_tool
    loop.max_reprompts = o.max_reprompts
    loop.output_strategy = plan.strategy if plan is not None else None
    loop.output_tool = plan.tool.name if plan is not None and plan.tool is not None else None
    loop.output_retries = plan.retries if plan is not None else 2
    loop.__class__ = LoopOptions
    request: Any = _OpenB()
    request.spec = host_spec
    request.agent = agent
    request.tools = tools
    request.session_id = session_id
    request.transcript = transcript
    request.environment = o.environment
    request.replay_from = None  # durable sessions set it (contrib.temporal); a run does not
    request.metadata = info_metadata
    request.pending = pending
    request.tool_input_deltas = (
        frozenset((plan.tool.name,)) if plan is not None and plan.tool is not None else _NONE
    )
    request.__class__ = OpenRequest
    prepared: Any = _PreparedB()
    prepared.provider = provider
    prepared.handler = handler
    prepared.open_request = request
    prepared.loop = loop
    prepared.max_concurrent_tools = o.max_concurrent_tools
    prepared.tool_timeout = tool_timeout
    # Library keys win over caller tags: the host's name rides on every loop event.
    prepared.caller = {**info_metadata, "provider": provider.name}
    prepared.info_metadata = info_metadata
    prepared.approvals = approvals
    prepared.confirm = o.confirm
    prepared.model = spec.model if spec is not None else None
    prepared.agent_meta = _agent_meta(agent, spec, provider)
    prepared.record = record
    prepared.output = plan
    prepared.__class__ = Prepared
    return prepared, outcome


_LoopB = fast_builder(
    LoopOptions,
    (
        "max_turns",
        "turn_guard",
        "terminal_tool",
        "require_terminal_tool",
        "max_reprompts",
        "output_strategy",
        "output_tool",
        "output_retries",
    ),
)
_OpenB = fast_builder(
    OpenRequest,
    (
        "spec",
        "agent",
        "tools",
        "session_id",
        "transcript",
        "environment",
        "replay_from",
        "metadata",
        "pending",
        "tool_input_deltas",
    ),
)
_NONE: frozenset[str] = frozenset()
_PreparedB = fast_builder(
    Prepared,
    (
        "provider",
        "handler",
        "open_request",
        "loop",
        "max_concurrent_tools",
        "tool_timeout",
        "caller",
        "info_metadata",
        "approvals",
        "confirm",
        "model",
        "agent_meta",
        "record",
        "output",
    ),
)


def _agent_meta(agent: Any, spec: AgentSpec | None, provider: Any) -> dict[str, Any]:
    """The agent's name and host id as far as ``agent=`` tells (a spec, a handle, an id),
    else the provider's own ``agent`` (Claude: the handle or id it was built with)."""
    name = spec.name if spec is not None else None
    agent_id = None
    for source in (agent, getattr(provider, "agent", None)):
        if source is None:
            continue
        if isinstance(source, str):
            agent_id = agent_id or source
            continue
        name = name or getattr(source, "name", None) or getattr(source, "harness_name", None)
        agent_id = (
            agent_id or getattr(source, "agent_id", None) or getattr(source, "harness_id", None)
        )
    return {
        "agent": name if isinstance(name, str) else None,
        "agent_id": agent_id if isinstance(agent_id, str) else None,
    }


def _with_defaults(options: Mapping[str, Any]) -> SimpleNamespace:
    """Every option by name, defaults filled in; an unknown name is refused."""
    if not options:  # the defaults alone: one namespace, read and never written
        return _DEFAULT_OPTIONS
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        name = unknown[0]
        raise InvalidOptionsError(
            f"unknown option {name!r} (host-specific options go to the provider's constructor)",
            option=name,
        )
    return SimpleNamespace(**{**DEFAULTS, **options})


def _check_provider(provider: Any) -> None:
    if not _is_provider(provider):
        raise InvalidOptionsError(
            f"{provider!r} is not a provider (Local, ClaudeManagedAgents, BedrockAgentCore)",
            option="provider",
        )


def _check_turn_guard(turn_guard: Any) -> None:
    if turn_guard is not None and not callable(turn_guard):
        raise InvalidOptionsError(
            f"turn_guard must be callable, got {turn_guard!r}",
            code="invalid_turn_guard",
            option="turn_guard",
        )


def _terminal_tool(required: Any, name: Any, spec: AgentSpec | None) -> str | None:
    """The terminal tool's name: the option, else the spec's; required if asked for."""
    if not isinstance(required, bool):
        raise InvalidOptionsError(
            f"require_terminal_tool must be True or False, got {required!r}",
            option="require_terminal_tool",
        )
    if name is not None:
        _validate.text("terminal_tool", name)
    chosen: str | None = spec.terminal_tool if name is None and spec is not None else name
    if required and not isinstance(chosen, str):
        raise InvalidOptionsError(
            "require_terminal_tool needs a terminal_tool (on the AgentSpec or as an option)",
            code="terminal_tool_required",
            option="terminal_tool",
        )
    return chosen


def _check_outcome(provider: Any, value: Any) -> Outcome | None:
    outcome = coerce_outcome(value)
    if outcome is not None and not provider.supports_outcomes:
        raise InvalidOptionsError(
            f"the {provider.name} host does not support outcomes",
            code="outcome_unsupported",
            option="outcome",
        )
    return outcome


def _check_counts(o: SimpleNamespace) -> None:
    for name in (
        "max_turns",
        "max_concurrent_tools",
        "max_total_tokens",
        "max_input_tokens",
        "max_output_tokens",
    ):
        value = getattr(o, name)
        if value is None or (type(value) is int and value >= 1):
            continue  # what _validate.integer accepts (bool is no int here), without the call
        _validate.integer(name, value, minimum=1, allow_none=True)
    if o.max_turns is None:
        raise InvalidOptionsError("max_turns must be a positive integer", option="max_turns")
    if (
        isinstance(o.max_reprompts, bool)
        or not isinstance(o.max_reprompts, int)
        or o.max_reprompts < 0
    ):
        raise InvalidOptionsError("max_reprompts must be an integer >= 0", option="max_reprompts")


def _check_telemetry_metadata(value: Any) -> None:
    if value is not None and (
        not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value)
    ):
        raise InvalidOptionsError(
            "telemetry_metadata must be a mapping with string keys", option="telemetry_metadata"
        )


def _handler_and_tools(handler: Any, spec: AgentSpec | None) -> tuple[Any, list[ToolDefinition]]:
    """Who serves tool calls (default: the agent's tools) and what the host is told of."""
    if handler is not None and not callable(getattr(handler, "handle_tool_call", None)):
        raise InvalidOptionsError(
            "handler must have a handle_tool_call(name, input, info) method", option="handler"
        )
    if spec is None:
        handler = Toolset() if handler is None else handler
        return handler, handler.definitions() if isinstance(handler, Toolset) else []
    toolset, definitions = _of_spec(spec)
    return toolset if handler is None else handler, list(definitions)


# What prepare derives from a spec, by the spec's identity: its tools are a tuple fixed at
# construction (AgentSpec.__post_init__) and a Toolset holds no session state (an MCP
# toolset's connections live in the copy its lifespan() yields), so one toolset serves
# every run of a spec. Each entry lives as long as its spec (a weak reference drops it).
_DERIVED: dict[int, tuple[Any, Toolset, tuple[ToolDefinition, ...]]] = {}


def _of_spec(spec: AgentSpec) -> tuple[Toolset, tuple[ToolDefinition, ...]]:
    """``(spec.toolset(), spec.tool_definitions())``, computed once per spec."""
    key = id(spec)
    entry = _DERIVED.get(key)
    if entry is not None and entry[0]() is spec:
        return entry[1], entry[2]
    toolset, definitions = spec.toolset(), tuple(spec.tool_definitions())
    try:
        ref = weakref.ref(spec, lambda _: _DERIVED.pop(key, None))
    except TypeError:  # pragma: no cover - a spec subclass with __slots__ and no weakref
        return toolset, definitions
    _DERIVED[key] = (ref, toolset, definitions)
    return toolset, definitions


def _info_metadata(caller: Mapping[str, Any] | None, spec: AgentSpec | None) -> dict[str, Any]:
    """What tools see in ``SessionInfo.metadata``: the caller's tags, then the model's."""
    model_meta = spec.model_config.get("metadata") if spec is not None else None
    return {**(caller or {}), **(model_meta if isinstance(model_meta, Mapping) else {})}
