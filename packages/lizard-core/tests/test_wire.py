"""The guest programs speak the vocabulary the host names in ``lizard_core._wire``."""

from __future__ import annotations

import ast

import pytest

from lizard_core import _wire
from lizard_core._guest import source

AGENT = ("agent",)
KERNEL = ("kernel_client", "kernel_daemon")


def _names(namespace: type) -> set[str]:
    return {value for key, value in vars(namespace).items() if key.isupper()}


def _spoken(files: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """(frame kinds, keys) the guest files write or read: dict keys, subscripts, ``.get``, and
    the keyword arguments of the kernel client's ``final``."""
    kinds: set[str] = set()
    keys: set[str] = set()
    for name in files:
        tree = ast.parse(source(name))  # the program as it travels, parts bundled
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        keys.add(key.value)
                        if key.value == "t" and isinstance(value, ast.Constant):
                            kinds.add(str(value.value))
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                if isinstance(node.slice.value, str):
                    keys.add(node.slice.value)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:  # frame["t"] = "end"
                    tagged = isinstance(target, ast.Subscript) and target.slice
                    if isinstance(tagged, ast.Constant) and tagged.value == "t":
                        kinds.add(str(node.value.value))
            if isinstance(node, ast.Call):
                _spoken_by_call(node, kinds, keys)
    return kinds, keys


def _spoken_by_call(node: ast.Call, kinds: set[str], keys: set[str]) -> None:
    func = node.func
    if isinstance(func, ast.Name) and func.id == "final":  # the kernel client's final(**end)
        keys.update(kw.arg for kw in node.keywords if kw.arg)
    first = node.args[0] if node.args else None
    if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
        return
    if isinstance(func, ast.Attribute) and func.attr in ("get", "setdefault"):
        keys.add(first.value)
    elif isinstance(func, ast.Name) and func.id == "emit_data":
        kinds.add(first.value)  # the agent's data frames: emit_data(kind, ...)


@pytest.mark.parametrize(
    ("files", "namespaces"),
    [
        (AGENT, (_wire.GuestFrame, _wire.AgentFrame, _wire.AgentEnd)),
        (KERNEL, (_wire.GuestFrame, _wire.KernelFrame, _wire.KernelEnd)),
    ],
    ids=["agent", "kernel"],
)
def test_every_key_the_host_reads_is_spoken_by_the_guest(
    files: tuple[str, ...], namespaces: tuple[type, ...]
) -> None:
    kinds, keys = _spoken(files)
    named = set().union(*(_names(n) for n in namespaces))
    assert named - kinds - keys == set()


@pytest.mark.parametrize(
    ("files", "namespace"),
    [(AGENT, _wire.AgentFrame), (KERNEL, _wire.KernelFrame)],
    ids=["agent", "kernel"],
)
def test_every_frame_kind_the_guest_sends_is_named_on_the_host(
    files: tuple[str, ...], namespace: type
) -> None:
    kinds, _ = _spoken(files)
    named = _names(_wire.GuestFrame) | _names(namespace)
    assert kinds - named == set()


def test_stream_budgets_fit_the_platform_cap_with_room_to_spare() -> None:
    cap = 512 * 1024
    assert _wire.KERNEL_STREAM_BUDGET < _wire.AGENT_STREAM_BUDGET < cap
