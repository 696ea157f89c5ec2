"""A ``SandboxAgent`` on a scripted model, for tests that run the SDK's ``Runner``.

The model (a ``Model`` subclass, as the SDK's docs suggest for tests) answers each turn with the
next queued output: tool calls, then a final message. The agent has the SDK's ``Shell``
capability (its ``exec_command`` tool) and a file capability whose tools call the session's
``read`` and ``write``, like the SDK's own integration tests. ``approval`` needs a human's
approval, which interrupts a run so that its ``RunState`` can be saved and resumed.

Run as a script (``python scripted_agent.py STATE_FILE``), it resumes a saved run in a new
process and prints the tool outputs as JSON.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agents import (
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    Tool,
    ToolCallOutputItem,
    Usage,
    function_tool,
)
from agents.items import RunItem, TResponseOutputItem
from agents.run_state import RunState
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Capability, Shell
from agents.sandbox.manifest import Manifest
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from openai_agents_lizard import LizardSandboxClient, LizardSandboxClientOptions

OPTIONS = LizardSandboxClientOptions(lifetime_ms=300_000)
PROGRAM = "import sys\nprint(6 * 7)\nprint('to stderr', file=sys.stderr)\n"


Turn = Sequence[TResponseOutputItem] | Callable[[Any], list[TResponseOutputItem]]
"""A turn's output items, or a function of the model's input that makes them."""


class ScriptedModel(Model):
    """Answers each turn with the next queued output items (or those a function makes)."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self.turns = list(turns)
        self.tool_names: set[str] = set()
        """The names of every tool the runner offered the model."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.tool_names.update(tool.name for tool in kwargs.get("tools", ()))
        turn = self.turns.pop(0)
        items = turn(kwargs.get("input")) if callable(turn) else list(turn)
        return ModelResponse(output=items, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests do not stream")


def call(name: str, call_id: str, **arguments: object) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        type="function_call",
        status="completed",
    )


def final(text: str) -> ResponseOutputMessage:
    content = ResponseOutputText(text=text, type="output_text", annotations=[])
    return ResponseOutputMessage(
        id="msg_final", type="message", role="assistant", status="completed", content=[content]
    )


class FileTools(Capability):
    """``write_file`` and ``read_file``: the session's ``write`` and ``read``."""

    type: str = "file-tools"

    def tools(self) -> list[Tool]:
        session = self.session

        @function_tool(name_override="write_file", failure_error_function=None)
        async def write_file(path: str, content: str) -> str:
            assert session is not None
            await session.write(Path(path), io.BytesIO(content.encode()))
            return f"wrote {path}"

        @function_tool(name_override="read_file", failure_error_function=None)
        async def read_file(path: str) -> str:
            assert session is not None
            handle = await session.read(Path(path))
            try:
                return bytes(handle.read()).decode()
            finally:
                handle.close()

        return [write_file, read_file]


@function_tool(name_override="approval", needs_approval=True)
def approval() -> str:
    """Wait for a human."""
    return "approved"


def make_agent(model: Model) -> SandboxAgent:
    return SandboxAgent(
        name="coder",
        model=model,
        instructions="Write, run and read programs in the sandbox.",
        default_manifest=Manifest(),
        tools=[approval],
        capabilities=[Shell(), FileTools()],
    )


def run_config(client: LizardSandboxClient, **sandbox: Any) -> RunConfig:
    sandbox_config = SandboxRunConfig(client=client, options=OPTIONS, **sandbox)
    return RunConfig(sandbox=sandbox_config, tracing_disabled=True)


def tool_outputs(items: Sequence[RunItem]) -> list[str]:
    return [str(item.output) for item in items if isinstance(item, ToolCallOutputItem)]


async def resume(state_file: Path) -> list[str]:
    """The second run: approve the saved run's interruption, read what the first run wrote."""
    model = ScriptedModel(
        [
            [call("read_file", "c_read_again", path="out.txt")],
            [call("exec_command", "c_ls", cmd="ls")],
            [final("done")],
        ]
    )
    agent = make_agent(model)
    state = await RunState.from_json(agent, json.loads(state_file.read_text()))  # noqa: ASYNC240
    for interruption in state.get_interruptions():
        state.approve(interruption)
    result = await Runner.run(agent, state, run_config=run_config(LizardSandboxClient()))
    assert result.final_output == "done"
    return tool_outputs(result.new_items)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(resume(Path(sys.argv[1])))))
