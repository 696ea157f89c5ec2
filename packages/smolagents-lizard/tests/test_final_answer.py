"""Final answers are decoded from smolagents' own encoding, safely and within bounds."""

from __future__ import annotations

import base64
import datetime
import io
import pickle
from typing import Any

import pytest
from PIL import Image
from smolagents.default_tools import FinalAnswerTool
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.tools import Tool, get_tools_definition_code

from smolagents_lizard._final_answer import (
    MAX_IMAGE_PIXELS,
    FinalAnswerError,
    decode_final_answer,
    remember_class_source,
)


def encode_like_the_sandbox(value: Any) -> str:
    """Run smolagents' patched final_answer (the code that runs in the sandbox) on the host."""
    tool = FinalAnswerTool()
    RemotePythonExecutor([], AgentLogger(LogLevel.OFF))._patch_final_answer_with_exception(tool)
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - its class exists only in there
        tool(value)
    assert type(raised.value).__name__ == "FinalAnswerException"
    return str(raised.value)


@pytest.mark.parametrize(
    "value",
    [
        {"answer": 42, "nested": {"items": [1, 2.5, None, True]}},
        [1, "two", [3]],
        42,
        3.25,
        "a string with unicode: ✓",
        (1, 2),
        {1, 2, 3},
        b"\x00\xff",
        datetime.date(2026, 11, 30),
    ],
)
def test_plain_values_round_trip(value: Any) -> None:
    assert decode_final_answer(encode_like_the_sandbox(value), max_bytes=1_000_000) == value


def test_numpy_array_round_trips() -> None:
    np = pytest.importorskip("numpy")
    decoded = decode_final_answer(
        encode_like_the_sandbox(np.arange(6).reshape(2, 3)), max_bytes=1_000_000
    )
    assert isinstance(decoded, np.ndarray)
    assert decoded.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_pil_image_round_trips_fully_decoded() -> None:
    image = Image.new("RGB", (8, 4), (255, 0, 0))
    decoded = decode_final_answer(encode_like_the_sandbox(image), max_bytes=1_000_000)
    assert isinstance(decoded, Image.Image)
    assert decoded.size == (8, 4)
    assert decoded.getpixel((0, 0)) == (255, 0, 0)


def test_pickle_is_refused_even_when_valid() -> None:
    encoded = "pickle:" + base64.b64encode(pickle.dumps({"a": 1})).decode()
    with pytest.raises(FinalAnswerError, match="pickle is refused"):
        decode_final_answer(encoded, max_bytes=1_000_000)


def test_oversized_answer_is_refused_before_parsing() -> None:
    encoded = encode_like_the_sandbox("x" * 2000)
    with pytest.raises(FinalAnswerError, match="over the 1,000-byte limit"):
        decode_final_answer(encoded, max_bytes=1000)


@pytest.mark.parametrize(
    ("encoded", "match"),
    [
        ("42", "not in smolagents' 'safe:' format"),
        ("safe:{not json", "could not be decoded"),
        ('safe:{"__type__": "PIL.Image", "data": "bm90IGFuIGltYWdl"}', "could not be decoded"),
    ],
)
def test_malformed_answers_raise_final_answer_error(encoded: str, match: str) -> None:
    with pytest.raises(FinalAnswerError, match=match):
        decode_final_answer(encoded, max_bytes=1_000_000)


def test_image_with_too_many_pixels_is_refused() -> None:
    # A bilevel image compresses to a few kilobytes whatever its size: a decompression bomb.
    side = int(MAX_IMAGE_PIXELS**0.5) + 100
    buffer = io.BytesIO()
    Image.new("1", (side, side)).save(buffer, format="PNG")
    assert buffer.tell() < 1_000_000
    data = base64.b64encode(buffer.getvalue()).decode()
    encoded = f'safe:{{"__type__": "PIL.Image", "data": "{data}"}}'
    with pytest.raises(FinalAnswerError, match="pixel limit"):
        decode_final_answer(encoded, max_bytes=1_000_000)


def patched_final_answer(*, remembered: bool) -> FinalAnswerTool:
    tool = FinalAnswerTool()
    RemotePythonExecutor([], AgentLogger(LogLevel.OFF))._patch_final_answer_with_exception(tool)
    if remembered:
        remember_class_source(type(tool), RemotePythonExecutor._patch_final_answer_with_exception)
    return tool


def test_a_remembered_class_source_writes_the_same_tool_code() -> None:
    plain = patched_final_answer(remembered=False)
    remembered = patched_final_answer(remembered=True)
    assert type(plain) is not type(remembered)  # the patch makes a new class each time
    assert remembered.to_dict() == plain.to_dict()
    assert get_tools_definition_code({"final_answer": remembered}) == get_tools_definition_code(
        {"final_answer": plain}
    )


def test_a_patched_class_source_is_looked_up_once_per_process(
    request: pytest.FixtureRequest,
) -> None:
    patched_final_answer(remembered=True)  # the first lookup
    looked_up: list[object] = request.getfixturevalue("source_lookups")
    tool = patched_final_answer(remembered=True)
    tool.to_dict()
    get_tools_definition_code({"final_answer": tool})
    assert type(tool) not in looked_up
    # Without it, each to_dict() asks inspect for the class (and parses its module's file).
    plain = patched_final_answer(remembered=False)
    plain.to_dict()
    assert type(plain) in looked_up


def test_a_class_with_a_source_of_its_own_is_left_alone() -> None:
    class Sourced(Tool):  # type: ignore[misc]  # smolagents is untyped
        __source__ = "class Sourced(Tool):\n    pass\n"

    class Inheriting(Sourced):
        pass

    remember_class_source(Inheriting, test_a_class_with_a_source_of_its_own_is_left_alone)
    assert "__source__" not in Inheriting.__dict__
