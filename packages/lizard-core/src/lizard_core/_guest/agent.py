"""The guest agent: one operation per run, answered as JSON lines on stdout.

Runs inside the sandbox on any Python 3.8 or newer, standard library only, as
``python3 -I -S -c <this program> <call id> <k> <request part>... <data>...``. The host
strips docstrings, comments and annotations before sending it (see
``lizard_core._guest.program``), so write them freely.

Wire contract (the host side is ``lizard_core.guest``):

- The request is JSON, base64-encoded and split over ``k`` argv items (each under the kernel's
  128 KiB per-argument limit); any further argv items are base64 data pieces for ``write``.
- Every stdout line is one compact ASCII JSON object with a type ``t``: first ``pid`` (this
  process, so the host can signal it), then operation frames, then exactly one ``end`` frame with
  the outcome. ``hb`` heartbeats are written whenever nothing else was for ``HEARTBEAT_S``.
- A frame that carries ``pg`` names a process group this agent owns, for the host to kill if the
  agent stops answering.
- Path errors end with ``{"t": "end", "err": [errno, strerror, filename]}``; bugs with ``bug``.
"""

from __future__ import annotations

import _thread
import binascii
import errno
import json
import os
import stat
import sys
import time
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Callable, Dict, List, Optional, Tuple

    from ._prelude import Frame

from ._agent_files import (
    op_chunk,
    op_exists,
    op_list,
    op_mkdir,
    op_read,
    op_realpath,
    op_remove,
    op_stat,
    op_write,
)
from ._agent_frames import (
    COPY_BYTES,
    HEARTBEAT_S,
    beat,
    emit,
    emit_data,
    ensure_dir,
    heartbeat,
    job_dir,
    packed_fit,
    sent_bytes,
)
from ._agent_spawn import reap, start_command
from ._prelude import cleanup


def kill_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False once it has no members left."""
    try:
        os.killpg(pgid, sig)
        return True
    except OSError:
        return False


def exit_code(rc: int) -> int:
    """Shell convention: death by signal N is 128 + N."""
    return 128 - rc if rc < 0 else rc


def feed_stdin(fd: int, pieces: List[str], staged: List[str]) -> None:
    """Write the command's input to its stdin pipe, then close it (runs in a thread).

    The input is the base64 argv pieces, then the staged upload files in order (each removed
    once sent, which frees the disk as the copy proceeds). A command that stops reading ends
    the feed with EPIPE, which is not an error: the command's exit code tells the rest.
    """
    try:
        for piece in pieces:
            block = binascii.a2b_base64(piece)
            while block:
                block = block[os.write(fd, block) :]
        for path in staged:
            with open(path, "rb") as source:
                while True:
                    block = source.read(COPY_BYTES)
                    if not block:
                        break
                    while block:
                        block = block[os.write(fd, block) :]
            os.unlink(path)
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def switch_user(name: str, env: Dict[str, str]) -> Any:
    """``[uid, gid, groups]`` to run as ``name`` (or a numeric uid), setting HOME/USER/LOGNAME.

    Returns a str to report instead when the user does not exist or cannot be switched to.
    """
    import pwd

    try:
        pw = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError):
        if not name.isdigit():
            return "unable to find user %s: no matching entries in passwd file" % name
        uid, gid, groups, login, home = int(name), int(name), [], name, "/"
    else:
        uid, gid, login, home = pw.pw_uid, pw.pw_gid, pw.pw_name, pw.pw_dir
        groups = os.getgrouplist(login, gid)
    if os.geteuid() != 0 and uid != os.geteuid():
        return "cannot run as user %s: the sandbox agent runs as uid %d, not root" % (
            name,
            os.geteuid(),
        )
    for key, value in (("HOME", home), ("USER", login), ("LOGNAME", login)):
        env[key] = value
    return [uid, gid, groups]


def op_run(req: Frame) -> Frame:
    """Run a command, streaming output and spilling past the budget.

    stdin is at EOF unless ``stdin`` is given: ``"inline"`` (the base64 argv pieces) or a list
    of staged upload files, fed through a pipe in that order. With ``user`` the command runs
    as that account (name or uid; its groups, HOME, USER and LOGNAME), which needs a root
    agent: otherwise, or for an unknown name, nothing starts and the end frame says why on
    stderr, with exit code 126 (and ``se`` EPERM when the agent lacks the privilege).
    With ``mkcwd`` a missing ``cwd`` is created first (``mkdir -p``). The end frame reports
    ``cwd``: where the command started, symlinks resolved, and ``se``: the errno of a program
    that could not be started (None when it started).
    """
    argv = req["argv"]
    cwd = command_cwd(req)
    env = dict(os.environ)
    identity: Any = None
    if req.get("user") is not None:
        identity = switch_user(req["user"], env)
        if isinstance(identity, str):
            message = ("%s\n" % identity).encode("utf-8", "surrogateescape")
            emit_data("o", message, {"s": 2})
            denied = errno.EPERM if "not root" in identity else None
            return {"rc": 126, "n": [0, len(message)], "sp": [None, None], "cwd": cwd, "se": denied}
    env.update(req.get("env") or {})
    stdin = req.get("stdin")
    stop: List[int] = []
    wake_r = catch_stop_signals(stop)
    try:
        proc = start_command(argv, cwd, env, stdin is not None, run_as(identity))
    except OSError as exc:
        if exc.errno == errno.E2BIG:
            raise  # the builtin error on the host, as a local execve gives it
        code = 127 if exc.errno == errno.ENOENT else 126
        why = "command not found" if code == 127 else exc.strerror
        message = ("%s: %s\n" % (argv[0], why)).encode("utf-8", "surrogateescape")
        emit_data("o", message, {"s": 2})
        return {"rc": code, "n": [0, len(message)], "sp": [None, None], "cwd": cwd, "se": exc.errno}
    if proc[1] is not None:
        # The thread owns the pipe's write end from here on.
        pieces: List[str] = req["pieces"] if stdin == "inline" else []
        staged: List[str] = [] if stdin == "inline" else list(stdin or [])
        _thread.start_new_thread(feed_stdin, (proc[1], pieces, staged))
    emit({"t": "start", "pg": proc[0]})
    output = CommandOutput(req)
    rc, timed_out = supervise(proc, output, stop, wake_r, req.get("timeout"), req["hb"])
    output.close()
    return {
        "rc": exit_code(rc),
        "n": output.total[1:],
        "sp": output.spilled(),
        "to": timed_out,
        "ol": output.over,
        "x": bool(stop),
        "cwd": cwd,
    }


def command_cwd(req: Frame) -> Optional[str]:
    """Where the command starts, symlinks resolved as ``cd -P`` would (created with ``mkcwd``)."""
    cwd: Optional[str] = req.get("cwd")
    if cwd is None:
        try:
            return os.getcwd()
        except OSError:
            return None  # removed under us: the command still starts there, as before
    if req.get("mkcwd"):
        ensure_dir(cwd)
    if not stat.S_ISDIR(os.stat(cwd).st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), cwd)
    return os.path.realpath(cwd)


def catch_stop_signals(stop: List[int]) -> int:
    """Record SIGTERM, SIGINT and SIGHUP in ``stop``; return a descriptor that wakes a select.

    Installed before the command starts, so a cancellation can never kill this agent and
    orphan the command. execve resets caught signals, so the command gets the defaults.
    """
    import signal

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)

    def on_stop(signum: int, _frame: Any) -> None:
        stop.append(signum)

    signal.signal(signal.SIGCHLD, lambda *_: None)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_stop)
    return wake_r


def run_as(identity: Optional[List[Any]]) -> Dict[str, Any]:
    """``Popen`` options that start the command as ``[uid, gid, groups]`` (none: as this agent)."""
    if identity is None:
        return {}
    uid, gid, groups = identity
    if sys.version_info >= (3, 9):
        return {"user": uid, "group": gid, "extra_groups": groups}
    else:  # pragma: no cover - Python 3.8 guests only

        def demote() -> None:
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)

        return {"preexec_fn": demote}


class CommandOutput:
    """A command's two streams: deflated frames within the wire budget, the rest spilled.

    Each stream is deflated on its own and flushed at every read, so output stays live; what
    fits ``wire`` bytes of frames (under the platform's per-stream cap) is sent, the rest of a
    stream that passes it is spilled to a job file. Past ``limit`` bytes a stream is cut and
    :attr:`over` set.
    """

    def __init__(self, req: Frame) -> None:
        self.req = req
        self.limit, self.wire = req["limit"], req["wire"]
        self.total = [0, 0, 0]
        self.spill: List[Any] = [None, None, None]
        # Made at a stream's first output: a deflate state is about 256 KiB to allocate, and
        # most commands leave one stream or both empty.
        self.packers: Dict[int, Any] = {}
        self.over = False

    def send(self, index: int, data: bytes) -> bytes:
        """Send what fits the wire budget; return the rest."""
        while data:
            fit = packed_fit(self.wire - sent_bytes[0])
            if fit < min(len(data), 4096):
                return data
            piece, data = data[:fit], data[fit:]
            packer = self.packers.get(index)
            if packer is None:
                packer = self.packers[index] = zlib.compressobj(6)
            emit_data("z", packer.compress(piece) + packer.flush(zlib.Z_SYNC_FLUSH), {"s": index})
        return data

    def take(self, index: int, data: bytes) -> None:
        room = self.limit - self.total[index]
        if len(data) > room:
            data, self.over = data[: max(room, 0)], True
        self.total[index] += len(data)
        if self.spill[index] is None:
            data = self.send(index, data)
            if data:
                self.spill[index] = open(os.path.join(job_dir(self.req), str(index)), "wb")
        if data:
            self.spill[index].write(data)

    def spilled(self) -> List[Optional[str]]:
        return [None if h is None else h.name for h in self.spill[1:]]

    def close(self) -> None:
        for handle in self.spill:
            if handle is not None:
                handle.close()


def supervise(
    proc: List[Any],
    output: CommandOutput,
    stop: List[int],
    wake_r: int,
    timeout: Optional[float],
    interval: float,
) -> Tuple[int, bool]:
    """Pump the output of ``proc`` until it has exited; its code, and whether it timed out.

    ``proc`` is a started command (``_agent_spawn``). Its group is killed past its timeout or
    output limit, or when asked to stop; an ``hb`` frame goes out whenever nothing was written
    for ``interval`` seconds.
    """
    import select
    import signal

    pgid = proc[0]
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    pipes = {proc[2]: 1, proc[3]: 2}
    for fd in pipes:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    started = time.monotonic()
    deadline: Optional[float] = None if timeout is None else started + timeout
    timed_out = False
    rc: Optional[int] = None
    exited_at: Optional[float] = None
    last_data = started
    stop_at: Optional[float] = None
    while True:
        now = time.monotonic()
        if rc is None:
            rc = reap(proc, False)
            if rc is not None:
                exited_at = last_data = now
        if (output.over or (deadline is not None and now >= deadline)) and rc is None:
            timed_out = timed_out or not output.over
            kill_group(pgid, signal.SIGKILL)
            deadline = None
        if stop and stop_at is None:
            stop_at = now
            kill_group(pgid, signal.SIGTERM)
        if stop_at is not None and now - stop_at > 1.0:
            kill_group(pgid, signal.SIGKILL)
        if not pipes:
            if rc is not None:
                break
        elif exited_at is not None and (now - last_data > 0.1 or now - exited_at > 1.0):
            # The command has exited; whatever still holds its pipes (a background child)
            # must not hold up the result.
            break
        wait = 0.05 if (exited_at is not None or stop_at is not None) else 1.0
        wait = min(wait, beat(interval))
        if deadline is not None:
            wait = min(wait, max(deadline - now, 0))
        for fd, _ in poller.poll(int(wait * 1000) + 1):
            if fd == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except OSError:
                    pass
                continue
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if data:
                last_data = time.monotonic()
                output.take(pipes[fd], data)
            else:
                poller.unregister(fd)
                del pipes[fd]
    while rc is None:
        rc = reap(proc, True)
    os.close(proc[2])
    os.close(proc[3])
    return rc, timed_out


def op_signal(req: Frame) -> Frame:
    """Signal another guest by pid, only while it is still the call ``cid``.

    A guest the launcher started carries the call id in its argv; one a hub forked names itself
    by it (the first 15 characters, all ``/proc/<pid>/comm`` holds).
    """
    pid = req["pid"]
    call = req["cid"].encode("ascii")
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            ours = call in handle.read().split(b"\0")
        if not ours:
            with open("/proc/%d/comm" % pid, "rb") as handle:
                ours = handle.read().rstrip(b"\n") == call[:15]
        if not ours:
            return {"v": False}  # the pid now belongs to someone else
    except OSError:
        pass  # gone already (its groups may not be), or no /proc
    try:
        os.kill(pid, req["sig"])
        found = True
    except ProcessLookupError:
        found = False
    for pgid in req.get("pg", []):
        kill_group(pgid, req["sig"])
    return {"v": found}


OPS: Dict[str, Callable[[Frame], Frame]] = {
    "run": op_run,
    "stat": op_stat,
    "list": op_list,
    "exists": op_exists,
    "realpath": op_realpath,
    "mkdir": op_mkdir,
    "remove": op_remove,
    "read": op_read,
    "chunk": op_chunk,
    "write": op_write,
    "signal": op_signal,
}


def main() -> None:
    """Decode the request, run its operation, and always finish with an ``end`` frame."""
    emit({"t": "pid", "pid": os.getpid()})
    call = sys.argv[1]
    parts = int(sys.argv[2])
    req = json.loads(binascii.a2b_base64("".join(sys.argv[3 : 3 + parts])))
    req["call"] = call
    req["pieces"] = sys.argv[3 + parts :]
    req.setdefault("hb", HEARTBEAT_S)
    if req.get("op") != "run":  # a command's supervision sends its own heartbeats
        _thread.start_new_thread(heartbeat, (req["hb"],))
    if req.get("rm"):
        cleanup(req["rm"])
    try:
        result = OPS[req["op"]](req)
    except OSError as exc:
        result = {"err": [exc.errno, exc.strerror, exc.filename]}
    except Exception as exc:
        result = {"bug": "%s: %s" % (type(exc).__name__, exc)}
    result["t"] = "end"
    emit(result)


if __name__ == "__main__":
    main()
