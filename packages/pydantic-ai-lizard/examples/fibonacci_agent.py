"""A Pydantic AI agent with harness `Shell` and `FileSystem`, working in a Lizard sandbox.

    python examples/fibonacci_agent.py

Without LIZARD_API_KEY it starts lizard-local (the loopback emulator) itself and a scripted
`FunctionModel` plays the model, so it runs offline. With LIZARD_API_KEY and LIZARD_PROJECT_ID set
it uses the Lizard cloud; add OPENAI_API_KEY (or name any model whose key is set in
LIZARD_DEMO_MODEL, e.g. `anthropic:claude-sonnet-4-5`) and a real model does the work (install its
provider too: `pip install 'pydantic-ai-slim[openai]'`).
It prints a short transcript, checks the result, destroys the sandbox and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.workspaces import Workspace
from pydantic_ai_harness.filesystem import FileSystem
from pydantic_ai_harness.shell import Shell

from pydantic_ai_lizard import LizardSandboxBackend

TASK = (
    "Write a Python script fib.py that prints the first ten Fibonacci numbers on one line, "
    "run it with python3 to save its output to fib.txt, and tell me what fib.txt contains."
)
PROGRAM = """\
a, b = 0, 1
numbers = []
for _ in range(10):
    numbers.append(a)
    a, b = b, a + b
print(*numbers)
"""
EXPECTED = "0 1 1 2 3 5 8 13 21 34"


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Plays the model: one tool call per step, then an answer built from the last tool result."""
    step = sum(isinstance(message, ModelResponse) for message in messages)
    if step == 0:
        return ModelResponse(
            parts=[ToolCallPart("write_file", {"path": "fib.py", "content": PROGRAM})]
        )
    if step == 1:
        return ModelResponse(
            parts=[ToolCallPart("run_command", {"command": "python3 fib.py > fib.txt"})]
        )
    if step == 2:
        return ModelResponse(parts=[ToolCallPart("read_file", {"path": "fib.txt"})])
    # read_file answers with a header, then numbered lines: keep the text of the last line.
    returns = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
    seen = returns[-1].model_response_str().splitlines()[-1].split("\t")[-1] if returns else "?"
    return ModelResponse(parts=[TextPart(f"fib.txt holds the first ten Fibonacci numbers: {seen}")])


def choose_model(cloud: bool) -> Model | str:
    """A real model on the cloud when its key is set; the scripted one otherwise."""
    name = os.environ.get("LIZARD_DEMO_MODEL") or (
        "openai:gpt-5" if os.environ.get("OPENAI_API_KEY") else ""
    )
    if cloud and name:
        return name
    return FunctionModel(scripted_model, model_name="scripted")


def short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_transcript(messages: list[ModelMessage]) -> None:
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                print(f"user   > {short(part.content)}")
            elif isinstance(part, ToolCallPart):
                print(f"agent  > {part.tool_name}({short(part.args_as_dict(), 120)})")
            elif isinstance(part, ToolReturnPart):
                print(f"tool   < {short(part.model_response_str())}")
            elif isinstance(part, RetryPromptPart):
                print(f"retry  < {short(part.model_response())}")
            elif isinstance(part, TextPart):
                print(f"agent  : {part.content.strip()}")


async def run(connection: dict[str, str], cloud: bool) -> int:
    backend = LizardSandboxBackend(
        lifetime_ms=600_000,
        api_url=connection.get("api_url"),
        api_key=connection.get("api_key"),
        project_id=connection.get("project_id"),
    )
    agent = Agent(
        choose_model(cloud),
        capabilities=[Shell(), FileSystem()],
        instructions="You work in a sandbox. Use the tools; keep the answer short.",
    )
    try:
        result = await agent.run(TASK, workspace=backend)
        print_transcript(result.all_messages())
        content = (await Workspace(backend).read_text("fib.txt")).strip()
        print(f"\nsandbox {backend.ref.id if backend.ref else '?'}: fib.txt = {content!r}")
        # A real model may separate the numbers differently; the numbers are what count.
        return 0 if content.replace(",", " ").split() == EXPECTED.split() else 1
    finally:
        await backend.destroy()
        print("sandbox destroyed")


def main() -> int:
    with contextlib.ExitStack() as stack:
        cloud = bool(os.environ.get("LIZARD_API_KEY"))
        connection: dict[str, str] = {}
        if not cloud:
            from lizard_local import LocalServer

            server = stack.enter_context(LocalServer())
            connection = {
                "api_url": server.url,
                "api_key": server.api_key,
                "project_id": server.project_id,
            }
            print(f"lizard-local at {server.url} (set LIZARD_API_KEY to use the Lizard cloud)\n")
        return asyncio.run(run(connection, cloud))


if __name__ == "__main__":
    sys.exit(main())
