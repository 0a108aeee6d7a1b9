"""The session loop as a sans-IO state machine.

The machine knows nothing about HTTP, SSE, AWS or tasks. The driver feeds it one
normalised turn at a time (:meth:`Machine.on_turn`) and it answers with the next action:

* :class:`RunTools` — run these custom tool uses, then resume with their results;
* :class:`Send` — send this input next (a terminal-tool re-prompt);
* :class:`Finish` — the request is over; here is its :class:`SessionResult`;
* :class:`CheckOutput` — with ``output=``: validate this typed output (after running the
  turn's other tool uses), then tell the machine (:meth:`Machine.on_output`).

Per-request state (turns, events, tool uses, usage, re-prompts) resets with
:meth:`Machine.begin_request`, so a live session's follow-up message starts fresh.

The budget: **one turn is one model call** (one host turn on the managed hosts).
``max_turns=N`` bounds the model calls of one request on every host: the machine counts
each :class:`~managedloop.results.TurnResult` it is fed as one turn, and a host never makes
more than one model call per turn (Local's re-ask after a turn whose calls were all
repeats is a turn of its own, flagged ``host_answered``). So ``result.turns`` is the number
of model calls made, and a request stops after turn N at the latest, with reason
``max_turns`` when it stopped only for that. ``custom_tool_uses`` lists the calls the loop
ran (a call with an ``input_error`` is answered with an error result and listed; calls of
the turn that hit a limit are not run and not listed).

Order of checks after each turn (the first that applies wins):

1. the turn guard (``turn_guard`` and the token budgets) may halt → ``terminated``;
2. ``requires_action`` with tool uses (or host-run tool uses the host holds for a
   decision) → run / decide them, unless ``max_turns`` is used up (→ ``terminated``,
   reason ``max_turns``); a call still waiting for a decision after that ends the request
   ``requires_action``, reason ``approval_required`` (:mod:`managedloop.session.approvals`);
3. ``requires_action`` the host answered itself (``host_answered``) → ask again with an
   empty resume, unless ``max_turns`` is used up (→ ``terminated``, reason ``max_turns``);
4. ``requires_action`` with none → ``terminated``, reason ``unresolved_requires_action``
   (an empty tool-result resume is never sent) — unless the turn holds server tool uses
   the host did not name as held (a host from outside that reports no
   ``host_approvals``): ``requires_action``, reason ``tool_confirmation_required``;
5. ``end_turn`` while terminal-tool enforcement is on and the tool was not called: re-prompt
   (a :class:`UserMessage` with ``reprompt=True``) while re-prompts and turns remain, else
   finish with reason ``no_terminal_tool``;
6. with ``output=`` (:mod:`managedloop.session.output`): a turn that calls the output tool
   → :class:`CheckOutput` (its other calls are listed and run first; the output call is
   never a user tool); an ``end_turn`` under the text or native strategy → :class:`CheckOutput`
   of its text; an ``end_turn`` without the output tool under the tool strategy → a
   re-prompt to call it. An output that fails validation is sent back to the model (the
   output tool's error result, or a corrective message) while ``output_retries`` and turns
   remain, else the request finishes ``terminated``, reason ``output_invalid``, with the
   last payload and its errors in ``output_failure``;
7. otherwise finish with the turn's terminal.

The budget is the loop's alone: no host is told ``max_turns``. The turn input that starts
the last turn the budget allows is marked ``final_turn`` (:meth:`Machine.before_turn`), so
a host that tells its model about it (Local's final-turn directive) needs no count of its
own; after that turn every path above finishes, so the mark comes once per request.

Deliberate change from the reference: ``max_turns=N`` allows exactly N turns (the reference
ran turn N+1 before tripping) and every library-made stop is a result, not an exception.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from managedloop.hosts import ToolResults, TurnInput, UserMessage
from managedloop.results import (
    ApprovalRequest,
    OutputFailure,
    RawEvent,
    SessionResult,
    Terminal,
    ToolUse,
    TurnResult,
    Usage,
    fast_builder,
    make_session_result,
    make_tool_result,
    make_usage,
)

__all__ = [
    "CheckOutput",
    "Finish",
    "GuardInput",
    "LoopOptions",
    "Machine",
    "RunTools",
    "Send",
    "output_retry_text",
    "reprompt_text",
]


# Read once: on Python 3.11 an Enum class attribute is read through EnumType.__getattr__'s
# slow hook, and on_turn reads these every turn.
_REQUIRES_ACTION, _END_TURN = Terminal.REQUIRES_ACTION, Terminal.END_TURN


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardInput:
    """What a turn guard sees after every turn (request-scoped)."""

    usage: Usage
    turns: int
    session_id: str | None


TurnGuard = Callable[[GuardInput], str | None]
"""Return ``None`` to continue, or a reason string to halt the session."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopOptions:
    max_turns: int = 50
    turn_guard: TurnGuard | None = None
    terminal_tool: str | None = None
    require_terminal_tool: bool = False
    max_reprompts: int = 2
    output_strategy: str | None = None
    """With ``output=``: ``"tool"``, ``"native"`` or ``"text"``; ``None``: no typed output."""
    output_tool: str | None = None
    """The output tool's name under the tool strategy."""
    output_retries: int = 2
    """How often an invalid output is sent back to the model before ``output_invalid``."""


@dataclass(frozen=True, slots=True)
class RunTools:
    tool_uses: Sequence[ToolUse]
    host_approvals: Sequence[ApprovalRequest] = ()
    """Host-run tool uses the host holds for a decision (answered with the results)."""


@dataclass(frozen=True, slots=True)
class Send:
    input: TurnInput


@dataclass(frozen=True, slots=True)
class Finish:
    result: SessionResult


@dataclass(slots=True)
class CheckOutput:
    """Validate ``payload`` (the output tool's input, or the turn's text); run
    ``tool_uses`` (the turn's other custom calls) first.

    Not frozen, unlike the other actions: one is made per typed answer, on the path whose
    cost ``output=`` adds to a run (issue 24), and a frozen ``__init__`` sets each of the
    five fields through ``object.__setattr__``. Nothing changes one once made."""

    payload: Any
    tool_uses: Sequence[ToolUse] = ()
    output_uses: Sequence[ToolUse] = ()
    """The calls of the output tool (tool strategy): answered only when the output is
    sent back as invalid."""
    host_approvals: Sequence[ApprovalRequest] = ()
    input_error: str | None = None
    """The output call's arguments could not be decoded (it is invalid as it stands)."""


Action = RunTools | Send | Finish | CheckOutput

_RunToolsB = fast_builder(RunTools, ("tool_uses", "host_approvals"))


def _run_tools(uses: Sequence[ToolUse], approvals: Sequence[ApprovalRequest]) -> RunTools:
    """``RunTools(uses, approvals)``, faster (one per tool turn; see
    :mod:`managedloop.results` on the fast constructors)."""
    action: Any = _RunToolsB()
    action.tool_uses = uses
    action.host_approvals = approvals
    action.__class__ = RunTools
    return action  # type: ignore[no-any-return]


def output_retry_text(errors: Sequence[dict[str, Any]], tool: str | None) -> str:
    """What the model is told when its typed output was refused."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc') or ()) or 'output'}: {e.get('msg')}"
        for e in errors
    )
    again = f"call {tool} again with corrected input" if tool else "answer again with only JSON"
    return f"Your output was not valid: {problems}. Fix these errors and {again}."


def reprompt_text(tool: str) -> str:
    return (
        f"You returned a response without calling {tool}. You MUST call {tool} now to "
        f"finish — produce the result via {tool}."
    )


@dataclass(slots=True)
class _Request:
    turns: int = 0
    events: list[RawEvent] = field(default_factory=list)
    custom_tool_uses: list[ToolUse] = field(default_factory=list)
    custom_ids: set[str] = field(default_factory=set)
    # Made with the first server tool use (Local has none): an empty list held per session
    # is one more object for the garbage collector to walk.
    server_tool_uses: list[ToolUse] | None = None
    # Usage summed in place: adding frozen Usage values would copy ``raw`` every turn.
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    active_seconds: float | None = None
    usage_raw: list[Any] = field(default_factory=list)
    reprompts_left: int = 2
    terminal_tool_called: bool = False
    # What the result reads of the last turn, not the TurnResult itself: holding it would
    # keep its events list, usage and empty lists alive across the tool calls and the next
    # model call (each one more object for the garbage collector; bench/README.md).
    last_stop_reason: Any = None
    last_text: str = ""
    last_stop_details: dict[str, Any] | None = None
    output_retries_left: int = 2
    output_failure: OutputFailure | None = None

    def usage(self) -> Usage:
        return make_usage(
            self.input_tokens,
            self.output_tokens,
            list(self.usage_raw),
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.cost_usd,
            self.active_seconds,
        )


def _fresh(reprompts_left: int, output_retries: int = 2) -> _Request:
    """``_Request(reprompts_left=...)``, without the generated ``__init__``'s twelve
    keyword defaults and factories (one or two per request)."""
    req = object.__new__(_Request)
    req.turns = 0
    req.events = []
    req.custom_tool_uses = []
    req.custom_ids = set()
    req.server_tool_uses = None
    req.input_tokens = 0
    req.output_tokens = 0
    req.cache_read_tokens = 0
    req.cache_write_tokens = 0
    req.cost_usd = None
    req.active_seconds = None
    req.usage_raw = []
    req.reprompts_left = reprompts_left
    req.terminal_tool_called = False
    req.last_stop_reason = None
    req.last_text = ""
    req.last_stop_details = None
    req.output_retries_left = output_retries
    req.output_failure = None
    return req


class Machine:
    """One session's loop state. Not thread-safe; one driver owns it."""

    __slots__ = ("_req", "_transcript", "options")

    def __init__(self, options: LoopOptions, host: Any = None) -> None:
        self.options = options
        self._req = _fresh(options.max_reprompts, options.output_retries)
        # The connection whose transcript() (client-held history) a result carries when
        # built without one given: the request's result has it from the start. (The
        # connection, not its bound method: one object less held per session.)
        self._transcript = host

    def begin_request(self) -> None:
        self._req = _fresh(self.options.max_reprompts, self.options.output_retries)

    @property
    def turns(self) -> int:
        return self._req.turns

    def before_turn(self, input: TurnInput) -> TurnInput:
        """``input`` marked ``final_turn`` when the budget allows no model call after the
        turn it starts (the host may tell the model; Local does when tools are offered)."""
        if self._req.turns + 1 < self.options.max_turns:
            return input
        if isinstance(input, UserMessage | ToolResults) and not input.final_turn:
            return dataclasses.replace(input, final_turn=True)
        return input

    def add_tool_uses(self, uses: Sequence[ToolUse]) -> None:
        """Record tool uses run outside a turn (a reattach redrive); ids stay unique."""
        req = self._req
        for use in uses:
            if use.id is None or use.id not in req.custom_ids:
                req.custom_tool_uses.append(use)
                if use.id is not None:
                    req.custom_ids.add(use.id)
            if use.name == self.options.terminal_tool:
                req.terminal_tool_called = True

    def unlist(self, ids: set[str]) -> None:
        """Drop tool uses that did not run after all (held for a decision) from the
        request's ``custom_tool_uses``."""
        req = self._req
        req.custom_tool_uses = [u for u in req.custom_tool_uses if u.id not in ids]
        req.custom_ids -= ids

    def on_turn(self, turn: TurnResult, session_id: str | None) -> Action:
        req = self._req
        opts = self.options
        req.turns += 1
        req.last_stop_reason = turn.stop_reason
        req.last_text = turn.text
        req.last_stop_details = turn.stop_details
        req.events.extend(turn.events)
        if turn.server_tool_uses:
            if req.server_tool_uses is None:
                req.server_tool_uses = []
            req.server_tool_uses.extend(turn.server_tool_uses)
        usage = turn.usage
        if usage is not None:
            req.input_tokens += usage.input_tokens
            req.output_tokens += usage.output_tokens
            req.cache_read_tokens += usage.cache_read_input_tokens
            req.cache_write_tokens += usage.cache_creation_input_tokens
            if usage.cost_usd is not None:  # None until some turn reports one
                req.cost_usd = (req.cost_usd or 0.0) + usage.cost_usd
            if usage.active_seconds is not None:
                req.active_seconds = (req.active_seconds or 0.0) + usage.active_seconds
            req.usage_raw.extend(usage.raw)

        if opts.turn_guard is not None:
            halt = opts.turn_guard(
                GuardInput(usage=req.usage(), turns=req.turns, session_id=session_id)
            )
            if halt is not None:
                return Finish(self.result(session_id, Terminal.TERMINATED, reason=str(halt)))

        if opts.output_strategy is not None:
            check = self._output_step(turn, session_id)
            if check is not None:
                return check

        if turn.terminal is _REQUIRES_ACTION:
            if turn.custom_tool_uses or turn.host_answered or turn.host_approvals:
                if req.turns >= opts.max_turns:  # not run, so not listed as run
                    return Finish(self.result(session_id, Terminal.TERMINATED, reason="max_turns"))
                if not turn.custom_tool_uses and not turn.host_approvals:
                    # the host answered every call: ask again
                    return Send(ToolResults(tool_uses=[], results=[]))
                uses = turn.custom_tool_uses
                if opts.terminal_tool is None:  # add_tool_uses, inline: one call per tool turn
                    listed, ids = req.custom_tool_uses, req.custom_ids
                    for use in uses:
                        uid = use.id
                        if uid is None:
                            listed.append(use)
                        elif uid not in ids:
                            listed.append(use)
                            ids.add(uid)
                else:
                    self.add_tool_uses(uses)
                return _run_tools(uses, turn.host_approvals)
            if turn.server_tool_uses:
                # The host holds its own (server) tools for a confirmation only the caller
                # can give (``send_event``): still waiting, but not on anything we can run.
                return Finish(
                    self.result(
                        session_id, Terminal.REQUIRES_ACTION, reason="tool_confirmation_required"
                    )
                )
            return Finish(
                self.result(session_id, Terminal.TERMINATED, reason="unresolved_requires_action")
            )

        if (
            turn.terminal is _END_TURN
            and opts.require_terminal_tool
            and opts.terminal_tool is not None
            and not req.terminal_tool_called
        ):
            if req.reprompts_left > 0 and req.turns < opts.max_turns:
                req.reprompts_left -= 1
                return Send(UserMessage(reprompt_text(opts.terminal_tool), reprompt=True))
            return Finish(self.result(session_id, Terminal.END_TURN, reason="no_terminal_tool"))

        return Finish(self.result(session_id, turn.terminal, reason=turn.reason))

    # -- typed output (output=) ---------------------------------------------------------

    def _output_step(self, turn: TurnResult, session_id: str | None) -> Action | None:
        """The typed-output step after ``turn`` (rule 6), or ``None``: the plain rules."""
        opts, req = self.options, self._req
        tool = opts.output_tool
        if tool is not None and turn.terminal is _REQUIRES_ACTION:
            outs = [u for u in turn.custom_tool_uses if u.name == tool]
            if not outs:
                return None
            others = [u for u in turn.custom_tool_uses if u.name != tool]
            self.add_tool_uses(others)  # the output call is never a user tool
            first = outs[0]
            return CheckOutput(first.input, others, outs, turn.host_approvals, first.input_error)
        if turn.terminal is not _END_TURN or turn.reason is not None:
            return None
        if opts.require_terminal_tool and not req.terminal_tool_called:
            return None  # the terminal tool's re-prompt comes first
        if tool is None:  # text or native: the answer is the output
            return CheckOutput(turn.text)
        error = {"loc": [], "msg": f"the answer did not call {tool}", "type": "missing_output"}
        return self._refused(CheckOutput(turn.text), [error], None, session_id)

    def on_output(
        self,
        check: CheckOutput,
        value: Any,
        errors: Sequence[dict[str, Any]] | None,
        answered: ToolResults | None,
        session_id: str | None,
    ) -> Action:
        """After :class:`CheckOutput`: ``errors`` ``None`` means ``value`` is the validated
        output (the request finishes with it); else the model is asked again while
        ``output_retries`` and turns remain. ``answered``: the results of the check's other
        tool uses (sent along with the output call's error result)."""
        if errors is None:
            self._req.output_failure = None  # refused earlier, accepted now
            result = self.result(session_id, _END_TURN)
            object.__setattr__(result, "output", value)
            return Finish(result)
        return self._refused(check, errors, answered, session_id)

    def _refused(
        self,
        check: CheckOutput,
        errors: Sequence[dict[str, Any]],
        answered: ToolResults | None,
        session_id: str | None,
    ) -> Action:
        opts, req = self.options, self._req
        req.output_failure = OutputFailure(payload=check.payload, errors=list(errors))
        if req.output_retries_left > 0 and req.turns < opts.max_turns:
            req.output_retries_left -= 1
            text = output_retry_text(errors, opts.output_tool)
            if not check.output_uses:
                return Send(UserMessage(text, reprompt=True))
            uses = list(answered.tool_uses) if answered is not None else []
            results = list(answered.results) if answered is not None else []
            for i, use in enumerate(check.output_uses):
                uses.append(use)
                results.append(
                    make_tool_result(
                        use.id or "",
                        text if i == 0 else "refused as well; see the first output call's errors",
                        True,
                    )
                )
            decisions = answered.decisions if answered is not None else {}
            return Send(ToolResults(tool_uses=uses, results=results, decisions=decisions))
        return Finish(self.result(session_id, Terminal.TERMINATED, reason="output_invalid"))

    def result(
        self,
        session_id: str | None,
        terminal: Terminal | None = None,
        *,
        reason: str | None = None,
        transcript: list[dict[str, Any]] | None = None,
        pending_events: Sequence[RawEvent] = (),
    ) -> SessionResult:
        """The request's result so far (also used for partial results on failure)."""
        req = self._req
        if transcript is None and self._transcript is not None:
            transcript = self._transcript.transcript()
        result = make_session_result(
            terminal if terminal is not None else Terminal.TERMINATED,
            req.last_stop_reason,
            reason,
            session_id,
            req.last_text,
            list(req.custom_tool_uses),
            list(req.server_tool_uses or ()),
            req.usage(),
            req.turns,
            [*req.events, *pending_events],
            transcript,
            None,
            req.last_stop_details,
        )
        strategy = self.options.output_strategy
        if strategy is not None:  # output=: how it was asked for, and what was refused
            object.__setattr__(result, "output_strategy", strategy)
            object.__setattr__(result, "output_failure", req.output_failure)
        return result
