"""An interactive process kept in the sandbox: started once, fed and read one call at a time.

What holds (tested against lizard-local in ``tests/test_interactive.py``):

- **Kept between calls.** :func:`astart_interactive` starts ``argv`` under a small guest daemon
  (standard-library Python, detached into its own session) that outlives the request; the
  process runs in ``cwd`` with the sandbox's environment plus ``env``, as ``user``.
- **A terminal when asked.** ``tty=True`` runs it under a pseudo-terminal (echo, CR LF line ends,
  ``isatty()`` true); otherwise stdin is a pipe and stdout and stderr share one pipe.
- **Each call is one request** and waits in the guest up to ``wait`` seconds (less when the
  process ends) before it returns the output since the previous call, in order, as exact bytes:
  at most :data:`READ_BUDGET` bytes a call, the rest kept for the next. :class:`Update` carries
  the exit code once the process has ended and its output has been read. The host accepts at
  most that budget (plus a header) per call: an answer that is larger, or does not match its
  header, is :class:`~lizard_core.errors.GuestProtocolError`, never cut silently.
- **Bounded in the sandbox too.** At most :data:`BACKLOG` unread bytes are kept; past that the
  process is no longer read (its writes block, as under a terminal nobody reads) until a call
  takes some, so a chatty process nobody polls cannot fill the sandbox's disk.
- **Input** (:meth:`InteractiveProcess.afeed`) goes to the process's stdin as given; feeding a
  process that has ended raises ``BrokenPipeError``.
- **Ends.** ``timeout`` kills the process (exit code 124) that long after the start;
  :meth:`InteractiveProcess.aterminate` kills its process group, returns once no member of it
  still runs (2 s at most: a kill is only queued; also for a start still starting, and no wait
  where ``/proc`` cannot be read), and removes its folder (the
  daemon sees that within a second and ends too, even with output unread or the pipe held
  open by a process left behind), and doing it again is harmless. A start cancelled (or
  failed) before it returned ends its process, also when the stop reaches the sandbox before
  the start does (the stop leaves the folder as a marker, and the start then runs nothing) or
  while it is starting. Destroying the sandbox ends everything anyway.
"""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from lizard_core.commands import CommandResult, arun_command
from lizard_core.errors import GuestProtocolError, LizardIntegrationError, OutputLimitError
from lizard_core.session import Session

__all__ = ["BACKLOG", "READ_BUDGET", "InteractiveProcess", "Update", "astart_interactive"]

READ_BUDGET: Final = 1024 * 1024
"""Most output bytes one call returns; the rest waits for the next call."""
# One private folder per process right under /tmp, so that any user can make its own.
_PREFIX: Final = "/tmp/.lizard-interactive-"
_TIMED_OUT: Final = 124
BACKLOG: Final = 8 * 1024 * 1024
"""Unread output bytes kept in the sandbox; past that the process is no longer read (it blocks
writing, as under an unread terminal) until a call takes some."""
# What the host accepts from one call: the budget, its header, and an error message.
_ANSWER_LIMIT: Final = READ_BUDGET + 4096

# Runs in the sandbox (Python 3.8+, standard library). argv[1]: the request as JSON.
_GUEST: Final = r"""
import base64, errno, json, os, select, signal, sys, time
req = json.loads(sys.argv[1])
d = req["dir"]
P = lambda name: os.path.join(d, name)
def exit_code():
    try:
        with open(P("exit")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
def taken():
    try:
        with open(P("taken")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0
def status_code(status):
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return 128 + os.WTERMSIG(status)
def running(group):
    wanted = str(group).encode()
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc to read (none mounted, or hidden): nothing to wait for
        return False
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == wanted and fields[0] not in (b"Z", b"X"):
            return True
    return False
def daemon():
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    fifo = os.open(P("in"), os.O_RDWR)  # read and write: never an EOF between writers
    out = os.open(P("out"), os.O_WRONLY | os.O_APPEND)
    argv = req["argv"]
    if req["tty"]:
        import pty
        child, master = pty.fork()
        if child == 0:
            try:
                os.execvp(argv[0], argv)
            finally:
                os._exit(127)
        to_child = from_child = master
    else:
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        child = os.fork()
        if child == 0:
            os.setsid()
            os.dup2(r_in, 0)
            os.dup2(w_out, 1)
            os.dup2(w_out, 2)
            for fd in (r_in, w_in, r_out, w_out, fifo, out):
                os.close(fd)
            try:
                os.execvp(argv[0], argv)
            finally:
                os._exit(127)
        os.close(r_in)
        os.close(w_out)
        to_child, from_child = w_in, r_out
    try:
        with open(P("pid.tmp"), "w") as f:
            f.write(str(child))
        os.rename(P("pid.tmp"), P("pid"))
        stopped = os.path.exists(P("stop"))
    except OSError:  # the folder is gone: a stop came while the process was starting
        stopped = True
    if stopped:  # stop marks before it reads the pid; we check after writing it
        for kill in (os.killpg, os.kill):
            try:
                kill(child, signal.SIGKILL)
            except OSError:
                pass
    deadline = None if req["timeout"] is None else time.monotonic() + req["timeout"]
    timed_out = False
    checked = time.monotonic()
    while True:
        wait = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
        watched = [fifo, from_child]
        if os.fstat(out).st_size - taken() > req["backlog"]:
            # Nobody reads: stop reading the process (it blocks on its full pipe or terminal,
            # as under an unread terminal) rather than fill the sandbox's disk.
            watched = [fifo]
            wait = min(wait, 0.2)
        ready, _, _ = select.select(watched, [], [], wait)
        if time.monotonic() - checked >= 1.0:
            checked = time.monotonic()
            if os.path.exists(P("stop")) or not os.path.isdir(d):
                # Stopped: no EOF may ever come (unread output past the backlog, or a process
                # left holding the pipe), so end here rather than outlive the stop.
                for kill in (os.killpg, os.kill):
                    try:
                        kill(child, signal.SIGKILL)
                    except OSError:
                        pass
                return
        if not ready and deadline is not None and time.monotonic() >= deadline:
            timed_out = True
            try:
                os.killpg(child, signal.SIGKILL)
            except OSError:
                pass
            deadline = None
            continue
        if fifo in ready:
            data = os.read(fifo, 65536)
            try:
                os.write(to_child, data)
            except OSError:
                pass
        if from_child in ready:
            try:
                data = os.read(from_child, 65536)
            except OSError:  # EIO: the terminal's last holder closed it
                data = b""
            if not data:
                break
            os.write(out, data)
    _, status = os.waitpid(child, 0)
    code = 124 if timed_out else status_code(status)
    with open(P("exit.tmp"), "w") as f:
        f.write(str(code))
    os.rename(P("exit.tmp"), P("exit"))
op = req["op"]
if op == "start":
    os.mkdir(d, 0o700)
    os.mkfifo(P("in"), 0o600)
    open(P("out"), "wb").close()
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                daemon()
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(first, 0)
elif op == "feed":
    if exit_code() is not None:
        sys.stderr.write("the process has ended\n")
        sys.exit(32)
    try:
        fd = os.open(P("in"), os.O_WRONLY | os.O_NONBLOCK)
    except OSError as error:
        sys.stderr.write("%s\n" % error)
        sys.exit(32 if error.errno == errno.ENXIO else 2)
    data = base64.b64decode(req["data"])
    while data:
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            time.sleep(0.01)
    os.close(fd)
elif op == "stop":
    try:
        os.mkdir(d, 0o700)  # first: the start, if it ever comes, finds it and starts nothing
        sys.exit(0)
    except FileExistsError:
        pass
    # 2 s at most in all: for the pid of a start still starting (its daemon, seeing the stop
    # mark once it has written the pid, kills the process itself), then for the group to end.
    deadline = time.monotonic() + 2.0
    group = None
    try:
        open(P("stop"), "wb").close()
        while group is None:
            try:
                with open(P("pid")) as f:
                    group = int(f.read())
            except FileNotFoundError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)
        os.killpg(group, signal.SIGKILL)
    except (OSError, ValueError):
        group = None
    # A kill is only queued: wait until no member of the group still runs, so that what it held
    # (files, ports, the CPU) is free once the stop has returned.
    while group is not None and running(group) and time.monotonic() < deadline:
        time.sleep(0.005)
    import shutil
    shutil.rmtree(d, ignore_errors=True)
    sys.exit(0)
deadline = time.monotonic() + req["wait"]
while time.monotonic() < deadline and exit_code() is None:
    time.sleep(0.02)
code = exit_code()
try:
    with open(P("out"), "rb") as f:
        f.seek(req["offset"])
        data = f.read(req["budget"])
        more = f.read(1) != b""
    with open(P("taken.tmp"), "w") as f:
        f.write(str(req["offset"] + len(data)))
    os.rename(P("taken.tmp"), P("taken"))
except OSError:
    data, more = b"", False
head = {"read": len(data), "exit": None if more else code}
sys.stdout.buffer.write(json.dumps(head).encode() + b"\n" + data)
"""


@dataclass(frozen=True)
class Update:
    """What one call saw: the output since the previous call, and the exit code once ended."""

    output: bytes
    exit_code: int | None


class InteractiveProcess:
    """A process kept in the sandbox by :func:`astart_interactive` (see the module docstring)."""

    def __init__(self, session: Session, directory: str, user: str | None) -> None:
        self._session = session
        self._directory = directory
        self._user = user
        self._offset = 0
        self._stopped = False
        self.exit_code: int | None = None
        """The exit code, once a call has seen the process end."""

    async def _call(self, op: str, *, wait: float = 0.0, data: bytes = b"") -> Update:
        request = {
            "op": op,
            "dir": self._directory,
            "offset": self._offset,
            "budget": READ_BUDGET,
            "wait": wait,
            "data": base64.b64encode(data).decode(),
        }
        result = await _guest_call(
            self._session, request, cwd=None, env=None, user=self._user, wait=wait
        )
        if result.exit_code == 32:
            raise BrokenPipeError("the interactive process has ended")
        if result.exit_code != 0:
            raise GuestProtocolError(f"interactive {op} failed: {result.stderr[-2000:]!r}")
        if op == "stop":
            return Update(b"", self.exit_code)
        return self._take(result.stdout)

    def _take(self, answer: bytes) -> Update:
        """Check one call's answer (header line, then the output) and advance past it."""
        head, _, output = answer.partition(b"\n")
        try:
            seen = json.loads(head)
            read, code = seen["read"], seen["exit"]
        except (ValueError, TypeError, KeyError) as error:
            raise GuestProtocolError("interactive call answered without its header") from error
        if read != len(output) or len(output) > READ_BUDGET:
            raise GuestProtocolError("interactive call's output does not match its header")
        if code is not None and (type(code) is not int or not -1 < code < 256):
            raise GuestProtocolError(f"interactive call reported exit code {code!r}")
        self._offset += len(output)
        if code is not None:
            self.exit_code = code
        return Update(output, self.exit_code)

    async def afeed(self, data: bytes, *, wait: float) -> Update:
        """Write ``data`` to the process's stdin, then wait up to ``wait`` s for its output."""
        if not isinstance(data, bytes):
            raise TypeError("data must be bytes")
        return await self._call("feed" if data else "poll", wait=wait, data=data)

    async def aterminate(self) -> None:
        """Kill the process group, wait until it has ended (2 s at most), and remove its folder.

        Harmless when already done.
        """
        if not self._stopped:
            await self._call("stop")
            self._stopped = True


async def astart_interactive(
    session: Session,
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
    tty: bool = False,
    wait: float = 0.25,
    timeout: float | None = None,  # noqa: ASYNC109  # the process's own limit, in the guest
) -> tuple[InteractiveProcess, Update]:
    """Start ``argv`` in the sandbox; return its handle and the output of the first ``wait`` s."""
    argv = list(argv)
    if not argv or not all(isinstance(part, str) for part in argv):
        raise TypeError("argv must be a non-empty sequence of str")
    if timeout is not None and timeout <= 0:
        raise ValueError("timeout must be positive")
    directory = f"{_PREFIX}{uuid.uuid4().hex}"
    request = {
        "op": "start",
        "dir": directory,
        "argv": argv,
        "tty": bool(tty),
        "timeout": timeout,
        "backlog": BACKLOG,
        "offset": 0,
        "budget": READ_BUDGET,
        "wait": wait,
    }
    process = InteractiveProcess(session, directory, user)
    try:
        result = await _guest_call(session, request, cwd=cwd, env=env, user=user, wait=wait)
    except BaseException:
        # Cancelled (or failed) while waiting for its first output: the process is detached, so
        # stopping the request does not stop it. Nobody would ever get its handle: end it.
        with contextlib.suppress(LizardIntegrationError):
            await process.aterminate()
        raise
    if result.exit_code != 0:
        raise GuestProtocolError(f"interactive start failed: {result.stderr[-2000:]!r}")
    try:
        return process, process._take(result.stdout)
    except GuestProtocolError:
        with contextlib.suppress(LizardIntegrationError):
            await process.aterminate()
        raise


async def _guest_call(
    session: Session,
    request: Mapping[str, object],
    *,
    cwd: str | None,
    env: Mapping[str, str] | None,
    user: str | None,
    wait: float,
) -> CommandResult:
    """One request to the guest side; its answer bounded on the host before it is kept."""
    try:
        return await arun_command(
            session,
            ["python3", "-c", _GUEST, json.dumps(request)],
            cwd=cwd,
            env=env,
            timeout=wait + 30.0,
            user=user,
            output_limit=_ANSWER_LIMIT,
        )
    except OutputLimitError as error:
        raise GuestProtocolError(
            f"interactive call answered more than {_ANSWER_LIMIT} bytes"
        ) from error
