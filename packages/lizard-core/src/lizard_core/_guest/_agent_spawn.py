"""How the agent starts a command: ``posix_spawn`` where it can, else ``subprocess.Popen``.

Part of the agent program (bundled into it by ``lizard_core._guest.source``).

A command's start is on every ``run``'s path, and ``Popen`` runs a few hundred lines of Python
that touch pages a process forked from the hub must first copy, so :func:`start_command`
spawns directly, with what ``Popen(argv, cwd=cwd, env=env, stdin=DEVNULL or PIPE,
stdout=PIPE, stderr=PIPE, start_new_session=True)`` gives the command:

- the same program: ``argv[0]`` searched in the ``PATH`` of ``env`` (a name with a slash used as
  it is), a candidate that does not exist skipped, another that fails passed over, and the
  first such error raised when none starts (``ENOENT`` when none exists), as ``OSError``;
- the same process: its own session, ``/dev/null`` (read-write) or a pipe as stdin, pipes as
  stdout and stderr, ``SIGPIPE`` and ``SIGXFSZ`` at their defaults (one difference: glibc's
  ``posix_spawn`` leaves its own internal signals 32 and 33 ignored, which no program sets or
  relies on, and which a C library's threads install handlers for), none of this process's
  other descriptors (the inheritable ones are closed for it), ``cwd`` as its working directory
  (this process moves there first: it runs this one command);
- ``Popen`` itself where the command runs as another user or this Python cannot spawn so (no
  ``os.posix_spawn``, no ``setsid`` in the C library's, no ``/proc``).

A started command is ``[pid, stdin, stdout, stderr, popen]``: the write end of its stdin pipe
(None: ``/dev/null``) for the caller to own, the read ends of its output pipes, and the
``Popen`` when one started it (else None); :func:`reap` gives its ``Popen.returncode``.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from ._wait_status import returncode

if TYPE_CHECKING:  # annotations only: the compact program drops this block and every annotation
    from typing import Any, Dict, List, Optional


def start_command(
    argv: List[str], cwd: Optional[str], env: Dict[str, str], piped: bool, options: Any
) -> List[Any]:
    """Start ``argv`` (stdin a pipe when ``piped``); with Popen ``options``, through Popen."""
    if not options:
        try:
            return spawn_command(argv, cwd, env, piped)
        except NotImplementedError:
            pass
    import subprocess

    proc: Any = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # Its own session and process group: timeout and cancellation kill exactly this
        # group, never what the command detached into a session of its own.
        start_new_session=True,
        **options,
    )
    pipes = [proc.stdin, proc.stdout, proc.stderr]
    fds = [pipe and os.dup(pipe.fileno()) for pipe in pipes]  # ours: the file objects go
    for pipe in pipes:
        if pipe:
            pipe.close()
    return [proc.pid] + fds + [proc]


def spawn_command(
    argv: List[str], cwd: Optional[str], env: Dict[str, str], piped: bool
) -> List[Any]:
    """``posix_spawn`` the command (see the module docstring); NotImplementedError: use Popen."""
    if not hasattr(os, "posix_spawn"):
        raise NotImplementedError
    ends = os.pipe() + os.pipe() + os.pipe()  # stdin (unused unless piped), stdout, stderr
    try:
        stdin = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDWR, 0)
        actions: List[Any] = [(os.POSIX_SPAWN_DUP2, ends[0], 0) if piped else stdin]
        actions += [(os.POSIX_SPAWN_DUP2, ends[3], 1), (os.POSIX_SPAWN_DUP2, ends[5], 2)]
        try:
            names = os.listdir("/proc/self/fd")
        except OSError:
            raise NotImplementedError from None
        for name in names:  # what Popen's close_fds closes
            try:
                if int(name) > 2 and os.get_inheritable(int(name)):
                    actions.append((os.POSIX_SPAWN_CLOSE, int(name)))
            except OSError:
                pass  # the listing's own descriptor, closed by now
        if cwd is not None:
            os.chdir(cwd)
        pid = spawn_path(argv, env, actions)
    except BaseException:
        for fd in ends:
            os.close(fd)
        raise
    for fd in ends[0], ends[3], ends[5]:
        os.close(fd)  # the command's ends
    if not piped:
        os.close(ends[1])
    return [pid, ends[1] if piped else None, ends[2], ends[4], None]


def spawn_path(argv: List[str], env: Dict[str, str], actions: List[Any]) -> int:
    """Spawn the first candidate for ``argv[0]`` that starts; else raise as ``Popen`` would."""
    name = argv[0]
    folders = [""] if os.path.dirname(name) else os.get_exec_path(env)
    first = None
    last = OSError(errno.ENOENT, os.strerror(errno.ENOENT), name)
    for path in [os.path.join(folder, name) for folder in folders]:
        try:
            os.stat(path)  # none there: exec would fail the same way, and costs a fork
            return os.posix_spawn(
                path, argv, env, file_actions=actions, setsid=True, setsigdef=(13, 25)
            )  # SIGPIPE and SIGXFSZ at their defaults, as Popen's restore_signals
        except OSError as exc:
            last = exc
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR) and first is None:
                first = exc
    raise first or last


def reap(command: List[Any], block: bool) -> Optional[int]:
    """The command's ``Popen.returncode``, or None while it runs (unless ``block``)."""
    if command[4] is not None:
        return command[4].wait() if block else command[4].poll()  # type: ignore[no-any-return]
    try:
        pid, status = os.waitpid(command[0], 0 if block else os.WNOHANG)
    except ChildProcessError:
        return 0  # reaped elsewhere, as Popen reports it
    return returncode(status) if pid else None  # pid 0: still running
