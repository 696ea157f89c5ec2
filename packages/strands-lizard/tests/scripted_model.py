"""A Strands ``Model`` that plays back scripted assistant turns and records what it was sent."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Iterator
from typing import Any

from strands.models import Model


def tool_use(name: str, tool_use_id: str, **arguments: Any) -> dict[str, Any]:
    """One ``toolUse`` content block."""
    return {"toolUse": {"name": name, "toolUseId": tool_use_id, "input": arguments}}


class ScriptedModel(Model):
    """Answers each model call with the next scripted turn (a list of content blocks)."""

    def __init__(self, turns: list[list[dict[str, Any]]]) -> None:
        self.turns = list(turns)
        self.seen: list[list[dict[str, Any]]] = []

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        raise NotImplementedError
        yield

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        self.seen.append(list(messages))
        for event in _events(self.turns.pop(0)):
            yield event

    def tool_results(self) -> dict[str, dict[str, Any]]:
        """Every tool result the model was sent, by tool use id."""
        found: dict[str, dict[str, Any]] = {}
        for messages in self.seen:
            for message in messages:
                for block in message["content"]:
                    if "toolResult" in block:
                        found[block["toolResult"]["toolUseId"]] = block["toolResult"]
        return found


def _events(blocks: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield {"messageStart": {"role": "assistant"}}
    stop = "end_turn"
    for block in blocks:
        if "text" in block:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": block["text"]}}}
        else:
            stop = "tool_use"
            use = block["toolUse"]
            start = {"toolUse": {"name": use["name"], "toolUseId": use["toolUseId"]}}
            yield {"contentBlockStart": {"start": start}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(use["input"])}}}}
        yield {"contentBlockStop": {}}
    yield {"messageStop": {"stopReason": stop}}
