"""The server's end of the per-sandbox agent protocol (see :mod:`lizard_local.sandbox_agent`).

One :class:`AgentLink` per sandbox: it starts the agent process (inside ``unshare`` in namespace
mode), sends JSON requests over a ``SOCK_SEQPACKET`` socket without ever blocking the event loop,
and resolves replies and exit reports to futures. ``exec`` returns the command's pid, the read
ends of its stdout and stderr pipes and a future for its exit code, registered before any exit
report can be dispatched. :meth:`AgentLink.stop` returns only when every process of the sandbox
is gone: in namespace mode that is when the namespace's PID 1 has been reaped.

In namespace mode the server reaches the sandbox's files through ``/proc/<agent>/root``. Start-up
fails unless that agent is found and its root is not the host's, and :attr:`AgentLink.root_id`
records the root's identity so that a recycled pid can never lead file operations to another
process's root (see :meth:`lizard_local.sandboxes.Sandbox.open_root`).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lizard_local import procscan
from lizard_local.sandbox_agent import passed_fds, send_datagram

__all__ = ["AgentError", "AgentLink", "ExecStarted"]

AGENT_SCRIPT = str(Path(__file__).with_name("sandbox_agent.py"))
_MAX_INLINE = 60_000  # bigger requests travel in a memfd (a datagram must fit the socket buffer)
_RECV_FDS_SPACE = socket.CMSG_SPACE(8 * array.array("i").itemsize)


class AgentError(Exception):
    """The agent refused a request; ``kind`` is its machine-readable reason."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass
class ExecStarted:
    """A started command: its pid (as the sandbox sees it), pipe read ends and exit future."""

    pid: int
    stdout_fd: int
    stderr_fd: int
    exit_code: asyncio.Future[int]


async def _wait_pid_exit(pid: int, limit_s: float) -> bool:
    """Wait (without polling) until ``pid`` has exited; False on timeout or if unsupported."""
    loop = asyncio.get_running_loop()
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return True  # already gone
    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(pidfd, lambda: None if done.done() else done.set_result(None))
    try:
        await asyncio.wait_for(done, limit_s)
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


def _spawn(argv: list[str], env: dict[str, str], log_path: str, fd: int) -> subprocess.Popen[bytes]:
    """Start the agent process (fast: vfork and exec; the agent's output goes to its log)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=[fd],
            start_new_session=True,  # a Ctrl-C meant for the server must not hit sandboxes
        )


def _find_namespace_root(unshare_pid: int) -> tuple[int, tuple[int, int]]:
    """The agent's host pid (the one child of ``unshare``) and the identity of its root.

    Fails rather than fall back to ``unshare``'s own pid: that process lives in the host's mount
    namespace, and file operations through its root would act on the host's files.
    """
    children = procscan.children_of(unshare_pid)
    if len(children) != 1:
        raise OSError(f"expected one agent under unshare {unshare_pid}, found {children}")
    st = os.stat(f"/proc/{children[0]}/root")
    host = os.stat("/")
    if (st.st_dev, st.st_ino) == (host.st_dev, host.st_ino):
        raise OSError("the sandbox's root is the host's root")
    return children[0], (st.st_dev, st.st_ino)


def _log_tail(log_path: str) -> str:
    try:
        return Path(log_path).read_bytes()[-2000:].decode("utf-8", "replace")
    except OSError:
        return ""


class AgentLink:
    """A running agent and the socket to it."""

    def __init__(
        self,
        sandbox_id: str,
        proc: subprocess.Popen[bytes],
        sock: socket.socket,
        namespace: bool,
        marker: bytes,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.namespace = namespace
        self.marker = marker
        self._proc = proc
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._next_id = 0
        self._replies: dict[int, asyncio.Future[tuple[dict[str, Any], list[int]]]] = {}
        self._exits: dict[int, asyncio.Future[int]] = {}
        self._outbox: deque[tuple[bytes, list[int]]] = deque()
        self._writing = False
        self.ready: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self.agent_pid = proc.pid  # host pid of the agent itself (found after ready in ns mode)
        #: (st_dev, st_ino) of the sandbox's root directory in namespace mode.
        self.root_id: tuple[int, int] | None = None
        self._loop.add_reader(sock.fileno(), self._on_readable)

    # --- start and stop -----------------------------------------------------------------------

    @classmethod
    async def start(
        cls,
        sandbox_id: str,
        config: dict[str, Any],
        *,
        namespace: bool,
        isolate_network: bool,
        log_path: str,
        instance: str,
        ready_timeout: float = 20.0,
    ) -> AgentLink:
        """Start an agent for ``sandbox_id`` and wait until it is ready."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        argv = [sys.executable, "-I", "-S", AGENT_SCRIPT, str(theirs.fileno())]
        if namespace:
            flags = ["--mount", "--pid", "--uts", "--kill-child", "--propagation", "private"]
            if isolate_network:
                flags.append("--net")
            argv = ["unshare", *flags, "--", *argv]
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "LANG": "C.UTF-8",
            "LIZARD_EMU_SANDBOX": sandbox_id,
            "LIZARD_EMU_INSTANCE": instance,
        }
        proc = _spawn(argv, env, log_path, theirs.fileno())
        theirs.close()
        link = cls(sandbox_id, proc, ours, namespace, f"LIZARD_EMU_SANDBOX={sandbox_id}".encode())
        link._send(config, [])
        try:
            first = await asyncio.wait_for(asyncio.shield(link.ready), ready_timeout)
        except (TimeoutError, ConnectionError) as exc:
            await link.stop(force=True)
            tail = _log_tail(log_path)
            raise AgentError("start", f"sandbox agent did not start: {exc!r} {tail}") from exc
        if first.get("event") == "failed":
            await link.stop(force=True)
            raise AgentError("start", f"sandbox agent failed: {first.get('message')}")
        if namespace:
            try:
                found = await asyncio.to_thread(_find_namespace_root, proc.pid)
                link.agent_pid, link.root_id = found
            except OSError as exc:
                await link.stop(force=True)
                raise AgentError("start", f"sandbox agent failed: {exc}") from exc
        return link

    async def stop(self, force: bool = False, limit_s: float = 5.0) -> None:
        """Kill every process of the sandbox and wait until they are gone."""
        if not force and not self.closed.done():
            with contextlib.suppress(Exception):
                self._send({"op": "shutdown"}, [])
            if await _wait_pid_exit(self._proc.pid, limit_s):
                self._reap()
                await self._after_stop()
                return
        # Forced: SIGKILL the agent (in namespace mode that ends the namespace's PID 1).
        for pid in {self._proc.pid, self.agent_pid}:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        await _wait_pid_exit(self.agent_pid, limit_s)
        await _wait_pid_exit(self._proc.pid, limit_s)
        self._reap()
        await self._after_stop()

    async def _after_stop(self) -> None:
        self._close_socket()
        # Host mode: a process that left the agent's tree but kept the marker is still ours.
        await asyncio.to_thread(procscan.kill_marked, self.marker)

    def _reap(self) -> None:
        with contextlib.suppress(Exception):
            self._proc.wait(timeout=1)

    def _close_socket(self) -> None:
        if self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
            if self._writing:
                self._loop.remove_writer(self._sock.fileno())
                self._writing = False
            self._sock.close()
        self._fail_all(ConnectionError("sandbox agent is gone"))

    def _fail_all(self, exc: Exception) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        if not self.ready.done():
            self.ready.set_exception(exc)
            self.ready.exception()  # mark retrieved
        for fut in self._replies.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
        self._replies.clear()
        for efut in self._exits.values():
            if not efut.done():
                efut.set_result(137)  # killed with the sandbox
        self._exits.clear()

    # --- requests -----------------------------------------------------------------------------

    async def request(self, msg: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        """Send a request and wait for its reply; AgentError when the agent refuses."""
        if self.closed.done():
            raise ConnectionError("sandbox agent is gone")
        self._next_id += 1
        rid = self._next_id
        fut: asyncio.Future[tuple[dict[str, Any], list[int]]] = self._loop.create_future()
        self._replies[rid] = fut
        self._send({**msg, "id": rid}, [])
        reply, fds = await fut
        if "error" in reply:
            for fd in fds:
                os.close(fd)
            raise AgentError(str(reply["error"]), str(reply.get("message", "")))
        return reply, fds

    async def exec(
        self, argv: list[str], env: dict[str, str], cwd: str, uid: int | None, gid: int | None
    ) -> ExecStarted:
        """Start a command; see :class:`ExecStarted`."""
        reply, fds = await self.request(
            {"op": "exec", "argv": argv, "env": env, "cwd": cwd, "uid": uid, "gid": gid}
        )
        exit_future: asyncio.Future[int] = reply["_exit"]
        return ExecStarted(int(reply["pid"]), fds[0], fds[1], exit_future)

    async def signal(self, pid: int, signum: int) -> None:
        """Signal ``pid`` and its same-session descendants."""
        await self.request({"op": "signal", "pid": pid, "signal": signum})

    async def pause(self) -> None:
        """SIGSTOP every process of the sandbox."""
        await self.request({"op": "pause"})

    async def resume(self) -> None:
        """SIGCONT every process of the sandbox."""
        await self.request({"op": "resume"})

    # --- socket I/O ---------------------------------------------------------------------------

    def _send(self, msg: dict[str, Any], fds: list[int]) -> None:
        data = json.dumps(msg).encode()
        if len(data) > _MAX_INLINE:
            memfd = os.memfd_create("lizard-request")
            os.write(memfd, data)
            data = json.dumps({"memfd": True}).encode()
            fds = [memfd, *fds]
            self._outbox.append((data, fds))
            # The memfd is closed once sent (see _flush).
        else:
            self._outbox.append((data, []))
        self._flush()

    def _flush(self) -> None:
        while self._outbox:
            data, fds = self._outbox[0]
            try:
                send_datagram(self._sock, data, fds)
            except BlockingIOError:
                if not self._writing:
                    self._loop.add_writer(self._sock.fileno(), self._flush)
                    self._writing = True
                return
            except OSError as exc:
                self._outbox.clear()
                self._fail_all(ConnectionError(f"sandbox agent is gone: {exc}"))
                return
            self._outbox.popleft()
            for fd in fds:
                os.close(fd)
        if self._writing:
            self._loop.remove_writer(self._sock.fileno())
            self._writing = False

    def _on_readable(self) -> None:
        while True:
            try:
                data, ancdata, _flags, _addr = self._sock.recvmsg(65536, _RECV_FDS_SPACE)
            except BlockingIOError:
                return
            except OSError:
                data, ancdata = b"", []
            if not data:
                self._loop.remove_reader(self._sock.fileno())
                self._fail_all(ConnectionError("sandbox agent is gone"))
                return
            self._dispatch(json.loads(data), passed_fds(ancdata))

    def _dispatch(self, msg: dict[str, Any], fds: list[int]) -> None:
        event = msg.get("event")
        if event == "exit":
            fut = self._exits.pop(int(msg["pid"]), None)
            if fut is not None and not fut.done():
                fut.set_result(int(msg["code"]))
            return
        if event in ("ready", "failed"):
            if not self.ready.done():
                self.ready.set_result(msg)
            return
        rid = msg.get("id")
        fut2 = self._replies.pop(rid, None) if isinstance(rid, int) else None
        if fut2 is None or fut2.done():
            for fd in fds:
                os.close(fd)
            return
        if "pid" in msg and "error" not in msg:
            # Register the exit future now: the exit report may be in this same read batch.
            msg["_exit"] = self._exits[int(msg["pid"])] = self._loop.create_future()
        fut2.set_result((msg, fds))
