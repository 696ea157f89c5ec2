"""Output a model reads: the head and the tail, and a marker that says what was cut.

Every adapter that hands a command's output to a model bounds it with :func:`head_and_tail`,
so that a command which prints megabytes neither floods the model's context nor leaves it with
nothing: the start (what ran) and the end (how it ended, the error) are both kept, and the
marker between them says how much of the middle is gone. Where the output was already stopped
at the command's byte limit, :func:`stopped_note` says so; output is never cut silently.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MODEL_OUTPUT_LIMIT", "head_and_tail", "stopped_note"]

MODEL_OUTPUT_LIMIT: Final = 100_000
"""Characters of one output stream a model is given by default (about 25,000 tokens)."""

_SNAP: Final = 200  # how far a cut may move to fall on a line break


def head_and_tail(text: str, limit: int = MODEL_OUTPUT_LIMIT) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and tail around a marker.

    The head and the tail get half of ``limit`` each, cut at a line break when one is near, and
    the marker names how many characters and lines were left out, e.g.
    ``[... 1,234,567 characters (20,000 lines) cut from the middle of the output ...]``. The
    result is at most ``limit`` characters plus the marker's length. Raises TypeError /
    ValueError for a ``text`` that is not a str or a ``limit`` under 2.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if limit < 2:
        raise ValueError(f"limit must be at least 2, not {limit}")
    if len(text) <= limit:
        return text
    head_end = limit // 2
    tail_start = len(text) - (limit - head_end)
    line_end = text.rfind("\n", head_end - _SNAP, head_end)
    if line_end > 0:
        head_end = line_end + 1
    line_start = text.find("\n", tail_start, tail_start + _SNAP)
    if line_start >= 0:
        tail_start = line_start + 1
    middle = text[head_end:tail_start]
    lines = middle.count("\n")
    marker = (
        f"[... {len(middle):,} characters ({lines:,} lines) cut from the middle of the output ...]"
    )
    # The marker has a line of its own: one line break added before it and one after it.
    return f"{text[:head_end]}\n{marker}\n{text[tail_start:]}"


def stopped_note(limit_bytes: int | None) -> str:
    """The note for a command stopped at ``limit_bytes`` of output on one stream.

    It says that the end of the output and the exit code are lost. ``limit_bytes`` None: the
    limit is not known (the note says "its output limit").
    """
    limit = "its output limit" if limit_bytes is None else f"{limit_bytes:,} bytes"
    return (
        f"[The command wrote more than {limit} to one stream and was stopped; "
        "what follows that point, and its exit code, are lost.]"
    )
