"""``LizardTool`` against lizard-local: validation without I/O, results, costs, cleanup."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from langchain_lizard import CommandOutput, LizardTool
from langchain_lizard._errors import LizardToolError, SandboxUnavailableError
from lizard_local import LocalServer


@pytest.fixture
def tool(lizard_local: LocalServer) -> Iterator[LizardTool]:
    with LizardTool(lifetime_ms=300_000) as made:
        yield made


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"timeout": "60"}, TypeError),
        ({"timeout": 0}, ValueError),
        ({"timeout": float("inf")}, ValueError),
        ({"api_url": "http://lizard.invalid"}, ValueError),
        ({"api_key": 123}, TypeError),
        ({"template": "no spaces allowed"}, ValueError),
        ({"lifetime_ms": 10}, ValueError),
        ({"envs": {"NAME": 1}}, TypeError),
    ],
)
def test_bad_arguments_are_refused_before_any_request(
    lizard_counters: LocalServer, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        LizardTool(**kwargs)
    assert lizard_counters.counters()["total"] == 0


def test_building_a_tool_makes_no_request(lizard_counters: LocalServer) -> None:
    tool = LizardTool()
    assert tool.sandbox_id is None
    assert "lzl_" not in repr(tool)
    assert lizard_counters.counters()["total"] == 0


def test_run_returns_the_exit_code_and_output(tool: LizardTool) -> None:
    output = tool.run("printf out; printf err >&2; exit 3")
    assert output == CommandOutput(3, "out", "err")
    assert str(output) == "exit code 3\nstdout:\nout\nstderr:\nerr"


async def test_arun_returns_the_exit_code_and_output(lizard_local: LocalServer) -> None:
    async with LizardTool(lifetime_ms=300_000) as tool:
        output = await tool.arun("echo hello from $(uname -s)")
    assert output == CommandOutput(0, "hello from Linux\n", "")


def test_first_command_creates_the_sandbox_then_one_request_each(
    lizard_counters: LocalServer,
) -> None:
    with LizardTool(lifetime_ms=300_000) as tool:
        tool.run("true")
        tool.run("true")
        routes = lizard_counters.counters()["routes"]
    assert routes["POST /api/sandboxes"] == 1
    assert routes["POST /api/sandboxes/{id}/exec"] == 2


def test_envs_reach_commands_and_the_host_environment_does_not(
    lizard_local: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_ONLY", "from the host")
    with LizardTool(envs={"GREETING": "hi"}, lifetime_ms=300_000) as tool:
        output = tool.run('printf "%s|%s" "$GREETING" "${HOST_ONLY-unset}"')
    assert output.stdout == "hi|unset"


def test_a_timeout_raises_with_the_partial_output(lizard_local: LocalServer) -> None:
    tool = LizardTool(timeout=1, lifetime_ms=300_000)
    with tool, pytest.raises(LizardToolError, match="timed out") as caught:
        tool.run("printf partial; sleep 30")
    assert caught.value.stdout == "partial"


def test_close_destroys_the_sandbox_and_may_be_repeated(lizard_local: LocalServer) -> None:
    tool = LizardTool(lifetime_ms=300_000)
    tool.run("true")
    sandbox_id = tool.sandbox_id
    assert sandbox_id in lizard_local.sandboxes()
    tool.close()
    assert sandbox_id not in lizard_local.sandboxes()
    tool.close()
    with pytest.raises(SandboxUnavailableError):
        tool.run("true")
