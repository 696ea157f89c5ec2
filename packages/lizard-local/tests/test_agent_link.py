"""The agent protocol driven directly: exec with passed pipes, signals, big requests, stop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lizard_local import procscan
from lizard_local.agent_link import AgentError, AgentLink, _find_namespace_root


async def read_all(fd: int) -> bytes:
    loop = asyncio.get_running_loop()
    chunks = []
    while True:
        data = await loop.run_in_executor(None, os.read, fd, 65536)
        if not data:
            os.close(fd)
            return b"".join(chunks)
        chunks.append(data)


async def start(tmp_path: Path, name: str = "sbx_linktest") -> AgentLink:
    cfg = {"sandbox_id": name, "namespace": False}
    return await AgentLink.start(
        name,
        cfg,
        namespace=False,
        isolate_network=False,
        log_path=str(tmp_path / "agent.log"),
        instance="linktest",
    )


async def test_exec_passes_pipes_and_reports_the_exit(tmp_path: Path):
    link = await start(tmp_path)
    try:
        env = {"PATH": "/usr/bin:/bin", "X": "y"}
        started = await link.exec(["sh", "-c", "echo $X; echo e >&2; exit 5"], env, "/", None, None)
        out, err, code = await asyncio.gather(
            read_all(started.stdout_fd), read_all(started.stderr_fd), started.exit_code
        )
        assert (out, err, code) == (b"y\n", b"e\n", 5)
        with pytest.raises(AgentError) as missing:
            await link.exec(["no-such-binary-here"], env, "/", None, None)
        assert missing.value.kind == "notfound"
        with pytest.raises(AgentError) as bad_cwd:
            await link.exec(["true"], env, "/no/such/dir", None, None)
        assert bad_cwd.value.kind == "workdir"
    finally:
        await link.stop()


async def test_big_requests_travel_in_a_memfd(tmp_path: Path):
    link = await start(tmp_path)
    try:
        big = "z" * 120_000  # over one datagram, under the kernel's argument limit
        started = await link.exec(["printf", "%s", big], {"PATH": "/usr/bin:/bin"}, "/", None, None)
        out = await read_all(started.stdout_fd)
        await read_all(started.stderr_fd)
        assert out.decode() == big
        assert await started.exit_code == 0
    finally:
        await link.stop()


async def test_signal_tree_and_unknown_pid(tmp_path: Path):
    link = await start(tmp_path)
    try:
        started = await link.exec(
            ["sh", "-c", "sleep 50 & wait"], {"PATH": "/usr/bin:/bin"}, "/", None, None
        )
        await asyncio.sleep(0.1)
        await link.signal(started.pid, signal.SIGTERM)
        assert await asyncio.wait_for(started.exit_code, 5) == 143
        os.close(started.stdout_fd)
        os.close(started.stderr_fd)
        with pytest.raises(AgentError):
            await link.signal(1, signal.SIGTERM)  # not a process of this sandbox
    finally:
        await link.stop()


async def test_stop_kills_detached_descendants(tmp_path: Path):
    link = await start(tmp_path, "sbx_linkstop")
    env = {"PATH": "/usr/bin:/bin", "LIZARD_EMU_SANDBOX": "sbx_linkstop"}
    started = await link.exec(
        ["sh", "-c", "setsid sleep 51 >/dev/null 2>&1 < /dev/null &"], env, "/", None, None
    )
    assert await started.exit_code == 0
    os.close(started.stdout_fd)
    os.close(started.stderr_fd)
    # The shell returns before setsid has exec'd sleep, and mid-exec /proc/<pid>/environ reads
    # empty; wait until the detached sleep is visible.
    deadline = time.monotonic() + 5
    while len(procscan.find_marked(b"LIZARD_EMU_SANDBOX=sbx_linkstop")) < 2:  # agent + sleep
        assert time.monotonic() < deadline, "the detached sleep never appeared"
        await asyncio.sleep(0.02)
    await link.stop()
    assert procscan.find_marked(b"LIZARD_EMU_SANDBOX=sbx_linkstop") == []
    assert link.closed.done()
    with pytest.raises(ConnectionError):
        await link.exec(["true"], env, "/", None, None)


def test_a_namespace_agent_must_have_a_root_of_its_own():
    # A parent whose one child lives in the host's mount namespace, as a failed unshare would
    # leave it: file operations through that child's root would reach the host's files.
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while not procscan.children_of(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(OSError, match="host's root"):
            _find_namespace_root(parent.pid)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
    with pytest.raises(OSError, match="expected one agent"):
        _find_namespace_root(parent.pid)  # gone: no child at all
