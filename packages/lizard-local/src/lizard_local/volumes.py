"""Volumes: named host directories that a sandbox mounts at ``/workspace`` and that outlive it.

As lizard-sdk 1.0.23 describes the platform's (``lizard/volume.py``): a volume's name is its key
inside a project (a slug: lowercase letters, digits and dashes, up to 64 characters), every call
takes the name or the id, it attaches to one sandbox at a time (``attachedTo``) and a sandbox
with one cannot be forked. Fidelity: the size is recorded, not enforced (``sizeEnforced:
false``); a volume lives as long as the server (its directory goes with the server's state);
namespace mode only (host mode has no ``/workspace`` of the sandbox's own to mount it on).
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lizard_local.host_cleanup import remove_tree
from lizard_local.http import ApiError

__all__ = ["MAX_SIZE_GB", "Volume", "VolumeStore"]

MAX_SIZE_GB = 50
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")


@dataclass
class Volume:
    """One volume."""

    id: str
    project_id: str
    name: str
    size_gb: int
    region: str
    created_at: int
    path: Path
    attached_to: str | None = None

    def record(self) -> dict[str, Any]:
        """The JSON volume record."""
        return {
            "id": self.id,
            "projectId": self.project_id,
            "name": self.name,
            "sizeGb": self.size_gb,
            "status": "ready",
            "createdAt": self.created_at,
            "attachedTo": self.attached_to,
            "region": self.region,
            "sizeEnforced": False,
        }


def _size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, "sizeGb must be a whole number", "invalid_volume_size")
    if not 1 <= value <= MAX_SIZE_GB:
        raise ApiError(400, f"sizeGb must be 1..{MAX_SIZE_GB}", "invalid_volume_size")
    return value


class VolumeStore:
    """The server's volumes, each a directory under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._volumes: dict[str, Volume] = {}

    def all(self, project_id: str) -> list[Volume]:
        """The project's volumes, oldest first."""
        return [v for v in self._volumes.values() if v.project_id == project_id]

    def find(self, project_id: str, name_or_id: str) -> Volume:
        """The project's volume by name or id, or 404."""
        for volume in self._volumes.values():
            if volume.project_id == project_id and name_or_id in (volume.id, volume.name):
                return volume
        raise ApiError(404, f'Volume "{name_or_id}" not found', "VOLUME_NOT_FOUND")

    def by_id_anywhere(self, volume_id: str) -> Volume:
        """A volume by id in any project (a create with ``volumeId`` names no project), or 404."""
        volume = self._volumes.get(volume_id)
        if volume is None:
            raise ApiError(404, f'Volume "{volume_id}" not found', "VOLUME_NOT_FOUND")
        return volume

    def create(self, project_id: str, body: dict[str, Any]) -> tuple[Volume, bool]:
        """``POST .../volumes``: (volume, created). ``getOrCreate`` returns an existing one."""
        name = body.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ApiError(
                400,
                "name must be a slug: lowercase letters, digits and dashes, up to 64",
                "invalid_volume_name",
            )
        size = _size(body.get("sizeGb", 5))
        region = body.get("region") or "us-east-1"
        if not isinstance(region, str):
            raise ApiError(400, "region must be a string", "INVALID_BODY")
        for volume in self.all(project_id):
            if volume.name == name:
                if body.get("getOrCreate") is True:
                    return volume, False
                raise ApiError(409, f'A volume named "{name}" already exists', "VOLUME_EXISTS")
        volume_id = "vol_" + secrets.token_hex(6)
        path = self.root / volume_id
        path.mkdir(parents=True, mode=0o755)
        volume = Volume(
            id=volume_id,
            project_id=project_id,
            name=name,
            size_gb=size,
            region=region,
            created_at=int(time.time() * 1000),
            path=path,
        )
        self._volumes[volume_id] = volume
        return volume, True

    def resize(self, volume: Volume, body: dict[str, Any]) -> None:
        """``PATCH``: grow only, as a Firecracker volume."""
        size = _size(body.get("sizeGb"))
        if size < volume.size_gb:
            raise ApiError(400, "A volume cannot shrink", "volume_shrink_unsupported")
        volume.size_gb = size

    async def delete(self, volume: Volume) -> None:
        """``DELETE``: 409 while a sandbox has it."""
        if volume.attached_to is not None:
            raise ApiError(
                409, f"The volume is attached to {volume.attached_to}", "VOLUME_ATTACHED"
            )
        del self._volumes[volume.id]
        await asyncio.to_thread(remove_tree, volume.path)

    def attach(self, volume: Volume, sandbox_id: str) -> None:
        """Attach to a sandbox being created: 409 while another one has it."""
        if volume.attached_to is not None and volume.attached_to != sandbox_id:
            raise ApiError(409, f"The volume is attached to {volume.attached_to}", "VOLUME_IN_USE")
        volume.attached_to = sandbox_id
        os.chmod(volume.path, 0o755)

    def detach(self, sandbox_id: str) -> None:
        """The sandbox is gone: its volume is free."""
        for volume in self._volumes.values():
            if volume.attached_to == sandbox_id:
                volume.attached_to = None
