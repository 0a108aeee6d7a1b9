"""Typed results: ``output=`` a type, ``result.output`` a validated instance of it.

``run(..., output=Weather)`` takes anything pydantic validates: a model, a dataclass, a
``TypedDict``, a union, a list, a scalar type. :func:`plan` turns it, once per run, into an
:class:`OutputPlan`: the type's validator (a ``pydantic.TypeAdapter``), its JSON Schema,
and a *strategy*, how the model is asked for it:

* ``"tool"`` -- an output tool (``final_result``; :func:`output_tool`) whose input schema
  is the type's JSON Schema (a type that is not an object is wrapped as ``{"response":
  ...}``, since every host wants an object there). Custom tools are what every host has,
  so this works everywhere. The model calls it to answer; the session ends when it does
  with valid input. It is never a user tool: never dispatched to the handler, never in
  ``custom_tool_uses``; a turn that calls it with other tools runs the others first.
* ``"native"`` -- the server's own structured output (Local only): ``response_format``
  ``{"type": "json_schema", ...}`` goes into the request (``strict`` where the schema is
  one strict mode accepts); with ``Local(profile="llama.cpp")`` it is ``{"type":
  "json_object", "schema": ...}``, which llama.cpp's servers constrain the answer to with
  a grammar made from the schema. The answer's text is the JSON. (A chat function of your
  own gets it in ``ChatRequest.options``; the in-process ``LlamaCppChat`` ignores it.)
* ``"text"`` -- the model is told the schema (in the system prompt) and its answer's text
  is parsed as JSON (a fenced code block is unwrapped), for models with neither.

The default: ``"native"`` on Local when the agent offers no tools (a server that
constrains the whole answer to the schema leaves no room for tool calls), else ``"tool"``.
``output_strategy=`` overrides it; a host that cannot take a strategy refuses it before
anything is sent (``InvalidOptionsError``, ``output_strategy_unsupported``). A host from
outside declares what it takes with ``output_strategies`` (default ``("tool", "text")``).

Validation: pydantic first, then each ``output_validator=`` function (sync or async; it
gets the instance and returns it, or a replacement; raising ``ml.ModelRetry("why")``
refuses it). A refused output goes back to the model -- the output tool's error result, or
a corrective message -- up to ``output_retries`` times (default 2); then the request ends
``terminated``, reason ``output_invalid``, with the last payload and its errors in
``result.output_failure`` (the machine's rule 6, :mod:`managedloop.session.machine`).

How the hosts are told (the one place the session layer knows a host's setting): the
agent spec handed to the host is a copy with the output tool added to its tools (and, on
Local, named as its terminal tool, so Local's final-turn directive asks for it), with the
``response_format`` in its ``model_config`` (native), or with the schema in its system
prompt (text). The user's spec is unchanged, and the copy is made once per spec and plan.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from managedloop.errors import InvalidOptionsError, ModelRetry
from managedloop.provisioning.specs import AgentSpec
from managedloop.tools import ToolDefinition

if TYPE_CHECKING:
    import pydantic

__all__ = [
    "OUTPUT_TOOL",
    "STRATEGIES",
    "OutputPlan",
    "import_type",
    "output_tool",
    "partial_output",
    "plan",
    "plan_and_spec",
    "schema_type",
    "type_path",
]

OUTPUT_TOOL = "final_result"
STRATEGIES = ("tool", "native", "text")
_WRAP = "response"  # the property a non-object output type is wrapped in (tool, native)
_DEFAULT_STRATEGIES = ("tool", "text")  # what a host that declares nothing takes
_LOCAL_STRATEGIES = ("tool", "native", "text")
_TEXT_INSTRUCTION = (
    "Answer with a single JSON value that matches this JSON Schema, and nothing else "
    "(no prose, no code fence):\n"
)

Validator = Callable[[Any], Any]


@dataclass(frozen=True, slots=True, eq=False)
class _Type:
    """What is derived once per output type: its validator and schemas."""

    adapter: pydantic.TypeAdapter[Any]
    schema: dict[str, Any]
    """The type's JSON Schema (what the text strategy shows the model)."""
    object_schema: dict[str, Any]
    """An object schema for it: the schema itself, or ``{"response": schema}``."""
    wrapped: bool
    name: str
    validate_python: Callable[[Any], Any]
    """The adapter's validator's own ``validate_python`` (no Python wrapper frame)."""
    validate_json: Callable[[str], Any]


@functools.lru_cache(maxsize=256)
def _derive(output: Any) -> _Type:
    import pydantic

    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(output)
        schema = adapter.json_schema()
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError) as exc:
        raise InvalidOptionsError(
            f"output= must be a type pydantic can validate and describe (a model, a "
            f"dataclass, a TypedDict, a union, a list, a scalar): {exc}",
            option="output",
        ) from None
    wrapped = schema.get("type") != "object"
    if wrapped:
        inner = {k: v for k, v in schema.items() if k != "$defs"}
        object_schema: dict[str, Any] = {
            "type": "object",
            "properties": {_WRAP: inner},
            "required": [_WRAP],
        }
        if "$defs" in schema:
            object_schema["$defs"] = schema["$defs"]
    else:
        object_schema = schema
    name = getattr(output, "__name__", None) or "output"
    if name == "Annotated":  # schema_type's, or a user's Annotated[...]: the schema's title
        name = str(schema.get("title") or "output")
    validator = adapter.validator
    return _Type(
        adapter,
        schema,
        object_schema,
        wrapped,
        name,
        validator.validate_python,
        validator.validate_json,
    )


def output_tool(output: Any, *, name: str = OUTPUT_TOOL) -> ToolDefinition:
    """The output tool for ``output`` (the tool strategy's): add it to an ``AgentSpec`` you
    provision for a managed host, so the provisioned agent has it."""
    derived = _derive(output)
    description = (
        f"Give your final answer as {derived.name} by calling this tool: the session ends "
        "with it. Call it once, when you have everything you need."
    )
    return ToolDefinition(name=name, description=description, input_schema=derived.object_schema)


def _strict_ok(schema: Any) -> bool:
    """Whether OpenAI's strict mode takes ``schema`` as is: every object closed
    (``additionalProperties: false``) with every property required."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            props = schema.get("properties", {})
            if schema.get("additionalProperties") is not False or set(
                schema.get("required", ())
            ) != set(props):
                return False
        return all(_strict_ok(v) for v in schema.values())
    if isinstance(schema, list):
        return all(_strict_ok(v) for v in schema)
    return True


def _errors(exc: Exception) -> list[dict[str, Any]]:
    """pydantic's errors as JSON: ``loc``, ``msg``, ``type`` each."""
    import pydantic_core

    if isinstance(exc, pydantic_core.ValidationError):
        return [
            {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False, include_context=False, include_input=False)
        ]
    return [{"loc": [], "msg": str(exc), "type": "invalid_output"}]


def _unfence(text: str) -> str:
    """``text`` without a Markdown code fence around it (models add one unasked)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.partition("\n")[2].rstrip()  # the opening line, with its language
        body = body.removesuffix("```")
    return body.strip()


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class OutputPlan:
    """How one run asks for, and checks, its typed output."""

    output: Any
    strategy: str
    tool: ToolDefinition | None
    retries: int
    validators: tuple[Validator, ...]
    _type: _Type

    @property
    def adapter(self) -> pydantic.TypeAdapter[Any]:
        return self._type.adapter

    async def check(
        self, payload: Any, input_error: str | None = None
    ) -> tuple[Any, list[dict[str, Any]] | None]:
        """``(instance, None)`` for an output that validates, else ``(None, errors)``.

        ``payload``: the output tool's input (tool) or the answer's text (native, text)."""
        value, errors = self.validated(payload, input_error)
        if errors is not None or not self.validators:
            return value, errors
        for validator in self.validators:
            try:
                checked = validator(value)
                if inspect.isawaitable(checked):
                    checked = await checked
            except ModelRetry as exc:
                return None, [{"loc": [], "msg": exc.message, "type": "model_retry"}]
            if checked is not None:
                value = checked
        return value, None

    def validated(
        self, payload: Any, input_error: str | None = None
    ) -> tuple[Any, list[dict[str, Any]] | None]:
        """:meth:`check` without the ``output_validator`` functions: pydantic's verdict,
        at once (no coroutine: a plan without validators needs no await)."""
        if input_error is not None:
            return None, [{"loc": [], "msg": input_error, "type": "invalid_json"}]
        # One frame: this is the whole of what validating costs above pydantic's own call
        # (bench.instructions check_tool / check_text).
        derived = self._type
        try:
            if self.strategy == "tool":
                if derived.wrapped:
                    if not isinstance(payload, dict) or _WRAP not in payload:
                        raise ValueError(f"the output goes in the {_WRAP!r} property")
                    payload = payload[_WRAP]
                return derived.validate_python(payload), None
            if type(payload) is not str:
                raise ValueError("the answer has no text")
            text = payload if payload[:1] == "{" else _unfence(payload)  # compact JSON as is
            if self.strategy == "native" and derived.wrapped:
                data = json.loads(text)
                if not isinstance(data, dict) or _WRAP not in data:
                    raise ValueError(f"the output goes in the {_WRAP!r} property")
                return derived.validate_python(data[_WRAP]), None
            return derived.validate_json(text), None
        except ValueError as exc:  # pydantic's ValidationError is one
            return None, _errors(exc)

    def host_spec(self, spec: AgentSpec, provider: Any) -> AgentSpec:
        """The copy of ``spec`` the host is given (see the module docstring)."""
        profile = getattr(getattr(provider, "profile", None), "name", None)
        return _host_spec(spec, self, str(getattr(provider, "name", "")), profile)


def _response_format(derived: _Type, profile: Any) -> dict[str, Any]:
    """The native strategy's ``response_format``: OpenAI's ``json_schema`` form (``strict``
    when the schema is one strict mode takes), or, for the ``llama.cpp`` profile, the
    ``json_object`` form with a ``schema`` that both llama.cpp servers turn into a grammar
    (llama-cpp-python's server takes no other)."""
    schema = derived.object_schema if derived.wrapped else derived.schema
    if profile == "llama.cpp":
        return {"type": "json_object", "schema": schema}
    json_schema: dict[str, Any] = {"name": _schema_name(derived.name), "schema": schema}
    if _strict_ok(schema):
        json_schema["strict"] = True
    return {"type": "json_schema", "json_schema": json_schema}


def _host_spec(spec: AgentSpec, p: OutputPlan, provider_name: str, profile: Any) -> AgentSpec:
    tool = p.tool.name if p.tool else None
    key = (id(spec), p.output, p.strategy, tool, provider_name, profile)
    entry = _COPIES.get(key)
    if entry is not None and entry[0]() is spec:
        return entry[1]
    changes: dict[str, Any] = {}
    if p.tool is not None:
        if p.tool.name not in {d.name for d in spec.tool_definitions()}:
            changes["tools"] = (*spec.tools, p.tool)  # not there yet (ml.output_tool)
        if provider_name == "local" and spec.terminal_tool is None:
            changes["terminal_tool"] = p.tool.name  # Local's final-turn directive names it
    elif p.strategy == "native":
        response_format = _response_format(p._type, profile)
        changes["model_config"] = {**spec.model_config, "response_format": response_format}
    else:
        schema = json.dumps(p._type.schema, separators=(",", ":"))
        prompt = _TEXT_INSTRUCTION + schema
        system = f"{spec.system_prompt}\n\n{prompt}" if spec.system_prompt else prompt
        changes["system_prompt"] = system
    copy = dataclasses.replace(spec, **changes)
    try:
        ref = weakref.ref(spec, lambda _: _COPIES.pop(key, None))
    except TypeError:  # pragma: no cover - a spec subclass without weakrefs
        return copy
    _COPIES[key] = (ref, copy)
    return copy


_COPIES: dict[tuple[Any, ...], tuple[Any, AgentSpec]] = {}


def _schema_name(name: str) -> str:
    """A ``json_schema.name`` OpenAI takes (``^[a-zA-Z0-9_-]{1,64}$``)."""
    cleaned = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64]
    return cleaned or "output"


_PLANS: dict[tuple[Any, ...], tuple[Any, Any, OutputPlan, AgentSpec]] = {}
_PLANS_MAX = 256  # (output, options, provider, spec) combinations kept; cleared beyond


def plan_and_spec(
    output: Any,
    *,
    strategy: Any,
    retries: Any,
    validators: Any,
    provider: Any,
    spec: AgentSpec | None,
    tools: Sequence[ToolDefinition],
) -> tuple[OutputPlan, AgentSpec | None]:
    """:func:`plan` and the spec the host is given (:meth:`OutputPlan.host_spec`; ``None``
    without a spec), made once per (output, options, provider, spec): a spec's tools are
    fixed at construction and a provider's host and profile do not change, so the checks,
    the choice and the copy need not be made again for every run of the same session
    setup. Held by weak references to the provider and spec (an entry is used only while
    both live)."""
    if spec is None or isinstance(validators, list):
        made = plan(
            output,
            strategy=strategy,
            retries=retries,
            validators=validators,
            provider=provider,
            spec=spec,
            tools=tools,
        )
        return made, made.host_spec(spec, provider) if spec is not None else None
    key: tuple[Any, ...] = (output, strategy, retries, validators, id(provider), id(spec))
    try:
        entry = _PLANS.get(key)
    except TypeError:  # an unhashable output or validator: no cache
        entry, key = None, ()
    if entry is not None and entry[0]() is provider and entry[1]() is spec:
        return entry[2], entry[3]
    made = plan(
        output,
        strategy=strategy,
        retries=retries,
        validators=validators,
        provider=provider,
        spec=spec,
        tools=tools,
    )
    host = made.host_spec(spec, provider)
    if key:
        try:
            refs = (weakref.ref(provider), weakref.ref(spec))
        except TypeError:  # pragma: no cover - a provider without weakrefs
            return made, host
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = (*refs, made, host)
    return made, host


def plan(
    output: Any,
    *,
    strategy: Any,
    retries: Any,
    validators: Any,
    provider: Any,
    spec: AgentSpec | None,
    tools: Sequence[ToolDefinition],
) -> OutputPlan:
    """Check the ``output*`` options and choose the strategy (before anything is sent)."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidOptionsError("output_retries must be an integer >= 0", option="output_retries")
    if validators is None:
        checks: tuple[Validator, ...] = ()
    elif callable(validators):
        checks = (validators,)
    elif isinstance(validators, Sequence) and all(callable(v) for v in validators):
        checks = tuple(validators)
    else:
        raise InvalidOptionsError(
            "output_validator must be a function (or a list of them) taking the output",
            option="output_validator",
        )
    try:
        derived = _derive(output)
    except TypeError:  # unhashable (a parametrised alias pydantic still takes): no cache
        derived = _derive.__wrapped__(output)
    host = str(getattr(provider, "name", ""))
    takes = getattr(provider, "output_strategies", None)
    if not isinstance(takes, tuple):
        takes = _LOCAL_STRATEGIES if host == "local" else _DEFAULT_STRATEGIES
    if strategy is None:
        strategy = "native" if "native" in takes and not tools and spec is not None else "tool"
    elif strategy not in STRATEGIES:
        raise InvalidOptionsError(
            f"output_strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}",
            option="output_strategy",
        )
    elif strategy not in takes:
        raise InvalidOptionsError(
            f"the {host} host cannot take output_strategy={strategy!r} (it takes "
            f"{', '.join(takes)})",
            code="output_strategy_unsupported",
            option="output_strategy",
        )
    if strategy != "tool" and spec is None:
        raise InvalidOptionsError(
            f"output_strategy={strategy!r} needs agent= an AgentSpec (the host is told "
            "through it); with a handle use the tool strategy",
            option="output_strategy",
        )
    tool: ToolDefinition | None = None
    if strategy == "tool":
        tool = output_tool(output)
        clash = next((t for t in tools if t.name == tool.name), None)
        if clash is not None and clash.input_schema != tool.input_schema:
            raise InvalidOptionsError(
                f"the agent already has a tool named {tool.name!r} that is not the output "
                f"tool of this type (ml.output_tool({derived.name}))",
                option="output",
            )
    return OutputPlan(
        output=output,
        strategy=strategy,
        tool=tool,
        retries=retries,
        validators=checks,
        _type=derived,
    )


def type_path(output: Any) -> str:
    """``"module:Qualname"`` of an output type that can be imported by name (durable
    sessions send it to their workers); a string is taken as one already."""
    if isinstance(output, str):
        module, sep, name = output.partition(":")
        if sep and module and name:
            return output
        raise InvalidOptionsError(
            f"output= as a string is 'module:Type', got {output!r}", option="output"
        )
    where, qualname = getattr(output, "__module__", None), getattr(output, "__qualname__", None)
    if (
        not isinstance(where, str)
        or not isinstance(qualname, str)
        or "<" in qualname
        or where == "__main__"
    ):
        raise InvalidOptionsError(
            f"output= must be a class importable by name here (or 'module:Type'), got "
            f"{output!r}: a durable session's workers import it",
            option="output",
        )
    return f"{where}:{qualname}"


def import_type(path: str) -> Any:
    """The type a :func:`type_path` names."""
    import importlib

    module, _, name = path.partition(":")
    value: Any = importlib.import_module(module)
    for part in name.split("."):
        value = getattr(value, part)
    return value


def schema_type(schema: Any) -> Any:
    """An output type for a JSON Schema (the CLI's ``--output schema.json``): the model is
    shown ``schema`` itself, and an output is checked against it with ``jsonschema``
    (its errors are the validation errors). Values stay JSON (dicts, lists, scalars)."""
    if not isinstance(schema, dict):
        raise InvalidOptionsError("a JSON Schema is a JSON object", option="output")
    import importlib

    try:  # (no type stubs ship with it)
        jsonschema: Any = importlib.import_module("jsonschema")
    except ImportError:  # pragma: no cover - installed with the dev and mcp extras
        raise InvalidOptionsError(
            "output= a JSON Schema needs the jsonschema package (pip install jsonschema)",
            option="output",
        ) from None
    import typing

    import pydantic

    try:
        checker = jsonschema.validators.validator_for(schema)(schema)
        checker.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidOptionsError(
            f"not a valid JSON Schema: {exc.message}", option="output"
        ) from None

    def check(value: Any) -> Any:
        problems = sorted(checker.iter_errors(value), key=lambda e: list(e.absolute_path))
        if problems:
            first = problems[0]
            where = "/".join(str(p) for p in first.absolute_path) or "output"
            raise ValueError(f"{where}: {first.message}")
        return value

    return typing.Annotated[Any, pydantic.WithJsonSchema(schema), pydantic.AfterValidator(check)]


def partial_output(plan: OutputPlan, text: str) -> Any:
    """The output as far as ``text`` gives it, validated leniently (pydantic's partial
    JSON: an unfinished last value is left out or cut short), or ``None`` when nothing of
    it validates yet. ``text``: the JSON answer still streaming (text, native), or the
    output tool's input JSON still streaming (tool). Never raises."""
    import pydantic_core

    body = text.lstrip()
    if body.startswith("```") and plan.strategy != "tool":
        body = body.partition("\n")[2]
    if not body:
        return None
    try:
        data = pydantic_core.from_json(body, allow_partial="trailing-strings")
        if plan.strategy != "text" and plan._type.wrapped:  # tool, native: {"response": ...}
            if not isinstance(data, dict) or _WRAP not in data:
                return None
            data = data[_WRAP]
        return plan.adapter.validate_python(data, experimental_allow_partial=True)
    except Exception:  # best effort: a user validator may fail on a partial any way it likes
        return None
