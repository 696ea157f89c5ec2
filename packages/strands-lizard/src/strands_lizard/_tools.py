"""The tools a ``LizardSandbox`` vends to an ``Agent``: Strands' own, bound to the sandbox.

Strands registers them when the agent is built (skipping a name the user registered already).
Strands 1.44 ships the shell as ``bash``; ``python_repl`` arrived in a later release, and is
vended where it exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from strands.types.tools import AgentTool
from strands.vended_tools.file_editor import make_file_editor
from strands.vended_tools.file_editor.file_editor import DEFAULT_FILE_EDITOR_DESCRIPTION

try:
    from strands.vended_tools.shell import make_shell
except ImportError:  # Strands before the shell tool's rename
    from strands.vended_tools.bash import make_bash as make_shell  # type: ignore[no-redef,import-not-found,unused-ignore]

if TYPE_CHECKING:
    from strands.sandbox import Sandbox

__all__ = ["vended_tools"]

SHELL: Final = (
    "Executes a shell command with /bin/sh and returns its output (stdout), error (stderr) and "
    "exit_code. Each call runs in a fresh shell: variables and the directory do not persist."
)
STATEFUL: Final = (
    "Executes Python code in a persistent interpreter and returns output (stdout), error (stderr, "
    "the traceback) and exit_code. Variables and imports persist; a final expression is printed."
)


def vended_tools(sandbox: Sandbox, *, stateful_python: bool) -> list[AgentTool]:
    """``sandbox_shell``, ``sandbox_file_editor`` and ``sandbox_python_repl`` (Strands 1.60+)."""
    where = f" It runs in a Lizard sandbox (a microVM), in {getattr(sandbox, 'working_dir', '/')}."
    tools: list[AgentTool] = [
        make_file_editor(
            sandbox=sandbox,
            name="sandbox_file_editor",
            description=f"{DEFAULT_FILE_EDITOR_DESCRIPTION}{where}",
        ),
        make_shell(sandbox=sandbox, name="sandbox_shell", description=f"{SHELL}{where}"),
    ]
    try:
        from strands.vended_tools.python_repl import make_python_repl
    except ImportError:  # Strands before 1.60
        return tools
    from strands.vended_tools.python_repl.types import PYTHON_REPL_DESCRIPTION

    description = (STATEFUL if stateful_python else PYTHON_REPL_DESCRIPTION) + where
    tools.append(
        make_python_repl(sandbox=sandbox, name="sandbox_python_repl", description=description)
    )
    return tools
