"""smolagents' work on ``final_answer`` before a sandbox is created, done once per tool class.

Contract:
- ``RemotePythonExecutor._patch_final_answer_with_exception`` makes a new subclass of the tool's
  class for every executor, reading the source of two functions with ``inspect`` (about 3.5 ms),
  and its ``to_dict()`` parses the tool code it writes (about 3.5 ms more): both on a new
  executor's path before the create, and the same for every executor. :func:`patch_final_answer`
  lets smolagents make the class once per tool class, its ``forward``, ``allow_pickle`` and
  patch method, and gives every later tool of that class the same one (a tool with a ``forward``
  of its own is patched afresh); :func:`tool_dict` keeps a copy of the ``to_dict()`` of such a
  tool per class, name and ``output_schema``, the only parts of the tool ``to_dict()`` reads
  besides its class. The tool code is the same, byte for byte.
- At most :data:`KEPT` classes are kept (the least recently used go), so a program that makes
  tool classes on the fly holds a bounded number of them.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from typing import Any, Final

from smolagents.remote_executors import RemotePythonExecutor
from smolagents.tools import Tool

from smolagents_lizard._final_answer import remember_class_source

KEPT: Final = 64
"""Patched classes kept, and ``to_dict()`` results."""


class _Kept(OrderedDict[tuple[object, ...], Any]):
    """At most :data:`KEPT` entries, the least recently used dropped first; callers hold _LOCK."""

    def take(self, key: tuple[object, ...]) -> Any:
        """The entry for ``key`` (now the most recently used), or None."""
        found = self.get(key)
        if found is not None:
            self.move_to_end(key)
        return found

    def keep(self, key: tuple[object, ...], value: Any) -> None:
        self[key] = value
        while len(self) > KEPT:
            self.popitem(last=False)


_PATCHED = _Kept()
_DICTS = _Kept()
_LOCK = threading.Lock()


def patch_final_answer(executor: RemotePythonExecutor, tool: Tool) -> None:
    """Smolagents' patch of ``tool`` for ``executor``, its class made once per tool class."""
    made_by = type(executor)._patch_final_answer_with_exception
    cls = type(tool)
    # A forward of the instance's own, which smolagents' patch takes, is patched afresh.
    key = None
    if "forward" not in vars(tool):
        key = (cls, getattr(cls, "forward", None), executor.allow_pickle, made_by)
        with _LOCK:
            patched = _PATCHED.take(key)
        if patched is not None:
            tool.__class__ = patched
            return
    executor._patch_final_answer_with_exception(tool)
    # Both to_dict() calls (before the create, and in get_tools_definition_code) would parse
    # smolagents' remote_executors.py again to find the new class's source.
    remember_class_source(type(tool), made_by)
    if key is not None:
        with _LOCK:
            _PATCHED.keep(key, type(tool))


def tool_dict(tool: Tool) -> dict[str, Any]:
    """``tool.to_dict()``; for a tool :func:`patch_final_answer` patched, made once and copied."""
    cls = type(tool)
    with _LOCK:
        ours = cls in _PATCHED.values()
    if not ours:
        return tool.to_dict()  # type: ignore[no-any-return]  # smolagents is untyped
    key = (cls, tool.name, repr(getattr(tool, "output_schema", None)))
    with _LOCK:
        made = _DICTS.take(key)
    if made is None:
        made = tool.to_dict()
        with _LOCK:
            _DICTS.keep(key, copy.deepcopy(made))  # not the tool's own output_schema object
    return copy.deepcopy(made)
