"""A scripted ADK model and a function that runs an agent: offline, with no model API."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from pydantic import PrivateAttr

Step = types.Part | Callable[[LlmRequest], types.Part]


def call(name: str, **args: Any) -> types.Part:
    """A function call the model makes."""
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def text(value: str) -> types.Part:
    """Text the model writes (a code block, or the final answer)."""
    return types.Part(text=value)


class ScriptedModel(BaseLlm):
    """Answers each request with the next prepared part; records the requests it was sent."""

    model: str = "scripted"
    _script: list[Step] = PrivateAttr(default_factory=list)
    _requests: list[LlmRequest] = PrivateAttr(default_factory=list)

    def __init__(self, script: Sequence[Step], **data: Any) -> None:
        super().__init__(**data)
        self._script = list(script)

    @property
    def requests(self) -> list[LlmRequest]:
        return self._requests

    @property
    def unused(self) -> int:
        return len(self._script)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self._requests.append(llm_request)
        if not self._script:
            raise AssertionError("the scripted model was asked for more answers than it has")
        step = self._script.pop(0)
        part = step(llm_request) if callable(step) else step
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


async def run_agent(
    agent: LlmAgent,
    prompt: str,
    *,
    runner: InMemoryRunner | None = None,
    session_id: str | None = None,
) -> list[Event]:
    """Run one invocation of ``agent`` and return its events; a runner made here is closed.

    ``session_id`` continues (or starts) that ADK session; otherwise a new one is made.
    """
    own = runner is None
    runner = runner or InMemoryRunner(agent=agent, app_name="lizard_adk_tests")
    try:
        session = None
        if session_id is not None:
            session = await runner.session_service.get_session(
                app_name=runner.app_name, user_id="tester", session_id=session_id
            )
        if session is None:
            session = await runner.session_service.create_session(
                app_name=runner.app_name, user_id="tester", session_id=session_id
            )
        events = []
        async for event in runner.run_async(
            user_id="tester",
            session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part(text=prompt)]),
        ):
            events.append(event)
        return events
    finally:
        if own:
            await runner.close()


def function_responses(events: Sequence[Event]) -> list[tuple[str, Any]]:
    """(tool name, response) of every function response in ``events``."""
    return [
        (part.function_response.name or "", part.function_response.response)
        for event in events
        for part in (event.content.parts or [] if event.content else [])
        if part.function_response is not None
    ]


def code_results(events: Sequence[Event]) -> list[types.CodeExecutionResult]:
    """Every code execution result in ``events``."""
    return [
        part.code_execution_result
        for event in events
        for part in (event.content.parts or [] if event.content else [])
        if part.code_execution_result is not None
    ]
