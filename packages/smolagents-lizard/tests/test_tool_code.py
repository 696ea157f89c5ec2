"""smolagents' patch of final_answer and its to_dict(), made once per tool class."""

from __future__ import annotations

from typing import Any

import pytest
from smolagents.default_tools import FinalAnswerTool
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.tools import get_tools_definition_code

from smolagents_lizard import _tool_code
from smolagents_lizard._tool_code import patch_final_answer, tool_dict


def _executor(allow_pickle: bool = False) -> RemotePythonExecutor:
    return RemotePythonExecutor([], AgentLogger(LogLevel.OFF), allow_pickle=allow_pickle)


def _smolagents_own(allow_pickle: bool = False) -> FinalAnswerTool:
    tool = FinalAnswerTool()
    _executor(allow_pickle)._patch_final_answer_with_exception(tool)
    return tool


@pytest.mark.parametrize("allow_pickle", [False, True])
def test_the_kept_patch_writes_the_same_tool_code_as_smolagents_own(allow_pickle: bool) -> None:
    first, second = FinalAnswerTool(), FinalAnswerTool()
    patch_final_answer(_executor(allow_pickle), first)
    patch_final_answer(_executor(allow_pickle), second)
    assert type(first) is type(second)  # made once
    own = _smolagents_own(allow_pickle)
    assert f"ALLOW_PICKLE = {allow_pickle}" in own.to_dict()["code"]
    for tool in (first, second):
        assert tool_dict(tool) == own.to_dict()
        assert get_tools_definition_code({"final_answer": tool}) == get_tools_definition_code(
            {"final_answer": own}
        )
        assert tool._forward.__func__ is type(own)._forward


def test_allow_pickle_and_a_changed_forward_get_their_own_class() -> None:
    safe, pickling = FinalAnswerTool(), FinalAnswerTool()
    patch_final_answer(_executor(False), safe)
    patch_final_answer(_executor(True), pickling)
    assert type(safe) is not type(pickling)
    assert "ALLOW_PICKLE = True" in tool_dict(pickling)["code"]

    class Answer(FinalAnswerTool):  # type: ignore[misc]  # smolagents is untyped
        def forward(self, answer: Any) -> Any:
            return ["first", answer]

    before = Answer()
    patch_final_answer(_executor(), before)
    assert before._forward(1) == ["first", 1]
    Answer.forward = lambda self, answer: ["second", answer]  # type: ignore[method-assign]
    after = Answer()
    patch_final_answer(_executor(), after)
    assert type(after) is not type(before)
    assert after._forward(1) == ["second", 1]


def test_a_later_tool_of_the_class_costs_no_source_lookup_and_gets_its_own_copy(
    request: pytest.FixtureRequest,
) -> None:
    first = FinalAnswerTool()
    patch_final_answer(_executor(), first)
    made = tool_dict(first)
    made["requirements"].append("changed by a caller")
    looked_up: list[object] = request.getfixturevalue("source_lookups")  # from here on
    later = FinalAnswerTool()
    patch_final_answer(_executor(), later)
    assert "changed by a caller" not in tool_dict(later)["requirements"]
    assert looked_up == []


def test_a_tool_the_cache_did_not_patch_is_serialized_by_smolagents() -> None:
    own = _smolagents_own()
    assert tool_dict(own) == own.to_dict()
    assert type(own) not in _tool_code._PATCHED.values()


def test_classes_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tool_code, "KEPT", 3)
    made = []
    for n in range(6):
        cls = type(f"Answer{n}", (FinalAnswerTool,), {})
        tool = cls()
        patch_final_answer(_executor(), tool)
        tool_dict(tool)
        made.append(type(tool))
    assert len(_tool_code._PATCHED) <= 3
    assert len(_tool_code._DICTS) <= 3
    assert made[-1] in _tool_code._PATCHED.values()
    assert made[0] not in _tool_code._PATCHED.values()


def test_a_forward_of_the_instances_own_is_patched_afresh() -> None:
    plain = FinalAnswerTool()
    patch_final_answer(_executor(), plain)

    def custom(self: Any, answer: Any) -> Any:
        return ["custom", answer]

    own = FinalAnswerTool()
    own.forward = custom.__get__(own)
    patch_final_answer(_executor(), own)
    assert type(own) is not type(plain)
    assert own._forward(1) == ["custom", 1]
    assert "custom" in tool_dict(own)["code"]
    assert "custom" not in tool_dict(plain)["code"]


def test_a_kept_dict_is_not_the_tools_own_output_schema() -> None:
    schema: dict[str, Any] = {"type": "object", "x": 1}
    first = FinalAnswerTool()
    first.output_schema = schema
    patch_final_answer(_executor(), first)
    assert tool_dict(first)["output_schema"] == {"type": "object", "x": 1}
    schema["x"] = 2  # the caller changes its own object afterwards
    second = FinalAnswerTool()
    second.output_schema = {"type": "object", "x": 1}
    patch_final_answer(_executor(), second)
    assert tool_dict(second)["output_schema"] == {"type": "object", "x": 1}
