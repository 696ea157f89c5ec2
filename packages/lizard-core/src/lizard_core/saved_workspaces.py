"""A workspace saved between sandboxes: as a tar through the host, or as a Lizard snapshot.

For frameworks whose persistence hooks hand bytes to a store of their own (the OpenAI Agents
SDK's ``persist_workspace`` / ``hydrate_workspace``). Contract (proven against lizard-local in
``tests/test_saved_workspaces.py``):

- :func:`asave_workspace` gives a file at position 0: the tar of
  :func:`~lizard_core.archives.apack_directory`, or, with ``snapshot=True``, the reference
  (:func:`~lizard_core.snapshots.encode_reference`) of a Lizard snapshot of the sandbox taken
  for it, with nothing through the host; then the snapshot named by ``replaces`` (an earlier
  save) is deleted, quietly. ``exclude`` needs a tar (``ValueError`` with a snapshot).
- :func:`arestore_workspace` unpacks a tar under the directory, checked on the host first
  (:func:`~lizard_core.archives.aunpack_archive`), and returns None; for a snapshot's reference
  it unpacks nothing and returns the snapshot's id: :func:`areplace_from_snapshot` then gives a
  sandbox holding those files.
- :func:`areplace_from_snapshot` destroys the session's sandbox first (a volume attaches to one
  sandbox at a time), then starts a new one from the snapshot with the same configuration and
  volume; one that fails or is cancelled is not left behind (:meth:`Session.aopen
  <lizard_core.session.Session.aopen>`).
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Iterable
from typing import IO

from lizard_core.archives import MAX_MEMBERS, SPOOL_MEMORY, apack_directory, aunpack_archive
from lizard_core.errors import LizardIntegrationError
from lizard_core.session import Session
from lizard_core.snapshots import (
    adelete_snapshots,
    atake_snapshot,
    decode_reference,
    encode_reference,
)

__all__ = ["areplace_from_snapshot", "arestore_workspace", "asave_workspace"]

_REFERENCE_HEAD = 512  # a reference is shorter; a tar's first header is this long


async def asave_workspace(
    session: Session,
    directory: str,
    *,
    snapshot: bool = False,
    label: str = "workspace",
    replaces: str | None = None,
    exclude: Iterable[str] = (),
    spool_memory: int = SPOOL_MEMORY,
) -> tuple[io.BytesIO | tempfile.SpooledTemporaryFile[bytes], str | None]:
    """The saved workspace as a file, and the snapshot's id (None for a tar)."""
    exclude = list(exclude)
    if not snapshot:
        packed = await apack_directory(
            session, directory, exclude=exclude, spool_memory=spool_memory
        )
        return packed, None
    if exclude:
        raise ValueError("a snapshot saves the whole sandbox: leaving paths out needs a tar")
    record = await atake_snapshot(session, label)
    if replaces not in (None, record.snapshot_id):
        with contextlib.suppress(LizardIntegrationError):
            await adelete_snapshots(session.config, [replaces])
    return io.BytesIO(encode_reference(record.snapshot_id)), record.snapshot_id


async def arestore_workspace(
    session: Session,
    directory: str,
    data: IO[bytes] | IO[str],
    *,
    max_members: int = MAX_MEMBERS,
    spool_memory: int = SPOOL_MEMORY,
) -> str | None:
    """Unpack a saved tar under ``directory``; for a snapshot's reference, return its id."""
    first = data.read(_REFERENCE_HEAD)
    head = first.encode() if isinstance(first, str) else bytes(first or b"")
    snapshot_id = decode_reference(head)
    if snapshot_id is None:
        await aunpack_archive(
            session, directory, data, max_members=max_members, spool_memory=spool_memory, head=head
        )
    return snapshot_id


async def areplace_from_snapshot(
    session: Session, snapshot_id: str, *, volume: str | None = None
) -> Session:
    """A new session on a sandbox started from ``snapshot_id``, ``session``'s destroyed first."""
    await session.adestroy()
    replacement = Session(session.config, snapshot_id=snapshot_id, volume=volume)
    await replacement.aopen()
    return replacement
