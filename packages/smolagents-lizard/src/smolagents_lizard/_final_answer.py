"""Decode the final answer that smolagents' patched ``final_answer`` tool raises in the sandbox.

Contract:
- ``RemotePythonExecutor.send_tools`` patches ``final_answer`` to raise ``FinalAnswerException``
  whose message is ``"safe:" + JSON`` (or ``"pickle:" + base64`` when pickle is allowed). The kernel
  reports it like any other exception, by class name and message.
- Only the ``safe:`` form is decoded, with ``json`` and smolagents'
  ``SafeSerializer.from_json_safe`` (plain data, bytes, dates, tuples, sets, numpy arrays, PIL
  images). ``pickle:`` is refused: the sandbox runs model-written code, and unpickling its output
  would run that code on the host.
- The encoded answer is bounded (``max_bytes``; the kernel returns exception messages whole),
  and so is its nesting: a value too deep for the decoder (100,000 nested lists, say) is a
  ``FinalAnswerError``, never a ``RecursionError``.
  Images are bounded in pixels and fully decoded here, so a hostile PNG fails now, with a clear
  error, not later in the caller's code.
- The patched tool imports numpy and PIL only to serialize arrays and images, inside its own
  ``try/except ImportError``; smolagents also hoists those imports to the top of the tool's
  definition cell, where a missing module would break the definition and a present one costs the
  executor's start its import (numpy: 150 ms and more, most of a new executor's start).
  ``drop_optional_imports`` removes the hoisted lines, so nothing is installed or imported for
  ``final_answer``: an array or an image in an answer means its module was imported by then.
  So does it for the standard-library modules the tool imports inside its functions
  (``LAZY_MODULES``), unless another tool's code or smolagents' own preamble imports them too.
- ``remember_class_source`` gives each patched class its source text, looked up once per
  process: smolagents reads a class's ``__source__`` before it asks ``inspect``, which for a class
  parses the whole file that defines it (the patch's ``remote_executors.py``, 45 KB: 7 to 15 ms)
  at every ``to_dict()``, and the patch makes a new class each time, at the same place in that
  file. The tool's code is the same either way.
- Every refusal raises ``FinalAnswerError`` (a ``ValueError``) whose text tells the model what to
  do instead; the executor turns it into a step error.
"""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Iterable
from typing import Any

from PIL import Image
from smolagents.serialization import SafeSerializer

FINAL_ANSWER_EXCEPTION = "FinalAnswerException"
"""The class name smolagents' patched ``final_answer`` raises in the sandbox."""

OPTIONAL_MODULES = frozenset({"PIL", "numpy"})
"""Modules the patched ``final_answer`` uses only when the answer holds their objects."""

LAZY_MODULES = frozenset({"base64", "dataclasses", "decimal", "io", "json", "pathlib", "pickle"})
"""Standard-library modules the patched ``final_answer`` imports inside its own functions, which
smolagents hoists to the top of the cell as well (``pathlib``, ``dataclasses`` and ``pickle``
alone cost a new executor about 9 ms there)."""

MAX_IMAGE_PIXELS = 50_000_000
"""Largest image (width x height) accepted in a final answer."""


_CLASS_SOURCES: dict[tuple[object, str, str], str] = {}
_CLASS_SOURCES_LOCK = threading.Lock()


def remember_class_source(cls: type, made_by: object) -> None:
    """Set ``cls.__source__`` to what ``inspect.getsource(cls)`` says, asked once per process.

    ``made_by`` is the function whose body defines ``cls`` (smolagents' patch method): a class
    of the same name from another function, or from a reloaded module, is looked up afresh. A
    class that has a ``__source__`` (its own or inherited) is left alone, as smolagents would
    not look it up; one whose source cannot be found too (``to_dict()`` raises as before).
    """
    if getattr(cls, "__source__", None):
        return
    key = (made_by, cls.__module__, cls.__qualname__)
    with _CLASS_SOURCES_LOCK:
        source = _CLASS_SOURCES.get(key)
    if source is None:
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):
            return
        with _CLASS_SOURCES_LOCK:
            _CLASS_SOURCES[key] = source
    cls.__source__ = source  # type: ignore[attr-defined]


class FinalAnswerError(ValueError):
    """The sandbox returned a final answer that is refused (pickle, too large, malformed)."""


def decode_final_answer(encoded: str, *, max_bytes: int) -> Any:
    """Return the Python value of a ``FinalAnswerException`` message, or raise FinalAnswerError."""
    size = len(encoded.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise FinalAnswerError(
            f"The final answer is {size:,} bytes once serialized, over the {max_bytes:,}-byte "
            "limit. Return a smaller value (a summary, or the path of a file in the sandbox)."
        )
    if encoded.startswith("pickle:"):
        raise FinalAnswerError(
            "The final answer came back pickled, and pickle is refused: return plain data "
            "(str, numbers, lists, dicts, tuples, sets, bytes, dates, numpy arrays, PIL images)."
        )
    if not encoded.startswith("safe:"):
        raise FinalAnswerError(
            "The final answer is not in smolagents' 'safe:' format; call final_answer(value) "
            "with plain data."
        )
    try:
        data = json.loads(encoded[len("safe:") :])
        value = SafeSerializer.from_json_safe(data)
    except RecursionError:
        # json and the deserializer recurse per level; the sandbox chose the depth.
        raise FinalAnswerError(
            "The final answer is nested too deeply to decode; return a flatter value."
        ) from None
    except (ValueError, TypeError, KeyError, OSError, Image.DecompressionBombError) as exc:
        # OSError: PIL cannot identify the image bytes.
        raise FinalAnswerError(f"The final answer could not be decoded: {exc}") from exc
    _load_images(value)
    return value


def _load_images(value: Any) -> None:
    """Decode every PIL image in ``value`` now, refusing ones larger than MAX_IMAGE_PIXELS.

    Walks the value with a stack of its own, so no nesting the decoder accepted can exhaust
    Python's recursion limit here.
    """
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            todo.extend(item)
        elif isinstance(item, Image.Image):
            _load_image(item)


def _load_image(value: Image.Image) -> None:
    width, height = value.size
    if width * height > MAX_IMAGE_PIXELS:
        raise FinalAnswerError(
            f"The final answer holds a {width}x{height} image, over the "
            f"{MAX_IMAGE_PIXELS:,}-pixel limit; return a smaller image."
        )
    try:
        value.load()
    except (OSError, ValueError) as exc:
        raise FinalAnswerError(f"The final answer's image could not be decoded: {exc}") from exc


def hoisted_imports(code: str) -> set[str]:
    """The modules of the top-level ``import M`` lines of a tool's code."""
    return set(re.findall(r"^import (\w+)$", code, flags=re.MULTILINE))


def drop_optional_imports(code: str, modules: Iterable[str]) -> str:
    """Remove the top-level ``import M`` lines of ``code`` for ``modules``."""
    for module in modules:
        code = re.sub(rf"^import {re.escape(module)}\n", "", code, flags=re.MULTILINE)
    return code
