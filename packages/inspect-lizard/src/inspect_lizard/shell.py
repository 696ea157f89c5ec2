"""A line-by-line shell in a running Lizard sandbox: what :meth:`connection` hands a person.

Lizard sandboxes take commands through the API; there is no terminal to attach to. This shell
reads one line at a time, runs it with ``/bin/sh -c`` in the sandbox (as ``--user``, in the
current directory, which ``cd DIR`` changes) and prints its output and a non-zero exit code.
Full-screen programs (editors, pagers) need a terminal and do not work; ``exit`` or end of input
leaves, and the sandbox keeps running. Credentials come from ``LIZARD_API_KEY`` /
``LIZARD_API_URL`` on the machine it runs on::

    python -m inspect_lizard.shell SANDBOX_ID [--user USER] [--cwd DIR]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from typing import TextIO

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import CommandTimeoutError, LizardIntegrationError, OutputLimitError
from lizard_core.session import Session

__all__ = ["command_for", "main"]

_CD_TIMEOUT_S = 30.0


def command_for(sandbox_id: str, *, user: str | None = None, cwd: str | None = None) -> str:
    """The shell command a person runs to reach ``sandbox_id`` with this shell."""
    argv = [sys.executable, "-m", "inspect_lizard.shell", sandbox_id]
    if user is not None:
        argv += ["--user", user]
    if cwd is not None:
        argv += ["--cwd", cwd]
    return shlex.join(argv)


def _run(session: Session, line: str, cwd: str, user: str | None, out: TextIO) -> str:
    words = shlex.split(line) if line.startswith("cd") else []
    if words[:1] == ["cd"] and len(words) <= 2:
        target = words[1] if len(words) == 2 else "~"
        done = run_command(
            session,
            f"cd {shlex.quote(target) if target != '~' else ''} && pwd",
            shell=True,
            cwd=cwd,
            user=user,
            timeout=_CD_TIMEOUT_S,
        )
        if done.exit_code == 0:
            return done.stdout.decode("utf-8", "replace").strip() or cwd
        out.write(done.stderr.decode("utf-8", "replace"))
        return cwd
    try:
        done = run_command(session, line, shell=True, cwd=cwd, user=user)
    except (CommandTimeoutError, OutputLimitError) as stopped:
        out.write((stopped.stdout + stopped.stderr).decode("utf-8", "replace"))
        out.write(f"[{stopped}]\n")
        return cwd
    out.write(done.stdout.decode("utf-8", "replace"))
    out.write(done.stderr.decode("utf-8", "replace"))
    if done.exit_code:
        out.write(f"[exit code {done.exit_code}]\n")
    return cwd


def main(
    argv: Sequence[str] | None = None, *, stdin: TextIO | None = None, out: TextIO | None = None
) -> int:
    """Run the shell; returns the process's exit code (1 when the sandbox cannot be reached)."""
    parser = argparse.ArgumentParser(prog="python -m inspect_lizard.shell", description=__doc__)
    parser.add_argument("sandbox_id")
    parser.add_argument("--user", default=None)
    parser.add_argument("--cwd", default="/")
    args = parser.parse_args(argv)
    stdin, out = stdin or sys.stdin, out or sys.stdout
    session = Session(SandboxConfig.from_env(integration="inspect"), sandbox_id=args.sandbox_id)
    cwd: str = args.cwd
    interactive = stdin.isatty()
    try:
        while True:
            if interactive:
                out.write(f"lizard:{cwd}$ ")
                out.flush()
            line = stdin.readline()
            if not line or line.strip() == "exit":
                return 0
            if line.strip():
                cwd = _run(session, line.rstrip("\n"), cwd, args.user, out)
                out.flush()
    except LizardIntegrationError as error:
        out.write(f"lizard: {error}\n")
        return 1
    finally:
        session.close()


if __name__ == "__main__":
    raise SystemExit(main())
