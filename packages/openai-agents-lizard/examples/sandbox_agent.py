"""An OpenAI Agents SDK ``SandboxAgent`` whose shell runs in a Lizard sandbox.

    python examples/sandbox_agent.py

Without LIZARD_API_KEY it starts lizard-local (the loopback emulator) itself and a scripted model
plays the model, so it runs offline. With LIZARD_API_KEY and LIZARD_PROJECT_ID set it uses the
Lizard cloud; add OPENAI_API_KEY and a real model (``LIZARD_DEMO_MODEL``, default ``gpt-5-mini``)
does the work. It prints a short transcript, checks the result and exits 0; the runner deletes
the sandbox it created.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

from agents import Model, ModelResponse, RunConfig, Runner, Usage
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Shell
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from openai_agents_lizard import LizardSandboxClient, LizardSandboxClientOptions

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
COMMANDS = [
    f"cat > fib.py <<'EOF'\n{PROGRAM}EOF",
    "python3 fib.py > fib.txt",
    "cat fib.txt",
]


class ScriptedModel(Model):
    """Plays the model: one ``exec_command`` per turn, then an answer from the last output."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = input if isinstance(input, list) else []
        outputs = [item for item in items if _field(item, "type") == "function_call_output"]
        step = len(outputs)
        if step < len(COMMANDS):
            call = ResponseFunctionToolCall(
                id=f"fc_{step}",
                call_id=f"call_{step}",
                name="exec_command",
                arguments=json.dumps({"cmd": COMMANDS[step]}),
                type="function_call",
                status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        last = str(_field(outputs[-1], "output")).strip().splitlines()[-1]
        text = ResponseOutputText(
            text=f"fib.txt holds the first ten Fibonacci numbers: {last}",
            type="output_text",
            annotations=[],
        )
        message = ResponseOutputMessage(
            id="msg_answer", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the example does not stream")


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


async def run(real_model: bool) -> str:
    agent = SandboxAgent(
        name="fibonacci",
        instructions="Use the shell to write and run programs. Answer with what you found.",
        model=os.environ.get("LIZARD_DEMO_MODEL", "gpt-5-mini") if real_model else ScriptedModel(),
        capabilities=[Shell()],
    )
    sandbox = SandboxRunConfig(
        client=LizardSandboxClient(),  # LIZARD_API_KEY, LIZARD_PROJECT_ID from the environment
        options=LizardSandboxClientOptions(lifetime_ms=300_000),
    )
    result = await Runner.run(
        agent, TASK, run_config=RunConfig(sandbox=sandbox, tracing_disabled=not real_model)
    )
    return str(result.final_output)


def main() -> int:
    with contextlib.ExitStack() as stack:
        cloud = bool(os.environ.get("LIZARD_API_KEY"))
        if not cloud:
            from lizard_local import LocalServer

            server = stack.enter_context(LocalServer())
            os.environ.update(server.env)
            print(f"No LIZARD_API_KEY: using lizard-local at {server.url}")
        real_model = cloud and bool(os.environ.get("OPENAI_API_KEY"))
        print(f"> {TASK}")
        answer = asyncio.run(run(real_model))
        print(f"< {answer}")
    if EXPECTED not in answer:
        print(f"expected {EXPECTED!r} in the answer", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
