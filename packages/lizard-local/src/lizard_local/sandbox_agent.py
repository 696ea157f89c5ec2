"""The sandbox agent: one long-lived process per sandbox that starts and tracks all its processes.

It is the emulator's stand-in for a microVM's init and part of the emulator itself; it is not
lizard_core's guest command agent, a program that adapters run in a sandbox through ``exec``.
The server starts one per sandbox (``python -I -S sandbox_agent.py FD``) and talks to it over an
``AF_UNIX``/``SOCK_SEQPACKET`` socket passed as file descriptor ``FD``; the first datagram is the
agent's configuration. The agent is standard library only and never imports the rest of the
package.

Contract:

- In namespace mode the agent is PID 1 of a fresh PID namespace (started by ``unshare --pid
  --mount --fork --kill-child``). It builds a private root, pivots into it, mounts a fresh
  ``/proc`` and, without internet, brings up ``lo`` in its empty network namespace. When PID 1
  exits the kernel kills every process of the namespace, so a sandbox can never leak processes.
- The private root is minimal, like a fresh microVM's, and shows nothing else of the host (see
  :mod:`lizard_local.sandbox_root` for what the server puts in it): the sandbox's own directory
  on disk as ``/`` (writable, empty ``/tmp``, ``/root``, ``/home/user``, ``/workspace``, ``/var``,
  ``/run``, ``/opt``...), the host's system directories bound in **read-only** (recursively,
  every mount below them too), the interpreter and templates read-only under
  ``/opt/lizard-local``, its own ``/etc`` (copy-on-write over a copy of the host's), a private
  ``/dev`` (``null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty`` bound from the host, a
  fresh ``/dev/pts`` and a private ``/dev/shm``) and ``/proc`` (a fresh one for the PID
  namespace, with ``/proc/sys``, ``/proc/sysrq-trigger`` and the other host-wide knobs
  read-only). Anything that cannot be made so fails the sandbox's start. Commands also lose the
  capabilities that would undo this or reach past it (``CAP_SYS_ADMIN``, ``CAP_MKNOD``,
  ``CAP_SYS_MODULE``, ``CAP_SYS_RAWIO``, ``CAP_NET_ADMIN``, ``CAP_DAC_READ_SEARCH``...; see
  :data:`DROPPED_CAPS`).
- In host mode the agent is a child subreaper: orphans (``start_new_session`` kernels, daemons)
  are re-parented to it, so "every process of the sandbox" is "every descendant of the agent".
  Every process also carries ``LIZARD_EMU_SANDBOX=<id>`` in its environment as a second net.
- Requests are JSON datagrams ``{"id", "op", ...}``; a request too big for one datagram travels
  in a memfd passed with ``SCM_RIGHTS``. Replies carry the same ``id``. ``exec`` answers with the
  pid and passes the read ends of the stdout and stderr pipes, so output never goes through the
  agent. Exits are reported as ``{"event": "exit", "pid", "code"}`` (128 + signal on a signal).
- End of file on the socket (the server went away) or ``shutdown`` kills every process of the
  sandbox and exits.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

MAX_DATAGRAM = 65536
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 16384
MS_UNBINDABLE = 1 << 17
MS_PRIVATE = 1 << 18
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
MNT_DETACH = 2
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (Linux 5.12+)
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 1
#: The sandbox's own top-level directories besides ``/tmp``, ``/root``, ``/home/user`` and
#: ``/workspace`` (made by the server), ``/etc``, ``/dev``, ``/proc`` and the host's system
#: directories: (path, mode).
SKELETON = (
    ("/var", 0o755),
    ("/var/tmp", 0o1777),
    ("/var/lib", 0o755),
    ("/var/cache", 0o755),
    ("/var/log", 0o755),
    ("/var/spool", 0o755),
    ("/var/mail", 0o2775),
    ("/run", 0o755),
    ("/opt", 0o755),
    ("/srv", 0o755),
    ("/mnt", 0o755),
    ("/media", 0o755),
)
#: Host devices bound into the sandbox's private ``/dev``.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
#: ``/proc`` entries that act on the whole host: read-only inside the sandbox.
PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
#: Capabilities removed from the bounding set of every command (even one run as root), so a
#: command cannot remount the host's directories writable (SYS_ADMIN), make device nodes for
#: the host's disks (MKNOD), write raw devices or kernel memory (SYS_RAWIO), load modules,
#: reconfigure the host's network (NET_ADMIN), open files by handle outside its root
#: (DAC_READ_SEARCH), set the clock, reboot, or change audit, MAC, BPF or perf settings.
DROPPED_CAPS = {
    "DAC_READ_SEARCH": 2,
    "LINUX_IMMUTABLE": 9,
    "NET_ADMIN": 12,
    "SYS_MODULE": 16,
    "SYS_RAWIO": 17,
    "SYS_PACCT": 20,
    "SYS_ADMIN": 21,
    "SYS_BOOT": 22,
    "SYS_TIME": 25,
    "SYS_TTY_CONFIG": 26,
    "MKNOD": 27,
    "AUDIT_CONTROL": 30,
    "MAC_OVERRIDE": 32,
    "MAC_ADMIN": 33,
    "SYSLOG": 34,
    "WAKE_ALARM": 35,
    "BLOCK_SUSPEND": 36,
    "PERFMON": 38,
    "BPF": 39,
    "CHECKPOINT_RESTORE": 40,
}

_libc: Any = None


def send_datagram(sock: socket.socket, data: bytes, fds: list[int]) -> None:
    """Send one datagram, with ``fds`` passed as ``SCM_RIGHTS`` when there are any."""
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.send(data)


def passed_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    """The file descriptors a received datagram carried (its ``SCM_RIGHTS`` messages)."""
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(payload[: len(payload) - len(payload) % arr.itemsize])
            fds.extend(arr)
    return fds


def libc() -> Any:
    """The C library, loaded once (for mount, pivot_root and prctl)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def check(rc: int, what: str) -> None:
    """Raise OSError with errno when a libc call failed."""
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src: str, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """The mount system call; OSError on failure."""
    check(
        libc().mount(
            src.encode(),
            dst.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {src} on {dst}",
    )


def bind(src: str, dst: str, readonly: bool = False) -> None:
    """Bind ``src`` (recursively) onto ``dst``; with ``readonly``, every mount of it read-only."""
    mount(src, dst, None, MS_BIND | MS_REC)
    if readonly:
        make_readonly(dst)


def unescape_mount_path(field: str) -> str:
    """A path from ``/proc/self/mountinfo`` (spaces and the like are octal escapes there)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts_below(path: str) -> list[tuple[str, set[str]]]:
    """(mount point, per-mount options) of the mount at ``path`` and every mount below it."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = unescape_mount_path(fields[4])
            if point == path or point.startswith(path.rstrip("/") + "/"):
                out.append((point, set(fields[5].split(","))))
    return out


def make_readonly(path: str) -> None:
    """Make the mount at ``path`` and every mount below it read-only; OSError if impossible.

    ``MS_REMOUNT | MS_BIND | MS_RDONLY`` changes one mount only (``MS_REC`` is ignored there), so
    this uses ``mount_setattr(AT_RECURSIVE)`` and, on kernels without it, remounts each mount of
    the tree in turn, keeping its other per-mount flags (clearing a locked one would fail).
    """
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)
    rc = libc().syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(-100),  # AT_FDCWD; the path is absolute anyway
        path.encode(),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    if rc == 0:
        return
    names = {
        "nosuid": MS_NOSUID,
        "nodev": MS_NODEV,
        "noexec": MS_NOEXEC,
        "noatime": MS_NOATIME,
        "nodiratime": MS_NODIRATIME,
        "relatime": MS_RELATIME,
        "strictatime": MS_STRICTATIME,
    }
    for point, options in mounts_below(path):
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        for name, flag in names.items():
            if name in options:
                flags |= flag
        mount("none", point, None, flags)
    for point, options in mounts_below(path):
        if "ro" not in options:
            raise OSError(f"{point} is still writable")


def make_mountpoint(src: str, dst: str) -> bool:
    """Create ``dst`` of the same kind as ``src`` (directory or file); False if impossible."""
    if os.path.isdir(dst) if os.path.isdir(src) else os.path.isfile(dst):
        return True  # already there (a file bound over another one)
    try:
        if os.path.isdir(src):
            os.makedirs(dst, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "a"):
                pass
        return True
    except OSError:
        return False


def pivot_into(new_root: str) -> None:
    """Make ``new_root`` the root of this mount namespace and drop the old one."""
    os.chdir(new_root)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is not None and libc().syscall(number, b".", b".") == 0:
        # pivot_root(".", ".") stacks the old root on top of the new one; detach it.
        check(libc().umount2(b".", MNT_DETACH), "umount old root")
    else:
        mount(new_root, "/", None, MS_MOVE)
        os.chroot(".")
    os.chdir("/")


def bring_up_loopback() -> None:
    """Set IFF_UP on ``lo`` in a fresh network namespace (SIOCGIFFLAGS / SIOCSIFFLAGS)."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, req))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))


def setup_dev(dev: str) -> None:
    """A private ``/dev``: a few host devices, a fresh ``/dev/pts`` and a private ``/dev/shm``.

    The host's own ``/dev`` is not bound in: through it a command could delete the host's device
    nodes or write its disks.
    """
    os.makedirs(dev, exist_ok=True)
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=1m")
    for name in DEVICES:
        src = "/dev/" + name
        if os.path.exists(src) and make_mountpoint(src, f"{dev}/{name}"):
            bind(src, f"{dev}/{name}")
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/pts")
    with contextlib.suppress(OSError):  # no pseudo-terminals is acceptable, a shared host one not
        mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666")
    os.mkdir(f"{dev}/shm")
    mount("tmpfs", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")


def setup_proc(proc: str) -> None:
    """A fresh ``/proc`` for the PID namespace, its host-wide knobs read-only."""
    os.makedirs(proc, exist_ok=True)
    mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_READONLY:
        path = f"{proc}/{name}"
        if os.path.exists(path):
            bind(path, path, readonly=True)


def drop_capabilities() -> None:
    """Remove :data:`DROPPED_CAPS` from the bounding set: every command started later lacks them.

    The agent keeps its own capabilities (the bounding set only limits what ``execve`` grants).
    """
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 40
    for cap in DROPPED_CAPS.values():
        if cap <= last:
            check(libc().prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")


def make_skeleton(new_root: str) -> None:
    """The sandbox's own top-level directories (:data:`SKELETON`) and the usual links in /var.

    ``/run`` is a tmpfs, as on a booted system.
    """
    old = os.umask(0)
    try:
        for path, mode in SKELETON:
            if not os.path.isdir(new_root + path):  # a reboot (resume, restore) keeps them
                os.mkdir(new_root + path, mode)
    finally:
        os.umask(old)
    mount("tmpfs", new_root + "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=20%")
    os.mkdir(new_root + "/run/lock", 0o1777)
    os.chmod(new_root + "/run/lock", 0o1777)
    for link, target in (("/var/run", "../run"), ("/var/lock", "../run/lock")):
        if not os.path.lexists(new_root + link):
            os.symlink(target, new_root + link)


def copy_tree(src: str, dst: str) -> None:
    """Copy a directory tree with modes and owners (the fallback for ``/etc`` without overlay)."""
    st = os.lstat(src)
    os.makedirs(dst, exist_ok=True)
    for entry in os.scandir(src):
        target = os.path.join(dst, entry.name)
        info = entry.stat(follow_symlinks=False)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.is_dir(follow_symlinks=False):
            copy_tree(entry.path, target)
            continue
        else:
            with open(entry.path, "rb") as fin, open(target, "wb") as fout:
                while chunk := fin.read(1 << 20):
                    fout.write(chunk)
            os.chmod(target, info.st_mode & 0o7777)
        os.lchown(target, info.st_uid, info.st_gid)
    os.chown(dst, st.st_uid, st.st_gid)
    os.chmod(dst, st.st_mode & 0o7777)


def setup_etc(master: str, dst: str, scratch: str) -> None:
    """The sandbox's own writable ``/etc``: copy-on-write over ``master`` (a copy of the host's).

    The changes live in a tmpfs of the sandbox's own (gone with it); without overlayfs the
    master is copied instead, which is slower.
    """
    os.makedirs(scratch, exist_ok=True)
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "mode=700")
    os.mkdir(scratch + "/upper")
    os.mkdir(scratch + "/work")
    os.makedirs(dst, exist_ok=True)
    options = f"lowerdir={master},upperdir={scratch}/upper,workdir={scratch}/work"
    try:
        mount("overlay", dst, "overlay", MS_NOSUID | MS_NODEV, options)
    except OSError:
        copy_tree(master, dst)


def setup_namespace(cfg: dict[str, Any]) -> None:
    """Build the sandbox's private root inside the fresh mount namespace and pivot into it."""
    new_root = cfg["rootfs"]
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    # The root is the sandbox's own directory on disk (its private directories already made by
    # the server), bound onto itself: pivot_root needs a mount point. Unbindable: should the
    # state directory lie inside a system directory, binding that leaves the sandbox out.
    mount(new_root, new_root, None, MS_BIND)
    mount("none", new_root, None, MS_UNBINDABLE)
    for name in cfg["system"]:
        src = "/" + name
        dst = new_root + src
        if os.path.islink(src):
            if not os.path.lexists(dst):  # a reboot finds the links of the first boot
                os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src):
            if not os.path.isdir(dst):
                os.mkdir(dst, 0o755)
            bind(src, dst, readonly=True)  # a failure fails the sandbox
    make_skeleton(new_root)
    setup_etc(cfg["etc"], new_root + "/etc", cfg["scratch"])
    if cfg.get("hostname"):
        with open(new_root + "/etc/hostname", "w") as f:
            f.write(cfg["hostname"] + "\n")
    # The interpreter and the templates, read-only, where the templates expect them.
    for src, inner in cfg["binds"]:
        dst = new_root + inner
        parent = os.path.dirname(dst)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o755)
        if not make_mountpoint(src, dst):
            raise OSError(f"cannot make a mount point at {inner}")
        bind(src, dst, readonly=True)
    if cfg.get("volume"):
        # A volume: a host directory of its own at /workspace, writable, outliving the sandbox.
        bind(cfg["volume"], new_root + "/workspace")
    setup_dev(new_root + "/dev")
    # Host paths the sandbox must not see (the other sandboxes' directories), should they lie
    # inside a bound directory.
    for path in cfg.get("hide", []):
        if os.path.isdir(new_root + path):
            mount("tmpfs", new_root + path, "tmpfs", MS_RDONLY | MS_NOSUID, "mode=755")
    setup_proc(new_root + "/proc")
    pivot_into(new_root)
    if cfg.get("hostname"):
        with contextlib.suppress(OSError):
            socket.sethostname(cfg["hostname"])
    if cfg.get("net"):
        with contextlib.suppress(OSError):
            bring_up_loopback()
    drop_capabilities()


def read_proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, session, state) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[1]), int(fields[3]), fields[0].decode()


def all_pids() -> list[int]:
    """Every pid visible in /proc."""
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


class Agent:
    """The agent's state and main loop."""

    def __init__(self, sock: socket.socket, cfg: dict[str, Any]) -> None:
        self.sock = sock
        self.cfg = cfg
        self.namespace = bool(cfg.get("namespace"))
        self.marker = ("LIZARD_EMU_SANDBOX=" + cfg["sandbox_id"]).encode()
        self.me = os.getpid()
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.running = True

    # --- process sets -------------------------------------------------------------------------

    def sandbox_pids(self) -> list[int]:
        """Every process of the sandbox except the agent itself."""
        if self.namespace:
            return [p for p in all_pids() if p != self.me]
        table: dict[int, int] = {}
        for pid in all_pids():
            st = read_proc_stat(pid)
            if st is not None:
                table[pid] = st[0]
        found: set[int] = set()
        frontier = [self.me]
        while frontier:
            parent = frontier.pop()
            for pid, ppid in table.items():
                if ppid == parent and pid not in found:
                    found.add(pid)
                    frontier.append(pid)
        for pid in table:
            if pid not in found and pid != self.me and self.has_marker(pid):
                found.add(pid)
        return sorted(found)

    def has_marker(self, pid: int) -> bool:
        """Whether ``pid``'s environment carries this sandbox's marker."""
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return self.marker in f.read().split(b"\0")
        except OSError:
            return False

    def tree(self, root: int) -> list[int]:
        """``root`` and its descendants that stayed in its session (detached daemons excluded)."""
        stats: dict[int, tuple[int, int, str]] = {}
        for pid in all_pids():
            st = read_proc_stat(pid)
            if st is not None:
                stats[pid] = st
        if root not in stats:
            return []
        session = stats[root][1]
        out = [root]
        frontier = [root]
        while frontier:
            parent = frontier.pop()
            for pid, (ppid, sid, _state) in stats.items():
                if ppid == parent and pid not in out:
                    frontier.append(pid)
                    if sid == session:
                        out.append(pid)
        return out

    def signal_all(self, sig: int, pids: list[int]) -> None:
        """Send ``sig`` to each pid, ignoring the ones already gone."""
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def kill_everything(self) -> None:
        """SIGKILL every process of the sandbox until none is left (bounded)."""
        for _ in range(200):
            pids = self.sandbox_pids()
            if not pids:
                return
            self.signal_all(signal.SIGKILL, pids)
            self.reap()
            time.sleep(0.005)

    # --- messaging ----------------------------------------------------------------------------

    def send(self, msg: dict[str, Any], fds: list[int] | None = None) -> None:
        """Send one datagram (with optional file descriptors)."""
        data = json.dumps(msg).encode()
        try:
            send_datagram(self.sock, data, fds or [])
        except OSError:
            self.running = False

    def receive(self) -> dict[str, Any] | None:
        """Read one request; None on end of file."""
        data, ancdata, _flags, _addr = self.sock.recvmsg(
            MAX_DATAGRAM, socket.CMSG_SPACE(4 * array.array("i").itemsize)
        )
        if not data:
            return None
        fds = passed_fds(ancdata)
        msg: dict[str, Any] = json.loads(data)
        if msg.get("memfd") and fds:
            with os.fdopen(fds.pop(0), "rb") as f:
                f.seek(0)
                msg = json.loads(f.read())
        for fd in fds:
            os.close(fd)
        return msg

    # --- operations ---------------------------------------------------------------------------

    def op_exec(self, msg: dict[str, Any]) -> None:
        """Start a command with fresh pipes; reply with its pid and the pipes' read ends."""
        argv: list[str] = msg["argv"]
        cwd: str = msg["cwd"]
        if not os.path.isdir(cwd):
            self.send({"id": msg["id"], "error": "workdir", "message": f"{cwd}: no such directory"})
            return
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        uid = msg.get("uid")
        gid = msg.get("gid")
        switch = uid is not None and os.geteuid() == 0 and uid != os.geteuid()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                cwd=cwd,
                env=msg["env"],
                start_new_session=True,
                user=uid if switch else None,
                group=gid if switch else None,
                extra_groups=[] if switch else None,
                close_fds=True,
            )
        except FileNotFoundError:
            os.close(out_r)
            os.close(err_r)
            self.send({"id": msg["id"], "error": "notfound", "message": f"{argv[0]}: not found"})
            return
        except OSError as exc:
            os.close(out_r)
            os.close(err_r)
            text = f"{argv[0]}: {exc.strerror or exc}"
            self.send({"id": msg["id"], "error": "exec", "message": text})
            return
        finally:
            os.close(out_w)
            os.close(err_w)
        self.children[proc.pid] = proc
        self.send({"id": msg["id"], "pid": proc.pid}, [out_r, err_r])
        os.close(out_r)
        os.close(err_r)

    def op_signal(self, msg: dict[str, Any]) -> None:
        """Signal a process and its same-session descendants; 404-ish error if not ours."""
        pid = int(msg["pid"])
        if pid == self.me or pid not in self.sandbox_pids():
            self.send({"id": msg["id"], "error": "nopid", "message": f"no process {pid}"})
            return
        self.signal_all(int(msg["signal"]), self.tree(pid))
        self.send({"id": msg["id"], "ok": True})

    def handle(self, msg: dict[str, Any]) -> None:
        """Dispatch one request."""
        op = msg.get("op")
        if op == "exec":
            self.op_exec(msg)
        elif op == "signal":
            self.op_signal(msg)
        elif op == "pause":
            self.signal_all(signal.SIGSTOP, self.sandbox_pids())
            self.send({"id": msg["id"], "ok": True})
        elif op == "resume":
            self.signal_all(signal.SIGCONT, self.sandbox_pids())
            self.send({"id": msg["id"], "ok": True})
        elif op == "shutdown":
            self.running = False
        else:
            self.send({"id": msg.get("id"), "error": "op", "message": f"unknown op {op!r}"})

    def reap(self) -> None:
        """Collect every exited child; report the ones started by exec."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            proc = self.children.pop(pid, None)
            if proc is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            proc.returncode = code  # reaped here: keep Popen from waiting on a recycled pid
            self.send({"event": "exit", "pid": pid, "code": code})

    def run(self) -> None:
        """Serve requests until shutdown or end of file, then kill everything."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: None)  # only shutdown or EOF stop the agent
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        self.send({"event": "ready", "namespace": self.namespace})
        self.reap()
        while self.running:
            for key, _ in sel.select():
                if key.fileobj is self.sock:
                    try:
                        msg = self.receive()
                    except OSError:
                        msg = None
                    if msg is None:
                        self.running = False
                        break
                    try:
                        self.handle(msg)
                    except Exception as exc:  # keep serving; the server sees the error
                        self.send({"id": msg.get("id"), "error": "agent", "message": repr(exc)})
                else:
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
        self.kill_everything()


def main() -> None:
    """Entry point: ``sandbox_agent.py FD``; the configuration is the first datagram."""
    fd = int(sys.argv[1])
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    cfg: dict[str, Any] = json.loads(sock.recv(MAX_DATAGRAM))
    try:
        if cfg.get("namespace"):
            setup_namespace(cfg)
        else:
            check(libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl subreaper")
    except OSError as exc:
        sock.send(json.dumps({"event": "failed", "message": str(exc)}).encode())
        sys.exit(1)
    Agent(sock, cfg).run()


if __name__ == "__main__":
    main()
