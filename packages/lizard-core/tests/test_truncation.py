"""lizard_core.truncation: the head and tail of an output, and a marker for the cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lizard_core.truncation import MODEL_OUTPUT_LIMIT, head_and_tail, stopped_note


def test_short_output_is_returned_whole() -> None:
    assert head_and_tail("hello\n", 10) == "hello\n"
    text = "x" * MODEL_OUTPUT_LIMIT
    assert head_and_tail(text) is text


def test_long_output_keeps_head_and_tail_at_line_breaks_and_names_the_cut() -> None:
    lines = [f"line {n}" for n in range(100_000)]
    text = "\n".join(lines) + "\nTraceback: the error at the end\n"
    clipped = head_and_tail(text, 1_000)
    head, _, tail = clipped.partition("\n[... ")
    assert head.startswith("line 0\nline 1\n")
    assert head.endswith("\n")
    assert tail.endswith("Traceback: the error at the end\n")
    assert tail.split("...]\n", 1)[1].startswith("line ")  # cut at a line break
    cut = int(tail.split(" characters")[0].replace(",", ""))
    kept_head, kept_tail = head, tail.split("...]\n", 1)[1]
    assert len(kept_head) + cut + len(kept_tail) == len(text)
    assert text.startswith(kept_head)
    assert text.endswith(kept_tail)
    assert "lines) cut from the middle of the output" in clipped
    assert len(clipped) < 1_000 + 100


@given(st.text(max_size=400), st.integers(min_value=2, max_value=300))
def test_every_character_is_kept_or_counted(text: str, limit: int) -> None:
    clipped = head_and_tail(text, limit)
    if len(text) <= limit:
        assert clipped == text
        return
    head, _, rest = clipped.rpartition("\n[... ")
    count, _, tail = rest.partition(" characters (")
    tail = tail.split("...]\n", 1)[1]
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + int(count.replace(",", "")) + len(tail) == len(text)


@pytest.mark.parametrize(("text", "limit", "error"), [(b"x", 10, TypeError), ("x", 1, ValueError)])
def test_bad_arguments(text: object, limit: int, error: type[Exception]) -> None:
    with pytest.raises(error):
        head_and_tail(text, limit)  # type: ignore[arg-type]


def test_stopped_note_names_the_limit() -> None:
    assert "10,485,760 bytes" in stopped_note(10 * 1024 * 1024)
    assert "its output limit" in stopped_note(None)
