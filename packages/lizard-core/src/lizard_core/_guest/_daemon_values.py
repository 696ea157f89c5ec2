"""What a cell hands back: its error described, and rich values as mime bundles, capped.

Part of the kernel daemon program (bundled into it by ``lizard_core._guest.source``).

- Errors come back as ``{name, message, traceback}`` with the daemon's own frames and ANSI
  colours removed; the message is never shortened.
- Rich values give ``text/plain`` always and the other forms an object offers; a form over the
  limit is cut (``text/plain``) or left out and named.
"""

from __future__ import annotations

import binascii
import io
import json
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: never evaluated, so the daemon runs on Python 3.8
    import traceback
    from typing import Any, Dict, List, Optional, Tuple

    from ._prelude import Frame

    Bundle = Dict[str, str]

from ._daemon_state import HERE

DATAFRAME_JSON_MAX_CELLS = 100000
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def without_daemon_frames(te: traceback.TracebackException) -> traceback.TracebackException:
    """Drop the daemon's own frames from a TracebackException and the exceptions chained to it."""
    import traceback

    seen = set()
    todo: List[Optional[traceback.TracebackException]] = [te]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        item.stack = traceback.StackSummary.from_list([f for f in item.stack if f.filename != HERE])
        todo.append(item.__cause__)
        todo.append(item.__context__)
        todo.extend(getattr(item, "exceptions", None) or [])
    return te


def describe_error(exc: BaseException) -> Frame:
    """Class name, message and an ANSI-free traceback that shows only the cell's frames."""
    import traceback  # at the first error, not on the new kernel's way to listening

    name = type(exc).__name__
    try:
        message = str(exc)
    except BaseException:
        message = "<unprintable %s>" % name
    try:
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    except TypeError:  # Python < 3.10 has no ``compact``
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    try:
        text = ANSI.sub("", "".join(without_daemon_frames(te).format()))
    except BaseException:
        text = "%s: %s\n" % (name, message)
    return {"name": name, "message": message, "traceback": text}


class CellNotCompiled(Exception):
    """Wraps the error that kept a cell from compiling (no frame of the cell ever ran)."""


def describe_compile_error(exc: BaseException) -> Frame:
    """A syntax error as Python prints it: the line and a caret, no stack."""
    import traceback

    text = "".join(traceback.format_exception_only(type(exc), exc))
    return {"name": type(exc).__name__, "message": str(exc), "traceback": ANSI.sub("", text)}


# Mime types offered through IPython's ``_repr_*_`` protocol, in IPython's order of preference.
REPR_METHODS = (
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
)


def png_of_figure(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return binascii.b2a_base64(buf.getvalue(), newline=False).decode("ascii")


def png_of_pil(image: Any) -> str:
    buf = io.BytesIO()
    try:
        image.save(buf, format="PNG")
    except (OSError, ValueError, KeyError):
        buf = io.BytesIO()
        image.convert("RGBA").save(buf, format="PNG")
    return binascii.b2a_base64(buf.getvalue(), newline=False).decode("ascii")


def is_instance_of(value: object, module: str, name: str) -> bool:
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return isinstance(cls, type) and isinstance(value, cls)


def rich_bundle(value: Any) -> Bundle:
    """Mime type -> string for a value; images are base64. Raises what the value's code raises."""
    data = {}
    if is_instance_of(value, "matplotlib.figure", "Figure"):
        data["image/png"] = png_of_figure(value)
    elif is_instance_of(value, "PIL.Image", "Image"):
        data["image/png"] = png_of_pil(value)
    cls = type(value)
    for method, mime in REPR_METHODS:
        if mime in data or (mime == "image/jpeg" and "image/png" in data):
            continue
        # Looked up on the type, so objects answering every attribute (mocks, proxies) are skipped.
        func = getattr(cls, method, None)
        if func is None or not callable(func):
            continue
        try:
            out = getattr(value, method)()
        except Exception:
            continue
        if isinstance(out, tuple) and len(out) == 2:
            out = out[0]  # (data, metadata)
        if out is None:
            continue
        if mime == "application/json":
            if not isinstance(out, str):
                out = json.dumps(out, default=str)
        elif isinstance(out, bytes):
            if mime.startswith("image/") and mime != "image/svg+xml":
                out = binascii.b2a_base64(out, newline=False).decode("ascii")
            else:
                out = out.decode("utf-8", "replace")
        if isinstance(out, str):
            data[mime] = out
    if "application/json" not in data and is_instance_of(value, "pandas", "DataFrame"):
        try:
            if value.size <= DATAFRAME_JSON_MAX_CELLS:
                data["application/json"] = value.to_json(
                    orient="split", date_format="iso", default_handler=str
                )
        except Exception:
            pass
    data["text/plain"] = repr(value)
    return data


def cap_bundle(data: Bundle, limit: int) -> Tuple[Bundle, List[str]]:
    """Cap each value of a bundle: text/plain is cut with a marker; anything else is omitted."""
    kept, omitted = {}, []
    for mime, text in data.items():
        if len(text) <= limit:
            kept[mime] = text
        elif mime == "text/plain":
            kept[mime] = text[:limit] + "\n[lizard: value cut at %d of %d characters]" % (
                limit,
                len(text),
            )
        else:
            omitted.append(mime)
    return kept, omitted
