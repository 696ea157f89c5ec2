"""Sandbox lifecycle and isolation: private files and processes, kill and expiry end everything."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from lizard import Sandbox
from lizard.errors import NotFoundError

from lizard_local import LocalServer, procscan
from lizard_local import sandboxes as registry_mod
from lizard_local.http import ApiError
from lizard_local.isolation import Template


def marked(sandbox_id: str) -> list[int]:
    return procscan.find_marked(f"LIZARD_EMU_SANDBOX={sandbox_id}".encode())


def test_two_sandboxes_see_neither_files_nor_processes(new_sandbox, lizard_local: LocalServer):
    if lizard_local.isolation != "namespace":
        pytest.skip("absolute paths are shared between sandboxes in host mode")
    a, b = new_sandbox(), new_sandbox()
    for d in ("/tmp", "/root", "/home/user", "/workspace"):
        a.fs.write(f"{d}/only-a.txt", "a")
        assert b.process.exec_(f"test -e {d}/only-a.txt").exit_code == 1
        with pytest.raises(NotFoundError):
            b.fs.read(f"{d}/only-a.txt")
    a.process.exec_("setsid sleep 77 >/dev/null 2>&1 < /dev/null &")
    assert "sleep 77" in a.process.exec_("ps ax -o args").stdout
    assert "sleep 77" not in b.process.exec_("ps ax -o args").stdout
    pid_in_a = int(a.process.exec_("pgrep -x sleep").stdout)
    assert b.process.exec_(f"kill -0 {pid_in_a} 2>/dev/null || echo gone").stdout == "gone"
    # Killing one leaves the other working.
    assert a.kill() is True
    assert b.process.exec_("echo alive").stdout == "alive"


def test_sandboxes_cannot_see_the_emulator_state(sandbox: Sandbox, lizard_local: LocalServer):
    if lizard_local.isolation != "namespace":
        pytest.skip("namespace mode only")
    prefix = lizard_local.info()["templates"]["base"]["prefix"]
    state = prefix.rsplit("/templates/", 1)[0]
    assert sandbox.process.exec_(f"ls -A {state}/sandboxes").stdout == ""


def test_kill_ends_detached_processes(lizard_local: LocalServer):
    sb = Sandbox.create("base", project_id=lizard_local.project_id)
    sb.process.exec_(
        'python3 -c \'import subprocess; subprocess.Popen(["sleep", "90"], '
        "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)'"
    )
    sb.process.exec_("nohup sleep 91 >/dev/null 2>&1 &")
    # A process in the middle of exec shows an empty /proc/<pid>/environ for a moment.
    deadline = time.monotonic() + 5
    while len(marked(sb.sandbox_id)) < 3:  # the agent (and unshare) plus both sleeps
        assert time.monotonic() < deadline, marked(sb.sandbox_id)
        time.sleep(0.02)
    assert sb.kill() is True
    assert marked(sb.sandbox_id) == []


def test_expire_now_ends_everything(lizard_local: LocalServer):
    sb = Sandbox.create("base", project_id=lizard_local.project_id)
    sb.process.exec_("setsid sleep 92 >/dev/null 2>&1 < /dev/null &")
    lizard_local.expire(sb.sandbox_id)
    assert marked(sb.sandbox_id) == []
    with pytest.raises(NotFoundError):
        sb.get_info()
    assert sb.kill() is False


def test_kill_ends_an_in_flight_command_with_137(lizard_local: LocalServer):
    sb = Sandbox.create("base", project_id=lizard_local.project_id)
    started = threading.Event()
    codes: list[int] = []

    def run() -> None:
        codes.append(
            sb.process.exec_(
                "sleep 60", on_pid=lambda _p: started.set(), timeout_ms=30_000
            ).exit_code
        )

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(10)
    sb.kill()
    t.join(10)
    assert codes == [137]


def test_concurrent_creates(lizard_local: LocalServer):
    ids: list[str] = []
    lock = threading.Lock()

    def make() -> None:
        sb = Sandbox.create("base", project_id=lizard_local.project_id)
        with lock:
            ids.append(sb.sandbox_id)

    threads = [threading.Thread(target=make) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(set(ids)) == 6
        assert set(ids) <= set(lizard_local.sandboxes())
    finally:
        for i in ids:
            Sandbox.connect(i).kill()


def test_file_operations_refuse_a_root_that_is_not_the_sandboxes():
    # The agent is gone and its pid now belongs to a host process (here: this one), whose root
    # is the host's: open_root must notice rather than hand out the host's "/".
    link: Any = SimpleNamespace(agent_pid=os.getpid(), root_id=(0, 0))
    sb = registry_mod.Sandbox(
        id="sbx_recycled",
        template=Template("base", "/nonexistent", False),
        project_id="proj_local",
        region="local",
        size="nano",
        metadata={},
        envs={},
        internet_access=True,
        started_at=datetime.now(UTC),
        dirs={},
        link=link,
        namespace=True,
        instance="test",
        base=Path("/nonexistent"),
        boot_config={},
    )
    for pid in (os.getpid(), 2**22 + 12345):
        link.agent_pid = pid
        with pytest.raises(ApiError) as info:
            sb.open_root()
        assert info.value.status == 404
    host = os.stat("/")
    link.agent_pid, link.root_id = os.getpid(), (host.st_dev, host.st_ino)
    os.close(sb.open_root())  # the recorded identity is what decides
