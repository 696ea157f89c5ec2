"""Sandbox records, lifetimes and the registry.

Contract:

- A sandbox exists from a successful create until it is killed or expires. From that moment every
  call about it answers 404, it is gone from the lists, its in-flight commands end with exit code
  137, and :meth:`Registry.kill` returns only after every process of the sandbox has exited.
- ``timeoutMs`` at create (0 = no deadline) and ``POST .../timeout`` (from now) set the deadline.
  Expiry is a timer per sandbox (no polling). Commands do not extend it; a pause freezes it.
- Paused sandboxes have every process stopped (SIGSTOP) and refuse commands and file operations
  with 409 until resumed.
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
from lizard_local.host_cleanup import remove_tree
from lizard_local.http import ApiError
from lizard_local.isolation import PRIVATE_DIRS, USERS, Isolation, Template, UserAccount

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
    timeout_ms: int = 0
    end_at: datetime | None = None
    status: str = "running"
    paused_remaining_s: float | None = None
    timer: asyncio.TimerHandle | None = None
    commands: set[RunningCommand] = field(default_factory=set)
    processes: dict[int, ProcessEntry] = field(default_factory=dict)
    exposed: dict[int, str] = field(default_factory=dict)

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
        if self.status == "paused":
            raise ApiError(409, "Sandbox is paused", "SANDBOX_PAUSED")


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
    ) -> Sandbox:
        """Start a sandbox (its agent and private directories)."""
        sandbox_id = "sbx_" + secrets.token_hex(6)
        base = self.isolation.state_dir / "sandboxes" / sandbox_id
        dirs = self._make_dirs(base)
        root = self.isolation.root
        cfg = {
            "sandbox_id": sandbox_id,
            "namespace": self.isolation.namespace,
            "rootfs": str(base / "rootfs"),
            "scratch": str(base / "scratch"),
            "system": list(root.system) if root else [],
            "binds": [list(b) for b in root.binds] if root else [],
            "etc": root.etc if root else None,
            "hide": [str(self.isolation.state_dir / "sandboxes")],
            "hostname": sandbox_id.replace("_", "-"),
            "net": not internet_access,
        }
        self._starting += 1
        try:
            link = await AgentLink.start(
                sandbox_id,
                cfg,
                namespace=self.isolation.namespace,
                isolate_network=not internet_access,
                log_path=str(base / "agent.log"),
                instance=self.instance,
            )
        except AgentError as exc:
            await asyncio.to_thread(remove_tree, base)
            raise ApiError(500, str(exc), "SANDBOX_START_FAILED") from exc
        finally:
            self._starting -= 1
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
        )
        self._sandboxes[sandbox_id] = sb
        self.set_timeout(sb, timeout_ms)
        link.closed.add_done_callback(lambda _f: self._agent_died(sandbox_id, link))
        return sb

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
        """Stop every process and freeze the lifetime."""
        if sb.status == "paused":
            return
        if sb.timer is not None:
            sb.timer.cancel()
            sb.timer = None
        if sb.end_at is not None:
            remaining = (sb.end_at - datetime.now(UTC)).total_seconds()
            sb.paused_remaining_s = max(remaining, 0.0)
        await sb.link.pause()
        sb.status = "paused"

    async def resume(self, sb: Sandbox) -> None:
        """Continue every process; the lifetime runs again from where it stopped."""
        if sb.status != "paused":
            return
        await sb.link.resume()
        sb.status = "running"
        if sb.paused_remaining_s is not None:
            remaining_ms = max(int(sb.paused_remaining_s * 1000), 1)
            sb.paused_remaining_s = None
            keep = sb.timeout_ms
            self.set_timeout(sb, remaining_ms)
            sb.timeout_ms = keep

    # --- kill ---------------------------------------------------------------------------------

    async def kill(self, sandbox_id: str) -> bool:
        """Kill the sandbox and every process of it; False if it was already gone."""
        sb = self._sandboxes.pop(sandbox_id, None)
        if sb is None:
            return False
        if sb.timer is not None:
            sb.timer.cancel()
        for command in list(sb.commands):
            command.sandbox_gone()
        sb.commands.clear()
        await sb.link.stop()
        base = self.isolation.state_dir / "sandboxes" / sandbox_id
        task = asyncio.get_running_loop().create_task(self._remove_dirs(base))
        self._cleanup.add(task)
        task.add_done_callback(self._cleanup.discard)
        return True

    @staticmethod
    async def _remove_dirs(base: Path) -> None:
        await asyncio.to_thread(remove_tree, base)

    def _agent_died(self, sandbox_id: str, link: AgentLink) -> None:
        """An agent that dies on its own takes its sandbox with it."""
        sb = self._sandboxes.get(sandbox_id)
        if sb is not None and sb.link is link:
            log.warning("sandbox %s lost its agent; removing it", sandbox_id)
            self._expire_soon(sandbox_id)

    async def shutdown(self) -> None:
        """Kill every sandbox and wait for the clean-up to finish."""
        await asyncio.gather(*(self.kill(i) for i in list(self._sandboxes)))
        while self._cleanup:
            with contextlib.suppress(Exception):
                await asyncio.gather(*list(self._cleanup))
