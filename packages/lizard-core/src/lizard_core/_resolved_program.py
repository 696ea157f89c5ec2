"""The program ``lizard_core.resolved_files`` runs in the sandbox (``python3 -I -S -c``).

It runs the resolver, then opens the path it printed one component at a time from ``/`` with
``O_NOFOLLOW``: the path a resolver prints has no symlink in it, so a component that is one now
was swapped in since (``ELOOP``), and nothing is read or written through it. Reads refuse what
is not a regular file before reading (a FIFO would block, a device never end).

argv: ``op small stage resolve_s script args...``; ``op`` is ``read`` or ``write``. A read
prints a file of up to ``small`` bytes; a larger one goes to ``stage`` (created in a new job
folder when ``new_job`` is set, else an existing file opened without following a symlink) and
its size is printed. A write takes its bytes from stdin, or from the files named by
``LIZARD_STAGED`` (``:``-separated) when set. Exit codes are the ``EXIT_*`` constants.
"""

from __future__ import annotations

from typing import Final

EXIT_REFUSED: Final = 90
"""The resolver refused: its exit code on stdout, its stderr forwarded."""
EXIT_ERRNO: Final = 91
"""An ``OSError``: its errno, a newline and the resolved path on stdout, its message on stderr."""
EXIT_LARGE: Final = 92
"""The file is larger than ``small``: it went to the stage, its size on stdout (with no stage:
nothing was copied, nothing printed)."""
EXIT_BAD_PATH: Final = 93
"""The resolver printed something that is not a canonical absolute path."""
EXIT_TIMEOUT: Final = 94
"""The resolver did not finish in time."""

PROGRAM: Final = f"""
import os, select, stat, sys, time
op, small, stage, new_job, limit, script = sys.argv[1:7]
small, limit = int(small), float(limit)
out = sys.stdout.buffer
def end(code, text=b"", err=b""):
    out.write(text); out.flush(); sys.stderr.buffer.write(err[-2000:]); sys.stderr.flush()
    os._exit(code)
def failed(e, path):
    end({EXIT_ERRNO}, b"%d\\n" % (e.errno or 5) + os.fsencode(path), (e.strerror or "").encode())
# The resolver, without the subprocess module (importing it costs more than the whole run).
out_r, out_w = os.pipe()
err_r, err_w = os.pipe()
pid = os.fork()
if not pid:
    try:
        os.setpgid(0, 0)
        os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.execv("/bin/sh", ["sh", "-c", script, "sh"] + sys.argv[7:])
    finally:
        os._exit(127)
os.close(out_w)
os.close(err_w)
got = {{out_r: b"", err_r: b""}}
deadline = time.monotonic() + limit
while out_r in got or err_r in got:
    left = deadline - time.monotonic()
    ready = select.select([fd for fd in got if fd >= 0], [], [], max(left, 0))[0]
    if not ready:
        try:
            os.killpg(pid, 9)
        except OSError:
            pass
        end({EXIT_TIMEOUT}, err=b"the resolver took longer than %d s" % limit)
    for fd in ready:
        piece = os.read(fd, 65536)
        if piece:  # the first 64 KiB (and one byte) of stdout, the last of stderr
            got[fd] = (got[fd] + piece)[:65537] if fd == out_r else (got[fd] + piece)[-65536:]
        else:
            got[-1 if fd == out_r else -2] = got.pop(fd)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
if code:
    end({EXIT_REFUSED}, str(code if code > 0 else 128 - code).encode(), got[-2])
stdout = got[-1]
path = os.fsdecode(stdout[:-1] if stdout.endswith(b"\\n") else stdout)
if len(stdout) > 65536 or b"\\0" in stdout or not path.startswith("/") \\
        or os.path.normpath(path) != path:
    end({EXIT_BAD_PATH}, err=b"the resolver printed no canonical path: %r" % stdout[:200])
N = os.O_NOFOLLOW | os.O_CLOEXEC
def parent(path, create):
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | N)
    for part in path.split("/")[1:-1]:
        try:
            next_fd = os.open(part, os.O_PATH | os.O_DIRECTORY | N, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(part, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            next_fd = os.open(part, os.O_PATH | os.O_DIRECTORY | N, dir_fd=fd)
        except NotADirectoryError:
            if stat.S_ISLNK(os.lstat(part, dir_fd=fd).st_mode):
                raise OSError(40, "a component became a symlink after it was resolved")
            raise
        os.close(fd)
        fd = next_fd
    return fd, path.rsplit("/", 1)[1] or "."
def copy(source, target, first=b""):
    total = 0
    while True:
        piece = first or os.read(source, 1 << 20)
        first = b""
        if not piece:
            return total
        view = memoryview(piece)
        while view:
            view = view[os.write(target, view):]
        total += len(piece)
def open_stage():
    if new_job == "1":
        jobs = os.path.dirname(os.path.dirname(stage))
        os.makedirs(jobs, 0o700, exist_ok=True)
        os.mkdir(os.path.dirname(stage), 0o700)
        return os.open(stage, os.O_WRONLY | os.O_CREAT | os.O_EXCL | N, 0o600)
    return os.open(stage, os.O_WRONLY | os.O_TRUNC | N)
try:
    where, base = parent(path, op == "write")
    if op == "read":
        fd = os.open(base, os.O_RDONLY | os.O_NONBLOCK | N, dir_fd=where)
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(21, "Is a directory")
        if not stat.S_ISREG(mode):
            raise OSError(22, "not a regular file (a FIFO, socket or device)")
        head = os.read(fd, small + 1)
        while len(head) <= small:
            more = os.read(fd, small + 1 - len(head))
            if not more:
                end(0, head)
            head += more
        if not stage:
            end({EXIT_LARGE})
        staged = open_stage()
        end({EXIT_LARGE}, str(copy(fd, staged, head)).encode())
    # O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of blocking.
    fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | N, 0o666,
                 dir_fd=where)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise OSError(22, "not a regular file (a FIFO, socket or device)")
    staged = os.environ.get("LIZARD_STAGED")
    for name in staged.split(":") if staged else ():
        source = os.open(name, os.O_RDONLY | N)
        copy(source, fd)
        os.close(source)
    if not staged:
        copy(0, fd)
    end(0)
except OSError as e:
    failed(e, path)
"""
