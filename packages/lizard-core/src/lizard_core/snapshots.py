r"""Snapshots: a session's files saved, new sessions started from them, and their cleanup.

As lizard-sdk 1.0.23 describes the platform's (``Sandbox.snapshot``, ``restore``): a snapshot
saves the files (about a second), the source keeps running, and a sandbox started from it
boots fresh with them, in the snapshot's own project. Each snapshot is billed by the GB-month
until deleted. Contract (``tests/test_snapshots.py``, against lizard-local):

- **Tagged like sandboxes.** The platform keeps no metadata on a snapshot, only a name, so
  :func:`take_snapshot` names it ``<name> <TAG_MARK><tags>``: the label, then the session
  configuration's :attr:`~lizard_core.config.SandboxConfig.sandbox_metadata` (integration,
  version, the caller's labels such as a run id) URL-encoded. :attr:`SnapshotRecord.tags` reads
  them back; a name without the mark has no tags.
- :func:`take_snapshot` is one ``POST`` (never retried: a second would make a second
  snapshot; sent from a worker thread, so that Ctrl-C while its answer is awaited deletes the
  snapshot made rather than leaving it billed unseen), then ``GET``\\ s until it is ``ready``
  (bounded by ``wait_s``; :class:`~lizard_core.errors.StateWaitTimeoutError` past it, a failed
  one is a :class:`~lizard_core.errors.SandboxStateError`).
- A session starts from one with ``Session(config, snapshot_id=...)``: a create with the
  snapshot, carrying the configuration's tags, envs and lifetime; its kernel reports its state
  as lost on the first cell (the snapshot holds files, not memory).
- :func:`find_snapshots` is one ``GET`` of the account's snapshots, kept by tags (every pair
  must match), by the origin tags (``integration``, ``run_id``, ``machine_id``, as
  :func:`~lizard_core.inventory.find_sandboxes`) and age (``older_than_s``; an undated one is
  never older); entries without a usable id are skipped.
  :func:`delete_snapshots` deletes each (one ``DELETE``, retried; a 404 counts as done) and
  raises the first error only after trying all.
- **A reference as bytes.** :func:`encode_reference` is a snapshot id as a small self-describing
  byte string, for frameworks that store a persisted workspace as bytes;
  :func:`decode_reference` reads one back from the start of such bytes (``None`` for anything
  else, a tar for one), checking the id.
- Names and ids are checked before any request; every function has an ``a``-prefixed coroutine.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlencode

import lizard
from lizard import Sandbox

from lizard_core._bridge import run_blocking
from lizard_core._platform_calls import NOT_FOUND, retried
from lizard_core._uninterrupted import uninterrupted
from lizard_core.checks import check_seconds
from lizard_core.config import SandboxConfig, wanted_tags
from lizard_core.errors import (
    LizardIntegrationError,
    SandboxStateError,
    StateWaitTimeoutError,
)

if TYPE_CHECKING:
    from lizard_core.session import Session

__all__ = [
    "DEFAULT_SNAPSHOT_WAIT_S",
    "TAG_MARK",
    "SnapshotRecord",
    "adelete_snapshots",
    "afind_snapshots",
    "atake_snapshot",
    "check_snapshot_id",
    "decode_reference",
    "delete_snapshots",
    "encode_reference",
    "find_snapshots",
    "take_snapshot",
]

REFERENCE_MAGIC: Final = b"LIZARD_SANDBOX_SNAPSHOT_V1\n"
"""How the bytes of :func:`encode_reference` begin."""
TAG_MARK: Final = "#lizard?"
"""What separates a snapshot's label from its URL-encoded tags in its name."""
DEFAULT_SNAPSHOT_WAIT_S: Final = 660.0
"""How long :func:`take_snapshot` waits for ``ready`` (the platform allows a snapshot 10 min)."""
MAX_LABEL: Final = 100
MAX_NAME: Final = 200
"""The longest name sent, tags included: lizard-local's bound (lizard-sdk documents none), so
that a name too long fails here, before the snapshot, not as a 400 after it."""
_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class SnapshotRecord:
    """A snapshot as the platform lists it, with the tags read from its name."""

    snapshot_id: str
    """The id to start sessions from (``Session(config, snapshot_id=...)``)."""
    label: str
    """The name it was given, without the tags."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """The tags in its name: the integration, its version and the caller's labels."""
    status: str | None = None
    """``ready`` once it can be restored; ``building``, ``failed``..."""
    project_id: str | None = None
    """The project it restores in (only there)."""
    source_sandbox_id: str | None = None
    """The sandbox it was taken from."""
    created_at: datetime | None = None
    """When it was taken (UTC), if the platform said."""
    source_volume: bool | None = None
    """Whether its source had a volume (whose files it does not hold)."""


def check_snapshot_id(snapshot_id: object) -> str:
    """A snapshot id (one URL path segment), or TypeError/ValueError."""
    if not isinstance(snapshot_id, str):
        raise TypeError(f"snapshot_id must be a str, not {type(snapshot_id).__name__}")
    if not _ID.fullmatch(snapshot_id):
        raise ValueError(f"snapshot_id {snapshot_id!r} is not a snapshot id")
    return snapshot_id


def encode_reference(snapshot_id: str) -> bytes:
    """``snapshot_id`` as bytes that :func:`decode_reference` recognises."""
    body = json.dumps({"snapshot_id": check_snapshot_id(snapshot_id)}).encode()
    return REFERENCE_MAGIC + body


def decode_reference(head: bytes) -> str | None:
    """The snapshot id that ``head`` (the first 512 bytes suffice) refers to, or None."""
    if not head.startswith(REFERENCE_MAGIC):
        return None
    try:
        value = json.loads(head[len(REFERENCE_MAGIC) :]).get("snapshot_id")
        return check_snapshot_id(value)
    except (ValueError, TypeError, AttributeError):
        return None


def snapshot_name(label: str, tags: Mapping[str, str]) -> str:
    """The platform name that carries ``label`` and ``tags`` (see the module docstring)."""
    if not isinstance(label, str):
        raise TypeError(f"name must be a str, not {type(label).__name__}")
    if not label.strip() or len(label) > MAX_LABEL or TAG_MARK in label:
        raise ValueError(f"name must be 1..{MAX_LABEL} characters without {TAG_MARK!r}")
    if any(ord(c) < 32 for c in label):
        raise ValueError("name must not contain control characters")
    name = f"{label} {TAG_MARK}{urlencode(sorted(tags.items()))}"
    if len(name) > MAX_NAME:
        raise ValueError(f"the snapshot's name with its tags passes {MAX_NAME} characters")
    return name


def _parse_name(name: str) -> tuple[str, dict[str, str]]:
    label, mark, encoded = name.rpartition(" " + TAG_MARK)
    if not mark:
        return name, {}
    return label, dict(parse_qsl(encoded, keep_blank_values=True))


def _record(raw: Any) -> SnapshotRecord | None:
    if not isinstance(raw, dict):
        return None
    snapshot_id, name = raw.get("id"), raw.get("name")
    if not isinstance(snapshot_id, str) or not _ID.fullmatch(snapshot_id):
        return None
    label, tags = _parse_name(name) if isinstance(name, str) else ("", {})
    created = raw.get("createdAt")
    when = None
    if isinstance(created, int | float) and not isinstance(created, bool) and created > 0:
        when = datetime.fromtimestamp(created / 1000, UTC)

    def text(key: str) -> str | None:
        value = raw.get(key)
        return value if isinstance(value, str) else None

    volume = raw.get("sourceVolume")
    return SnapshotRecord(
        snapshot_id,
        label,
        tags,
        text("status"),
        text("projectId"),
        text("sourceSandboxId"),
        when,
        volume if isinstance(volume, bool) else None,
    )


def take_snapshot(
    session: Session, name: str = "snapshot", *, wait_s: float = DEFAULT_SNAPSHOT_WAIT_S
) -> SnapshotRecord:
    """Save the session's files as a snapshot tagged like its sandbox (blocking).

    The sandbox keeps running. Returns once the snapshot is ready.
    """
    from lizard_core.session import Session  # the session module imports this one

    if not isinstance(session, Session):
        raise TypeError(f"session must be a Session, not {type(session).__name__}")
    full_name = snapshot_name(name, session.config.sandbox_metadata)
    wait_s = check_seconds(wait_s, name="wait_s")
    sandbox = session.sandbox()
    sent, interrupted = uninterrupted(
        lambda: session.call(sandbox.snapshot, full_name), name="lizard-core-snapshot"
    )
    if interrupted is not None:
        # Ctrl-C while the answer was awaited: the snapshot exists and only it names it.
        made = _record(sent.result()) if sent.exception() is None else None
        if made is not None:
            _delete_quietly(session.config, made.snapshot_id)
        raise interrupted
    record = _record(sent.result())
    if record is None:
        raise LizardIntegrationError("Lizard answered the snapshot without a usable id.")
    deadline = time.monotonic() + wait_s
    delay = 0.05
    while record.status not in (None, "ready"):
        if record.status in ("failed", "suspended", "paused"):
            raise SandboxStateError(
                f"The snapshot {record.snapshot_id} of sandbox {sandbox.sandbox_id} "
                f"is {record.status}."
            )
        if time.monotonic() >= deadline:
            raise StateWaitTimeoutError(
                f"The snapshot {record.snapshot_id} was not ready within {wait_s:g} s."
            )
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
        raw = retried(Sandbox.get_snapshot, (record.snapshot_id,), session.api_kwargs())
        record = _record(raw) or record
    return record


def _delete_quietly(config: SandboxConfig, snapshot_id: str) -> None:
    """Delete a snapshot nobody will be told of (best effort: an error here matters less)."""
    with contextlib.suppress(LizardIntegrationError):
        delete_snapshots(config, [snapshot_id])


def find_snapshots(
    config: SandboxConfig,
    tags: Mapping[str, str] | None = None,
    *,
    integration: str | None = None,
    run_id: str | None = None,
    machine_id: str | None = None,
    older_than_s: float | None = None,
) -> list[SnapshotRecord]:
    """The account's snapshots that match every filter given (blocking).

    ``tags``: pairs the snapshot's tags must hold. ``integration``, ``run_id``, ``machine_id``:
    the origin tags every snapshot :func:`take_snapshot` makes carries (e.g.
    ``run_id=config.run_id`` for this run's), as :func:`lizard_core.inventory.find_sandboxes`
    takes them. ``older_than_s`` keeps those taken at least that many seconds ago; one whose
    time the platform did not say is never "older" (a cleanup by age must not take it).
    """
    if not isinstance(config, SandboxConfig):
        raise TypeError(f"config must be a SandboxConfig, not {type(config).__name__}")
    wanted = wanted_tags(
        tags, integration=integration, run_id=run_id, machine_id=machine_id, name="tags"
    )
    if older_than_s is not None:
        older_than_s = check_seconds(older_than_s, name="older_than_s")
    raws = retried(Sandbox.my_snapshots, (), config.api_kwargs())
    records = [r for r in map(_record, raws if isinstance(raws, list) else ()) if r]
    return [r for r in records if _matches(r, wanted, older_than_s=older_than_s)]


def _matches(
    record: SnapshotRecord, wanted: Mapping[str, str], *, older_than_s: float | None
) -> bool:
    if not all(record.tags.get(k) == v for k, v in wanted.items()):
        return False
    if older_than_s is None:
        return True
    if record.created_at is None:
        return False
    return (datetime.now(UTC) - record.created_at).total_seconds() >= older_than_s


def delete_snapshots(config: SandboxConfig, snapshot_ids: Iterable[str]) -> list[str]:
    """Delete each snapshot (blocking); return the ids now gone (a 404 counts as gone)."""
    if not isinstance(config, SandboxConfig):
        raise TypeError(f"config must be a SandboxConfig, not {type(config).__name__}")
    ids = [check_snapshot_id(i) for i in snapshot_ids]
    deleted: list[str] = []
    errors: list[LizardIntegrationError] = []
    for snapshot_id in ids:
        try:
            retried(
                Sandbox.delete_snapshot, (snapshot_id,), config.api_kwargs(), passthrough=NOT_FOUND
            )
        except lizard.NotFoundError:
            pass
        except LizardIntegrationError as error:
            errors.append(error)
            continue
        deleted.append(snapshot_id)
    if errors:
        raise errors[0]
    return deleted


async def atake_snapshot(
    session: Session, name: str = "snapshot", *, wait_s: float = DEFAULT_SNAPSHOT_WAIT_S
) -> SnapshotRecord:
    """Async :func:`take_snapshot`; a cancellation waits for the request already sent."""
    return await run_blocking(lambda: take_snapshot(session, name, wait_s=wait_s))


async def afind_snapshots(
    config: SandboxConfig,
    tags: Mapping[str, str] | None = None,
    *,
    integration: str | None = None,
    run_id: str | None = None,
    machine_id: str | None = None,
    older_than_s: float | None = None,
) -> list[SnapshotRecord]:
    """Async :func:`find_snapshots`."""
    return await run_blocking(
        lambda: find_snapshots(
            config,
            tags,
            integration=integration,
            run_id=run_id,
            machine_id=machine_id,
            older_than_s=older_than_s,
        )
    )


async def adelete_snapshots(config: SandboxConfig, snapshot_ids: Iterable[str]) -> list[str]:
    """Async :func:`delete_snapshots`."""
    return await run_blocking(delete_snapshots, config, list(snapshot_ids))
