"""The package's public names (lizard_core/__init__.py)."""

from __future__ import annotations

import inspect

import lizard_core
from lizard_core import commands, files


def test_every_exported_name_exists_and_is_documented() -> None:
    assert len(set(lizard_core.__all__)) == len(lizard_core.__all__)
    for name in lizard_core.__all__:
        value = getattr(lizard_core, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"lizard_core.{name} has no docstring"


def test_commands_and_files_are_exported_as_defined() -> None:
    for module, names in (
        (commands, ["run_command", "arun_command", "CommandResult", "DEFAULT_OUTPUT_LIMIT"]),
        (files, ["SandboxFiles", "FileStat"]),
    ):
        for name in names:
            assert name in lizard_core.__all__
            assert getattr(lizard_core, name) is getattr(module, name)
