"""A scripted Deep Agents run: the model's replies are fixed tool calls (no model service)."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage


class ScriptedModel(GenericFakeChatModel):
    """Replies with the scripted messages in turn; tools are bound by Deep Agents, not used."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


SCRIPT = "/workspace/fib.py"
PROGRAM = "a, b = 0, 1\nfor _ in range(10):\n    print(a, end=' ')\n    a, b = b, a + b\n"


def agent_model() -> ScriptedModel:
    return ScriptedModel(
        messages=iter(
            [
                call("write_file", "w", file_path=SCRIPT, content=PROGRAM),
                call("execute", "x", command=f"python3 {SCRIPT} | tee /workspace/out.txt"),
                call("read_file", "r", file_path="/workspace/out.txt"),
                AIMessage(content="The first ten Fibonacci numbers are printed above."),
            ]
        )
    )


def tool_results(messages: list[Any]) -> dict[str, str]:
    return {m.tool_call_id: str(m.content) for m in messages if isinstance(m, ToolMessage)}
