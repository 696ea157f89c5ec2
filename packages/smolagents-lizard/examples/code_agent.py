"""A smolagents CodeAgent whose Python runs in a Lizard sandbox.

    python examples/code_agent.py

Without LIZARD_API_KEY the script starts lizard-local (the loopback emulator, `pip install
lizard-local`) and drives the agent with a scripted model, so it runs offline. With
LIZARD_API_KEY and LIZARD_PROJECT_ID set it uses the Lizard cloud, and with HF_TOKEN set it asks
a real model (smolagents' InferenceClientModel) instead of the scripted one.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from smolagents import ActionStep, ChatMessage, CodeAgent, InferenceClientModel, Model
from smolagents.monitoring import AgentLogger, LogLevel

from smolagents_lizard import LizardExecutor

TASK = "Work out the total and the average of the prices 3.5, 4.25 and 2.0."

# What a model might write, one reply per step: a first step, a mistake, the fix and the answer.
SCRIPT = [
    "Thought: I will store the prices first.\n<code>\nprices = [3.5, 4.25, 2.0]\n"
    "total = sum(prices)\nprint(f'{len(prices)} prices, total {total}')\n</code>",
    "Thought: Now the average.\n<code>\naverage = total / count\n</code>",
    "Thought: `count` does not exist; the variables from step 1 are still there.\n<code>\n"
    "average = total / len(prices)\nfinal_answer({'total': total, 'average': round(average, 2)})\n"
    "</code>",
]


class ScriptedModel(Model):  # type: ignore[misc]  # smolagents is untyped
    """Plays back canned replies, one per step, like a model that always answers the same."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(model_id="scripted")
        self._replies = list(replies)

    def generate(self, messages: list[Any], **kwargs: Any) -> ChatMessage:
        return ChatMessage(role="assistant", content=self._replies.pop(0))


def print_transcript(agent: CodeAgent, result: Any) -> None:
    def show(label: str, text: str) -> None:
        print(f"{label:<9}" + text.strip().replace("\n", "\n" + " " * 9))

    for step in agent.memory.steps:
        if not isinstance(step, ActionStep):
            continue
        print(f"--- step {step.step_number}")
        show("code:", step.code_action or "")
        printed = (step.observations or "").split("Last output from code snippet:")[0]
        printed = printed.replace("Execution logs:", "").strip()
        if printed:
            show("printed:", printed)
        if step.error is not None:
            show("error:", str(step.error).strip().splitlines()[-1])
        elif step.action_output is not None:
            show("answer:" if step.is_final_answer else "value:", repr(step.action_output))
    print(f"=== final answer: {result!r}")


def main() -> int:
    with contextlib.ExitStack() as stack:
        connection: dict[str, Any] = {}
        if os.environ.get("LIZARD_API_KEY"):
            where = "the Lizard cloud"
        else:
            from lizard_local import LocalServer

            server = stack.enter_context(LocalServer())
            where = f"lizard-local at {server.url}"
            connection.update(
                api_url=server.url, api_key=server.api_key, project_id=server.project_id
            )
        real_model = bool(os.environ.get("HF_TOKEN"))
        model: Model = InferenceClientModel() if real_model else ScriptedModel(SCRIPT)
        print(f"Running a CodeAgent with {type(model).__name__} against {where}")

        quiet = AgentLogger(level=LogLevel.OFF)
        executor = stack.enter_context(LizardExecutor(logger=quiet, **connection))
        agent = CodeAgent(
            tools=[], model=model, executor=executor, max_steps=6, verbosity_level=LogLevel.OFF
        )
        result = agent.run(TASK)
        print(f"sandbox: {executor.sandbox_id}")
        print_transcript(agent, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
