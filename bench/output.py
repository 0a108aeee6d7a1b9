"""Typed results (``output=``): ``python -m bench output`` (or ``python -m bench.output``).

Two measurements, each against a baseline taken in the same run:

* **validation cost** -- what ``output=Weather`` adds to a run, against what pydantic's
  own validation of the same payload costs (``TypeAdapter(Weather).validate_python``,
  timed in the same run). The same scripted one-turn session
  (``Local(chat=ScriptedChatModel)``, no HTTP) whose model answers the payload as JSON
  text runs without ``output=`` (with ``max_turns=50``, its default, so both runs take the
  same path through the option checks) and with ``output=Weather`` (text strategy),
  alternately, one session each in turn, so the load of a shared machine falls on both
  alike; the figure is the difference of the medians, in multiples of ``validate_python``
  (``validate_json`` of the text, which the typed run does, is printed beside it). The
  validation step alone (``OutputPlan.validated``, what the driver calls when there are no
  ``output_validator`` functions: of the output tool's input under the tool strategy,
  against ``validate_python``; of the answer's text under the text strategy, against
  ``validate_json``) is timed too.
* **the real model** (``python -m bench output llama``, needs ``managedloop[local-model]``):
  SmolLM2-135M behind ``python -m llama_cpp.server`` (``chatml-function-calling``,
  ``Local(profile="llama.cpp")``) answers a simple schema (:class:`Capital`) in 10 seeded
  runs (temperature 0.8, seeds 0-9, ``max_tokens=128``, ``max_turns=3``, the default
  ``output_retries=2``) with the native strategy (``response_format`` json_object +
  schema: a grammar) and with the tool strategy; the count of runs that returned a valid
  instance is printed for each (what ``output=`` promises), how many of those name Paris
  (what a 135M model knows: not promised), and every other run's end.
"""

from __future__ import annotations

import asyncio
import enum
import json
import statistics
import sys
import time
from typing import Any

import pydantic

import managedloop as ml
from managedloop.providers import Local
from managedloop.testing import ScriptedChatModel, say

SESSIONS = 4000  # of each kind, alternating
CALLS = 5000  # validations per timing round
ROUNDS = 7  # the fastest round of a call timing is kept: load only ever adds time
SEEDS = range(10)


class Sky(enum.Enum):
    SUNNY = "sunny"
    RAIN = "rain"


class Temperature(pydantic.BaseModel):
    celsius: float


class Weather(pydantic.BaseModel):
    city: str
    sky: Sky
    temperature: Temperature


class Capital(pydantic.BaseModel):
    """The simple schema of the real-model measurement (bounded strings: a grammar made
    from the schema then bounds what a rambling small model can write into them)."""

    country: str = pydantic.Field(max_length=32)
    capital: str = pydantic.Field(max_length=32)


PAYLOAD = {"city": "Paris", "sky": "sunny", "temperature": {"celsius": 21.5}}
AGENT = ml.AgentSpec(name="bench", tools=[])


async def _sessions(provider: Local, n: int, **options: Any) -> float:
    start = time.perf_counter()
    for _ in range(n):
        result = await ml.run(provider, agent=AGENT, prompt="x", **options)
        assert result.turns == 1, result
    return (time.perf_counter() - start) / n


def _best_us(samples: list[float]) -> float:
    """The fastest round, in µs: on a shared machine other work only ever adds time."""
    return min(samples) * 1e6


def validation_cost() -> None:
    from managedloop.session.output import plan as make_plan

    text = json.dumps(PAYLOAD)
    provider = Local(model="m", chat=ScriptedChatModel([say(text)]))
    adapter = pydantic.TypeAdapter(Weather)
    tool_plan, text_plan = (
        make_plan(
            Weather,
            strategy=strategy,
            retries=2,
            validators=None,
            provider=provider,
            spec=AGENT,
            tools=[],
        )
        for strategy in ("tool", "text")
    )
    pc = time.perf_counter

    async def sessions() -> tuple[list[float], list[float]]:
        plain: list[float] = []
        typed: list[float] = []
        for _ in range(SESSIONS):
            start = pc()
            await ml.run(provider, agent=AGENT, prompt="x", max_turns=50)
            plain.append(pc() - start)
            start = pc()
            await ml.run(provider, agent=AGENT, prompt="x", output=Weather, output_strategy="text")
            typed.append(pc() - start)
        return plain, typed

    def checks(plan: Any, payload: Any) -> float:
        start = pc()
        for _ in range(CALLS):
            plan.validated(payload)
        return (pc() - start) / CALLS

    def calls(fn: Any) -> float:
        start = pc()
        for _ in range(CALLS):
            fn()
        return (pc() - start) / CALLS

    plain, typed = asyncio.run(sessions())
    py = min(calls(lambda: adapter.validate_python(PAYLOAD)) for _ in range(ROUNDS))
    js = min(calls(lambda: adapter.validate_json(text)) for _ in range(ROUNDS))
    check = min(checks(tool_plan, PAYLOAD) for _ in range(ROUNDS))
    check_text = min(checks(text_plan, text) for _ in range(ROUNDS))
    p, t = statistics.median(plain), statistics.median(typed)
    print(f"TypeAdapter.validate_python   {py * 1e6:8.2f} us  (the baseline)")
    print(f"TypeAdapter.validate_json     {js * 1e6:8.2f} us  = {js / py:.2f}x")
    print(f"plain one-turn run (median)   {p * 1e6:8.1f} us")
    print(f"output=Weather run (median)   {t * 1e6:8.1f} us")
    extra = t - p
    print(
        f"  typed - plain               {extra * 1e6:8.2f} us  = {extra / py:.1f}x validate_python"
    )
    print(
        f"output tool check (tool)      {check * 1e6:8.2f} us  = {check / py:.2f}x validate_python"
    )
    print(
        f"answer text check (text)      {check_text * 1e6:8.2f} us  = {check_text / js:.2f}x"
        " validate_json"
    )


def _llama(strategy: str, server: Any) -> tuple[int, int, int, float]:
    valid = right = errors = 0
    start = time.perf_counter()
    for seed in SEEDS:
        provider = Local(
            model="smollm2",
            base_url=server.base_url,
            api_key=None,
            profile="llama.cpp",
            max_retries=0,
            model_config={"temperature": 0.8, "seed": seed, "max_tokens": 128},
        )
        try:
            result = ml.run_sync(
                provider,
                agent=ml.AgentSpec(name="capital", system_prompt="Answer in JSON."),
                prompt="What is the capital of France?",
                output=Capital,
                output_strategy=strategy,
                max_turns=3,
            )
        except ml.ManagedLoopError as exc:
            errors += 1
            print(f"    seed {seed}: {exc.code}: {str(exc)[:100]}")
            continue
        if isinstance(result.output, Capital):
            valid += 1
            right += "paris" in result.output.capital.lower()
            continue
        failure = result.output_failure
        last = json.dumps(failure.payload)[:80] if failure is not None else repr(result.text[:80])
        print(f"    {strategy} seed {seed}: {result.terminal.value}/{result.reason}: {last}")
    return valid, right, errors, time.perf_counter() - start


def llama() -> None:
    from bench.quality import Server

    server = Server()
    try:
        print("| strategy | valid instances | of which capital is Paris | raised | time |")
        print("|---|---:|---:|---:|---:|")
        for strategy in ("native", "tool"):
            valid, right, errors, seconds = _llama(strategy, server)
            n = len(SEEDS)
            row = [strategy, f"{valid}/{n}", f"{right}/{valid}", f"{errors}/{n}"]
            row.append(f"{seconds:.1f} s")
            print("| " + " | ".join(row) + " |")
    finally:
        server.close()


def main(argv: list[str] | None = None) -> None:
    # (``python -m bench output llama`` hands this suite its own name too: parts only)
    given = argv if argv is not None else sys.argv[1:]
    wanted = {a for a in given if a in ("validation", "llama")} or {"validation"}
    if "validation" in wanted:
        validation_cost()
    if "llama" in wanted:
        llama()


if __name__ == "__main__":
    main()
