"""Forks: N copies of a running session's sandbox, each a session of its own.

As lizard-sdk 1.0.23 describes the platform's ``fork``: a copy of the sandbox at that instant,
memory, processes and files, billed like its source; each copy is a sandbox start; a sandbox
with a volume cannot be forked (409). Contract (``tests/test_forks.py``, against lizard-local):

- :func:`fork_sessions` checks ``count`` (1..100) and refuses a session made with a volume
  with :class:`~lizard_core.errors.SandboxStateError` before any request; the platform's own
  409 is the same class, with a message that says why. Then one ``POST .../fork`` (never
  retried: a second would make more copies).
- Each copy is a :class:`~lizard_core.session.Session` that created its sandbox (destroyed on
  ``with`` exit), with the source's configuration, keep-alive and idle pause, and a lifetime of
  its own (the configuration's). All or nothing: if any copy could not be made, the ones that
  were are destroyed and the error says how many failed and why; an interrupt (Ctrl-C) or an
  unusable answer while the copies are taken in destroys every copy too; so does one while the
  fork's answer is awaited (the request runs in a worker thread that outlives the interrupt).
- Kernels carry over where the platform keeps memory: a fork's kernel is keyed by its lineage
  (:attr:`Session.lineage_id`), so it finds its source's running kernel. Where memory is not
  kept (lizard-local), the copy boots fresh and its kernel's first cell reports the state
  lost with :data:`FORKED_NOTICE`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

from lizard_core._bridge import run_blocking
from lizard_core._uninterrupted import uninterrupted
from lizard_core.errors import LizardIntegrationError, SandboxStateError
from lizard_core.session import Session

__all__ = ["FORKED_NOTICE", "MAX_FORKS", "afork_sessions", "fork_sessions"]

MAX_FORKS: Final = 100
FORKED_NOTICE: Final = (
    "This sandbox is a fork that booted fresh with a copy of its source's files: the Python "
    "kernel's variables, imports and functions were not carried over (files are)."
)
_VOLUME_REFUSAL: Final = (
    "A sandbox with a volume attached cannot be forked (the volume attaches to one sandbox at "
    "a time); snapshot it instead, or fork a sandbox without a volume."
)


def _check_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"count must be an int, not {type(count).__name__}")
    if not 1 <= count <= MAX_FORKS:
        raise ValueError(f"count must be 1..{MAX_FORKS}, not {count}")
    return count


def fork_sessions(session: Session, count: int = 1) -> list[Session]:
    """``count`` copies of the session's running sandbox, each its own session (blocking)."""
    if not isinstance(session, Session):
        raise TypeError(f"session must be a Session, not {type(session).__name__}")
    _check_count(count)
    if session.volume is not None:
        raise SandboxStateError(_VOLUME_REFUSAL, code="FORK_VOLUME")
    sandbox = session.sandbox()
    answer, interrupted = uninterrupted(
        lambda: session.call(sandbox.fork, count=count, timeout_ms=session.config.lifetime_ms),
        name="lizard-core-fork",
    )
    if interrupted is not None:
        # Ctrl-C while the answer was awaited: the copies exist and only it names them.
        if answer.exception() is None:
            _kill_all([], [getattr(r, "sandbox", None) for r in answer.result() or ()])
        raise interrupted
    try:
        results: list[Any] = answer.result()
    except SandboxStateError as error:
        if error.code != "FORK_VOLUME" and "volume" not in error.message.lower():
            raise  # paused, busy...: its own class and words say why
        raise SandboxStateError(
            f"Lizard refused to fork sandbox {sandbox.sandbox_id}: {error.message} "
            f"({_VOLUME_REFUSAL})",
            status_code=error.status_code,
            code=error.code,
        ) from error
    copies: list[Session] = []
    failures: list[str] = []
    handles = [getattr(result, "sandbox", None) for result in results or ()]
    try:
        for result, handle in zip(results or (), handles, strict=True):
            if handle is None:
                failures.append(str(getattr(result, "error", None) or "fork failed")[:300])
                continue
            copies.append(session.adopt_copy(handle, FORKED_NOTICE))
    except BaseException:
        # Ctrl-C or an unusable answer while the copies were taken in: none may go on billing.
        _kill_all(copies, handles[len(copies) + len(failures) :])
        raise
    if failures or len(copies) != count:
        _kill_all(copies, [])
        reason = failures[0] if failures else "the platform answered fewer copies"
        raise LizardIntegrationError(
            f"{count - len(copies)} of {count} forks of sandbox {sandbox.sandbox_id} failed: "
            f"{reason}. The copies that were made have been destroyed."
        )
    return copies


def _kill_all(copies: list[Session], handles: list[Any]) -> None:
    """Destroy the copies taken in and kill the raw handles not yet taken (best effort)."""
    for copy in copies:
        # The error being raised matters more; a copy that will not die ends with its lifetime.
        with contextlib.suppress(LizardIntegrationError):
            copy.destroy()
    for handle in handles:
        if handle is not None:
            with contextlib.suppress(Exception):
                handle.kill()


async def afork_sessions(session: Session, count: int = 1) -> list[Session]:
    """Async :func:`fork_sessions`; a cancellation waits for the fork already sent."""
    return await run_blocking(fork_sessions, session, count)
