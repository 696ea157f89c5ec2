"""Sessions beyond a run against the Lizard cloud: what lizard-local can only emulate.

Runs only with LIZARD_LIVE_TESTS=1 and LIZARD_API_KEY / LIZARD_PROJECT_ID set (`nox -s live --
lizard-core`). Every sandbox, snapshot and volume it makes is short-lived and removed at the end.

What it settles: that the platform's pause keeps files and ends processes (lizard-sdk 1.0.23
says so; its README still says memory is kept) and that a resume's kernel reports exactly what
happened; how a restore and a fork behave, memory included (a fork clones memory on the
platform: the copy's kernel carries on, with no notice); the 409 for a fork of a volume-backed
sandbox; and that an exposed port answers with the token and refuses without it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import lizard
import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import SandboxStateError
from lizard_core.forks import fork_sessions
from lizard_core.kernel import Kernel
from lizard_core.ports import expose_port
from lizard_core.session import Session
from lizard_core.snapshots import delete_snapshots, find_snapshots, take_snapshot
from lizard_core.volumes import delete_volume
from lizard_local.pytest_plugin import LIVE, Cloud

pytestmark = [*LIVE, pytest.mark.enable_socket]


@pytest.fixture(scope="module")
def config(lizard_cloud: Cloud) -> Iterator[SandboxConfig]:
    run = "live-" + uuid.uuid4().hex[:10]
    config = SandboxConfig.from_env(
        api_key=lizard_cloud.api_key,
        project_id=lizard_cloud.project_id,
        api_url=lizard_cloud.api_url,
        lifetime_ms=600_000,
        metadata={"run": run},
        integration="lizard-core-live-tests",
    )
    yield config
    delete_snapshots(config, [r.snapshot_id for r in find_snapshots(config, {"run": run})])


def test_pause_resume_and_attach(config: SandboxConfig) -> None:
    with Session(config) as session:
        kernel = Kernel(session)
        assert kernel.execute("kept_in_memory = 1", timeout=60).error is None
        run_command(session, ["sh", "-c", "echo kept > /tmp/live-file"])
        session.pause()
        session.close()
        with Session(config, sandbox_id=session.sandbox_id, destroy_on_exit=True) as attached:
            assert run_command(attached, ["cat", "/tmp/live-file"]).stdout == b"kept\n"
            after = Kernel(attached).execute("'kept_in_memory' in globals()", timeout=60)
            # Files-only pause: the kernel is fresh and says so. Memory kept: it carries on.
            if after.results[0].text == "False":
                assert after.state_lost
                assert after.notice
            else:
                assert not after.state_lost


def test_snapshot_and_restore(config: SandboxConfig) -> None:
    with Session(config) as source:
        run_command(source, ["sh", "-c", "echo prepared > /tmp/live-snap"])
        snap = take_snapshot(source, "live")
        assert snap.status == "ready"
    with Session(config, snapshot_id=snap.snapshot_id) as restored:
        assert run_command(restored, ["cat", "/tmp/live-snap"]).stdout == b"prepared\n"
    assert delete_snapshots(config, [snap.snapshot_id]) == [snap.snapshot_id]


def test_fork_carries_memory_on_the_platform(config: SandboxConfig) -> None:
    with Session(config) as source:
        kernel = Kernel(source)
        assert kernel.execute("warm = 42", timeout=60).error is None
        [copy] = fork_sessions(source)
        with copy:
            result = Kernel(copy).execute("warm", timeout=60)
            if result.results and result.results[0].text == "42":
                assert not result.state_lost  # memory cloned: the kernel carried over
            else:
                assert result.state_lost  # the platform booted the copy fresh: said so
                assert result.notice


def test_fork_of_a_volume_backed_sandbox_is_refused(config: SandboxConfig) -> None:
    volume = "live-" + uuid.uuid4().hex[:10]
    try:
        with Session(config, volume=volume, volume_size_gb=1) as owner:
            owner.sandbox()
            attached = Session(config, sandbox_id=owner.sandbox_id)
            with pytest.raises(SandboxStateError):
                fork_sessions(attached)
            attached.close()
    finally:
        delete_volume(config, volume)


def test_exposed_port_needs_the_token(config: SandboxConfig) -> None:
    with Session(config) as session:
        run_command(
            session,
            ["sh", "-c", "cd /tmp && python3 -m http.server 8000 >/dev/null 2>&1 &"],
        )
        exposed = expose_port(session, 8000)
        url = f"https://{exposed.hostname}/"
        deadline = time.monotonic() + 60
        while (res := httpx.get(url, headers=exposed.headers)).status_code != 200:
            assert time.monotonic() < deadline, res.status_code
            time.sleep(1)
        assert httpx.get(url).status_code in (401, 403)


def test_idle_pause_and_transparent_resume(config: SandboxConfig) -> None:
    with Session(config, idle_pause_s=5) as session:
        run_command(session, ["sh", "-c", "echo idle > /tmp/live-idle"])
        deadline = time.monotonic() + 120
        while not session.paused:
            assert time.monotonic() < deadline
            time.sleep(1)
        raw = lizard.Sandbox(str(session.sandbox_id), **session.api_kwargs())
        assert raw.get_info().status == "paused"
        assert run_command(session, ["cat", "/tmp/live-idle"]).stdout == b"idle\n"
