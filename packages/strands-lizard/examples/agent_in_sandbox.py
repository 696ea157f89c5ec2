"""A Strands agent whose shell, files and Python run in a Lizard sandbox, output streamed live.

    python examples/agent_in_sandbox.py

Without LIZARD_API_KEY it starts lizard-local (the loopback emulator) itself and a scripted model
plays the model, so it runs offline. With LIZARD_API_KEY and LIZARD_PROJECT_ID set it uses the
Lizard cloud; add LIZARD_DEMO_MODEL (a Bedrock model id, with AWS credentials) and a real model does
the work. It streams a command's output as it runs, runs the agent, checks the result, destroys
the sandbox and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncGenerator
from typing import Any

from strands import Agent
from strands.models import Model
from strands.sandbox import ExecutionResult, StreamChunk

from strands_lizard import LizardSandbox

TASK = (
    "Write /workspace/fib.py printing the first ten Fibonacci numbers on one line, run it with "
    "python3 saving its output to /workspace/fib.txt, then read fib.txt back."
)
PROGRAM = "a, b = 0, 1\nnumbers = []\nfor _ in range(10):\n    numbers.append(a)\n"
PROGRAM += "    a, b = b, a + b\nprint(*numbers)\n"
EXPECTED = "0 1 1 2 3 5 8 13 21 34"
FIB_TXT = "/workspace/fib.txt"


class ScriptedModel(Model):
    """Plays the model offline: each call answers with the next scripted turn."""

    def __init__(self, turns: list[list[dict[str, Any]]]) -> None:
        self.turns = turns

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        raise NotImplementedError
        yield

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        yield {"messageStart": {"role": "assistant"}}
        stop = "end_turn"
        for block in self.turns.pop(0):
            if "text" in block:
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": block["text"]}}}
            else:
                stop = "tool_use"
                name, tool_id, tool_input = block["tool"]
                start = {"toolUse": {"name": name, "toolUseId": tool_id}}
                yield {"contentBlockStart": {"start": start}}
                delta = {"toolUse": {"input": json.dumps(tool_input)}}
                yield {"contentBlockDelta": {"delta": delta}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": stop}}


def choose_model() -> Model | str:
    name = os.environ.get("LIZARD_DEMO_MODEL")
    if name and os.environ.get("LIZARD_API_KEY"):
        return name  # a Bedrock model id: Strands' default provider
    editor = {"command": "create", "path": "/workspace/fib.py", "file_text": PROGRAM}
    return ScriptedModel(
        [
            [{"tool": ("sandbox_file_editor", "t1", editor)}],
            [{"tool": ("sandbox_shell", "t2", {"command": "python3 fib.py > fib.txt"})}],
            [{"tool": ("sandbox_file_editor", "t3", {"command": "view", "path": FIB_TXT})}],
            [{"text": f"fib.txt contains: {EXPECTED}"}],
        ]
    )


async def stream_a_command(sandbox: LizardSandbox) -> None:
    """Print each chunk as it arrives in the sandbox, with its time since the call."""
    started = time.monotonic()
    command = "for i in 1 2 3; do echo step $i; sleep 0.3; done"
    async for item in sandbox.execute_streaming(command):
        if isinstance(item, StreamChunk):
            print(f"  +{time.monotonic() - started:.2f}s {item.stream_type}: {item.data.strip()}")
        elif isinstance(item, ExecutionResult):
            print(f"  exit code {item.exit_code}")


async def main() -> int:
    with contextlib.ExitStack() as stack:
        if not os.environ.get("LIZARD_API_KEY"):
            from lizard_local import LocalServer

            server = stack.enter_context(LocalServer())
            os.environ.update(server.env)
            print(f"No LIZARD_API_KEY: using lizard-local at {server.url} and a scripted model")
        async with LizardSandbox(lifetime_ms=600_000) as sandbox:
            await sandbox.execute("true")  # the first use creates the sandbox
            print(f"Sandbox {sandbox.sandbox_id}; a command's output, streamed as it runs:")
            await stream_a_command(sandbox)
            agent = Agent(model=choose_model(), sandbox=sandbox, callback_handler=None)
            result = await agent.invoke_async(TASK)
            print(f"Agent: {str(result).strip()}")
            written = (await sandbox.read_text(FIB_TXT)).strip()
            print(f"{FIB_TXT}: {written}")
        if written != EXPECTED:
            print(f"expected {EXPECTED!r}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
