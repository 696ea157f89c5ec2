"""Strands' ``Agent`` drives ``LizardSandbox``: its vended tools, its built-in ``shell`` and a
custom tool that reaches the sandbox through ``tool_context.agent.sandbox``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import CREATE, Requests
from scripted_model import ScriptedModel, tool_use
from strands import Agent, ToolContext, tool

from lizard_local import LocalServer
from strands_lizard import LizardSandbox


@tool(context=True)
async def line_count(path: str, tool_context: ToolContext) -> int:
    """Count the lines of a file in the agent's sandbox.

    Args:
        path: The file.
    """
    return (await tool_context.agent.sandbox.read_text(path)).count("\n")


def _text(result: dict[str, Any]) -> str:
    return "".join(
        block.get("text", "") or json.dumps(block.get("json", "")) for block in result["content"]
    )


async def test_an_agent_runs_a_command_and_reads_a_file_in_the_sandbox(
    lizard_local: LocalServer, requests: Requests
) -> None:
    model = ScriptedModel(
        [
            [
                tool_use(
                    "sandbox_shell", "t1", command="printf 'a\\nb\\nc\\n' > notes.txt; uname -s"
                )
            ],
            [tool_use("sandbox_file_editor", "t2", command="view", path="/workspace/notes.txt")],
            [tool_use("line_count", "t3", path="notes.txt")],
            [{"text": "The file has three lines."}],
        ]
    )
    async with LizardSandbox(lifetime_ms=120_000) as sandbox:
        agent = Agent(model=model, sandbox=sandbox, tools=[line_count], callback_handler=None)
        assert {"sandbox_shell", "sandbox_file_editor"} <= set(agent.tool_names)
        result = await agent.invoke_async("How many lines does notes.txt have?")
        assert str(result).strip() == "The file has three lines."
        results = model.tool_results()
        assert all(r["status"] == "success" for r in results.values()), results
        assert json.loads(_text(results["t1"]))["output"] == "Linux\n"
        assert "1  a" in _text(results["t2"])
        assert "3  c" in _text(results["t2"])
        assert _text(results["t3"]) == "3"
        assert requests.counts()[CREATE] == 1
        assert lizard_local.sandboxes().count(sandbox.sandbox_id) == 1


async def test_concurrent_tool_calls_and_a_sub_agent_share_one_sandbox(
    lizard_local: LocalServer, requests: Requests
) -> None:
    try:
        from strands.vended_tools import shell
    except ImportError:  # Strands before the rename of bash to shell
        from strands.vended_tools import bash as shell  # type: ignore[attr-defined]
    name = shell.tool_name  # the tool that reads context.agent.sandbox at call time

    parent_model = ScriptedModel(
        [
            [tool_use(name, f"c{i}", command=f"echo {i} >> /tmp/calls") for i in range(4)],
            [{"text": "done"}],
        ]
    )
    child_model = ScriptedModel(
        [[tool_use(name, "s1", command="wc -l < /tmp/calls")], [{"text": "counted"}]]
    )
    async with LizardSandbox(lifetime_ms=120_000) as sandbox:
        parent = Agent(model=parent_model, sandbox=sandbox, tools=[shell], callback_handler=None)
        await parent.invoke_async("write four lines")
        child = Agent(
            model=child_model, sandbox=parent.sandbox, tools=[shell], callback_handler=None
        )
        await child.invoke_async("count them")
        counted = child_model.tool_results()["s1"]
        assert '"output": "4\\n"' in _text(counted)
        assert requests.counts()[CREATE] == 1


async def test_a_timeout_reaches_the_model_with_the_partial_output(
    lizard_local: LocalServer,
) -> None:
    model = ScriptedModel(
        [
            [tool_use("sandbox_shell", "t1", command="echo partial; sleep 60", timeout=1)],
            [{"text": "it timed out"}],
        ]
    )
    async with LizardSandbox(lifetime_ms=120_000) as sandbox:
        agent = Agent(model=model, sandbox=sandbox, callback_handler=None)
        await agent.invoke_async("run it")
    result = model.tool_results()["t1"]
    assert result["status"] == "error"
    assert "timed out" in _text(result)
    assert "partial" in _text(result)


async def test_the_vended_python_repl_keeps_state_with_stateful_python(
    lizard_local: LocalServer,
) -> None:
    model = ScriptedModel(
        [
            [tool_use("sandbox_python_repl", "p1", code="rows = [1, 2, 3]")],
            [tool_use("sandbox_python_repl", "p2", code="print(sum(rows))")],
            [{"text": "6"}],
        ]
    )
    async with LizardSandbox(stateful_python=True, lifetime_ms=120_000) as sandbox:
        agent = Agent(model=model, sandbox=sandbox, callback_handler=None)
        if "sandbox_python_repl" not in agent.tool_names:
            pytest.skip("this Strands has no python_repl tool (added in 1.60)")
        await agent.invoke_async("sum the rows")
    result = model.tool_results()["p2"]
    assert result["status"] == "success"
    assert json.loads(_text(result)) == {"output": "6\n", "error": "", "exit_code": 0}
