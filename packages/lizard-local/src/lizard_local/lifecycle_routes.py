"""The routes of sandboxes that outlive a run: fork, snapshots and volumes.

Wire shapes as lizard-sdk 1.0.23 sends and reads them (``lizard/sandbox/sandbox.py``,
``lizard/volume.py``):

- ``POST /api/sandboxes/{id}/fork {"count", "timeoutMs"}`` -> one entry per copy, ``{"sandbox":
  record, "processesCloned": false, "note": ...}`` or ``{"error": ...}``; 409 for a sandbox with
  a volume or not running. The copies boot fresh on a copy of the files: a namespace sandbox's
  processes cannot be cloned, and ``processesCloned`` and ``note`` say so.
- ``POST /api/sandboxes/{id}/snapshot {"name", "poolSize"}`` -> the snapshot record, ready.
- ``GET /api/sandbox-snapshots``, ``GET /api/projects/{pid}/snapshots``, ``GET|DELETE
  /api/sandbox-snapshots/{id}``; ``PATCH`` (scope, pool size) and ``POST .../pause|resume``
  answer the record unchanged (no warm pool here).
- ``POST /api/projects/{pid}/volumes {"name", "sizeGb", "region"?, "getOrCreate"?}``, ``GET``
  the list, ``GET|PATCH|DELETE .../volumes/{nameOrId}``.
- ``POST /api/sandboxes`` with ``snapshotId`` (403 ``SNAPSHOT_SCOPE`` from another project),
  ``volumeId`` or ``volumeName``: :meth:`LifecycleRoutes.create_sources`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from lizard_local.http import ApiError, Request, Response, json_response
from lizard_local.isolation import Template
from lizard_local.sandboxes import MAX_TIMEOUT_MS, Registry
from lizard_local.snapshots import snapshot_name
from lizard_local.volumes import Volume

__all__ = ["FORK_NOTE", "MAX_FORKS", "LifecycleRoutes"]

MAX_FORKS = 100
FORK_NOTE = (
    "lizard-local forks copy the files only: processes and memory cannot be cloned into a "
    "namespace sandbox, so each copy boots fresh."
)

Add = Callable[[str, str, Callable[[Request], Awaitable[Response]]], None]


def _int(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ApiError(400, f"{name} must be an integer in {low}..{high}", "INVALID_BODY")
    return value


class LifecycleRoutes:
    """Handlers for fork, snapshots and volumes, over the app's registry."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def add_routes(self, add: Add) -> None:
        """Register every route with the app's ``add(method, template, handler)``."""
        sb = "/api/sandboxes/{id}"
        snap = "/api/sandbox-snapshots"
        vol = "/api/projects/{pid}/volumes"
        add("POST", sb + "/fork", self.fork)
        add("POST", sb + "/snapshot", self.snapshot)
        add("GET", snap, self.list_snapshots)
        add("GET", "/api/projects/{pid}/snapshots", self.list_project_snapshots)
        add("GET", snap + "/{sid}", self.get_snapshot)
        add("PATCH", snap + "/{sid}", self.get_snapshot)
        add("POST", snap + "/{sid}/pause", self.get_snapshot)
        add("POST", snap + "/{sid}/resume", self.get_snapshot)
        add("DELETE", snap + "/{sid}", self.delete_snapshot)
        add("POST", vol, self.create_volume)
        add("GET", vol, self.list_volumes)
        add("GET", vol + "/{vid}", self.get_volume)
        add("PATCH", vol + "/{vid}", self.resize_volume)
        add("DELETE", vol + "/{vid}", self.delete_volume)

    # --- create's sources ---------------------------------------------------------------------

    def create_sources(
        self, body: dict[str, Any], project_id: str
    ) -> tuple[Template | None, str | None, Path | None, Volume | None]:
        """(template, size, files) of a ``snapshotId`` and the volume a create names."""
        template = size = files = volume = None
        snapshot_id = body.get("snapshotId")
        if snapshot_id is not None:
            if not isinstance(snapshot_id, str):
                raise ApiError(400, "snapshotId must be a string", "INVALID_BODY")
            snapshot = self.registry.snapshots.get(snapshot_id)
            if snapshot.project_id != project_id:
                raise ApiError(403, "A snapshot restores only in its own project", "SNAPSHOT_SCOPE")
            template, size, files = snapshot.template, snapshot.size, snapshot.path
        volume_id, volume_name = body.get("volumeId"), body.get("volumeName")
        if volume_id is not None or volume_name is not None:
            if size in ("nano", "mini", "big") or body.get("size") in ("nano", "mini", "big"):
                raise ApiError(400, "Nano, Mini and Big sandboxes take no volume", "INVALID_SIZE")
            if isinstance(volume_id, str):
                volume = self.registry.volumes.by_id_anywhere(volume_id)
            elif isinstance(volume_name, str):
                volume = self.registry.volumes.find(project_id, volume_name)
            else:
                raise ApiError(400, "volumeId/volumeName must be a string", "INVALID_BODY")
        return template, size, files, volume

    # --- fork and snapshots -------------------------------------------------------------------

    async def fork(self, req: Request) -> Response:
        """``POST /api/sandboxes/{id}/fork``."""
        sb = self.registry.get(req.params["id"])
        body = req.json(required=False)
        count = _int(body, "count", 1, 1, MAX_FORKS)
        timeout_ms = _int(body, "timeoutMs", 0, 0, MAX_TIMEOUT_MS)
        sb.require_running()
        if sb.volume is not None:
            raise ApiError(409, "A sandbox with a volume attached cannot be forked", "FORK_VOLUME")
        out: list[dict[str, Any]] = []
        made: list[str] = []
        try:
            for _ in range(count):
                try:
                    copy = await self.registry.fork(sb, timeout_ms)
                except ApiError as exc:
                    out.append({"error": exc.message})
                    continue
                made.append(copy.id)
                out.append({"sandbox": copy.record(), "processesCloned": False, "note": FORK_NOTE})
        except BaseException:
            # A host fault or a client gone mid-fork: the caller never learns these ids, so
            # none of the copies may outlive the request.
            for sandbox_id in made:
                await self.registry.kill(sandbox_id)
            raise
        return json_response(out, 201)

    async def snapshot(self, req: Request) -> Response:
        """``POST /api/sandboxes/{id}/snapshot``."""
        sb = self.registry.get(req.params["id"])
        body = req.json(required=False)
        name = snapshot_name(body, sb.id)
        pool_size = _int(body, "poolSize", 5, 0, 100)
        snapshot = await self.registry.snapshot(sb, name, pool_size)
        return json_response(snapshot.record(), 201)

    async def list_snapshots(self, req: Request) -> Response:
        """``GET /api/sandbox-snapshots``: every snapshot (one user here)."""
        return json_response([s.record() for s in self.registry.snapshots.all()])

    async def list_project_snapshots(self, req: Request) -> Response:
        """``GET /api/projects/{pid}/snapshots``."""
        pid = req.params["pid"]
        snapshots = self.registry.snapshots.all()
        return json_response([s.record() for s in snapshots if s.project_id == pid])

    async def get_snapshot(self, req: Request) -> Response:
        """``GET`` a snapshot; also ``PATCH`` and ``pause``/``resume``, which change nothing."""
        return json_response(self.registry.snapshots.get(req.params["sid"]).record())

    async def delete_snapshot(self, req: Request) -> Response:
        """``DELETE /api/sandbox-snapshots/{id}``: 404 when unknown."""
        await self.registry.snapshots.delete(req.params["sid"])
        return json_response({"ok": True})

    # --- volumes ------------------------------------------------------------------------------

    async def create_volume(self, req: Request) -> Response:
        """``POST /api/projects/{pid}/volumes``."""
        volume, created = self.registry.volumes.create(req.params["pid"], req.json())
        return json_response(volume.record(), 201 if created else 200)

    async def list_volumes(self, req: Request) -> Response:
        """``GET /api/projects/{pid}/volumes``."""
        return json_response([v.record() for v in self.registry.volumes.all(req.params["pid"])])

    async def get_volume(self, req: Request) -> Response:
        """``GET .../volumes/{nameOrId}``."""
        return json_response(self._volume(req).record())

    async def resize_volume(self, req: Request) -> Response:
        """``PATCH .../volumes/{nameOrId} {"sizeGb"}``."""
        volume = self._volume(req)
        self.registry.volumes.resize(volume, req.json())
        return json_response(volume.record())

    async def delete_volume(self, req: Request) -> Response:
        """``DELETE .../volumes/{nameOrId}``: 409 while attached."""
        await self.registry.volumes.delete(self._volume(req))
        return json_response({"ok": True})

    def _volume(self, req: Request) -> Volume:
        return self.registry.volumes.find(req.params["pid"], req.params["vid"])
