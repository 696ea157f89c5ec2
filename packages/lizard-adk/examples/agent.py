"""Two ADK agents in Lizard sandboxes: one with ADK's environment tools, one writing Python.

    python examples/agent.py

The model is scripted (a ``BaseLlm`` that replays prepared answers), so no model API key is
needed; pass ``model="gemini-flash-latest"`` to ``LlmAgent`` for a real one. With LIZARD_API_KEY
and LIZARD_PROJECT_ID set it uses the Lizard cloud; without them it starts lizard-local (the
loopback emulator, ``pip install lizard-local``), so it runs offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import warnings
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.environment import EnvironmentToolset
from google.genai import types
from pydantic import PrivateAttr

from lizard_adk import LizardCodeExecutor, LizardEnvironment

warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]")


class ScriptedModel(BaseLlm):
    """Answers each request with the next prepared part."""

    model: str = "scripted"
    _parts: list[types.Part] = PrivateAttr(default_factory=list)

    def __init__(self, parts: list[types.Part], **data: Any) -> None:
        super().__init__(**data)
        self._parts = list(parts)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        part = self._parts.pop(0)
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=0, candidates_token_count=0, total_token_count=0
        )
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)


def call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


async def run(agent: LlmAgent, prompt: str) -> None:
    runner = InMemoryRunner(agent=agent, app_name="lizard_adk_example")
    try:
        session = await runner.session_service.create_session(
            app_name=runner.app_name, user_id="example"
        )
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        async for event in runner.run_async(
            user_id="example", session_id=session.id, new_message=message
        ):
            for part in event.content.parts or [] if event.content else []:
                if part.function_response:
                    print(f"  {part.function_response.name} -> {part.function_response.response}")
                elif part.code_execution_result:
                    print(f"  code -> {part.code_execution_result.output!r}")
                elif part.text:
                    print(f"  {event.author}: {part.text.strip()}")
    finally:
        await runner.close()  # closes the toolset, which destroys the environment's sandbox


async def main() -> None:
    print("An agent with ADK's EnvironmentToolset on a LizardEnvironment:")
    environment = LizardEnvironment(lifetime_ms=300_000)
    script = [
        call("WriteFile", path="hello.py", content="import platform\nprint(platform.system())\n"),
        call("Execute", command="python3 hello.py"),
        types.Part(text="The sandbox runs Linux."),
    ]
    tools = [EnvironmentToolset(environment=environment)]
    await run(LlmAgent(name="worker", model=ScriptedModel(script), tools=tools), "Where am I?")

    print("An agent whose code blocks run in a stateful LizardCodeExecutor:")
    script = [
        types.Part(text="```python\nsquares = [n * n for n in range(10)]\n```"),
        types.Part(text="```python\nprint(sum(squares))\n```"),
        types.Part(text="The sum of the first ten squares is 285."),
    ]
    with LizardCodeExecutor(stateful=True, template="base", lifetime_ms=300_000) as executor:
        coder = LlmAgent(name="coder", model=ScriptedModel(script), code_executor=executor)
        await run(coder, "Sum the first ten squares.")


if __name__ == "__main__":
    with contextlib.ExitStack() as stack:
        if not os.environ.get("LIZARD_API_KEY"):
            from lizard_local import LocalServer

            server = stack.enter_context(LocalServer())
            os.environ.update(server.env)
            print(f"No LIZARD_API_KEY: using lizard-local at {server.url}")
        asyncio.run(main())
