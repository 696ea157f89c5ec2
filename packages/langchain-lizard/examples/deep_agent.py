"""A Deep Agents agent whose shell and file tools run in a Lizard sandbox.

    python examples/deep_agent.py

Without LIZARD_API_KEY it starts lizard-local (the loopback emulator) itself and a scripted chat
model plays the model, so it runs offline. With LIZARD_API_KEY and LIZARD_PROJECT_ID set it uses
the Lizard cloud; add OPENAI_API_KEY (and `pip install langchain-openai`) and a real model does
the work (LIZARD_DEMO_MODEL names another, e.g. `anthropic:claude-sonnet-4-5`).
It prints a short transcript, checks the result, destroys the sandbox and exits 0.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from deepagents import create_deep_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage

from langchain_lizard import LizardSandbox

TASK = (
    "Write a Python script /workspace/fib.py that prints the first ten Fibonacci numbers on one "
    "line, run it with python3 saving its output to /workspace/fib.txt, then read fib.txt back."
)
PROGRAM = "a, b = 0, 1\nnumbers = []\nfor _ in range(10):\n    numbers.append(a)\n"
PROGRAM += "    a, b = b, a + b\nprint(*numbers)\n"
EXPECTED = "0 1 1 2 3 5 8 13 21 34"


class ScriptedModel(GenericFakeChatModel):
    """Plays the model offline: the scripted replies in turn (tool schemas are not needed)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self


def _call(name: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{name}"}])


def choose_model() -> BaseChatModel:
    name = os.environ.get("LIZARD_DEMO_MODEL") or (
        "openai:gpt-4.1-mini" if os.environ.get("OPENAI_API_KEY") else None
    )
    if name and os.environ.get("LIZARD_API_KEY"):
        from langchain.chat_models import init_chat_model

        return init_chat_model(name)
    return ScriptedModel(
        messages=iter(
            [
                _call("write_file", file_path="/workspace/fib.py", content=PROGRAM),
                _call("execute", command="python3 /workspace/fib.py > /workspace/fib.txt"),
                _call("read_file", file_path="/workspace/fib.txt"),
                AIMessage(content=f"fib.txt contains: {EXPECTED}"),
            ]
        )
    )


def main() -> int:
    with contextlib.ExitStack() as stack:
        if not os.environ.get("LIZARD_API_KEY"):
            from lizard_local import LocalServer

            server = stack.enter_context(LocalServer())
            os.environ.update(server.env)
            print(f"No LIZARD_API_KEY: using lizard-local at {server.url}")
        backend = stack.enter_context(LizardSandbox(lifetime_ms=600_000))
        agent = create_deep_agent(model=choose_model(), backend=backend)
        state = agent.invoke({"messages": [{"role": "user", "content": TASK}]})
        for message in state["messages"]:
            if isinstance(message, ToolMessage):
                print(f"  [{message.name}] {str(message.content).strip()[:200]}")
        print(f"Agent: {state['messages'][-1].content}")
        saved = backend.download_files(["/workspace/fib.txt"])[0]
        print(f"Sandbox {backend.id}: /workspace/fib.txt = {saved.content!r}")
        if saved.content is None or EXPECTED not in saved.content.decode():
            print("The agent did not save the expected numbers.", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
