"""Agent helpers that read /proc: process stats and same-session trees."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

from lizard_local.agent import Agent, read_proc_stat


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
