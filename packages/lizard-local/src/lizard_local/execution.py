"""Run one ``exec`` request: start the command in its sandbox and deliver its output.

Contract (the platform's exec endpoint as lizard-sdk drives it, JSON and SSE):

- A string ``cmd`` runs as ``["/bin/sh", "-c", cmd]``; a list is an argv with a PATH lookup in the
  command's own environment. A missing program is not an HTTP error: exit code 127 and stderr
  ``"<argv0>: not found"``. A missing ``workdir`` gives exit code 1 and a message.
- Environment, low to high: ``PATH``/``HOME``/``USER``/``LOGNAME``/``LANG`` < the sandbox's create
  ``envs`` < the command's ``envs``; the sandbox marker is always set. stdin is ``/dev/null``.
- Output is read from the pipes as it arrives (no polling) and cut into lines by
  :class:`~lizard_local.output.LineSplitter`. The command is done when its main process has
  exited and both pipes reached end of file, or ``exit_grace_s`` after the exit if a background
  child still holds them.
- On ``timeoutMs`` (less a margin of 10%, at most 250 ms, so that the answer beats the SDK's
  read timeout of the same length) the command's process tree is killed and the exit code is
  124 with ``command timed out after Ns`` on stderr; a killed sandbox ends it with 137; a client
  that disconnects has its command killed. Death by a signal is 128 + signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from typing import Any

from lizard_local.agent_link import AgentError
from lizard_local.http import ApiError, string_map
from lizard_local.nonblocking import read_ready
from lizard_local.output import LineSplitter
from lizard_local.sandboxes import ProcessEntry, Sandbox
from lizard_local.settings import Settings

__all__ = ["CommandRun", "parse_exec_body", "sse_event"]

RUNNER_MARK = "# Lizard code runner"
_STREAMS = ("stdout", "stderr")


def sse_event(data: dict[str, Any], event: str | None = None) -> bytes:
    """One SSE event: a single ``data:`` line of single-line JSON."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # httpx splits lines like str.splitlines(): escape the separators JSON leaves raw.
    if "\x85" in text or "\u2028" in text or "\u2029" in text:
        text = text.replace("\x85", "\\u0085").replace("\u2028", "\\u2028")
        text = text.replace("\u2029", "\\u2029")
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def parse_exec_body(body: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Validate an exec body; 400 on anything malformed."""
    cmd = body.get("cmd")
    if isinstance(cmd, str):
        argv = ["/bin/sh", "-c", cmd]
    elif isinstance(cmd, list):
        if not cmd:
            raise ApiError(400, "cmd must not be empty", "INVALID_BODY")
        if not all(isinstance(a, str) for a in cmd):
            raise ApiError(400, "cmd must be a string or a list of strings", "INVALID_BODY")
        if "\0" in "".join(cmd):
            raise ApiError(400, "cmd must not contain NUL bytes", "INVALID_BODY")
        argv = list(cmd)
    elif cmd is None:
        raise ApiError(400, "cmd is required", "INVALID_BODY")
    else:
        raise ApiError(400, "cmd must be a string or a list of strings", "INVALID_BODY")
    if isinstance(cmd, str) and "\0" in cmd:
        raise ApiError(400, "cmd must not contain NUL bytes", "INVALID_BODY")
    envs = string_map(body.get("envs"), "envs")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise ApiError(400, "user must be a string", "INVALID_BODY")
    workdir = body.get("workdir")
    if workdir is not None and (not isinstance(workdir, str) or not workdir.startswith("/")):
        raise ApiError(400, "workdir must be an absolute path", "INVALID_PATH")
    timeout = body.get("timeoutMs")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)):
        raise ApiError(400, "timeoutMs must be an integer", "INVALID_BODY")
    if timeout is not None and timeout < 0:
        raise ApiError(400, "timeoutMs must not be negative", "INVALID_BODY")
    timeout_ms = min(timeout or settings.default_exec_timeout_ms, settings.max_exec_timeout_ms)
    return {
        "argv": argv,
        "envs": envs,
        "user": user,
        "workdir": workdir,
        "timeout_ms": timeout_ms,
        "pid_event": bool(body.get("pidEvent")),
    }


class CommandRun:
    """One command: start it, collect or stream its output, report its exit code."""

    def __init__(self, sb: Sandbox, settings: Settings, spec: dict[str, Any], sse: bool) -> None:
        self.sb = sb
        self.settings = settings
        self.spec = spec
        self.sse = sse
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.done = asyncio.Event()
        self.wake = asyncio.Event()
        self.frames: list[bytes] = []
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.raw: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        cap = settings.stream_cap_bytes if (not sse or settings.cap_sse) else None
        split = settings.line_split_bytes if sse else None
        self.splitters = {s: LineSplitter(split, cap) for s in _STREAMS}
        self._fds: dict[str, int] = {}
        self._exit_seen: int | None = None
        self._timed_out = False
        self._grace: asyncio.TimerHandle | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    # --- start --------------------------------------------------------------------------------

    def _environment(self) -> tuple[list[str], dict[str, str], str, int | None, int | None]:
        sb = self.sb
        account = sb.user(self.spec["user"])
        home = sb.home_of(account)
        env = {
            "PATH": sb.template.path,
            "HOME": home,
            "USER": account.name,
            "LOGNAME": account.name,
            "LANG": "C.UTF-8",
            "PYTHONNOUSERSITE": "1",
        }
        if not sb.namespace:
            env["TMPDIR"] = sb.dirs["/tmp"]
        env.update(sb.envs)
        env.update(self.spec["envs"])
        env["LIZARD_EMU_SANDBOX"] = sb.id
        env["LIZARD_EMU_INSTANCE"] = sb.instance
        argv = self._host_mode_runner(self.spec["argv"]) if not sb.namespace else self.spec["argv"]
        cwd = self.spec["workdir"] or home
        switch = sb.namespace or os.geteuid() == 0
        uid = account.uid if switch else None
        gid = account.gid if switch else None
        return argv, env, cwd, uid, gid

    def _host_mode_runner(self, argv: list[str]) -> list[str]:
        """Point the SDK's code runner at this sandbox's own state directory (host mode only)."""
        if len(argv) >= 3 and argv[1] == "-c" and argv[2].startswith(RUNNER_MARK):
            source = argv[2].replace(
                'ROOT = "/tmp/.lizard-code"', f'ROOT = "{self.sb.dirs["/tmp"]}/.lizard-code"'
            )
            source = source.replace('"/home/user"', json.dumps(self.sb.dirs["/home/user"]))
            return [argv[0], argv[1], source, *argv[3:]]
        return argv

    async def start(self) -> None:
        """Start the command (or record an immediate failure as its result)."""
        argv, env, cwd, uid, gid = self._environment()
        self.sb.commands.add(self)
        try:
            started = await self.sb.link.exec(argv, env, cwd, uid, gid)
        except AgentError as exc:
            code = {"notfound": 127, "workdir": 1}.get(exc.kind, 126)
            self._push_line("stderr", exc.message)
            self._finish(code)
            return
        except ConnectionError:
            self._finish(137)
            return
        self.pid = started.pid
        self.sb.processes[started.pid] = ProcessEntry(
            started.pid, list(self.spec["argv"]), int(time.time() * 1000), cwd
        )
        if self.done.is_set():  # the sandbox was killed while the command was starting
            os.close(started.stdout_fd)
            os.close(started.stderr_fd)
            return
        for stream, fd in (("stdout", started.stdout_fd), ("stderr", started.stderr_fd)):
            os.set_blocking(fd, False)
            self._fds[stream] = fd
            self._loop.add_reader(fd, self._on_readable, stream, fd)
        started.exit_code.add_done_callback(self._on_exit)
        # The SDK uses the same number as its read timeout: stop the command a little early
        # (10%, at most 250 ms) so the 124 answer reaches the client before it gives up.
        limit = self.spec["timeout_ms"] / 1000
        self._deadline = self._loop.call_later(limit - min(0.25, limit / 10), self._on_timeout)

    # --- events -------------------------------------------------------------------------------

    def _on_readable(self, stream: str, fd: int) -> None:
        data = read_ready(fd, 65536)
        if data is None:
            return
        if not data:
            self._close_stream(stream)
            self._maybe_finish()
            return
        self._take(stream, data)

    def _take(self, stream: str, data: bytes) -> None:
        if self.settings.json_output == "verbatim" and not self.sse:
            cap = self.settings.stream_cap_bytes
            buf = self.raw[stream]
            room = len(data) if cap is None else max(cap - len(buf), 0)
            if room < len(data):
                self.splitters[stream].truncated = True
            buf += data[:room]
            return
        for line in self.splitters[stream].feed(data):
            self._push_line(stream, line)

    def _push_line(self, stream: str, line: str) -> None:
        if self.sse:
            self.frames.append(sse_event({"stream": stream, "line": line}))
            self.wake.set()
        else:
            self.lines[stream].append(line)

    def _on_exit(self, fut: asyncio.Future[int]) -> None:
        self._exit_seen = 137 if fut.cancelled() else fut.result()
        if self.pid is not None:
            self.sb.processes.pop(self.pid, None)
        if not self._fds:
            self._maybe_finish()
        else:
            self._grace = self._loop.call_later(self.settings.exit_grace_s, self._grace_over)

    def _grace_over(self) -> None:
        for stream in list(self._fds):
            # Take what is already buffered, then stop listening.
            fd = self._fds[stream]
            with contextlib.suppress(OSError):
                while chunk := os.read(fd, 65536):
                    self._take(stream, chunk)
            self._close_stream(stream)
        self._maybe_finish()

    def _on_timeout(self) -> None:
        self._timed_out = True
        self.kill_tree()

    def kill_tree(self, signum: int = signal.SIGKILL) -> None:
        """Kill the command's process tree (in the background)."""
        if self.pid is None or self.done.is_set():
            return
        task = self._loop.create_task(self._signal(signum))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _signal(self, signum: int) -> None:
        assert self.pid is not None
        with contextlib.suppress(AgentError, ConnectionError):
            await self.sb.link.signal(self.pid, signum)

    def sandbox_gone(self) -> None:
        """The sandbox was killed: end now with 137."""
        for stream in list(self._fds):
            self._close_stream(stream)
        self._finish(137)

    # --- finish -------------------------------------------------------------------------------

    def _close_stream(self, stream: str) -> None:
        fd = self._fds.pop(stream, None)
        if fd is not None:
            self._loop.remove_reader(fd)
            os.close(fd)

    def _maybe_finish(self) -> None:
        if self._exit_seen is not None and not self._fds:
            code = self._exit_seen
            if self._timed_out:
                code = 124
            self._finish(code)

    def _finish(self, code: int) -> None:
        if self.done.is_set():
            return
        for stream in _STREAMS:
            for line in self.splitters[stream].finish():
                self._push_line(stream, line)
        if self._timed_out:
            seconds = self.spec["timeout_ms"] / 1000
            self._push_line("stderr", f"command timed out after {seconds:g}s")
        for handle in (self._grace, self._deadline):
            if handle is not None:
                handle.cancel()
        if self.pid is not None:
            self.sb.processes.pop(self.pid, None)
        self.sb.commands.discard(self)
        self.exit_code = code
        if self.sse:
            self.frames.append(sse_event({"exitCode": code}, event="exit"))
        self.done.set()
        self.wake.set()

    def abort(self) -> None:
        """The client went away: kill the command."""
        if not self.done.is_set():
            self.kill_tree()

    @property
    def truncated(self) -> bool:
        """Whether either stream hit the output cap."""
        return any(s.truncated for s in self.splitters.values())

    def json_result(self) -> dict[str, Any]:
        """The JSON-mode response body."""
        if self.settings.json_output == "verbatim":
            out = {s: self.raw[s].decode("utf-8", "replace") for s in _STREAMS}
            if self._timed_out:
                out["stderr"] += f"command timed out after {self.spec['timeout_ms'] / 1000:g}s\n"
            stdout, stderr = out["stdout"], out["stderr"]
            if not self.raw["stderr"] and self.lines["stderr"] and not self._timed_out:
                stderr = "\n".join(self.lines["stderr"])  # a start failure message
        else:
            stdout = "\n".join(self.lines["stdout"])
            stderr = "\n".join(self.lines["stderr"])
        return {
            "stdout": stdout,
            "stderr": stderr,
            "exitCode": self.exit_code if self.exit_code is not None else 0,
            "truncated": self.truncated,
        }
