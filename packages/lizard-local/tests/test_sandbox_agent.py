"""The agent: /proc helpers, and the namespace sandbox it builds (read-only host, private dirs)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from lizard import Sandbox

import lizard_local as lizard_local_pkg
from lizard_local import LocalServer
from lizard_local.sandbox_agent import DEVICES, DROPPED_CAPS, Agent, read_proc_stat


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_read_proc_stat_of_self_and_of_a_missing_pid():
    ppid, session, state = read_proc_stat(os.getpid()) or (0, 0, "")
    assert ppid == os.getppid()
    assert session == os.getsid(0)
    assert state in "RS"
    assert read_proc_stat(2**22 + 12345) is None


def test_tree_excludes_detached_descendants():
    root = subprocess.Popen(
        ["sh", "-c", "sleep 30 & setsid sleep 31 & wait"], start_new_session=True
    )
    try:
        time.sleep(0.2)
        agent = Agent.__new__(Agent)  # only the /proc helpers are used
        tree = agent.tree(root.pid)
        assert tree[0] == root.pid
        assert [cmdline(pid) for pid in tree[1:]] == [b"sleep\x0030\x00"]
    finally:
        os.killpg(root.pid, 9)
        root.wait()
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            if cmdline(pid) == b"sleep\x0031\x00":
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)


# --- the namespace sandbox's filesystem: what comes from the host is read-only -----------------

PRIVATE = ("/tmp", "/root", "/home/user", "/workspace")
#: Every mount a namespace sandbox may write: its root (its own directory), /etc and /run (its
#: own), /dev (its own), /proc (its own).
WRITABLE = {"/", "/etc", "/run", "/dev", "/dev/pts", "/dev/shm", "/proc"} | {
    f"/dev/{d}" for d in DEVICES
}


def need_namespace(server: LocalServer) -> None:
    if server.isolation != "namespace":
        pytest.skip("namespace mode only (root on Linux)")


def test_commands_cannot_change_what_comes_from_the_host(
    sandbox: Sandbox, lizard_local: LocalServer, host_canary: str
):
    need_namespace(lizard_local)
    targets = ("/usr/sandbox-was-here", "/opt/lizard-local/templates/sandbox-was-here")
    for target in targets:
        r = sandbox.process.exec_(f"touch {target}")
        assert r.exit_code == 1
        assert "Read-only file system" in r.stderr
    assert not os.path.exists("/usr/sandbox-was-here")
    # Deleting a template file, directly or with rm -rf through a symlink (the trailing slash
    # follows it), changes nothing either.
    template = "/opt/lizard-local/templates/base"
    for script in (
        f"rm -f {template}/pyvenv.cfg",
        f"ln -s {template} /workspace/link && rm -rf /workspace/link/",
    ):
        r = sandbox.process.exec_(script)
        assert r.exit_code == 1
        assert "Read-only file system" in r.stderr
    assert sandbox.process.exec_(["python3", "-c", "print('still here')"]).stdout == "still here"
    # The host's other files are not there at all.
    for path in (host_canary, os.path.dirname(lizard_local_pkg.__file__)):
        assert sandbox.process.exec_(["test", "-e", path]).exit_code == 1
    with open(f"{host_canary}/canary") as f:
        assert f.read() == "host"


def test_the_sandbox_own_directories_and_dev_are_writable(
    sandbox: Sandbox, lizard_local: LocalServer
):
    need_namespace(lizard_local)
    dirs = "/tmp /root /home/user /workspace /dev/shm /etc /var/tmp /run /opt /"
    script = (
        f"set -e; for d in {dirs}; do echo ok > $d/w && cat $d/w && rm $d/w; done; "
        "echo x > /dev/null; head -c 4 /dev/urandom | wc -c"
    )
    r = sandbox.process.exec_(script)
    assert (r.exit_code, r.stdout.split()) == (0, ["ok"] * 10 + ["4"])
    assert sandbox.process.exec_("echo hi", user="user").stdout == "hi"
    mode = sandbox.process.exec_("stat -c %a /tmp /dev/shm /var/tmp /root").stdout.split()
    assert mode == ["1777", "1777", "1777", "700"]


def test_every_mount_from_the_host_is_read_only(sandbox: Sandbox, lizard_local: LocalServer):
    need_namespace(lizard_local)
    mounts = sandbox.process.exec_("cat /proc/self/mountinfo").stdout.splitlines()
    writable = {m.split()[4] for m in mounts if m.split()[5].split(",")[0] == "rw"}
    assert writable <= WRITABLE, writable - WRITABLE
    points = {m.split()[4] for m in mounts}
    assert {"/usr", "/sys", "/opt/lizard-local/templates", "/proc/sys"} <= points - writable


def test_dev_shm_is_private(new_sandbox, lizard_local: LocalServer):
    need_namespace(lizard_local)
    a, b = new_sandbox(), new_sandbox()
    name = f"lizard-test-{a.sandbox_id}"
    a.process.exec_(f"echo a > /dev/shm/{name}")
    assert a.process.exec_(f"cat /dev/shm/{name}").stdout == "a"
    assert b.process.exec_(f"test -e /dev/shm/{name}").exit_code == 1
    assert not os.path.exists(f"/dev/shm/{name}")


def test_commands_lack_the_capabilities_that_would_undo_it(
    sandbox: Sandbox, lizard_local: LocalServer
):
    need_namespace(lizard_local)
    status = sandbox.process.exec_("grep CapBnd /proc/self/status").stdout
    bounding = int(status.split()[1], 16)
    assert bounding & (1 << DROPPED_CAPS["SYS_ADMIN"]) == 0
    assert bounding & (1 << DROPPED_CAPS["MKNOD"]) == 0
    assert bounding & (1 << 0)  # CAP_CHOWN: root is still root inside
    r = sandbox.process.exec_("mount -o remount,rw /usr")
    assert r.exit_code != 0
    assert sandbox.process.exec_("touch /usr/sandbox-was-here").exit_code == 1
    assert sandbox.process.exec_("whoami && chown user /tmp").stdout == "root"


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"
)
@pytest.mark.parametrize("how", ["mount_setattr", "remount each"])
def test_make_readonly_covers_every_mount_below(tmp_path, how: str):
    # In a private mount namespace: nothing is mounted on the host, whatever happens.
    script = textwrap.dedent(
        f"""
        import os
        from lizard_local import sandbox_agent as agent
        if {how!r} == "remount each":
            agent.SYS_MOUNT_SETATTR = 99999  # ENOSYS: the fallback for kernels before 5.12
        top = {str(tmp_path / "top")!r}
        os.makedirs(top + "/sub")
        agent.mount("tmpfs", top, "tmpfs", 0, "mode=755")
        os.makedirs(top + "/sub")
        agent.mount("tmpfs", top + "/sub", "tmpfs", agent.MS_NOSUID, "mode=755")
        agent.make_readonly(top)
        for path in (top + "/x", top + "/sub/x"):
            try:
                open(path, "w").close()
                print("writable", path)
            except OSError as exc:
                print(exc.strerror)
        print(sorted(o for _, opts in agent.mounts_below(top) for o in opts & {{"ro", "nosuid"}}))
        """
    )
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = out.stdout.splitlines()
    assert lines == ["Read-only file system"] * 2 + ["['nosuid', 'ro', 'ro']"], out.stderr
