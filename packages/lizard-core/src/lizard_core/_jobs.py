"""Job folders in the sandbox, and their removal carried on the next guest request.

Contract:

- Every file a guest program leaves for the host (a spill, a staged body, a read chunk) lives in
  a job folder directly below :data:`JOBS_ROOT`; :func:`is_job_file` is the only check of a
  path a guest names before the host fetches it.
- :func:`schedule_cleanup` records a job folder to remove; the next guest call on the same
  sandbox carries the list in its request (``rm``), so cleaning up costs no request of its own.
  A call that fails before its guest ran hands the list back.
- What is pending for a sandbox is dropped when the sandbox is known to be gone or its session
  destroyed it (:func:`forget_cleanup`): no request will ever carry it.
"""

from __future__ import annotations

import posixpath
import threading
from typing import Any, Final, TypeGuard

__all__ = [
    "JOBS_ROOT",
    "forget_cleanup",
    "is_job_file",
    "return_cleanup",
    "schedule_cleanup",
    "take_cleanup",
]

JOBS_ROOT: Final = "/tmp/.lizard-core"
"""Job directories (spilled output, file chunks) live here, one per call, named by call id."""

_cleanup_lock = threading.Lock()
_cleanup: dict[str, set[str]] = {}


def schedule_cleanup(sandbox: Any, job_dir: str) -> None:
    """Have the next guest call on ``sandbox`` remove ``job_dir`` (a directory in JOBS_ROOT)."""
    if job_dir.rsplit("/", 1)[0] != JOBS_ROOT:
        raise ValueError(f"not a job directory: {job_dir!r}")
    with _cleanup_lock:
        _cleanup.setdefault(str(sandbox.sandbox_id), set()).add(job_dir)


def is_job_file(path: object) -> TypeGuard[str]:
    """True for a file directly in a job directory, the only files a guest may name to fetch."""
    return (
        isinstance(path, str)
        and posixpath.normpath(path) == path
        and posixpath.dirname(posixpath.dirname(path)) == JOBS_ROOT
    )


def take_cleanup(sandbox_id: str) -> list[str]:
    """What is pending for ``sandbox_id``, removed from the registry."""
    with _cleanup_lock:
        return sorted(_cleanup.pop(sandbox_id, ()))


def return_cleanup(sandbox_id: str, paths: list[str]) -> None:
    """Give back what a call took but never sent."""
    if paths:
        with _cleanup_lock:
            _cleanup.setdefault(sandbox_id, set()).update(paths)


def forget_cleanup(sandbox_id: str) -> None:
    """Drop what was scheduled for a sandbox that is gone: no request will ever carry it."""
    with _cleanup_lock:
        _cleanup.pop(sandbox_id, None)
