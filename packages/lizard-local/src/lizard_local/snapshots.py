"""Snapshots: a copy of a sandbox's files that new sandboxes start from.

As lizard-sdk 1.0.23 describes the platform's (``Sandbox.snapshot``, ``restore``): a snapshot
saves the files, the source keeps running, and a sandbox started from it (``POST
/api/sandboxes`` with ``snapshotId``) boots fresh with them, in the snapshot's own project, at
the source's template and size. Fidelity: the copy is taken at once and answered ``ready``
(``readyCount`` = ``poolSize``, no warm pool); what it holds is what
:mod:`lizard_local.file_copies` copies; it lives as long as the server.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lizard_local.host_cleanup import remove_tree
from lizard_local.http import ApiError
from lizard_local.isolation import Template

__all__ = ["Snapshot", "SnapshotStore"]

MAX_NAME = 200


@dataclass
class Snapshot:
    """One snapshot: its record and the directory that holds its files."""

    id: str
    name: str
    project_id: str
    region: str
    source_sandbox_id: str
    template: Template
    size: str
    pool_size: int
    cpus: int
    memory_mb: int
    created_at: int
    source_volume: bool
    path: Path

    def record(self) -> dict[str, Any]:
        """The JSON snapshot record (lizard-sdk's ``SandboxSnapshot``)."""
        return {
            "id": self.id,
            "name": self.name,
            "projectId": self.project_id,
            "workspaceId": "ws_local",
            "region": self.region,
            "sourceSandboxId": self.source_sandbox_id,
            "status": "ready",
            "poolSize": self.pool_size,
            "readyCount": self.pool_size,
            "error": None,
            "cpus": self.cpus,
            "memoryMb": self.memory_mb,
            "createdAt": self.created_at,
            "scope": "project",
            "createdBy": "user_local",
            "sourceVolume": self.source_volume,
            "template": self.template.name,
        }


class SnapshotStore:
    """The server's snapshots, each a directory under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._snapshots: dict[str, Snapshot] = {}

    def all(self) -> list[Snapshot]:
        """Every snapshot, oldest first."""
        return list(self._snapshots.values())

    def get(self, snapshot_id: str) -> Snapshot:
        """The snapshot, or 404."""
        snapshot = self._snapshots.get(snapshot_id)
        if snapshot is None:
            raise ApiError(404, f'Snapshot "{snapshot_id}" not found', "SNAPSHOT_NOT_FOUND")
        return snapshot

    def new_path(self) -> tuple[str, Path]:
        """A fresh id and the (created) directory its files go to."""
        snapshot_id = "snap_" + secrets.token_hex(6)
        path = self.root / snapshot_id
        path.mkdir(parents=True, mode=0o700)
        return snapshot_id, path

    def add(self, snapshot: Snapshot) -> None:
        """Record a snapshot whose files are in place."""
        self._snapshots[snapshot.id] = snapshot

    async def delete(self, snapshot_id: str) -> Snapshot:
        """Forget the snapshot and remove its files; 404 when unknown."""
        snapshot = self.get(snapshot_id)
        del self._snapshots[snapshot_id]
        await asyncio.to_thread(remove_tree, snapshot.path)
        return snapshot

    async def remove_all(self) -> None:
        """The server stops: every snapshot goes."""
        for snapshot_id in list(self._snapshots):
            await self.delete(snapshot_id)


def snapshot_name(body: dict[str, Any], sandbox_id: str) -> str:
    """The name a snapshot request asks for (the SDK always sends one)."""
    name = body.get("name")
    if name is None:
        return f"Snapshot {sandbox_id}"
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME:
        raise ApiError(400, f"name must be a string of 1..{MAX_NAME} characters", "INVALID_BODY")
    return name


def created_ms() -> int:
    """Now, in Unix milliseconds."""
    return int(time.time() * 1000)
