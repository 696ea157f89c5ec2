"""Sandbox records, lifetimes and the registry.

Contract:

- A sandbox exists from a successful create until it is killed or expires. From that moment every
  call about it answers 404, it is gone from the lists, its in-flight commands end with exit code
  137, and :meth:`Registry.kill` returns only after every process of the sandbox has exited.
- ``timeoutMs`` at create (0 = no deadline) and ``POST .../timeout`` (from now) set the deadline.
  Expiry is a timer per sandbox (no polling). Commands do not extend it; a pause freezes it.
- Pause keeps files only, as lizard-sdk 1.0.23 describes the platform's: every process ends
  (in-flight commands with exit code 137), the sandbox's files stay on disk, commands and file
  operations answer 409 ``SANDBOX_PAUSED``, and the lifetime is frozen. Resume boots the
  sandbox fresh (a new agent, a new PID namespace) on the same files; its lifetime runs on from
  where it stopped. ``/etc``'s changes are the one thing a reboot loses here (see
  :mod:`lizard_local.file_copies`).
- Fork and snapshot copy the files (:mod:`lizard_local.file_copies`); a sandbox started from a
  copy boots fresh: processes cannot be cloned into a namespace sandbox. A volume
  (:mod:`lizard_local.volumes`) is bound at ``/workspace``; a sandbox with one cannot be forked.
- Exposed ports are loopback listeners that check the token (:mod:`lizard_local.port_proxy`);
  they go with the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from lizard_local.agent_link import AgentError, AgentLink
from lizard_local.file_copies import copy_files
from lizard_local.host_cleanup import remove_tree
from lizard_local.http import ApiError
from lizard_local.isolation import PRIVATE_DIRS, USERS, Isolation, Template, UserAccount
from lizard_local.port_proxy import PortProxy
from lizard_local.snapshots import Snapshot, SnapshotStore
from lizard_local.volumes import Volume, VolumeStore

__all__ = ["SIZES", "Registry", "Sandbox"]

log = logging.getLogger("lizard_local")

#: size -> (cpus, memoryMb, pricePerHour), as lizard-sdk's size table.
SIZES: dict[str, tuple[int, int, float]] = {
    "nano": (1, 1024, 0.00405),
    "mini": (1, 2048, 0.0081),
    "small": (2, 4096, 0.0162),
    "medium": (4, 8192, 0.0324),
    "large": (8, 16384, 0.0648),
    "big": (16, 32768, 0.1296),
}
MAX_TIMEOUT_MS = 2_147_483_647


class RunningCommand(Protocol):
    """What the registry needs from an in-flight command."""

    pid: int | None

    def sandbox_gone(self) -> None:
        """The sandbox was killed: finish now with exit code 137."""


def iso(ts: datetime) -> str:
    """ISO-8601 UTC with milliseconds and ``Z``."""
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


@dataclass
class ProcessEntry:
    """A command started through exec, for ``GET .../processes``."""

    pid: int
    cmd: list[str]
    started_at_ms: int
    cwd: str


@dataclass
class Sandbox:
    """One live sandbox."""

    id: str
    template: Template
    project_id: str
    region: str
    size: str
    metadata: dict[str, str]
    envs: dict[str, str]
    internet_access: bool
    started_at: datetime
    dirs: dict[str, str]
    link: AgentLink
    namespace: bool
    instance: str
    base: Path
    #: The agent's configuration, for each boot (create, resume).
    boot_config: dict[str, Any]
    volume: Volume | None = None
    timeout_ms: int = 0
    end_at: datetime | None = None
    status: str = "running"
    paused_remaining_s: float | None = None
    timer: asyncio.TimerHandle | None = None
    commands: set[RunningCommand] = field(default_factory=set)
    processes: dict[int, ProcessEntry] = field(default_factory=dict)
    exposed: dict[int, str] = field(default_factory=dict)
    proxies: dict[int, tuple[PortProxy, int]] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The JSON sandbox record (``GET /api/sandboxes/{id}``)."""
        cpus, memory_mb, price = SIZES[self.size]
        end = iso(self.end_at) if self.end_at is not None else None
        return {
            "sandboxId": self.id,
            "id": self.id,
            "status": self.status,
            "template": self.template.name,
            "projectId": self.project_id,
            "region": self.region,
            "size": self.size,
            "cpus": cpus,
            "memoryMb": memory_mb,
            "pricePerHour": price,
            "startedAt": iso(self.started_at),
            "endAt": end,
            "expiresAt": end,
            "timeoutMs": self.timeout_ms,
            "metadata": dict(self.metadata),
            "internetAccess": self.internet_access,
            "allowedHosts": None,
            "runtime": "local",
            "isolation": "namespace" if self.namespace else "host",
            "pauseError": None,
            "volumeId": self.volume.id if self.volume is not None else None,
        }

    def user(self, name: str | None) -> UserAccount:
        """The account a command or file operation runs as (400 for an unknown name)."""
        account = USERS.get(name or "root")
        if account is None:
            raise ApiError(400, f'Unknown user "{name}"', "UNKNOWN_USER")
        return account

    def home_of(self, account: UserAccount) -> str:
        """The account's HOME as commands see it."""
        if self.namespace:
            return account.home
        return self.dirs[account.home]

    def open_root(self) -> int:
        """An ``O_PATH`` descriptor of the sandbox's ``/`` (the host's in host mode); close it.

        In namespace mode it is the agent's root, checked against the identity recorded at
        start: 404 when the agent is gone, for its pid may by now be another process's, whose
        root is the host's.
        """
        flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
        if not self.namespace:
            return os.open("/", flags)
        try:
            fd = os.open(f"/proc/{self.link.agent_pid}/root", flags)
        except OSError as exc:
            raise ApiError(404, "Sandbox not found", "SANDBOX_NOT_FOUND") from exc
        st = os.fstat(fd)
        if self.link.root_id is None or (st.st_dev, st.st_ino) != self.link.root_id:
            os.close(fd)
            raise ApiError(404, "Sandbox not found", "SANDBOX_NOT_FOUND")
        return fd

    def own_dirs(self) -> list[str]:
        """Real host paths of the sandbox's own directories (behind /tmp, /root...)."""
        return [os.path.realpath(d) for d in self.dirs.values()]

    def require_running(self) -> None:
        """409 unless the sandbox is running."""
        if self.status in ("paused", "resuming"):
            raise ApiError(409, f"Sandbox is {self.status}", "SANDBOX_PAUSED")


class Registry:
    """All live sandboxes of this server."""

    def __init__(self, isolation: Isolation, instance: str, default_project: str) -> None:
        self.isolation = isolation
        self.instance = instance
        self.default_project = default_project
        self._sandboxes: dict[str, Sandbox] = {}
        self._starting = 0
        self._cleanup: set[asyncio.Task[None]] = set()
        self.on_expired: Callable[[str], None] | None = None
        self.volumes = VolumeStore(isolation.state_dir / "volumes")
        self.snapshots = SnapshotStore(isolation.state_dir / "snapshots")

    def ids(self) -> list[str]:
        """Ids of live sandboxes."""
        return list(self._sandboxes)

    def all(self) -> list[Sandbox]:
        """Live sandboxes, oldest first."""
        return list(self._sandboxes.values())

    def get(self, sandbox_id: str) -> Sandbox:
        """The sandbox, or 404."""
        sb = self._sandboxes.get(sandbox_id)
        if sb is None:
            raise ApiError(404, "Sandbox not found", "SANDBOX_NOT_FOUND")
        return sb

    # --- create -------------------------------------------------------------------------------

    async def create(
        self,
        *,
        template: Template,
        project_id: str,
        region: str,
        size: str,
        metadata: dict[str, str],
        envs: dict[str, str],
        internet_access: bool,
        timeout_ms: int,
        files_from: Path | None = None,
        volume: Volume | None = None,
    ) -> Sandbox:
        """Start a sandbox (its agent and private directories).

        ``files_from`` is a state directory (a sandbox's, a snapshot's) whose files it starts
        with; ``volume`` is mounted at ``/workspace`` (409 while another sandbox has it).
        """
        sandbox_id = "sbx_" + secrets.token_hex(6)
        if volume is not None:
            if not self.isolation.namespace:
                raise ApiError(501, "Volumes need lizard-local's namespace mode", "NOT_IMPLEMENTED")
            self.volumes.attach(volume, sandbox_id)
        try:
            return await self._create(
                sandbox_id,
                template=template,
                project_id=project_id,
                region=region,
                size=size,
                metadata=metadata,
                envs=envs,
                internet_access=internet_access,
                timeout_ms=timeout_ms,
                files_from=files_from,
                volume=volume,
            )
        except BaseException:
            self.volumes.detach(sandbox_id)
            raise

    async def _create(
        self,
        sandbox_id: str,
        *,
        template: Template,
        project_id: str,
        region: str,
        size: str,
        metadata: dict[str, str],
        envs: dict[str, str],
        internet_access: bool,
        timeout_ms: int,
        files_from: Path | None,
        volume: Volume | None,
    ) -> Sandbox:
        base = self.isolation.state_dir / "sandboxes" / sandbox_id
        dirs = self._make_dirs(base)
        if files_from is not None:
            await asyncio.to_thread(copy_files, files_from, base, self.isolation.namespace)
        root = self.isolation.root
        state = self.isolation.state_dir
        cfg = {
            "sandbox_id": sandbox_id,
            "namespace": self.isolation.namespace,
            "rootfs": str(base / "rootfs"),
            "scratch": str(base / "scratch"),
            "system": list(root.system) if root else [],
            "binds": [list(b) for b in root.binds] if root else [],
            "etc": root.etc if root else None,
            "hide": [str(state / "sandboxes"), str(state / "volumes"), str(state / "snapshots")],
            "volume": str(volume.path) if volume is not None else None,
            "hostname": sandbox_id.replace("_", "-"),
            "net": not internet_access,
        }
        try:
            link = await self._boot(sandbox_id, cfg, base, internet_access)
        except ApiError:
            await asyncio.to_thread(remove_tree, base)
            raise
        now = datetime.now(UTC)
        sb = Sandbox(
            id=sandbox_id,
            template=template,
            project_id=project_id,
            region=region,
            size=size,
            metadata=metadata,
            envs=envs,
            internet_access=internet_access,
            started_at=now,
            dirs=dirs,
            link=link,
            namespace=self.isolation.namespace,
            instance=self.instance,
            base=base,
            boot_config=cfg,
            volume=volume,
        )
        self._sandboxes[sandbox_id] = sb
        self.set_timeout(sb, timeout_ms)
        self._watch(sb)
        return sb

    async def _boot(
        self, sandbox_id: str, cfg: dict[str, Any], base: Path, internet_access: bool
    ) -> AgentLink:
        """Start the sandbox's agent on its files (a create or a resume)."""
        self._starting += 1
        try:
            return await AgentLink.start(
                sandbox_id,
                cfg,
                namespace=self.isolation.namespace,
                isolate_network=not internet_access,
                log_path=str(base / "agent.log"),
                instance=self.instance,
            )
        except AgentError as exc:
            raise ApiError(500, str(exc), "SANDBOX_START_FAILED") from exc
        finally:
            self._starting -= 1

    def _watch(self, sb: Sandbox) -> None:
        link = sb.link
        link.closed.add_done_callback(lambda _f: self._agent_died(sb.id, link))

    def _make_dirs(self, base: Path) -> dict[str, str]:
        """Host directories behind the private paths, created with sensible owners and modes.

        In namespace mode they are the directories of the sandbox's root (``rootfs``) itself;
        in host mode, per-sandbox directories beside it.
        """
        names = {
            "/tmp": "tmp",
            "/root": "root",
            "/home/user": "home-user",
            "/workspace": "workspace",
        }
        dirs: dict[str, str] = {}
        rootfs = base / "rootfs"
        rootfs.mkdir(parents=True)
        os.chmod(rootfs, 0o755)
        if self.isolation.namespace:
            # Only root on the host may reach into it: what a sandbox's root leaves in its own
            # directories (a setuid program, say) must not be usable by the host's other users.
            os.chmod(base, 0o700)
        for inner in PRIVATE_DIRS:
            host = rootfs / inner[1:] if self.isolation.namespace else base / names[inner]
            host.parent.mkdir(mode=0o755, exist_ok=True)
            host.mkdir()
            dirs[inner] = str(host)
        os.chmod(dirs["/tmp"], 0o1777)
        os.chmod(dirs["/root"], 0o700)
        if self.isolation.can_switch_user:
            os.chown(dirs["/home/user"], USERS["user"].uid, USERS["user"].gid)
        if not self.isolation.namespace:
            # The SDK's code runner keeps its state here in host mode (see execution.py).
            (base / "tmp" / ".lizard-code").mkdir()
        return dirs

    # --- lifetime -----------------------------------------------------------------------------

    def set_timeout(self, sb: Sandbox, timeout_ms: int) -> None:
        """Deadline = now + ``timeout_ms`` (0 = none); frozen while paused."""
        if sb.timer is not None:
            sb.timer.cancel()
            sb.timer = None
        sb.timeout_ms = timeout_ms
        if timeout_ms <= 0:
            sb.end_at = None
            sb.paused_remaining_s = None
            return
        sb.end_at = datetime.now(UTC) + timedelta(milliseconds=timeout_ms)
        if sb.status == "paused":
            sb.paused_remaining_s = timeout_ms / 1000
            return
        loop = asyncio.get_running_loop()
        sb.timer = loop.call_later(timeout_ms / 1000, self._expire_soon, sb.id)

    def _expire_soon(self, sandbox_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._expire_quietly(sandbox_id))
        self._cleanup.add(task)
        task.add_done_callback(self._cleanup.discard)

    async def _expire_quietly(self, sandbox_id: str) -> None:
        try:
            await self.expire(sandbox_id)
        except Exception:
            log.exception("expiring sandbox %s failed", sandbox_id)

    async def expire(self, sandbox_id: str) -> bool:
        """Expire a sandbox now (the reaper's action; also a test control)."""
        killed = await self.kill(sandbox_id)
        if killed:
            log.info("sandbox %s expired", sandbox_id)
            if self.on_expired is not None:
                self.on_expired(sandbox_id)
        return killed

    async def pause(self, sb: Sandbox) -> None:
        """End every process, keep the files, freeze the lifetime."""
        if sb.status == "paused":
            return
        if sb.status != "running":
            raise ApiError(409, f"Sandbox is {sb.status}", "SANDBOX_BUSY")
        if sb.timer is not None:
            sb.timer.cancel()
            sb.timer = None
        if sb.end_at is not None:
            remaining = (sb.end_at - datetime.now(UTC)).total_seconds()
            sb.paused_remaining_s = max(remaining, 0.0)
        sb.status = "paused"  # before the agent goes, so that its end is not taken for a death
        self._end_commands(sb)
        await sb.link.stop()

    async def resume(self, sb: Sandbox) -> None:
        """Boot fresh on the kept files; the lifetime runs again from where it stopped."""
        if sb.status != "paused":
            return
        sb.status = "resuming"
        try:
            sb.link = await self._boot(sb.id, sb.boot_config, sb.base, sb.internet_access)
        except BaseException:
            sb.status = "paused"
            raise
        if self._sandboxes.get(sb.id) is not sb:  # killed while it booted
            await sb.link.stop()
            return
        sb.status = "running"
        self._watch(sb)
        if sb.paused_remaining_s is not None:
            remaining_ms = max(int(sb.paused_remaining_s * 1000), 1)
            sb.paused_remaining_s = None
            keep = sb.timeout_ms
            self.set_timeout(sb, remaining_ms)
            sb.timeout_ms = keep

    # --- copies -------------------------------------------------------------------------------

    async def fork(self, sb: Sandbox, timeout_ms: int) -> Sandbox:
        """A new sandbox on a copy of ``sb``'s files, booted fresh (processes are not cloned)."""
        sb.require_running()
        if sb.volume is not None:
            raise ApiError(409, "A sandbox with a volume attached cannot be forked", "FORK_VOLUME")
        return await self.create(
            template=sb.template,
            project_id=sb.project_id,
            region=sb.region,
            size=sb.size,
            metadata=dict(sb.metadata),
            envs=dict(sb.envs),
            internet_access=sb.internet_access,
            timeout_ms=timeout_ms or sb.timeout_ms,
            files_from=sb.base,
        )

    async def snapshot(self, sb: Sandbox, name: str, pool_size: int) -> Snapshot:
        """Copy ``sb``'s files into a new snapshot; the sandbox keeps running."""
        if sb.status not in ("running", "paused"):
            raise ApiError(409, f"Sandbox is {sb.status}", "SANDBOX_BUSY")
        snapshot_id, path = self.snapshots.new_path()
        try:
            await asyncio.to_thread(copy_files, sb.base, path, self.isolation.namespace)
        except BaseException:
            await asyncio.to_thread(remove_tree, path)
            raise
        cpus, memory_mb, _ = SIZES[sb.size]
        snapshot = Snapshot(
            id=snapshot_id,
            name=name,
            project_id=sb.project_id,
            region=sb.region,
            source_sandbox_id=sb.id,
            template=sb.template,
            size=sb.size,
            pool_size=pool_size,
            cpus=cpus,
            memory_mb=memory_mb,
            created_at=int(datetime.now(UTC).timestamp() * 1000),
            source_volume=sb.volume is not None,
            path=path,
        )
        self.snapshots.add(snapshot)
        return snapshot

    # --- exposed ports ------------------------------------------------------------------------

    async def expose(self, sb: Sandbox, port: int) -> tuple[int, str]:
        """(loopback listener port, token) for ``port``; the same pair while it stays exposed."""
        if port in sb.proxies:
            proxy, listener = sb.proxies[port]
            return listener, proxy.token
        proxy = PortProxy(port, secrets.token_urlsafe(16))
        listener = await proxy.start()
        sb.proxies[port] = (proxy, listener)
        sb.exposed[port] = proxy.token
        return listener, proxy.token

    async def unexpose(self, sb: Sandbox, port: int) -> None:
        """Stop publishing ``port``."""
        sb.exposed.pop(port, None)
        entry = sb.proxies.pop(port, None)
        if entry is not None:
            await entry[0].close()

    # --- kill ---------------------------------------------------------------------------------

    async def kill(self, sandbox_id: str) -> bool:
        """Kill the sandbox and every process of it; False if it was already gone."""
        sb = self._sandboxes.pop(sandbox_id, None)
        if sb is None:
            return False
        if sb.timer is not None:
            sb.timer.cancel()
        self._end_commands(sb)
        for proxy, _ in sb.proxies.values():
            await proxy.close()
        sb.proxies.clear()
        # A paused sandbox's agent is already stopped and reaped: stopping it again would
        # signal its old pids, which by now may be other processes'.
        stopped = sb.status in ("paused", "resuming")  # resume stops what it boots
        sb.status = "deleted"
        if not stopped:
            await sb.link.stop()
        self.volumes.detach(sandbox_id)
        base = self.isolation.state_dir / "sandboxes" / sandbox_id
        task = asyncio.get_running_loop().create_task(self._remove_dirs(base))
        self._cleanup.add(task)
        task.add_done_callback(self._cleanup.discard)
        return True

    @staticmethod
    def _end_commands(sb: Sandbox) -> None:
        for command in list(sb.commands):
            command.sandbox_gone()
        sb.commands.clear()
        sb.processes.clear()

    @staticmethod
    async def _remove_dirs(base: Path) -> None:
        await asyncio.to_thread(remove_tree, base)

    def _agent_died(self, sandbox_id: str, link: AgentLink) -> None:
        """An agent that dies on its own takes its sandbox with it."""
        sb = self._sandboxes.get(sandbox_id)
        if sb is not None and sb.link is link and sb.status == "running":
            log.warning("sandbox %s lost its agent; removing it", sandbox_id)
            self._expire_soon(sandbox_id)

    async def shutdown(self) -> None:
        """Kill every sandbox and wait for the clean-up to finish."""
        await asyncio.gather(*(self.kill(i) for i in list(self._sandboxes)))
        await self.snapshots.remove_all()
        while self._cleanup:
            with contextlib.suppress(Exception):
                await asyncio.gather(*list(self._cleanup))
