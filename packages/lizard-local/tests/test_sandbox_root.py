"""The minimal root of a namespace sandbox: nothing of the host but what it needs, read-only."""

from __future__ import annotations

import os
import pwd
import shutil
import struct
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from lizard import Sandbox
from lizard.errors import LizardError

from lizard_local import LocalServer, sandbox_agent
from lizard_local.elf_runpath import relocate_runpath, runpath
from lizard_local.isolation import PRIVATE_DIRS, Isolation
from lizard_local.sandbox_root import (
    MOUNT_ROOT,
    SYSTEM_DIRS,
    RootPlan,
    copy_etc,
    plan_root,
    server_site_dirs,
)
from lizard_local.sandboxes import Registry

CHECKOUT = Path(__file__).resolve().parents[3]
#: Top-level entries of every namespace sandbox besides the host's system directories.
OWN_TOP = {"dev", "etc", "home", "media", "mnt", "opt", "proc", "root", "run", "srv", "tmp"}
OWN_TOP |= {"var", "workspace"}


def need_namespace(server: LocalServer) -> None:
    if server.isolation != "namespace":
        pytest.skip("namespace mode only (root on Linux)")


def run(sandbox: Sandbox, cmd: str | list[str], user: str | None = None) -> tuple[int, str]:
    r = sandbox.process.exec_(cmd, user=user) if user else sandbox.process.exec_(cmd)
    return r.exit_code, r.stdout + r.stderr


# --- what a sandbox sees --------------------------------------------------------------------------


@pytest.mark.parametrize("template", ["base", "interpreter"])
def test_a_fresh_sandbox_has_empty_home_tmp_and_workspace(
    new_sandbox: Callable[..., Sandbox], lizard_local: LocalServer, template: str
):
    need_namespace(lizard_local)
    sandbox = new_sandbox(template)
    dirs = "/tmp /root /home/user /workspace /var/tmp"
    assert run(sandbox, f"find {dirs} -mindepth 1") == (0, "")
    assert run(sandbox, "ls -A /home") == (0, "user")


def test_the_root_holds_system_directories_and_nothing_else_of_the_host(
    sandbox: Sandbox, lizard_local: LocalServer
):
    need_namespace(lizard_local)
    host_system = {d for d in SYSTEM_DIRS if os.path.isdir(f"/{d}")}
    assert set(run(sandbox, "ls -A /")[1].split()) == OWN_TOP | host_system
    assert run(sandbox, "ls -A /opt") == (0, "lizard-local")
    moved = set(run(sandbox, f"ls -A {MOUNT_ROOT}")[1].split())
    assert "templates" in moved
    assert moved <= {"templates", "python", "python-bin", "site"}
    # Links stay links (a merged /usr), so /bin/sh is the host's.
    for name in host_system:
        if os.path.islink(f"/{name}"):
            assert run(sandbox, f"readlink /{name}") == (0, os.readlink(f"/{name}"))
    assert run(sandbox, "/bin/sh -c 'echo ok'") == (0, "ok")


def test_host_files_outside_the_mounts_are_not_readable(
    sandbox: Sandbox, lizard_local: LocalServer
):
    need_namespace(lizard_local)
    fresh = [tempfile.mkdtemp(prefix="lizard-probe-"), tempfile.mkdtemp(dir="/var/tmp")]
    files = [f"{d}/secret" for d in fresh] + [str(CHECKOUT / f".probe-{uuid.uuid4().hex}")]
    try:
        for path in files:
            Path(path).write_text("host secret")
        for path in files:
            code, out = run(sandbox, ["cat", path])
            assert code == 1
            assert "No such file or directory" in out
            with pytest.raises(LizardError) as info:
                sandbox.fs.read_bytes(path)
            assert info.value.status_code == 404
        assert run(sandbox, ["test", "-e", str(CHECKOUT)])[0] == 1
    finally:
        for path in files:
            Path(path).unlink(missing_ok=True)
        for d in fresh:
            shutil.rmtree(d, ignore_errors=True)


def test_adduser_works_and_is_seen_by_no_other_sandbox_nor_the_host(
    new_sandbox: Callable[..., Sandbox], lizard_local: LocalServer
):
    need_namespace(lizard_local)
    name = f"lzprobe{uuid.uuid4().hex[:6]}"
    if shutil.which("adduser"):  # Debian's, as Inspect's self-check runs it
        add = f"adduser --disabled-password --gecos '' {name}"
    else:
        add = f"useradd -m {name}"
    first, second = new_sandbox(), new_sandbox()
    code, out = run(first, add)
    assert code == 0, out
    assert run(first, f"id -un {name} && test -d /home/{name} && echo home") == (0, f"{name}\nhome")
    assert run(first, f"su -s /bin/sh -c 'id -un' {name}") == (0, name)
    assert run(second, f"id {name}")[0] == 1
    assert run(second, f"test -e /home/{name}")[0] == 1
    with pytest.raises(KeyError):
        pwd.getpwnam(name)
    assert not os.path.exists(f"/home/{name}")
    assert name not in Path("/etc/passwd").read_text()


def test_etc_is_the_sandbox_own(new_sandbox: Callable[..., Sandbox], lizard_local: LocalServer):
    need_namespace(lizard_local)
    first, second = new_sandbox(), new_sandbox()
    before = Path("/etc/hosts").read_bytes()
    assert run(first, "echo '10.9.9.9 lizard-probe' >> /etc/hosts") == (0, "")
    assert run(first, "grep -c lizard-probe /etc/hosts") == (0, "1")
    assert run(second, "grep -c lizard-probe /etc/hosts") == (1, "0")
    assert Path("/etc/hosts").read_bytes() == before
    assert run(first, "id -un 1000 && getent passwd user") == (
        0,
        "user\nuser:x:1000:1000::/home/user:/bin/sh",
    )
    hostname = first.sandbox_id.replace("_", "-")
    assert run(first, "cat /etc/hostname; hostname") == (0, f"{hostname}\n{hostname}")
    first.fs.write("/etc/lizard-probe.conf", "x")  # the files API writes there too
    assert run(second, "test -e /etc/lizard-probe.conf")[0] == 1
    assert not os.path.exists("/etc/lizard-probe.conf")


def test_the_interpreter_comes_from_opt_lizard_local(
    new_sandbox: Callable[..., Sandbox], lizard_local: LocalServer
):
    need_namespace(lizard_local)
    sandbox = new_sandbox("interpreter")
    probe = (
        "import sys, numpy, ipykernel\n"
        "libs = {l.split()[-1] for l in open('/proc/self/maps') if 'libpython' in l}\n"
        "print(sys.base_prefix, numpy.__file__, *sorted(libs))\n"
    )
    for user in ("root", "user"):
        code, out = run(sandbox, ["python3", "-c", probe], user=user)
        assert code == 0, out
        paths = out.split()
        allowed = (f"{MOUNT_ROOT}/", *(f"/{d}/" for d in SYSTEM_DIRS))
        assert all(p.startswith(allowed) for p in paths), paths
        base = paths[0]
        # A shared libpython is the interpreter's own, not another one found on the system.
        assert all(lib.startswith(base + "/") for lib in paths[2:]), paths


# --- the pieces ---------------------------------------------------------------------------------


def _elf_with_runpath(value: bytes) -> bytes:
    """A minimal 64-bit little-endian ELF file: a string table and a dynamic section."""
    dynstr = b"\0" + value + b"\0"
    dynstr += b"\0" * (-len(dynstr) % 8)
    dynamic = struct.pack("<qQqQ", 29, 1, 0, 0)  # DT_RUNPATH -> offset 1; DT_NULL
    shoff = 64 + len(dynstr) + len(dynamic)
    header = struct.pack(
        "<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 0
    )
    sections = bytes(64)
    sections += struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 64, len(dynstr), 0, 0, 1, 0)
    sections += struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, 64 + len(dynstr), 16, 1, 0, 8, 16)
    return header + dynstr + dynamic + sections


def test_relocate_runpath_moves_entries_under_the_prefix():
    old = b"/root/.pyenv/versions/3.11.7/lib:$ORIGIN/../x"
    data = _elf_with_runpath(old)
    assert runpath(data) == ["/root/.pyenv/versions/3.11.7/lib", "$ORIGIN/../x"]
    moved = relocate_runpath(data, "/root/.pyenv/versions/3.11.7", "/opt/lizard-local/python")
    assert moved is not None
    assert len(moved) == len(data)
    assert runpath(moved) == ["/opt/lizard-local/python/lib", "$ORIGIN/../x"]
    assert relocate_runpath(data, "/usr/local", "/opt/x") is None  # nothing under it
    assert relocate_runpath(data, "/root/.pyenv/versions/3.11", "/opt/x") is None  # not a parent
    with pytest.raises(ValueError, match="does not fit"):
        relocate_runpath(data, "/root", "/opt/a-much-longer-prefix-than-the-original-one")
    with pytest.raises(ValueError, match="not an ELF"):
        relocate_runpath(b"#!/bin/sh\n" + bytes(80), "/root", "/opt")
    with pytest.raises(ValueError, match="malformed"):
        runpath(data[: len(data) - 100])  # the section headers cut off


def test_runpath_of_the_running_interpreter_can_be_read():
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    entries = runpath(Path(exe).read_bytes())
    assert all(isinstance(e, str) and e for e in entries)


def test_copy_etc_keeps_modes_and_replaces_links_a_sandbox_cannot_follow(tmp_path: Path):
    src, outside = tmp_path / "src", tmp_path / "outside"
    (src / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "resolv.conf").write_text("nameserver 10.0.0.1\n")
    (src / "secret").write_text("s")
    os.chmod(src / "secret", 0o640)
    (src / "sub" / "conf").write_text("c")
    (src / "resolv.conf").symlink_to(outside / "resolv.conf")  # into /run on systemd hosts
    (src / "os-release").symlink_to("/usr/lib/os-release")  # reachable: stays a link
    (src / "mtab").symlink_to("../proc/self/mounts")
    os.mkfifo(src / "fifo")
    copy_etc(src, tmp_path / "copy")
    copy = tmp_path / "copy"
    assert sorted(os.listdir(copy)) == ["mtab", "os-release", "resolv.conf", "secret", "sub"]
    assert (copy / "secret").stat().st_mode & 0o777 == 0o640
    assert (copy / "sub" / "conf").read_text() == "c"
    assert not (copy / "resolv.conf").is_symlink()
    assert (copy / "resolv.conf").read_text() == "nameserver 10.0.0.1\n"
    assert os.readlink(copy / "os-release") == "/usr/lib/os-release"
    assert os.readlink(copy / "mtab") == "../proc/self/mounts"


def test_root_plan_moves_the_interpreter_out_of_private_places(tmp_path: Path):
    (tmp_path / "templates").mkdir()
    sites = server_site_dirs()
    plan = plan_root(tmp_path, sites)
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    assert plan.inside(exe) == plan.python
    for src, dst in plan.binds:
        assert os.path.exists(src), src
        assert dst.startswith(f"{MOUNT_ROOT}/"), dst
    for host, inside in plan.site_dirs.items():
        assert host in sites
        assert not inside.startswith(("/tmp/", "/root/", "/home/", str(CHECKOUT)))
    passwd = (tmp_path / "etc" / "passwd").read_text().splitlines()
    assert "user:x:1000:1000::/home/user:/bin/sh" in passwd
    assert [line for line in passwd if line.split(":")[2] == "1000"] == [passwd[-1]]


def test_root_plan_inside_maps_the_longest_bind():
    plan = RootPlan(
        system=SYSTEM_DIRS,
        binds=(("/root/py", "/opt/lizard-local/python"), ("/root/py/lib/x", "/opt/x")),
        etc="/nowhere",
        python="/opt/lizard-local/python/bin/python3",
        site_dirs={},
    )
    assert plan.inside("/root/py/bin/python3") == "/opt/lizard-local/python/bin/python3"
    assert plan.inside("/root/py/lib/x/y") == "/opt/x/y"
    assert plan.inside("/usr/lib") == "/usr/lib"


def test_the_agent_copies_etc_itself_where_overlayfs_is_missing(tmp_path: Path):
    src = tmp_path / "master"
    (src / "sub").mkdir(parents=True)
    (src / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    os.chmod(src / "passwd", 0o644)
    (src / "sub" / "key").write_text("k")
    os.chmod(src / "sub" / "key", 0o600)
    os.chmod(src / "sub", 0o750)
    (src / "localtime").symlink_to("/usr/share/zoneinfo/UTC")
    sandbox_agent.copy_tree(str(src), str(tmp_path / "etc"))
    etc = tmp_path / "etc"
    assert (etc / "passwd").read_text() == "root:x:0:0::/root:/bin/sh\n"
    assert (etc / "sub" / "key").stat().st_mode & 0o777 == 0o600
    assert (etc / "sub").stat().st_mode & 0o777 == 0o750
    assert os.readlink(etc / "localtime") == "/usr/share/zoneinfo/UTC"
    (etc / "passwd").write_text("changed")  # a copy: the master stays as it was
    assert (src / "passwd").read_text() == "root:x:0:0::/root:/bin/sh\n"


def test_a_namespace_sandbox_directory_on_the_host_is_for_root_only(tmp_path: Path):
    registry = Registry(Isolation("namespace", tmp_path, {}, None), "test", "proj_local")
    dirs = registry._make_dirs(tmp_path / "sbx_1")
    assert (tmp_path / "sbx_1").stat().st_mode & 0o777 == 0o700
    assert dirs == {d: f"{tmp_path}/sbx_1/rootfs{d}" for d in PRIVATE_DIRS}
    assert [Path(dirs[d]).stat().st_mode & 0o7777 for d in ("/tmp", "/root")] == [0o1777, 0o700]
