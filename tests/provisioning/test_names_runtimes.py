"""Host-side names (issue 10 item 2) and the runtime bootstrap (item 5).

§9 lines covered (reference-inventory.md):

* name_test: hyphens sanitised on AgentCore (``rma_live_bedrock_harness_<d>``); the charset
  and a leading letter are enforced (``9-live.agent``); the digest is never truncated;
  Claude names are byte-identical ``<base>_<digest8>`` (hyphens kept); a base of exactly
  the budget (31 on AgentCore, 247 on Claude) is kept whole and fills the limit.
* runtimes_test: shebang, pipefail and locale; ``mise use --global elixir@1.17.0`` and
  ``mise install``; erlang precedes elixir; ``-otp-<major>`` when erlang is present;
  other languages in input order; deterministic (Runtime and mapping alike); installer
  line before the PATH export before the first ``mise use``; the ~/.bashrc block guarded
  by its marker after the final ``mise install`` (the PATH export twice); the prompt
  block names each runtime, says EXACTLY ONCE / bash / idempotent and embeds the script
  in a bash fence; required hosts sorted, deduplicated, the six mise hosts, ``[]`` for
  none.

Deliberately changed: a base too long for the policy is refused
(``agent_base_too_long`` / ``environment_base_too_long``) on both hosts, never shortened
with a hash (the reference shortened on AgentCore): prune must read every name back to
its base. So the name_test lines on truncation (40 bytes exactly, 30-char-prefix
distinctness, 31/32 collisions, multi-byte truncation) become "refused, naming the
limit". The bashrc marker reads ``mise activate-managedloop``.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import managedloop as ml
from managedloop.provisioning.names import AGENTCORE_HARNESS, CLAUDE, compose, version_of
from managedloop.provisioning.runtimes import (
    MISE_HOSTS,
    bootstrap_for,
    bootstrap_script,
    required_hosts,
    system_prompt_block,
)

D = "38ca3140" + "0" * 56


def test_agentcore_sanitises_and_needs_a_leading_letter() -> None:
    assert compose("rma-live.bedrock-harness", D, AGENTCORE_HARNESS) == (
        "rma_live_bedrock_harness_38ca3140"
    )
    assert compose("9-live.agent", D, AGENTCORE_HARNESS) == "a9_live_agent_38ca3140"


def test_claude_names_are_kept_byte_for_byte() -> None:
    assert compose("rma-v02-rtc", D, CLAUDE) == "rma-v02-rtc_38ca3140"
    assert compose("café", D, CLAUDE) == "café_38ca3140"


@pytest.mark.parametrize(("policy", "budget"), [(AGENTCORE_HARNESS, 31), (CLAUDE, 247)])
def test_a_base_of_exactly_the_budget_fills_the_limit_one_more_is_refused(
    policy: object, budget: int
) -> None:
    name = compose("b" * budget, D, policy)  # type: ignore[arg-type]
    assert len(name) == budget + 9
    assert name.endswith("_38ca3140")
    with pytest.raises(ml.InvalidOptionsError) as info:
        compose("b" * (budget + 1), D, policy)  # type: ignore[arg-type]
    assert info.value.code == "agent_base_too_long"
    assert info.value.context["max_base"] == budget
    with pytest.raises(ml.InvalidOptionsError) as env:
        compose("b" * (budget + 1), D, policy, kind="environment")  # type: ignore[arg-type]
    assert env.value.code == "environment_base_too_long"


@pytest.mark.parametrize("bad", ["", "a\nb", "tab\tbed", 7])
def test_bad_bases_are_named_errors(bad: object) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        compose(bad, D, CLAUDE)  # type: ignore[arg-type]
    assert info.value.code == "invalid_name"


def test_version_of_reads_names_back_strictly() -> None:
    assert version_of("data_aaaaaaaa", "data", CLAUDE) == "aaaaaaaa"
    assert version_of("data_analysis_aaaaaaaa", "data", CLAUDE) is None
    assert version_of("d_d_aaaaaaaa", "d", CLAUDE) is None
    assert version_of("data_AAAAAAAA", "data", CLAUDE) is None
    assert version_of("data_aaaaaaaa_x", "data", CLAUDE) is None
    assert version_of("billing_support_aaaaaaaa", "billing-support", AGENTCORE_HARNESS) == (
        "aaaaaaaa"
    )


EX = ml.Runtime(lang="elixir", version="1.17.0")
ER = ml.Runtime(lang="erlang", version="27.1.2")
GO = ml.Runtime(lang="go", version="1.23.4")


def test_script_shape_and_order() -> None:
    script = bootstrap_script([GO, EX, ER])
    lines = script.splitlines()
    assert lines[:3] == [
        "#!/usr/bin/env bash",
        "set -euo pipefail",
        "export LC_ALL=C.UTF-8 LANG=C.UTF-8",
    ]
    uses = [line for line in lines if line.startswith("mise use --global")]
    assert uses == [
        "mise use --global erlang@27.1.2",
        "mise use --global elixir@1.17.0-otp-27",
        "mise use --global go@1.23.4",
    ]
    installer = next(i for i, line in enumerate(lines) if "mise.jdx.dev/install.sh" in line)
    path = next(i for i, line in enumerate(lines) if line.startswith("export PATH="))
    assert installer < path < lines.index(uses[0]) < lines.index("mise install")
    assert lines.index("mise install") < next(i for i, x in enumerate(lines) if "grep -q" in x)
    assert script.count("$HOME/.local/bin:$HOME/.local/share/mise/shims:$PATH") == 2
    assert "mise use --global elixir@1.17.0\n" in bootstrap_script([EX])  # no erlang: plain
    assert bootstrap_script([EX, GO]) == bootstrap_script(
        [ml.Runtime.coerce({"lang": "elixir", "version": "1.17.0"}), GO]
    )


def test_prompt_block_and_hosts() -> None:
    block = system_prompt_block([EX, GO])
    assert block.startswith("## Runtime bootstrap")
    assert "elixir 1.17.0, go 1.23.4" in block
    assert "EXACTLY ONCE" in block
    assert "via bash" in block
    assert "idempotent" in block
    assert f"```bash\n{bootstrap_script([EX, GO])}```" in block
    hosts = required_hosts([EX])
    assert hosts == sorted(set(hosts)) == sorted(MISE_HOSTS)
    assert len(hosts) == 6
    assert required_hosts([]) == []
    assert bootstrap_for([]) is None
    boot = bootstrap_for([EX])
    assert boot is not None
    assert boot.script == bootstrap_script([EX])


_bases = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1, max_size=40
)


@pytest.mark.fuzz
@given(
    base=_bases, other=_bases, digest=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
)
def test_every_composed_name_reads_back_to_its_base_and_no_other(
    base: str, other: str, digest: str
) -> None:
    for policy in (AGENTCORE_HARNESS, CLAUDE):
        if len(policy.host_base(base)) > policy.max_base:
            with pytest.raises(ml.InvalidOptionsError, match="never shortened"):
                compose(base, digest, policy)
            continue
        name = compose(base, digest, policy)
        assert len(name) <= policy.max_length
        assert name.endswith("_" + digest[:8])
        assert version_of(name, base, policy) == digest[:8]
        if policy is AGENTCORE_HARNESS:
            assert re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,39}", name)
        if policy.host_base(other) != policy.host_base(base):
            assert version_of(name, other, policy) is None
