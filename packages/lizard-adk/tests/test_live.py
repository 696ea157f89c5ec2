"""ADK agents in the Lizard cloud: run with ``nox -s live`` (``-m live``).

Needs ``LIZARD_LIVE_TESTS=1``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID``; each test creates one
short-lived sandbox and destroys it. Offline runs deselect them (``-m "not live"``); the other test
modules' ``connection``-parametrized tests also run here against the cloud.
"""

from __future__ import annotations

from typing import Any

from adk_support import ScriptedModel, call, code_results, function_responses, run_agent, text
from google.adk.agents import LlmAgent
from google.adk.runners import InMemoryRunner
from google.adk.tools.environment import EnvironmentToolset

from lizard_adk import LizardCodeExecutor, LizardEnvironment
from lizard_local.pytest_plugin import LIVE, Cloud

pytestmark = list(LIVE)


async def test_an_environment_toolset_agent_in_a_cloud_sandbox(lizard_cloud: Cloud) -> None:
    connection: dict[str, Any] = dict(lizard_cloud.connection)
    environment = LizardEnvironment(lifetime_ms=120_000, **connection)
    model = ScriptedModel(
        [
            call("WriteFile", path="hello.txt", content="hi"),
            call("Execute", command="cat hello.txt"),
            text("ok"),
        ]
    )
    agent = LlmAgent(
        name="worker", model=model, tools=[EnvironmentToolset(environment=environment)]
    )
    runner = InMemoryRunner(agent=agent, app_name="lizard_adk_live")
    try:
        responses = function_responses(await run_agent(agent, "Go.", runner=runner))
    finally:
        await runner.close()
    assert responses[1] == ("Execute", {"status": "ok", "stdout": "hi"})


async def test_a_code_executor_agent_in_a_cloud_sandbox(lizard_cloud: Cloud) -> None:
    connection: dict[str, Any] = dict(lizard_cloud.connection)
    executor = LizardCodeExecutor(stateful=True, lifetime_ms=120_000, **connection)
    model = ScriptedModel(
        [text("```python\nn = 6\n```"), text("```python\nprint(n * 7)\n```"), text("42")]
    )
    agent = LlmAgent(name="coder", model=model, code_executor=executor)
    try:
        results = code_results(await run_agent(agent, "Go."))
    finally:
        executor.close()
    assert results[1].output == "Code execution result:\n42\n\n"
