"""The full Claude Managed Agents lifecycle: provision, run with a local tool, read, tear down.

The Python counterpart of the specification's ``examples/claude_managed_agents.exs``. It
runs offline as written, against ``managedloop.testing.ClaudeEmulator``: a real HTTP
server on 127.0.0.1 that speaks the Managed Agents REST + SSE API, driven through the real
``anthropic`` SDK. Every line marked ``REAL SERVICE`` says what changes for the real API.

    python examples/claude_lifecycle.py

Needs the extra ``managedloop[claude]`` (the ``anthropic`` SDK).
"""

from __future__ import annotations

import anyio

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import ClaudeEmulator, call, say


# A custom tool runs here, in this process: the host sees only its name, description
# (the docstring), input schema (from the annotations) and the text it returns.
@ml.tool
def lookup_customer(email: str) -> str:
    """Look a customer up by email address."""
    customers = {"ada@example.com": "Pro plan, active since 2021"}  # your private data
    if email not in customers:
        raise ml.ToolError(f"no customer {email}")  # the model gets an error result
    return f"Customer {email}: {customers[email]}."


# Managed hosts keep agents server-side, so the spec needs a name. The agent is created
# as "<name>_<digest8>": a changed prompt, tool or model is a new agent, never an edit.
AGENT = ml.AgentSpec(
    name="support",
    system_prompt="Answer billing questions. Use the tools; never guess.",
    tools=[lookup_customer],
    model="claude-sonnet-5-5",
)
# ``config`` goes to the host verbatim: a cloud sandbox with unrestricted networking.
ENVIRONMENT = ml.EnvironmentSpec(
    name="support-sandbox", config={"type": "cloud", "networking": {"type": "unrestricted"}}
)

# What the emulator's model does: one tool call, then an answer. (The real model decides.)
SCRIPT = [
    call("lookup_customer", {"email": "ada@example.com"}),
    say("ada@example.com is on the Pro plan, active since 2021."),
]


def main() -> None:
    with ClaudeEmulator(SCRIPT) as emu:
        # REAL SERVICE: ClaudeManagedAgents() reads ANTHROPIC_API_KEY (or a bearer-token
        # file, ANTHROPIC_BEARER_TOKEN_FILE); the emulator hands out its own key and URL.
        credentials = {"api_key": emu.api_key, "bearer_token_file": None}
        provider = ClaudeManagedAgents(base_url=emu.base_url, **credentials)

        # 1. Provision the agent and its environment in one call. Cached per process:
        #    the same spec again returns the same handle without a request.
        handle = ml.provision_sync(provider, AGENT, environment=ENVIRONMENT)
        print("agent:", handle.name, handle.agent_id.startswith("agent_"))
        assert ml.provision_sync(provider, AGENT, environment=ENVIRONMENT) == handle

        # 2. Run a session on the handle. The tool call comes back to this process, runs,
        #    and its result goes to the host; the loop repeats until a terminal.
        runner = ClaudeManagedAgents(
            agent=handle, environment=handle, base_url=emu.base_url, **credentials
        )
        result = ml.run_sync(runner, agent=AGENT, prompt="What plan is ada@example.com on?")

        # 3. The same result shape as every other host.
        print("terminal:", result.terminal)  # end_turn
        print("stop_reason:", result.stop_reason)  # the host's raw value, verbatim
        print("text:", result.text)
        print("tools:", [(u.name, u.input) for u in result.custom_tool_uses])
        print("usage:", result.usage.input_tokens, result.usage.output_tokens)
        print("session:", result.session_id.startswith("sesn_"), "turns:", result.turns)

        # 4. Files the agent wrote under /mnt/session/outputs/ (the emulator writes one
        #    as the agent would) are session artifacts, read through the Files API.
        emu.write_output(result.session_id, "summary.txt", "Pro plan, active.")

        async def artifacts() -> list[tuple[str, bytes]]:
            store = ml.Artifacts.for_session(runner, result.session_id)
            return [(a.name, await store.fetch(a.name)) for a in await store.list()]

        print("artifacts:", anyio.run(artifacts))

        # 5. Tear down: the agent and the environment are archived (each reported).
        print("teardown:", ml.teardown_sync(provider, handle))


if __name__ == "__main__":
    main()
