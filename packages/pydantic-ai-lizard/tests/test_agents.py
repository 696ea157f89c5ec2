"""Agents with harness tools (`Shell`, `FileSystem`, `Coder`) working in Lizard sandboxes.

Models are scripted with `FunctionModel`, so each test states exactly which tool calls the agent
makes and checks what the sandbox did with them. Skipped when pydantic-ai-harness is missing, or
installed next to a pydantic-ai-slim it does not pin (each harness release pins one exactly).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.workspaces import Workspace

from lizard_local import LocalServer
from pydantic_ai_lizard import LizardSandbox, LizardSandboxBackend


def _harness_skip_reason() -> str | None:
    try:
        harness = importlib.metadata.distribution("pydantic-ai-harness")
    except importlib.metadata.PackageNotFoundError:
        return "pydantic-ai-harness is not installed"
    slim = Version(importlib.metadata.version("pydantic-ai-slim"))
    for line in harness.requires or []:
        requirement = Requirement(line)
        pinned = requirement.name == "pydantic-ai-slim" and requirement.marker is None
        if pinned and slim not in requirement.specifier:
            return f"pydantic-ai-harness {harness.version} pins {requirement}, not {slim}"
    return None


_SKIP = _harness_skip_reason()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

if _SKIP is None:
    from pydantic_ai_harness.coder import Coder
    from pydantic_ai_harness.filesystem import FileSystem
    from pydantic_ai_harness.shell import Shell

CREATE = "POST /api/sandboxes"


def script(*steps: ToolCallPart) -> FunctionModel:
    """A model that makes one tool call per step, then answers with the last tool result.

    It streams too (`Coder` asks for streamed responses), replaying the same script.
    """

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = _steps_in_this_run(messages)
        if step < len(steps):
            call = steps[step]
            assert call.tool_name in {tool.name for tool in info.function_tools}, call.tool_name
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(f"done: {_last_tool_result(messages)}")])

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        for part in respond(messages, info).parts:
            if isinstance(part, ToolCallPart):
                yield {0: DeltaToolCall(name=part.tool_name, json_args=part.args_as_json_str())}
            elif isinstance(part, TextPart):
                yield part.content

    return FunctionModel(respond, stream_function=stream)


def _steps_in_this_run(messages: Sequence[ModelMessage]) -> int:
    # Count responses after the last user prompt, so a continued run starts its own script.
    count = 0
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and any(
            part.part_kind == "user-prompt" for part in message.parts
        ):
            break
        count += isinstance(message, ModelResponse)
    return count


def _last_tool_result(messages: Sequence[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                return part.model_response_str()
    return ""


def _tool_results(messages: Sequence[ModelMessage]) -> dict[str, str]:
    return {
        part.tool_name: part.model_response_str()
        for message in messages
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


async def test_shell_and_filesystem_work_in_the_sandbox(lizard_counters: LocalServer) -> None:
    sandbox = LizardSandbox()
    model = script(
        ToolCallPart(
            "write_file", {"path": "hello.py", "content": "print('hello from', __name__)\n"}
        ),
        ToolCallPart("run_command", {"command": "python3 hello.py > out.txt && echo ran; exit 3"}),
        ToolCallPart("read_file", {"path": "out.txt"}),
    )
    agent = Agent(model, capabilities=[sandbox, Shell(), FileSystem()])
    result = await agent.run("Write, run and read hello.py.")
    ref = result.workspace.ref
    assert ref is not None
    assert ref.provider == "lizard"
    try:
        results = _tool_results(result.all_messages())
        assert "ran" in results["run_command"]
        assert "3" in results["run_command"]
        assert "hello from __main__" in results["read_file"]
        assert "hello from __main__" in result.output
        # The run ended; its sandbox did not.
        assert ref.id in lizard_counters.sandboxes()
        backend = sandbox.backend(ref)
        assert await Workspace(backend).read_text("/workspace/out.txt") == "hello from __main__\n"
        assert lizard_counters.counters()["routes"][CREATE] == 1
    finally:
        await sandbox.destroy(ref)
    assert ref.id not in lizard_counters.sandboxes()


async def test_coder_edits_and_tests_code(lizard_local: LocalServer) -> None:
    backend = LizardSandboxBackend(working_dir="/workspace/repo")
    buggy = "def add(a, b):\n    return a - b\n\n"
    buggy += "assert add(2, 3) == 5, 'add is broken'\nprint('tests pass')\n"
    model = script(
        ToolCallPart("write_file", {"path": "calc.py", "content": buggy}),
        ToolCallPart("shell", {"command": "python3 calc.py"}),
        ToolCallPart("edit_file", {"path": "calc.py", "old_text": "a - b", "new_text": "a + b"}),
        ToolCallPart("shell", {"command": "python3 calc.py"}),
    )
    agent = Agent(model, capabilities=[Coder(sub_agents=False)])
    try:
        result = await agent.run("Fix calc.py so its test passes.", workspace=backend)
        assert "tests pass" in result.output
        assert "a + b" in await Workspace(backend).read_text("calc.py")
        failing_run = next(
            part.model_response_str()
            for message in result.all_messages()
            for part in message.parts
            if isinstance(part, ToolReturnPart) and part.tool_name == "shell"
        )
        assert "add is broken" in failing_run
    finally:
        await backend.destroy()


async def test_a_second_run_reattaches_through_message_history(
    lizard_counters: LocalServer,
) -> None:
    sandbox = LizardSandbox()
    agent = Agent(
        script(
            ToolCallPart("run_command", {"command": "echo remembered > note.txt && cat note.txt"})
        ),
        capabilities=[sandbox, Shell(), FileSystem()],
    )
    first = await agent.run("Leave a note.")
    ref = first.workspace.ref
    assert ref is not None
    try:
        history = first.all_messages()
        assert any(isinstance(m, ModelResponse) and m.workspace_ref == ref for m in history)
        reader = Agent(
            script(ToolCallPart("read_file", {"path": "note.txt"})),
            capabilities=[sandbox, Shell(), FileSystem()],
        )
        second = await reader.run("Read the note.", message_history=history)
        assert second.workspace.ref == ref
        assert "remembered" in second.output
        assert lizard_counters.counters()["routes"][CREATE] == 1
    finally:
        await sandbox.destroy(ref)


def test_the_example_runs_offline_and_cleans_up() -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "fibonacci_agent.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIZARD_")}
    done = subprocess.run(
        [sys.executable, str(example)], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agent  > run_command(" in done.stdout
    assert "fib.txt = '0 1 1 2 3 5 8 13 21 34'" in done.stdout
    assert done.stdout.rstrip().endswith("sandbox destroyed")
