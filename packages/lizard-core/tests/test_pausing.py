"""Pause, resume, idle pause and attach whatever the state (``lizard_core._pausing``).

Against lizard-local, whose pause is the platform's (lizard-sdk 1.0.23): files kept, processes
ended, a resume boots fresh. The kernel's report of lost state is proven here too, since it is
what a resume means for a user.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import lizard
import pytest

from lizard_core._pausing import RESUMED_NOTICE
from lizard_core.commands import arun_command, run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import (
    CredentialsError,
    LizardIntegrationError,
    SandboxGoneError,
    SandboxPausedError,
)
from lizard_core.kernel import Kernel
from lizard_core.session import Session
from lizard_local import LocalServer

PAUSE = "POST /api/sandboxes/{id}/pause"
RESUME = "POST /api/sandboxes/{id}/resume"
GET = "GET /api/sandboxes/{id}"
EXTEND = "POST /api/sandboxes/{id}/timeout"
KILL = "DELETE /api/sandboxes/{id}"


def _count(server: LocalServer, route: str) -> int:
    return int(server.counters()["routes"].get(route, 0))


def _status(server: LocalServer, sandbox_id: str) -> str:
    info = lizard.Sandbox(sandbox_id, api_key=server.api_key, api_url=server.url).get_info()
    return str(info.status)


@pytest.fixture
def session(sandbox_config: SandboxConfig) -> Iterator[Session]:
    with Session(sandbox_config) as s:
        yield s


def test_pause_keeps_files_ends_processes_and_the_next_operation_resumes(
    session: Session, lizard_local: LocalServer
) -> None:
    run_command(session, "echo kept > /tmp/kept; (sleep 300 &) ; true", shell=True)
    session.pause()
    assert session.paused
    assert "state=paused" in repr(session)
    sandbox_id = session.sandbox_id
    assert sandbox_id is not None
    assert _status(lizard_local, sandbox_id) == "paused"
    session.pause()  # idempotent: no second request
    result = run_command(
        session, "cat /tmp/kept; ps -eo args | grep -c '^sleep 300' || true", shell=True
    )
    assert result.stdout.split() == [b"kept", b"0"]  # files kept, processes ended
    assert not session.paused
    assert session.boot_epoch == 1
    assert session.boot_notice == RESUMED_NOTICE
    assert _status(lizard_local, sandbox_id) == "running"


def test_pause_and_resume_cost_one_request_each_plus_the_status_wait(
    session: Session, lizard_counters: LocalServer
) -> None:
    session.sandbox()
    lizard_counters.reset_counters()
    session.pause()
    session.resume()
    session.resume()  # running already: nothing
    assert _count(lizard_counters, PAUSE) == 1
    assert _count(lizard_counters, RESUME) == 1
    assert _count(lizard_counters, GET) == 2  # lizard-local answers the new status at once


def test_a_lazy_session_pauses_nothing(sandbox_config: SandboxConfig, lizard_counters) -> None:
    lizard_counters.reset_counters()
    Session(sandbox_config).pause()
    assert lizard_counters.counters()["total"] == 0


def test_a_pause_by_someone_else_is_a_clear_error(
    session: Session, lizard_local: LocalServer
) -> None:
    sandbox = session.sandbox()
    sandbox.pause()  # behind the session's back
    with pytest.raises(SandboxPausedError, match="resume"):
        run_command(session, "true", shell=True)
    sandbox.resume()
    assert run_command(session, "echo ok", shell=True).stdout == b"ok\n"


def test_attach_to_a_paused_sandbox_resumes_it_and_renews_its_lifetime(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    first = Session(sandbox_config.replace(lifetime_ms=60_000))
    run_command(first, "echo from-run-1 > /home/user/notes", shell=True)
    first.pause()
    first.close()  # a run ends, its sandbox paused for the next one
    sandbox_id = first.sandbox_id
    assert sandbox_id is not None
    with Session(sandbox_config, sandbox_id=sandbox_id, destroy_on_exit=True) as second:
        assert run_command(second, "cat /home/user/notes", shell=True).stdout == b"from-run-1\n"
        assert second.boot_epoch == 1
        info = second.sandbox().get_info()
        assert info.status == "running"
        end = datetime.strptime(info.end_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert (end - datetime.now(UTC)).total_seconds() > 250  # renewed to 300 s, not 60


def test_attach_to_a_running_sandbox_renews_its_lifetime_once(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer
) -> None:
    existing = lizard.Sandbox.create(
        "base",
        project_id=lizard_counters.project_id,
        timeout_ms=20_000,
        api_key=lizard_counters.api_key,
        api_url=lizard_counters.url,
    )
    lizard_counters.reset_counters()
    with Session(sandbox_config, sandbox_id=existing.sandbox_id, destroy_on_exit=True) as s:
        s.sandbox()
        s.sandbox()
        assert s.boot_epoch == 0
    assert _count(lizard_counters, GET) == 1
    assert _count(lizard_counters, EXTEND) == 1
    assert _count(lizard_counters, RESUME) == 0


@pytest.mark.parametrize("timeout_ms", [0, 3_600_000])
def test_attach_never_shortens_a_lifetime_nor_adds_a_deadline(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer, timeout_ms: int
) -> None:
    existing = lizard.Sandbox.create(
        "base",
        project_id=lizard_counters.project_id,
        timeout_ms=timeout_ms,
        api_key=lizard_counters.api_key,
        api_url=lizard_counters.url,
    )
    end_before = existing.get_info().end_at
    lizard_counters.reset_counters()
    try:
        with Session(sandbox_config, sandbox_id=existing.sandbox_id, keep_alive=True) as s:
            for _ in range(3):
                s.call(s.sandbox().get_info, idempotent=True)
        assert _count(lizard_counters, EXTEND) == 0
        assert existing.get_info().end_at == end_before
    finally:
        existing.kill()


def test_attach_to_a_killed_sandbox_stays_gone(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    with Session(sandbox_config) as s:
        sandbox_id = s.sandbox().sandbox_id
    with pytest.raises(SandboxGoneError):
        Session(sandbox_config, sandbox_id=sandbox_id).sandbox()


def test_idle_pause_pauses_after_idle_and_the_next_operation_resumes(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    with Session(sandbox_config, idle_pause_s=0.6) as s:
        run_command(s, "echo 1 > /tmp/n", shell=True)
        sandbox_id = s.sandbox_id
        assert sandbox_id is not None
        # A command longer than the idle time is use: no pause under it.
        assert run_command(s, "sleep 1.2; echo done", shell=True).stdout == b"done\n"
        assert not s.paused
        deadline = time.monotonic() + 10
        while not s.paused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.paused
        assert _status(lizard_local, sandbox_id) == "paused"
        assert run_command(s, "cat /tmp/n", shell=True).stdout == b"1\n"  # resumed transparently
        assert _status(lizard_local, sandbox_id) == "running"
        assert s.boot_epoch == 1


async def test_async_faces(sandbox_config: SandboxConfig, lizard_local: LocalServer) -> None:
    async with Session(sandbox_config, idle_pause_s=30) as s:
        await arun_command(s, "echo a > /tmp/a", shell=True)
        await s.apause()
        assert s.paused
        await s.aresume()
        assert not s.paused
        await s.apause()
        assert (
            await arun_command(s, "cat /tmp/a", shell=True)
        ).stdout == b"a\n"  # asandbox resumes


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"idle_pause_s": 0}, ValueError),
        ({"idle_pause_s": "5"}, TypeError),
        ({"state_wait_s": -1}, ValueError),
        ({"snapshot_id": "a/b"}, ValueError),
        ({"snapshot_id": 5}, TypeError),
        ({"volume": "Not A Slug"}, ValueError),
        ({"volume": "ok", "volume_size_gb": 0}, ValueError),
        ({"volume": "ok", "sandbox_id": "sbx_1"}, ValueError),
        ({"snapshot_id": "snap_1", "sandbox_id": "sbx_1"}, ValueError),
    ],
)
def test_bad_arguments_raise_before_any_request(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer, kwargs: Any, error: type
) -> None:
    lizard_counters.reset_counters()
    with pytest.raises(error):
        Session(sandbox_config, **kwargs)
    assert lizard_counters.counters()["total"] == 0


# ── the kernel after a fresh boot ────────────────────────────────────────


def test_a_resumed_sessions_kernel_reports_lost_state_and_then_works(session: Session) -> None:
    kernel = Kernel(session)
    assert kernel.execute("x = 41", timeout=30).error is None
    session.pause()
    lost = kernel.execute("print('alive')", timeout=30)
    assert lost.state_lost
    assert lost.notice == RESUMED_NOTICE
    assert lost.stdout == "alive\n"
    assert kernel.execute("x = 1; x + 1", timeout=30).results[0].text == "2"
    again = kernel.execute("x + 1", timeout=30)
    assert not again.state_lost
    assert again.notice is None


def test_a_boot_that_kept_memory_reports_nothing(session: Session) -> None:
    # Where the platform keeps memory across a pause, the session counts a boot but the kernel
    # carries on: same kernel, no notice.
    kernel = Kernel(session)
    assert kernel.execute("y = 5", timeout=30).error is None
    session._booted_fresh(RESUMED_NOTICE)
    kept = kernel.execute("y", timeout=30)
    assert not kept.state_lost
    assert kept.notice is None
    assert kept.results[0].text == "5"


def test_a_platform_call_longer_than_the_idle_time_is_not_paused_under(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    # take_snapshot, fork_sessions and expose_port run their request through Session.call:
    # one that lasts past idle_pause_s (a snapshot takes about a second) is use, not idleness.
    with Session(sandbox_config, idle_pause_s=0.3) as s:
        sandbox = s.sandbox()
        seen: list[bool] = []

        def slow_request() -> str:
            time.sleep(1.0)
            seen.append(s.paused)
            return str(sandbox.get_info().status)

        assert s.call(slow_request) == "running"
        assert seen == [False]


def test_an_interrupted_pause_wait_leaves_a_session_that_resumes(
    session: Session, lizard_local: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C (or a timeout) after the pause was sent, while its status is awaited: the session
    # must still know that it paused its sandbox, so that the next operation resumes it
    # rather than failing on a paused sandbox.
    run_command(session, "echo kept > /tmp/kept", shell=True)
    wait = Session._wait_status

    def interrupted(self: Session, sandbox: Any, want: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Session, "_wait_status", interrupted)
    with pytest.raises(KeyboardInterrupt):
        session.pause()
    monkeypatch.setattr(Session, "_wait_status", wait)
    assert run_command(session, "cat /tmp/kept", shell=True).stdout == b"kept\n"
    assert not session.paused
    assert session.boot_epoch == 1

    session.pause()
    monkeypatch.setattr(Session, "_wait_status", interrupted)
    with pytest.raises(KeyboardInterrupt):
        session.resume()
    monkeypatch.setattr(Session, "_wait_status", wait)
    assert run_command(session, "cat /tmp/kept", shell=True).stdout == b"kept\n"
    assert session.boot_epoch == 2


def _idlers() -> list[Any]:
    import threading

    return [t for t in threading.enumerate() if t.name == "lizard-core-idle-pause"]


@pytest.mark.parametrize("end", ["close", "destroy"])
def test_the_idle_timer_ends_with_the_session_and_a_paused_one_is_destroyed(
    sandbox_config: SandboxConfig, lizard_local: LocalServer, end: str
) -> None:
    before = set(_idlers())
    s = Session(sandbox_config, idle_pause_s=30)
    run_command(s, ["true"])
    assert len(set(_idlers()) - before) == 1
    s.pause()
    sandbox_id = s.sandbox_id
    getattr(s, end)()
    deadline = time.monotonic() + 5
    while set(_idlers()) - before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not set(_idlers()) - before
    if end == "destroy":
        assert sandbox_id not in lizard_local.sandboxes()
    else:  # left paused for a later run to attach to
        assert _status(lizard_local, str(sandbox_id)) == "paused"
        Session(sandbox_config, sandbox_id=sandbox_id).destroy()


@pytest.mark.parametrize("paused", [False, True])
def test_a_session_dropped_unclosed_is_collected_and_its_idle_timer_ends(
    sandbox_config: SandboxConfig, lizard_local: LocalServer, paused: bool
) -> None:
    import gc
    import weakref

    before = set(_idlers())
    s = Session(sandbox_config, idle_pause_s=0.2)
    run_command(s, ["true"])
    [idler] = set(_idlers()) - before
    sandbox_id = str(s.sandbox_id)
    if paused:  # the timer then waits for the next use, not for a due pause
        s.pause()
    dropped = weakref.ref(s)
    try:
        del s  # the timer holds it only weakly
        # An idle pause in progress holds it until that pause ends: bounded waits, no timing.
        deadline = time.monotonic() + 30
        while dropped() is not None and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.05)
        assert dropped() is None
        idler.join(timeout=30)
        assert not idler.is_alive()
    finally:
        lizard.Sandbox(sandbox_id, api_key=lizard_local.api_key, api_url=lizard_local.url).kill()


@pytest.mark.parametrize("timeout_ms", [0, 3_600_000])
def test_attach_to_a_paused_sandbox_never_shortens_its_lifetime_nor_adds_a_deadline(
    sandbox_config: SandboxConfig, lizard_local: LocalServer, timeout_ms: int
) -> None:
    # A paused sandbox's lifetime is frozen, not over: after the resume it runs on from what
    # was left, and the configuration's shorter lifetime (300 s) must not replace it.
    existing = lizard.Sandbox.create(
        "base",
        project_id=lizard_local.project_id,
        timeout_ms=timeout_ms,
        api_key=lizard_local.api_key,
        api_url=lizard_local.url,
    )
    try:
        existing.pause()
        with Session(sandbox_config, sandbox_id=existing.sandbox_id) as s:
            s.sandbox()
            assert s.boot_epoch == 1
        info = existing.get_info()
        assert info.status == "running"
        if timeout_ms == 0:
            assert not info.end_at
        else:
            end = datetime.strptime(info.end_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            assert (end - datetime.now(UTC)).total_seconds() > 3000
    finally:
        existing.kill()


def test_async_faces_under_trio_and_a_cancelled_resume_leaves_a_consistent_session(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    import trio

    async def main() -> None:
        async with Session(sandbox_config, idle_pause_s=0.3) as s:
            await arun_command(s, "echo t > /tmp/t", shell=True)
            deadline = time.monotonic() + 10
            while not s.paused and time.monotonic() < deadline:  # noqa: ASYNC110 (a thread sets it)
                await trio.sleep(0.05)
            assert s.paused  # the idle timer works under trio too
            with trio.move_on_after(0.001):  # cancelled while resuming: the resume completes
                await s.aresume()
            result = await arun_command(s, "cat /tmp/t", shell=True)
            assert result.stdout == b"t\n"
            assert s.boot_epoch >= 1  # another idle pause may come between, on a slow machine

    trio.run(main)


def test_pausing_an_attached_sandbox_that_is_paused_resumes_nothing(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer
) -> None:
    existing = lizard.Sandbox.create(
        "base",
        project_id=lizard_counters.project_id,
        api_key=lizard_counters.api_key,
        api_url=lizard_counters.url,
    )
    try:
        existing.pause()
        lizard_counters.reset_counters()
        s = Session(sandbox_config, sandbox_id=existing.sandbox_id)
        s.pause()  # a later run making sure it stays paused: no boot just to pause it again
        s.close()
        assert _count(lizard_counters, RESUME) == 0
        assert _count(lizard_counters, PAUSE) == 0
        assert _status(lizard_counters, existing.sandbox_id) == "paused"
    finally:
        existing.kill()


def test_keep_alive_and_idle_pause_together_a_paused_lifetime_is_frozen(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    config = sandbox_config.replace(lifetime_ms=2_000)
    with Session(config, keep_alive=True, idle_pause_s=0.3) as s:
        run_command(s, "echo alive > /tmp/a", shell=True)
        deadline = time.monotonic() + 10
        while not s.paused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.paused
        time.sleep(2.5)  # past the lifetime: paused, it does not run out
        assert s.sandbox_id in lizard_local.sandboxes()
        assert run_command(s, "cat /tmp/a", shell=True).stdout == b"alive\n"


def test_a_slow_keep_alive_extension_before_an_operation_is_not_paused_under(
    sandbox_config: SandboxConfig, lizard_local: LocalServer, restore_latency: None
) -> None:
    # The next operation resumes, then extends the lifetime (due: more than half of it went
    # by); that request taking longer than idle_pause_s must not let the idle timer pause the
    # sandbox again before the operation starts.
    config = sandbox_config.replace(lifetime_ms=4_000)
    with Session(config, keep_alive=True, idle_pause_s=0.3) as s:
        run_command(s, ["true"])
        deadline = time.monotonic() + 10
        while not s.paused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.paused
        time.sleep(2.2)  # the extension is due (paused, the lifetime does not run out)
        lizard_local.set_latency(600)
        try:
            assert run_command(s, ["echo", "ok"]).stdout == b"ok\n"
        finally:
            lizard_local.set_latency(0)


def test_keep_paused_leaves_the_sandbox_paused_for_a_later_attach(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    session = Session(sandbox_config)
    run_command(session, "echo kept > /tmp/kept", shell=True)
    sandbox_id = session.sandbox_id
    assert sandbox_id is not None
    session.keep_paused()
    assert _status(lizard_local, sandbox_id) == "paused"
    with pytest.raises(SandboxGoneError):
        session.sandbox()  # closed: this session no longer uses it
    with Session(sandbox_config, sandbox_id=sandbox_id, destroy_on_exit=True) as later:
        assert run_command(later, ["cat", "/tmp/kept"]).stdout == b"kept\n"


def test_keep_paused_destroys_a_sandbox_whose_pause_fails(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    session = Session(sandbox_config)
    session.sandbox()
    sandbox_id = session.sandbox_id
    lizard_local.inject_fault(PAUSE, status=400)  # refused: not retried
    with pytest.raises(LizardIntegrationError):
        session.keep_paused()
    assert sandbox_id not in lizard_local.sandboxes()  # not left running, billing


def test_keep_paused_tries_again_a_destroy_that_failed_after_a_failed_pause(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    session = Session(sandbox_config)
    session.sandbox()
    sandbox_id = session.sandbox_id
    lizard_local.inject_fault(PAUSE, status=400)
    lizard_local.inject_fault(KILL, status=403)  # refused too: the sandbox still runs
    with pytest.raises(CredentialsError):
        session.keep_paused()
    assert sandbox_id in lizard_local.sandboxes()
    lizard_local.reset_counters()
    session.keep_paused()  # the destroy again, not a quiet close of a running sandbox
    assert sandbox_id not in lizard_local.sandboxes()
    assert _count(lizard_local, PAUSE) == 0
    session.keep_paused()  # done: no request
    assert lizard_local.counters()["total"] == 1


async def test_akeep_paused_of_a_sandbox_already_gone_is_done(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    session = Session(sandbox_config)
    await session.asandbox()
    assert session.sandbox_id is not None
    lizard.Sandbox(
        session.sandbox_id, api_key=lizard_local.api_key, api_url=lizard_local.url
    ).kill()
    await session.akeep_paused()
    with pytest.raises(SandboxGoneError):
        await session.asandbox()
