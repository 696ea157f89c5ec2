"""A prepared environment: a setup run once, its files snapshotted, every copy restored from it.

Restoring a snapshot boots a sandbox with its files in about half a second, where creating one
and running the setup again pays for the setup every time (``nox -s bench``: the lifecycle
rows). An adapter that starts many sandboxes of one environment (an eval's samples, a pool of
workers) runs :func:`prepare_snapshot` once and starts each from its id
(``Session(config, snapshot_id=...)``). Contract (``tests/test_prepare_snapshot.py``):

- The setup runs in a new sandbox made from ``config`` (or from ``snapshot_id``): a str under
  ``/bin/sh -c``, a sequence
  as an argv, bounded by ``timeout``. A non-zero exit is :class:`SetupFailedError` with the
  head and tail of its output; no snapshot is taken.
- The snapshot is tagged like the sandbox (:mod:`lizard_core.snapshots`), so a cleanup finds
  it by run, integration or machine. The setup's sandbox is destroyed in every case, a failed
  or cancelled setup included.
"""

from __future__ import annotations

from collections.abc import Sequence

from lizard_core._bridge import run_blocking
from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import SetupFailedError
from lizard_core.session import Session
from lizard_core.snapshots import SnapshotRecord, take_snapshot
from lizard_core.truncation import head_and_tail

__all__ = ["DEFAULT_SETUP_TIMEOUT_S", "aprepare_snapshot", "prepare_snapshot"]

DEFAULT_SETUP_TIMEOUT_S = 1800.0
"""How long a setup may run (30 minutes: an install, a clone, a build)."""


def _check_setup(setup: object) -> tuple[str | list[str], bool]:
    if isinstance(setup, str):
        if not setup.strip() or "\0" in setup:
            raise ValueError("setup must be a non-empty command without NUL")
        return setup, True
    if isinstance(setup, Sequence) and setup and all(isinstance(a, str) for a in setup):
        return list(setup), False
    raise TypeError("setup must be a shell command (str) or a non-empty argv (list of str)")


def prepare_snapshot(
    config: SandboxConfig,
    setup: str | Sequence[str],
    name: str = "prepared",
    *,
    timeout: float = DEFAULT_SETUP_TIMEOUT_S,
    snapshot_id: str | None = None,
) -> SnapshotRecord:
    """Run ``setup`` in a new sandbox, snapshot its files, destroy it (blocking).

    ``snapshot_id`` starts the setup's sandbox from an earlier snapshot. Returns the ready
    snapshot; raises :class:`SetupFailedError` when the setup exits non-zero,
    and the session's errors otherwise. See the module docstring.
    """
    if not isinstance(config, SandboxConfig):
        raise TypeError(f"config must be a SandboxConfig, not {type(config).__name__}")
    command, shell = _check_setup(setup)
    with Session(config, destroy_on_exit=True, snapshot_id=snapshot_id) as session:
        result = run_command(session, command, shell=shell, timeout=timeout)
        if result.exit_code != 0:
            output = (result.stdout + result.stderr).decode("utf-8", errors="replace")
            raise SetupFailedError(
                f"The setup exited with code {result.exit_code}; no snapshot was taken.",
                exit_code=result.exit_code,
                output=head_and_tail(output, 4000),
            )
        return take_snapshot(session, name)


async def aprepare_snapshot(
    config: SandboxConfig,
    setup: str | Sequence[str],
    name: str = "prepared",
    *,
    timeout: float = DEFAULT_SETUP_TIMEOUT_S,  # noqa: ASYNC109  (the setup's own, in the guest)
    snapshot_id: str | None = None,
) -> SnapshotRecord:
    """Async :func:`prepare_snapshot`; a cancellation waits for the step in progress."""
    return await run_blocking(
        lambda: prepare_snapshot(config, setup, name, timeout=timeout, snapshot_id=snapshot_id)
    )
