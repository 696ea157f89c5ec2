"""Is a sandbox still there? One ``GET /api/sandboxes/{id}``, asked only on failure paths."""

from __future__ import annotations

from typing import Any, Final

from lizard_core.errors import (
    MALFORMED_ANSWER,
    SandboxGoneError,
    malformed_answer,
    translated,
)

__all__ = ["GONE_STATUSES", "confirm_alive"]

GONE_STATUSES: Final = frozenset({"failed", "stopped", "deleted", "killed", "expired"})
"""Statuses of a sandbox record that mean the sandbox is over: the SDK's terminal states
(``failed``, ``stopped``, ``deleted``) and the words a kill or an expiry would report."""


def confirm_alive(sandbox: Any) -> None:
    """Check that the ``lizard.Sandbox`` still exists: one ``GET /api/sandboxes/{id}``.

    Raises :class:`~lizard_core.errors.SandboxGoneError` if it no longer does (404, or a status
    in :data:`GONE_STATUSES`), and the translated error if the check itself fails; it is never
    retried. :meth:`Session.check_alive` is the same check for a session, which also records
    the answer; use this one only for a sandbox without a session.
    """
    sandbox_id = str(sandbox.sandbox_id)
    with translated(sandbox_id=sandbox_id):
        try:
            info = sandbox.get_info()
        except MALFORMED_ANSWER as exc:
            raise malformed_answer("sandbox lookup", exc) from exc
    status = getattr(info, "status", None)
    if isinstance(status, str) and status.lower() in GONE_STATUSES:
        raise SandboxGoneError(
            f"The sandbox {sandbox_id} no longer exists (its status is {status!r}).",
            sandbox_id=sandbox_id,
        )
