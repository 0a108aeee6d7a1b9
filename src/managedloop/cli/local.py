"""The Local host's part of the ``managedloop`` command (see :mod:`managedloop.cli`).

Model settings reach the endpoint as request-body keys, verbatim (``Local(model_config=...)``):
``--tool-choice``, ``--max-tokens`` and ``--temperature`` for the common ones, and a
repeatable ``--set key=value`` for anything else the server takes (``top_p``, ``seed``,
``response_format``...). A ``--set`` value is read as JSON when it parses (``--set seed=7``
sends the number 7, ``--set stop='["\\n"]'`` a list) and as a plain string otherwise
(``--set user=me``). Keys the loop itself writes (``model``, ``messages``, ``tools``,
``stream``, ``stream_options``) cannot be set. Some servers (llama.cpp's) ignore ``tools``
unless ``tool_choice`` is sent: ``--tool-choice auto`` drives them. ``--profile`` picks a
compatibility profile (``Local(profile=...)``; see ``_profiles``).
"""

from __future__ import annotations

import argparse
import json
import json as _json  # emulate()'s keyword json= would shadow the module
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from managedloop.config import MISSING
from managedloop.errors import InvalidOptionsError
from managedloop.providers.local import PROFILES, LlamaCppChat, Local, redact_url
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import SessionResult

if TYPE_CHECKING:
    from managedloop.testing.script import Step

__all__ = [
    "LABEL",
    "MODEL_LABEL",
    "add_run_arguments",
    "announce",
    "demo",
    "demo_model",
    "emulate",
    "model_config_for_run",
    "provider_for_run",
]

LABEL = "Local"
MODEL_LABEL = "Local, SmolLM2 in-process"
DEMO_MODEL = "emulator"
# A weak model's loop is bounded tightly: the guards (duplicate calls, the final-turn
# directive) then show, and a run never takes more than a few seconds.
DEMO_MODEL_MAX_TURNS = 6
# Body keys the loop writes itself: a --set of one would send it twice or break the loop.
_LOOP_KEYS = frozenset({"model", "messages", "tools", "stream", "stream_options"})
_TOOL_CHOICES = ("auto", "none", "required")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI accepts as a function name


def demo(agent: AgentSpec, prompt: str, script: Sequence[Step] | None = None) -> SessionResult:
    """Run ``agent`` on the Local host against a fresh loopback chat emulator playing
    ``script`` (``None``: the emulator's default, each tool once with example arguments)."""
    from managedloop.session import run_sync
    from managedloop.testing.chat import ChatEmulator

    with ChatEmulator(script) as emu:
        provider = Local(model=DEMO_MODEL, base_url=emu.base_url, api_key=emu.api_key)
        return run_sync(provider, agent=agent, prompt=prompt)


def demo_model(agent: AgentSpec, prompt: str) -> SessionResult:
    """Run ``agent`` on the Local host over the offline in-process model (SmolLM2 through
    llama.cpp, extra ``managedloop[local-model]``): a real model, no server, no network."""
    from managedloop.session import run_sync

    provider = Local(model="smollm2-135m-instruct", chat=LlamaCppChat())
    return run_sync(provider, agent=agent, prompt=prompt, max_turns=DEMO_MODEL_MAX_TURNS)


# -- argument types (a ValueError/ArgumentTypeError becomes a usage error, exit 2) ------


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def _temperature(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value}")
    return number


def _tool_choice(value: str) -> Any:
    """``auto``/``none``/``required``, a JSON object, or a tool name (that tool, forced)."""
    if value in _TOOL_CHOICES:
        return value
    if value.lstrip().startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not a JSON object: {exc}") from None
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError("not a JSON object")
        return parsed
    if _TOOL_NAME.fullmatch(value) is None:
        raise argparse.ArgumentTypeError(
            f"takes {', '.join(_TOOL_CHOICES)}, a tool name or a JSON object, got {value!r}"
        )
    return {"type": "function", "function": {"name": value}}


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _setting(value: str) -> tuple[str, Any]:
    """``key=value``: the value as JSON if it parses, else as the string itself."""
    key, sep, raw = value.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"takes key=value, got {value!r}")
    if key in _LOOP_KEYS:
        raise argparse.ArgumentTypeError(
            f"{key} is written by the loop itself and cannot be set "
            "(use --model, --tools or --no-stream)"
        )
    try:
        parsed: Any = json.loads(raw)
    except ValueError:
        return key, raw
    if not _finite(parsed):  # 1e999 parses as inf, which is not JSON on the wire
        raise argparse.ArgumentTypeError(f"{key}: {raw} is not a finite number")
    return key, parsed


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("local host")
    group.add_argument(
        "--base-url", help="OpenAI-compatible endpoint up to /v1 (default: $OPENAI_BASE_URL)"
    )
    group.add_argument("--model", required=True, help="model id; anthropic:<id> for Claude")
    group.add_argument(
        "--api-key", help="sent as a bearer token (default: $OPENAI_API_KEY; prefer the env)"
    )
    group.add_argument("--no-stream", action="store_true", help="wait for whole responses")
    group.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        help="what to send to this kind of server (default: one that works on OpenAI and "
        "llama.cpp as written)",
    )
    group.add_argument(
        "--max-retries",
        type=int,
        default=3,
        help="retries of a transient failure per model call (default: 3)",
    )
    settings = parser.add_argument_group("model settings (sent verbatim as request-body keys)")
    settings.add_argument(
        "--tool-choice",
        type=_tool_choice,
        metavar="CHOICE",
        help="auto, none, required, a tool name (force that tool) or a JSON object; "
        "llama.cpp's server ignores tools unless this is sent",
    )
    settings.add_argument(
        "--max-tokens", type=_positive_int, metavar="N", help="max_tokens: cap each answer"
    )
    settings.add_argument(
        "--temperature", type=_temperature, metavar="T", help="sampling temperature (>= 0)"
    )
    settings.add_argument(
        "--set",
        dest="settings",
        action="append",
        type=_setting,
        default=[],
        metavar="KEY=VALUE",
        help="any other body key; VALUE is JSON if it parses, else a string (repeatable)",
    )


def model_config_for_run(args: argparse.Namespace) -> dict[str, Any]:
    """The request-body keys the command line asked for (``Local(model_config=...)``)."""
    config: dict[str, Any] = {}
    for key, value in args.settings:
        config[key] = value  # the last --set of a key wins, as with any repeated flag
    flags = {
        "tool_choice": args.tool_choice,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
    }
    for key, value in flags.items():
        if value is None:
            continue
        if key in config and config[key] != value:
            flag = "--" + key.replace("_", "-")
            raise InvalidOptionsError(
                f"--set {key}=... contradicts {flag}; give one of them", option=key
            )
        config[key] = value
    return config


def announce(title: str, info: dict[str, Any], *, json: bool) -> None:
    """An emulator's connection settings on stdout: ``key=value`` lines, or one JSON line
    (``{"ok": true, "command": "emulate", "emulator": ..., ...}``) with ``--json``."""
    if json:
        doc = {"ok": True, "command": "emulate", "emulator": title, **info}
        print(_json.dumps(doc), flush=True)
        return
    print(title, flush=True)
    for key, value in info.items():
        print(f"{key}={value}", flush=True)
    print("Ctrl-C to stop.", flush=True)


OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


def _where(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """With no ``--base-url``: say on stderr where the run goes, and refuse a ``--api-key``
    for a host nobody named (only OpenAI's own ``OPENAI_API_KEY`` goes to OpenAI unasked)."""
    if args.base_url is not None or getattr(args, "model", "").startswith("anthropic:"):
        return
    from_env = environ.get("OPENAI_BASE_URL")
    url = from_env or OPENAI_DEFAULT_BASE_URL
    if args.api_key is not None and not from_env:
        raise InvalidOptionsError(
            f"--api-key without --base-url would send that key to {url}, a host this run "
            "was not pointed at: give --base-url (or $OPENAI_BASE_URL), or put an OpenAI "
            "key in $OPENAI_API_KEY",
            option="api_key",
        )
    source = "$OPENAI_BASE_URL" if from_env else "the default; --base-url to change it"
    sys.stderr.write(f"managedloop: run: no --base-url: sending to {redact_url(url)} ({source})\n")


def provider_for_run(args: argparse.Namespace) -> Local:
    _where(args, os.environ)
    return Local(
        model=args.model,
        base_url=args.base_url if args.base_url is not None else MISSING,
        api_key=args.api_key if args.api_key is not None else MISSING,
        stream=not args.no_stream,
        profile=args.profile,
        max_retries=args.max_retries,
        model_config=model_config_for_run(args),
    )


def emulate(host: str, port: int, *, json: bool = False) -> None:
    """Serve the chat emulator on ``127.0.0.1:port`` until interrupted; ``json``: what a
    client needs as one JSON line instead of ``key=value`` lines."""
    from managedloop.testing.chat import ChatEmulator

    emu = ChatEmulator(port=port).start()
    try:
        announce(
            f"{LABEL} chat emulator (OpenAI Chat Completions)",
            {
                "base_url": emu.base_url,
                "anthropic_base_url": emu.anthropic_base_url,
                "api_key": emu.api_key,
            },
            json=json,
        )
        emu.serve_forever()
    finally:
        emu.stop()
