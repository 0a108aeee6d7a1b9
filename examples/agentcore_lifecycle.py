"""The Bedrock AgentCore lifecycle: provision a harness, run, reattach, tear down, and the
AWS gotchas (the session-id contract, model ids, asynchronous deletion).

The Python counterpart of the specification's ``examples/bedrock_agent_core.exs``. It runs
offline as written, against ``managedloop.testing.AgentCoreEmulator``: a real HTTP
server on 127.0.0.1 serving both AgentCore planes through real botocore (SigV4 checked on
every request, binary event-stream frames). Lines marked ``REAL SERVICE`` say what changes.

    python examples/agentcore_lifecycle.py

Needs the extra ``managedloop[agentcore]`` (botocore).
"""

from __future__ import annotations

import managedloop as ml
from managedloop.providers import BedrockAgentCore
from managedloop.providers.agentcore import new_runtime_session_id
from managedloop.testing import AgentCoreEmulator, call, say


@ml.tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}, 21 C"


# Gotcha: a model id. On AWS most Anthropic models are invoked through a *cross-region
# inference profile* ("us.anthropic...", "eu.anthropic..."), not the bare model id, and
# the profile must exist in your region. ``model`` is sent as bedrockModelConfig.modelId.
AGENT = ml.AgentSpec(
    name="weather-agent",
    system_prompt="Use the tools.",
    tools=[get_weather],
    model="us.anthropic.claude-sonnet-4-5-20250929-v1:0",
)
SCRIPT = [
    call("get_weather", {"city": "Paris"}),
    say("It is sunny in Paris."),
    say("Still sunny in Paris."),  # the reattached follow-up
]
PROVISION_TIMEOUT = 30.0  # seconds for the whole provision; the emulator is READY in ~50 ms


def main() -> None:
    # REAL SERVICE: drop **emu.client_kwargs (endpoint, region and the emulator's keys):
    # credentials then come from the AWS chain, and the role is an IAM role you own.
    with AgentCoreEmulator(SCRIPT) as emu, BedrockAgentCore(**emu.client_kwargs) as provider:
        # 1. Provision: CreateHarness, wait for READY, then for the endpoint invokes use
        #    (live, the DEFAULT endpoint took minutes after READY). One deadline covers it
        #    all: provision timeout + run timeout must fit in your own enclosing deadline.
        handle = ml.provision_sync(
            provider, AGENT, execution_role_arn=emu.execution_role_arn, timeout=PROVISION_TIMEOUT
        )
        print("harness:", handle.harness_name, emu.harness_status(handle.harness_id))

        # 2. Gotcha: the runtime session id. The service takes 33-100 characters of
        #    [a-zA-Z0-9_-] starting with a letter or digit; a uuid4 without dashes (32
        #    characters) is one short. A bad id fails at construction, before any request.
        try:
            BedrockAgentCore(runtime_session_id="too-short", **emu.client_kwargs)
        except ml.InvalidOptionsError as error:
            print("bad session id:", error.code)  # invalid_session_id
        session_id = new_runtime_session_id()  # "ml-<32 hex>": always valid
        runner = BedrockAgentCore(runtime_session_id=session_id, **emu.client_kwargs)

        # 3. Run on the handle (it carries the harness ARN): each turn is one
        #    InvokeHarness; the tool runs here. A handle carries no implementations, so
        #    handler= serves the calls.
        with runner:
            result = ml.run_sync(
                runner, agent=handle, prompt="Weather in Paris?", handler=AGENT.toolset()
            )
            print("terminal:", result.terminal, "stop_reason:", result.stop_reason)
            print("text:", result.text)
            print("tools:", [(u.name, u.input) for u in result.custom_tool_uses])
            print("same session:", result.session_id == session_id)

            # 4. Reattach: the harness keeps the conversation server-side for the session
            #    (without a pinned id, every run would mint a fresh session).
            again = ml.run_sync(
                provider, agent=handle, prompt="And now?", handler=AGENT.toolset(), resume=result
            )
            print("reattached:", again.session_id == session_id, again.text)

        # 5. Gotcha: deletion is asynchronous. Teardown returns while the harness is still
        #    DELETING (on AWS for a while). Until it is gone its name stays taken: a
        #    provision of the same spec meanwhile gets a 409, which provision waits out
        #    inside its own timeout (else ProvisioningError(code="harness_still_deleting"))
        #    before creating the harness again under the same content-addressed name.
        report = ml.teardown_sync(provider, handle)
        print("teardown:", report["status"])  # DELETING


if __name__ == "__main__":
    main()
