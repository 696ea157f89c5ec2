"""Kernel client: one run per kernel operation, relaying the kernel daemon's frames.

Standard library only, Python 3.8+. Runs inside the sandbox like the guest agent, as
``python3 -I -S -c <this program> <call id> <k> <request part>... <op> <key> <daemon_sha> <cwd>
<daemon>`` (the request is JSON, base64, split over ``k`` argv items; the five items after it
name the operation and the daemon, see below), and answers in the same frames: one compact JSON
object per stdout line with a type ``t``, first ``pid``, ``hb`` heartbeats while nothing else is
written, and last exactly one ``end``. Operations:

- ``execute``, ``install``, ``ping`` (request ``{"body", "start_timeout"?}``): connect to the
  kernel daemon of ``key``, starting it first when it is not running (so the first operation on
  a sandbox costs no extra request), forward ``body`` and relay the daemon's frames (see
  ``kernel_daemon``) line by line as they arrive. ``daemon`` is the daemon's source (zlib,
  base64; empty once the host knows the sandbox holds version ``daemon_sha``); when it is needed
  and missing the answer is ``{"t": "end", "need_source": true}``. ``cwd`` (empty: the exec's)
  is the daemon's working directory. These five travel as plain argv items so that a daemon is
  started before ``json`` is imported: in a new sandbox the client runs in a fresh Python, where
  that import (``re``, ``enum``) takes longer than the daemon's own start needs to get going,
  and the two then run side by side.
- ``interrupt``, ``restart``, ``close``: SIGINT to the daemon; kill it (its whole process group)
  and start a fresh one; kill it and remove its directory.
- A ``body`` too large for argv arrives as ``staged`` instead: the files (in one job directory)
  the host uploaded its JSON to, read in order and removed once a daemon is there to take it.
- Every request may carry the guest protocol's ``rm`` (job directories to remove), honoured as
  the agent honours it, so cleanup piggybacked on a kernel call is never lost.

Guarantees:

- The daemon lives in ``$TMPDIR/.lizard-kernel-<uid>/<key>`` (0700 and ours, checked: a symlink
  or a directory open to others is refused), listens on ``sock`` there, and runs in its own
  session, so it outlives this exec and dies as a group when killed.
- Only whole lines are relayed. If the daemon dies before its ``end`` frame (os._exit, a crash,
  the OOM killer), the client writes its own ``end`` with ``state_lost`` and a plain ``notice``,
  and starts a fresh daemon for the next operation. A daemon found dead when a request arrives is
  replaced, and that request's ``end`` carries ``state_lost`` too.
- ``body.timeout`` and ``body.grace``: the daemon interrupts the cell at ``timeout``; if no ``end``
  has come ``timeout + grace`` seconds after the ``cell`` frame, the client kills the daemon's
  process group, starts a fresh daemon and reports ``TimeoutError`` with ``state_lost``.
- Killing this client (host cancellation) closes its connection, which interrupts the cell; the
  kernel and its namespace stay.
- A request queued behind one whose client is gone (the daemon names that client in its
  ``busy`` file) waits at most the request's ``grace`` plus a second for the orphaned cell to
  stop; past that it kills the daemon's process group, starts a fresh daemon and runs there, and
  its ``end`` carries ``state_lost`` and a notice. So a cancelled cell that ignores SIGINT or sits
  in native code cannot wedge the kernel for later calls.
"""

from __future__ import annotations

# Every execute starts this program, so its imports are kept to cheap ones: binascii instead of
# base64 and _socket instead of socket (both would pull in re and enum), no struct, select or
# signal (enum too); json (re and enum) is imported where it is used, after the daemon was started.
import _socket
import binascii
import errno
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, List, Optional, Tuple

    from ._client_daemon import Starting
    from ._prelude import Frame

    Opening = Tuple[Optional[_socket.socket], Optional[Starting], Optional[str]]

    def part_break() -> None: ...


from ._client_spawn import OPENS, Refused, is_daemon, kernel_dir, read_pid, start_early

T0 = time.monotonic()
HUB_FORK = globals().get("HUB_FORK")
"""The launcher's fork of the hub, where a launcher runs this program (``.launcher``): called once
the daemon is on its way and the request read, so that in a new sandbox the daemon starts before
the hub is compiled, and the hub's work does not compete with the daemon's start."""
EARLY = start_early(sys.argv)
"""The daemon's Python, started before the rest of this program is compiled where this call will
start a daemon: the first part of the program ends here (``lizard_core._guest``)."""

part_break()

from ._client_daemon import (  # noqa: E402  # the program's second part
    SIGINT,
    NeedSource,
    StartLock,
    alive,
    connect,
    kill_daemon,
    log_tail,
    peer_pid,
    runs_version,
    spawn_daemon,
    start_daemon,
)
from ._prelude import JOBS_ROOT, cleanup, frame_line  # noqa: E402

START = b'{"t":"cell"'
FINAL = b'{"t":"end"'
# While queued behind another request, how often to check whether its client is gone.
QUEUE_POLL = 0.25


def emit(obj: Frame) -> None:
    write_all(frame_line(obj))


def write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(1, view)
        except InterruptedError:
            continue
        view = view[n:]


def final(error: Optional[Frame] = None, **extra: Any) -> None:
    frame: Frame = {"t": "end", "error": error}
    frame.update(extra)
    frame["client_ms"] = round((time.monotonic() - T0) * 1000, 3)
    emit(frame)


def error(name: str, message: str, traceback: str = "") -> Frame:
    return {"name": name, "message": message, "traceback": traceback}


def begin_open(directory: str, req: Frame) -> Opening:
    """Connect to the running daemon, or start one without waiting for it.

    Returns ``(socket, None, None)`` for a daemon of the request's version, else
    ``(None, starting, lost)``: a daemon started (the start lock held until it listens) and
    ``lost``, which is None, ``"dead"`` when a daemon had died here since the last request, or
    ``"replaced"`` when one of another version was running (after an upgrade of the host
    library) and had to be stopped.
    """
    try:
        sock = connect(directory)
    except OSError:
        pass
    else:
        if runs_version(peer_pid(sock), req):
            return sock, None, None
        sock.close()
    lock = StartLock(directory).__enter__()
    try:
        lost = None
        try:
            sock = connect(directory)  # another client may have started it meanwhile
        except OSError as exc:
            # A socket nobody listens on (or a pid file without a socket) means a daemon ran
            # here and died.
            if exc.errno == errno.ECONNREFUSED or os.path.exists(os.path.join(directory, "pid")):
                lost = "dead"
        else:
            pid = peer_pid(sock)
            if runs_version(pid, req):
                lock.__exit__()
                return sock, None, None
            sock.close()
            kill_daemon(pid)
            lost = "replaced"
        stale = read_pid(directory)
        # A pid file left from before a restore may name a pid this call's early Python took.
        if stale and not (EARLY is not None and stale == EARLY.pid):
            kill_daemon(stale)
    except BaseException:
        lock.__exit__()
        raise
    return None, spawn_daemon(directory, req, lock, EARLY), lost


def open_kernel(
    directory: str, req: Frame, opening: Optional[Opening] = None
) -> Tuple[_socket.socket, bool, Optional[str]]:
    """Connect to the running daemon, or start one (``opening``: already begun).

    Returns ``(socket, spawned, lost)``, ``lost`` as :func:`begin_open` says.
    """
    sock, starting, lost = opening or begin_open(directory, req)
    if EARLY is not None:
        EARLY.drop()  # let go unless the daemon started is it (then it is no longer ours)
    if sock is not None:
        return sock, False, None
    assert starting is not None
    return starting.connection(req), True, lost


LOST_DEAD = (
    "The Python kernel died (os._exit, a crash or the out-of-memory killer); its variables, "
    "imports and functions are lost. A fresh kernel is ready."
)
LOST_FOUND_DEAD = (
    "The Python kernel had died since the previous call (a crash, the out-of-memory killer or a "
    "background os._exit); its variables, imports and functions are lost. This call ran in a "
    "fresh kernel."
)
LOST_REPLACED = (
    "A Python kernel of another lizard-core version was running in this sandbox and was replaced; "
    "its variables, imports and functions are lost. This call ran in a fresh kernel."
)
LOST_STUCK = (
    "An earlier cell whose call was cancelled did not stop (it ignored the interrupt or was stuck "
    "in native code), so the Python kernel was restarted; its variables, imports and functions "
    "are lost. This call ran in a fresh kernel."
)
LOST_KILLED = (
    "The cell did not stop within %g s of its %g s timeout (it ignored the interrupt or was stuck "
    "in native code), so the Python kernel was restarted; its variables, imports and functions are "
    "lost."
)


def relay(
    directory: str, req: Frame, sock: _socket.socket, spawned: bool, lost: Optional[str]
) -> None:
    import json

    body = req.get("body") or {}
    heartbeat = float(req.get("hb") or 2.5)
    # Only a cell is killed with its kernel; pip, in an install, is stopped by the daemon itself.
    timeout = body.get("timeout") if body.get("op") == "execute" else None
    grace = float(body.get("grace") or 0)
    pid = peer_pid(sock)
    if spawned:
        emit({"t": "spawned", "lost": lost})
    # Frames past the streamed budget go to this call's job directory (the protocol's rule).
    body["job"] = os.path.join(JOBS_ROOT, req["call"])
    sock.sendall((json.dumps(body) + "\n").encode())
    pending = b""
    kernel = None
    started_at = None
    last_write = time.monotonic()
    seen_final = False
    orphan_seen = None  # when the daemon was first found serving a client that is gone
    next_check = last_write + QUEUE_POLL
    while True:
        now = time.monotonic()
        if started_at is None and now >= next_check:
            next_check = now + QUEUE_POLL
            orphan_seen = (orphan_seen or now) if serves_orphan(directory) else None
            if orphan_seen is not None and now >= orphan_seen + grace_of(body) + 1.0:
                # Queued behind a cell whose client is gone and that ignores its interrupts.
                sock.close()
                try:
                    fresh = restart_stuck(directory, req, pid)
                except NeedSource:
                    final(need_source=True)
                    return
                relay(directory, req, fresh, True, "stuck")
                return
        if timeout and started_at is not None and now >= started_at + timeout + grace:
            sock.close()
            replace_daemon(directory, req, pid)
            final(
                error(
                    "TimeoutError",
                    "the cell ran longer than its %g s timeout and did not stop when interrupted"
                    % timeout,
                ),
                timed_out=True,
                state_lost=True,
                notice=LOST_KILLED % (grace, timeout),
                spill=spill_of(body),
            )
            return
        wait = heartbeat if started_at is not None else QUEUE_POLL
        if timeout and started_at is not None:
            wait = min(wait, max(0.0, started_at + timeout + grace - now))
        sock.settimeout(max(wait, 0.001))
        try:
            data = sock.recv(262144)
        except _socket.timeout:
            if time.monotonic() - last_write >= heartbeat:
                emit({"t": "hb"})
                last_write = time.monotonic()
            continue
        except OSError:
            data = b""
        if not data:
            break
        pending += data
        cut = pending.rfind(b"\n")
        if cut < 0:
            continue
        lines, pending = pending[: cut + 1], pending[cut + 1 :]
        if started_at is None and lines.startswith(START):
            started_at = time.monotonic()
            kernel = json.loads(lines.split(b"\n", 1)[0]).get("kernel")
        last = lines[:-1].rsplit(b"\n", 1)[-1]
        if last.startswith(FINAL):
            seen_final = True
            # The client's own time goes into the final frame, which stays the last line.
            head = lines[: len(lines) - len(last) - 1]
            write_all(head)
            frame = json.loads(last)
            frame["client_ms"] = round((time.monotonic() - T0) * 1000, 3)
            if lost:
                frame["state_lost"] = True
                frame["notice"] = {"dead": LOST_FOUND_DEAD, "stuck": LOST_STUCK}.get(
                    lost, LOST_REPLACED
                )
            emit(frame)
        else:
            write_all(lines)
        last_write = time.monotonic()
    sock.close()
    if seen_final:
        return
    # The daemon closed the connection without a final frame: it died.
    tail = log_tail(directory, kernel or "?")
    replace_daemon(directory, req, pid if is_daemon(pid, directory) else 0)
    final(
        error("KernelDied", "the Python kernel process died while running the cell", tail),
        state_lost=True,
        notice=LOST_DEAD,
        spill=spill_of(body),
    )


def serves_orphan(directory: str) -> bool:
    """True when the daemon is serving a client that is gone (see the daemon's ``busy``)."""
    try:
        with open(os.path.join(directory, "busy"), "rb") as f:
            owner = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return False  # between requests, or just starting one
    return owner != os.getpid() and not alive(owner)


def grace_of(body: Frame) -> float:
    """How long an orphaned cell gets to stop: this request's grace, or the default."""
    try:
        return max(0.0, float(body.get("grace") or 3.0))
    except (TypeError, ValueError):
        return 3.0


def restart_stuck(directory: str, req: Frame, pid: int) -> _socket.socket:
    """Kill the wedged daemon ``pid`` and return a connection to a fresh one.

    Another queued client may have done it first: then connect to the daemon it started.
    """
    with StartLock(directory):
        if read_pid(directory) == pid:
            kill_daemon(pid)
            return start_daemon(directory, req)
    return open_kernel(directory, req)[0]


def replace_daemon(directory: str, req: Frame, pid: int) -> None:
    """Kill the daemon ``pid`` (0: already gone) and start a fresh one for the next call.

    A fresh daemon that fails to start is left to the next call to report: this call's own
    outcome (a timeout, a death) is what the caller must hear now.
    """
    with StartLock(directory):
        if pid:
            kill_daemon(pid)
        try:
            start_daemon(directory, req).close()
        except (Refused, NeedSource, OSError):
            pass


def spill_of(body: Frame) -> Optional[str]:
    """The file of frames a dead or killed cell wrote past the streamed budget, if any.

    The host fetches it (the output before the end included) and has the job directory removed.
    """
    path = os.path.join(body["job"], "frames")
    return path if os.path.exists(path) else None


def staged_paths(paths: Any) -> List[str]:
    """The files a large request body was uploaded to, in order (only job files are accepted)."""
    if not paths:
        return []
    if not isinstance(paths, list) or not all(
        isinstance(p, str) and os.path.dirname(os.path.dirname(os.path.normpath(p))) == JOBS_ROOT
        for p in paths
    ):
        raise Refused("the request named staged files outside the job directories")
    return paths


def read_staged(paths: List[str]) -> Frame:
    """The request body the host uploaded to ``paths`` (too large for argv), as JSON."""
    import json

    chunks = []
    try:
        for path in paths:
            with open(path, "rb") as f:
                chunks.append(f.read())
        body = json.loads(b"".join(chunks))
    except (OSError, ValueError) as exc:
        raise Refused("the staged request could not be read: %s" % exc) from None
    if not isinstance(body, dict):
        raise Refused("the staged request is not an object")
    return body


def remove_staged(paths: List[str]) -> None:
    """Free the disk now; the host also has the job directory removed by its next request."""
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
    if paths:
        try:
            os.rmdir(os.path.dirname(paths[0]))
        except OSError:
            pass


def begin_early(argv: List[str]) -> Tuple[Optional[str], Optional[Opening]]:
    """The kernel's directory and, for an operation that opens the kernel, its opening begun.

    Before ``json`` is imported; any failure is left for :func:`main` to meet and report.
    """
    req = request_args({}, argv)
    try:
        directory = kernel_dir(req["key"])
        if req["op"] not in OPENS:
            return directory, None
        return directory, begin_open(directory, req)
    except (Refused, NeedSource, OSError):
        return None, None


def request_args(req: Frame, argv: List[str]) -> Frame:
    """``req`` with the operation and the daemon the argv items after the request name."""
    op, key, sha, cwd, daemon = (argv + [""] * 5)[:5]
    req.update(op=op, key=key, daemon_sha=sha, cwd=cwd or None, daemon=daemon or None)
    return req


def main() -> None:
    # By hand: frame_line would import json, which waits until the daemon is on its way.
    write_all(b'{"t":"pid","pid":%d}\n' % os.getpid())
    parts = int(sys.argv[2])
    named = sys.argv[3 + parts :]
    directory, opening = begin_early(named)
    import json

    req = json.loads(binascii.a2b_base64("".join(sys.argv[3 : 3 + parts])))
    request_args(req, named)
    req["call"] = "".join(c for c in sys.argv[1] if c.isalnum())[:64] or str(os.getpid())
    cleanup(req.get("rm"))
    if HUB_FORK is not None:
        # Now that this process has little left to do but wait: the hub compiles and preloads
        # on the CPU it leaves, not on the one a starting daemon needs.
        HUB_FORK()
    op = req.get("op")
    try:
        directory = directory or kernel_dir(str(req["key"]))
        if op in OPENS:
            staged = staged_paths(req.get("staged"))
            if staged:
                req["body"] = read_staged(staged)
            try:
                sock, spawned, lost = open_kernel(directory, req, opening)
            except NeedSource:
                final(need_source=True)  # the staged body stays for the retry
                return
            remove_staged(staged)
            relay(directory, req, sock, spawned, lost)
        elif op == "interrupt":
            pid = read_pid(directory)
            if pid:
                os.kill(pid, SIGINT)
            final(running=bool(pid))
        elif op == "restart":
            with StartLock(directory):
                pid = read_pid(directory)
                if pid:
                    kill_daemon(pid)
                try:
                    sock = start_daemon(directory, req)
                except NeedSource:
                    final(need_source=True)
                    return
            req["body"] = {"op": "ping"}
            relay(directory, req, sock, True, None)
        elif op == "close":
            with StartLock(directory):
                pid = read_pid(directory)
                if pid:
                    kill_daemon(pid)
                import shutil

                shutil.rmtree(directory, ignore_errors=True)
            final(running=bool(pid))
        else:
            final(error("ValueError", "unknown kernel operation %r" % (op,)))
    except Refused as exc:
        final(error("KernelUnavailable", str(exc)))


main()
