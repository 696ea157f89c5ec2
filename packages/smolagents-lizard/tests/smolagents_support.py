"""Test helpers shared by the test modules: a scripted model, code replies, a recording logger.

(A uniquely named module rather than a ``tests`` package, so that the repository's test
directories can be collected in one session.)
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from rich.console import Console
from smolagents import ChatMessage, Model
from smolagents.monitoring import AgentLogger, LogLevel


class ScriptedModel(Model):  # type: ignore[misc]  # smolagents is untyped
    """A model that plays back one canned reply per step and records what it was shown.

    A reply may be a callable, run when the step asks for it (to act between steps).
    """

    def __init__(self, *replies: str | Callable[[], str]) -> None:
        super().__init__(model_id="scripted")
        self.replies = list(replies)
        self.calls = 0
        self.last_prompt = ""

    def generate(self, messages: list[Any], **kwargs: Any) -> ChatMessage:
        self.calls += 1
        self.last_prompt = "\n".join(str(message.content) for message in messages)
        reply = self.replies.pop(0)
        return ChatMessage(role="assistant", content=reply() if callable(reply) else reply)


def code(text: str) -> str:
    """A model reply that runs ``text``."""
    return f"Thought: next.\n<code>\n{text.strip()}\n</code>"


def recording_logger() -> tuple[AgentLogger, io.StringIO]:
    """A smolagents logger whose console writes into a string."""
    out = io.StringIO()
    console = Console(file=out, width=240, highlight=False, color_system=None)
    return AgentLogger(LogLevel.INFO, console), out
