"""Kernel results become step outputs and capped, ANSI-free logs."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from smolagents_lizard._outputs import (
    cap_logs,
    is_uninformative,
    last_image,
    strip_ansi,
    value_from_bundle,
)


def png(color: tuple[int, int, int], size: tuple[int, int] = (4, 3)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_short_logs_are_untouched() -> None:
    assert cap_logs("hello\n", 10) == "hello\n"


def test_long_logs_keep_head_and_tail_with_a_marker() -> None:
    text = "".join(f"line {i}\n" for i in range(10_000))
    capped = cap_logs(text, 1000)
    assert capped.startswith("line 0\nline 1\n")
    assert capped.endswith("line 9999\n")
    assert f"{len(text) - 1000:,} characters of output cut" in capped
    assert len(capped) < 1000 + 200


def test_ansi_sequences_are_removed() -> None:
    colored = "\x1b[0;31mValueError\x1b[0m: bad\x1b]0;title\x07 done"
    assert strip_ansi(colored) == "ValueError: bad done"


def test_image_result_becomes_a_pil_image() -> None:
    value = value_from_bundle(
        {"text/plain": "<PIL.Image.Image image>", "image/png": png((0, 9, 0))}
    )
    assert isinstance(value, Image.Image)
    assert value.getpixel((0, 0)) == (0, 9, 0)


def test_dataframe_keeps_its_text_table() -> None:
    table = "   a\n0  1\n1  2"
    assert value_from_bundle({"text/plain": table, "text/html": "<table>...</table>"}) == table


@pytest.mark.parametrize(
    ("mime", "data", "expected"),
    [
        ("text/html", "<b>bold</b>", "<b>bold</b>"),
        ("application/json", {"a": [1, 2]}, '{"a": [1, 2]}'),
        ("text/markdown", "# title", "# title"),
    ],
)
def test_default_repr_gives_way_to_a_richer_text_form(
    mime: str, data: object, expected: str
) -> None:
    bundle = {"text/plain": "<IPython.core.display.HTML object>", mime: data}
    assert value_from_bundle(bundle) == expected


def test_plain_text_is_kept_when_nothing_richer_exists() -> None:
    assert (
        value_from_bundle({"text/plain": "<foo.Bar object at 0x7f>"}) == "<foo.Bar object at 0x7f>"
    )


def test_broken_image_data_falls_back_to_text() -> None:
    assert value_from_bundle({"text/plain": "img", "image/png": "not base64!"}) == "img"


def test_last_image_picks_the_last_figure() -> None:
    bundles = [{"image/png": png((1, 1, 1))}, {"text/plain": "x"}, {"image/png": png((2, 2, 2))}]
    image = last_image(bundles)
    assert image is not None
    assert image.getpixel((0, 0)) == (2, 2, 2)
    assert last_image([{"text/plain": "x"}]) is None


@pytest.mark.parametrize(
    ("text", "uninformative"),
    [
        ("<foo.Bar object at 0x7f00>", True),
        ("[<matplotlib.lines.Line2D at 0x7f00>]", True),
        ("<IPython.core.display.HTML object>", True),
        ("(<a.B object at 0x1>, <c.D object at 0x2>)", True),
        ("Text(0.5, 1.0, 'title')", False),
        ("<b>bold</b>", False),
        ("[<foo.Bar object at 0x1>, 3]", False),
    ],
)
def test_default_reprs_are_recognised(text: str, uninformative: bool) -> None:
    assert is_uninformative(text) is uninformative
