"""Turn what the kernel returns into what a smolagents step shows: an output value and logs.

Contract:
- The output of a step is its final expression's value. An image (PNG or JPEG) becomes a PIL
  image; anything else is text: ``text/plain`` (a DataFrame's table, a number's repr), unless that
  is only a default ``<... object>`` repr and the value offers a richer text form (JSON, Markdown,
  HTML, SVG, LaTeX), which is then used so nothing the code displayed is lost.
- A step whose final expression has no value, or only an uninformative one (``<... object at
  0x...>``, matplotlib's ``[<Line2D ...>]``), but which drew figures returns the last figure.
- Logs are capped at a character limit: the head and the tail are kept, and a marker in the
  middle says how much was cut and what to do instead. A log is never cut silently.
- ANSI escape sequences are removed from everything the model reads.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_DEFAULT_REPR = re.compile(r"<[\w.]+ (?:object(?: at 0x[0-9a-fA-F]+)?|at 0x[0-9a-fA-F]+)>")
_ONLY_PUNCTUATION = re.compile(r"[\[\](),\s]*")
_IMAGE_TYPES = ("image/png", "image/jpeg")
_TEXT_FALLBACKS = ("application/json", "text/markdown", "text/html", "image/svg+xml", "text/latex")


def strip_ansi(text: str) -> str:
    """Remove terminal colour and cursor escape sequences."""
    return _ANSI.sub("", text)


def cap_logs(text: str, limit: int) -> str:
    """Return ``text`` if it fits in ``limit`` characters, else its head and tail with a marker."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    head = text[: limit // 2]
    tail = text[len(text) - (limit - len(head)) :]
    marker = (
        f"\n[... {cut:,} characters of output cut by smolagents-lizard (limit {limit:,}): print "
        "less, or write large output to a file and print a summary ...]\n"
    )
    return head + marker + tail


def value_from_bundle(bundle: Mapping[str, Any]) -> Any:
    """Pick the step output from one rich result (mime type -> data)."""
    for mime in _IMAGE_TYPES:
        if mime in bundle:
            image = _decode_image(bundle[mime])
            if image is not None:
                return image
    plain = bundle.get("text/plain")
    if isinstance(plain, str) and not is_uninformative(plain):
        return strip_ansi(plain)
    for mime in _TEXT_FALLBACKS:
        if mime in bundle:
            data = bundle[mime]
            return data if isinstance(data, str) else json.dumps(data, default=str)
    return strip_ansi(plain) if isinstance(plain, str) else None


def is_uninformative(text: str) -> bool:
    """True for default reprs such as ``<foo.Bar object at 0x7f...>``, alone or in a list."""
    rest = _DEFAULT_REPR.sub("", text)
    return rest != text and _ONLY_PUNCTUATION.fullmatch(rest) is not None


def last_image(bundles: Sequence[Mapping[str, Any]]) -> Image.Image | None:
    """Return the last image among displayed results (figures), if any."""
    for bundle in reversed(bundles):
        for mime in _IMAGE_TYPES:
            if mime in bundle:
                image = _decode_image(bundle[mime])
                if image is not None:
                    return image
    return None


def _decode_image(data: Any) -> Image.Image | None:
    try:
        raw = data if isinstance(data, bytes) else base64.b64decode(data, validate=True)
        with Image.open(io.BytesIO(raw)) as image:
            image.load()
            return image.copy()
    except (binascii.Error, OSError, ValueError, TypeError, Image.DecompressionBombError):
        return None
