"""What a namespace sandbox's root is made of, prepared once when the server starts.

A namespace sandbox sees a minimal root, like a fresh microVM, and nothing else of the host
(:mod:`lizard_local.sandbox_agent` builds it):

- the host's system directories :data:`SYSTEM_DIRS` (``/usr``, ``/bin``, ``/sbin``, ``/lib*``,
  ``/sys``), read-only; the ones that are links on the host (a merged ``/usr``) stay links;
- the Python the templates use, read-only, under :data:`MOUNT_ROOT` unless it already lies in a
  system directory: the base installation at ``/opt/lizard-local/python``, each site-packages
  folder of the server's environment (ipykernel, numpy...) at ``/opt/lizard-local/site/N`` and
  the templates at ``/opt/lizard-local/templates``. A Python whose executable finds ``libpython``
  through an absolute search path (pyenv's) gets a copy of the executable with that path moved,
  bound over the original inside the sandbox (see :mod:`lizard_local.elf_runpath`);
- its own ``/etc``: copy-on-write over a copy of the host's ``/etc`` taken here, in which uid
  1000 is ``user``;
- its own empty ``/tmp``, ``/root``, ``/home/user``, ``/workspace``, ``/var``, ``/run``, ``/opt``...
  on a writable root, a private ``/dev`` and a fresh ``/proc``.

So a pyenv interpreter under ``/root/.pyenv`` or a virtual environment inside a checkout is
usable in the sandbox while ``/root`` is empty and the checkout absent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import site
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from lizard_local.elf_runpath import relocate_runpath

__all__ = ["MOUNT_ROOT", "SYSTEM_DIRS", "RootPlan", "copy_etc", "plan_root"]

#: Host top-level directories a Linux userland needs, bound read-only into every sandbox.
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "sys")
#: Where the interpreter and the templates appear inside a sandbox when not in a system directory.
MOUNT_ROOT = "/opt/lizard-local"
#: Top-level links a symlinked ``/etc`` entry may point into and still work inside a sandbox.
_REACHABLE = tuple(f"/{d}/" for d in (*SYSTEM_DIRS, "etc", "proc", "dev"))


@dataclass(frozen=True)
class RootPlan:
    """The parts of a namespace sandbox's root that come from the host."""

    #: Host top-level entries bound read-only (or re-created as links) at the same path.
    system: tuple[str, ...]
    #: (host path, sandbox path) bound read-only, in order (a later one may lie inside an earlier).
    binds: tuple[tuple[str, str], ...]
    #: The copy of the host's ``/etc`` each sandbox's own ``/etc`` starts from.
    etc: str
    #: The Python executable as sandboxes see it (what the templates' ``python3`` links to).
    python: str
    #: Host site-packages folder -> the path it has inside a sandbox.
    site_dirs: dict[str, str]

    def inside(self, host_path: str) -> str:
        """The path a host path bound by this plan has inside a sandbox (itself if unmoved)."""
        return _inside(self.binds, os.path.realpath(host_path))


def _inside(binds: list[tuple[str, str]] | tuple[tuple[str, str], ...], path: str) -> str:
    for src, dst in sorted(binds, key=lambda b: -len(b[0])):
        if path == src or path.startswith(src + "/"):
            return dst + path[len(src) :]
    return path


def _in_system_dir(path: str) -> bool:
    return any(path == f"/{d}" or path.startswith(f"/{d}/") for d in SYSTEM_DIRS)


def _base_executable() -> str:
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def server_site_dirs() -> list[str]:
    """The site-packages folders of the Python running the server (for ``interpreter``)."""
    dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    purelib = sysconfig.get_paths()["purelib"]
    if purelib not in dirs and os.path.isdir(purelib):
        dirs.append(purelib)
    return [os.path.realpath(d) for d in dirs]


def plan_root(state_dir: Path, site_dirs: list[str]) -> RootPlan:
    """Copy ``/etc``, relocate the interpreter if needed; the plan every sandbox is built from.

    ``site_dirs`` are the host site-packages folders the ``interpreter`` template adds. The
    templates themselves are expected under ``state_dir/templates``.
    """
    binds: list[tuple[str, str]] = []
    exe = _base_executable()
    prefix = os.path.realpath(sys.base_prefix)
    python = exe
    if not _in_system_dir(prefix) and (exe == prefix or exe.startswith(prefix + "/")):
        moved = f"{MOUNT_ROOT}/python"
        binds.append((prefix, moved))
        python = moved + exe[len(prefix) :]
        patched = _patched_executable(exe, prefix, moved, state_dir)
        if patched is not None:
            binds.append((patched, python))
    elif not _in_system_dir(exe):
        # An executable outside its prefix (unusual): bind its folder as it is.
        binds.append((os.path.dirname(exe), f"{MOUNT_ROOT}/python-bin"))
        python = f"{MOUNT_ROOT}/python-bin/{os.path.basename(exe)}"
    placed: dict[str, str] = {}
    moved_sites = 0
    for host in site_dirs:
        if _in_system_dir(host) or host == prefix or host.startswith(prefix + "/"):
            placed[host] = _inside(binds, host)
        else:
            placed[host] = f"{MOUNT_ROOT}/site/{moved_sites}"
            binds.append((host, placed[host]))
            moved_sites += 1
    binds.append((str(state_dir / "templates"), f"{MOUNT_ROOT}/templates"))
    etc = state_dir / "etc"
    copy_etc(Path("/etc"), etc)
    _add_user_account(etc)
    return RootPlan(SYSTEM_DIRS, tuple(binds), str(etc), python, placed)


def _patched_executable(exe: str, prefix: str, moved: str, state_dir: Path) -> str | None:
    """A copy of ``exe`` whose library search path follows the move, or None if not needed."""
    try:
        data = Path(exe).read_bytes()
        new = relocate_runpath(data, prefix, moved)
    except (OSError, ValueError) as exc:
        raise RuntimeError(
            f"cannot relocate the Python at {prefix} into sandboxes: {exc}; "
            "run lizard-local with a Python installed elsewhere or with --isolation host"
        ) from exc
    if new is None:
        return None
    target = state_dir / "python-executable"
    target.write_bytes(new)
    os.chmod(target, 0o755)
    return str(target)


def copy_etc(src: Path, dst: Path) -> None:
    """Copy a directory tree with modes and owners; unreadable and special files are left out.

    A link that leads out of ``/etc`` to a place a sandbox does not have (``resolv.conf`` into
    ``/run``) is replaced by a copy of the file it leads to.
    """
    st = os.lstat(src)
    dst.mkdir(mode=0o700)
    for entry in os.scandir(src):
        target = dst / entry.name
        try:
            info = entry.stat(follow_symlinks=False)
            if entry.is_symlink():
                link = os.readlink(entry.path)
                resolved = os.path.realpath(entry.path)
                if resolved.startswith(_REACHABLE) or not os.path.isfile(resolved):
                    os.symlink(link, target)
                    _chown(target, info, follow=False)
                    continue
                info = os.stat(resolved)
                shutil.copyfile(resolved, target)
            elif entry.is_dir(follow_symlinks=False):
                copy_etc(Path(entry.path), target)
                continue
            elif entry.is_file(follow_symlinks=False):
                shutil.copyfile(entry.path, target)
            else:
                continue  # sockets, FIFOs, devices
            _chown(target, info)
            os.chmod(target, info.st_mode & 0o7777)
        except OSError:
            continue
    _chown(dst, st)
    os.chmod(dst, st.st_mode & 0o7777)


def _chown(path: Path, like: os.stat_result, follow: bool = True) -> None:
    """Give ``path`` the owner of ``like``; as another user than root, keep one's own."""
    with contextlib.suppress(PermissionError):
        os.chown(path, like.st_uid, like.st_gid, follow_symlinks=follow)


#: Account database file -> (the line for ``user``, the field holding the id, or None).
_USER_LINES = {
    "passwd": ("user:x:1000:1000::/home/user:/bin/sh", 2),
    "group": ("user:x:1000:", 2),
    "shadow": ("user:!:19000:0:99999:7:::", None),
    "gshadow": ("user:!::", None),
}


def _add_user_account(etc: Path) -> None:
    """Make uid and gid 1000 the ``user`` account in the copied account files."""
    for name, (line, id_field) in _USER_LINES.items():
        path = etc / name
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        kept = [
            old
            for old in lines
            if not old.startswith("user:")
            and not (id_field is not None and old.split(":")[id_field : id_field + 1] == ["1000"])
        ]
        mode = path.stat().st_mode
        path.write_text("\n".join([*kept, line]) + "\n")
        os.chmod(path, mode & 0o7777)
