"""Volumes: disks that outlive sandboxes, mounted at ``/workspace``, addressed by name.

As lizard-sdk 1.0.23 describes them (``lizard/volume.py``): a volume's name is its key inside a
project (a slug: lowercase letters, digits and dashes, up to 64 characters), it attaches to
one sandbox at a time, and a sandbox with one cannot be forked. A
:class:`~lizard_core.session.Session` made with ``volume="name"`` creates the volume if absent
(get-or-create) and mounts it. Contract (``tests/test_volumes.py``, against lizard-local):

- Names and sizes are checked before any request (:func:`check_volume_name`,
  :func:`check_volume_size`: :class:`TypeError` / :class:`ValueError`).
- :func:`ensure_volume` is one get-or-create ``POST``; an existing volume keeps its size.
  :func:`find_volumes` is one ``GET``; :func:`get_volume` one ``GET`` (``None`` when absent);
  :func:`delete_volume` one ``DELETE`` (``False`` when absent; a volume still attached is a
  :class:`~lizard_core.errors.SandboxStateError`); :func:`resize_volume` one ``PATCH`` (grow
  only on Firecracker). Each resolves the configuration's project first (cached per process).
- Records from the platform are checked: an entry without a usable id or name is skipped.
- Errors are :class:`~lizard_core.errors.LizardIntegrationError` kinds; the idempotent calls
  are retried on transient failures. Every function has an ``a``-prefixed coroutine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import lizard
from lizard import Volume

from lizard_core._bridge import run_blocking
from lizard_core._platform_calls import NOT_FOUND, project_id, retried
from lizard_core.config import SandboxConfig
from lizard_core.errors import malformed_answer

__all__ = [
    "DEFAULT_VOLUME_SIZE_GB",
    "VolumeRecord",
    "adelete_volume",
    "aensure_volume",
    "afind_volumes",
    "aget_volume",
    "aresize_volume",
    "check_volume_name",
    "check_volume_size",
    "delete_volume",
    "ensure_volume",
    "find_volumes",
    "get_volume",
    "resize_volume",
]

DEFAULT_VOLUME_SIZE_GB: Final = 5
"""The size of a volume made by get-or-create, as the platform's default."""
_NAME: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
_REF: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")  # a name or an id: one URL path segment


def _check_ref(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"volume must be a str, not {type(name).__name__}")
    if not _REF.fullmatch(name):
        raise ValueError(f"volume {name!r} is not a volume name or id")
    return name


@dataclass(frozen=True)
class VolumeRecord:
    """A volume as the platform describes it."""

    volume_id: str
    """The generated id."""
    name: str
    """The name: the volume's key in its project."""
    size_gb: int | None = None
    """Its size in GB, if the platform said."""
    attached_to: str | None = None
    """The sandbox it is attached to, or None when free."""
    region: str | None = None
    """The region its node lives in (a sandbox mounting it runs there)."""
    status: str | None = None
    """Its status, if the platform said."""


def check_volume_name(name: object) -> str:
    """A volume name (a slug of 1 to 64 characters), or TypeError/ValueError."""
    if not isinstance(name, str):
        raise TypeError(f"volume must be a str, not {type(name).__name__}")
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"volume {name!r} is not a volume name: lowercase letters, digits and dashes, "
            "starting and ending with a letter or digit, up to 64 characters"
        )
    return name


def check_volume_size(size_gb: object) -> int:
    """A whole number of GB, at least 1, or TypeError/ValueError."""
    if isinstance(size_gb, bool) or not isinstance(size_gb, int):
        raise TypeError(f"volume_size_gb must be an int, not {type(size_gb).__name__}")
    if size_gb < 1:
        raise ValueError(f"volume_size_gb must be at least 1, not {size_gb}")
    return size_gb


def _record(info: Any) -> VolumeRecord | None:
    volume_id, name = getattr(info, "id", None), getattr(info, "name", None)
    if not isinstance(volume_id, str) or not volume_id or not isinstance(name, str):
        return None
    size, attached = getattr(info, "size_gb", None), getattr(info, "attached_to", None)
    region, status = getattr(info, "region", None), getattr(info, "status", None)
    return VolumeRecord(
        volume_id,
        name,
        size if isinstance(size, int) and not isinstance(size, bool) else None,
        attached if isinstance(attached, str) else None,
        region if isinstance(region, str) else None,
        status if isinstance(status, str) else None,
    )


def ensure_volume(
    config: SandboxConfig, name: str, *, size_gb: int = DEFAULT_VOLUME_SIZE_GB
) -> VolumeRecord:
    """The project's volume ``name``, made with ``size_gb`` if absent (blocking)."""
    check_volume_name(name)
    check_volume_size(size_gb)
    pid = project_id(config)
    volume = retried(Volume.get_or_create, (pid, name), {"size_gb": size_gb, **config.api_kwargs()})
    return VolumeRecord(str(volume.volume_id), str(volume.name or name))


def find_volumes(config: SandboxConfig) -> list[VolumeRecord]:
    """Every volume of the configuration's project (blocking)."""
    infos = retried(Volume.list, (project_id(config),), config.api_kwargs())
    return [r for r in map(_record, infos or ()) if r is not None]


def get_volume(config: SandboxConfig, name: str) -> VolumeRecord | None:
    """The volume by name (or id), or None when the project has none such (blocking)."""
    _check_ref(name)
    pid = project_id(config)
    try:
        volume = retried(Volume.get, (pid, name), config.api_kwargs(), passthrough=NOT_FOUND)
        info = retried(volume.get_info, (pid,), passthrough=NOT_FOUND)
    except lizard.NotFoundError:
        return None
    return _record(info)


def delete_volume(config: SandboxConfig, name: str) -> bool:
    """Delete the volume and its data (blocking); False if there was none."""
    _check_ref(name)
    pid = project_id(config)
    try:
        retried(Volume.remove, (pid, name), config.api_kwargs(), passthrough=NOT_FOUND)
    except lizard.NotFoundError:
        return False
    return True


def resize_volume(config: SandboxConfig, name: str, size_gb: int) -> VolumeRecord:
    """Grow the volume to ``size_gb`` (blocking); the platform refuses a shrink."""
    _check_ref(name)
    check_volume_size(size_gb)
    info = retried(Volume.resize, (project_id(config), name, size_gb), config.api_kwargs())
    record = _record(info)
    if record is None:
        raise malformed_answer("volume resize", TypeError("no volume record"))
    return record


async def aensure_volume(
    config: SandboxConfig, name: str, *, size_gb: int = DEFAULT_VOLUME_SIZE_GB
) -> VolumeRecord:
    """Async :func:`ensure_volume`."""
    return await run_blocking(lambda: ensure_volume(config, name, size_gb=size_gb))


async def afind_volumes(config: SandboxConfig) -> list[VolumeRecord]:
    """Async :func:`find_volumes`."""
    return await run_blocking(find_volumes, config)


async def aget_volume(config: SandboxConfig, name: str) -> VolumeRecord | None:
    """Async :func:`get_volume`."""
    return await run_blocking(get_volume, config, name)


async def adelete_volume(config: SandboxConfig, name: str) -> bool:
    """Async :func:`delete_volume`."""
    return await run_blocking(delete_volume, config, name)


async def aresize_volume(config: SandboxConfig, name: str, size_gb: int) -> VolumeRecord:
    """Async :func:`resize_volume`."""
    return await run_blocking(resize_volume, config, name, size_gb)
