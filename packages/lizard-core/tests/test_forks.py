"""Forks (``lizard_core.forks``) through the real lizard-sdk into lizard-local."""

from __future__ import annotations

import uuid

import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import SandboxStateError
from lizard_core.forks import FORKED_NOTICE, afork_sessions, fork_sessions
from lizard_core.kernel import Kernel
from lizard_core.session import Session
from lizard_local import LocalServer

FORK = "POST /api/sandboxes/{id}/fork"


def test_forks_are_sessions_of_their_own_with_the_files_and_a_restart_notice(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    with Session(sandbox_config) as source:
        kernel = Kernel(source)
        assert kernel.execute("warm = 'yes'", timeout=30).error is None  # a warm executor
        run_command(source, "echo at-fork > /tmp/state", shell=True)
        copies = fork_sessions(source, 2)
        try:
            assert len({c.sandbox_id for c in copies} | {source.sandbox_id}) == 3
            for copy in copies:
                assert copy.created
                assert copy.lineage_id == source.sandbox_id
                assert run_command(copy, "cat /tmp/state", shell=True).stdout == b"at-fork\n"
                # lizard-local cannot clone processes: the copy's kernel says its state is lost.
                first = Kernel(copy).execute("'warm' in globals()", timeout=30)
                assert first.state_lost
                assert first.notice == FORKED_NOTICE
                assert first.results[0].text == "False"
            run_command(copies[0], "echo diverged > /tmp/state", shell=True)
            assert run_command(source, "cat /tmp/state", shell=True).stdout == b"at-fork\n"
            assert kernel.execute("warm", timeout=30).results[0].text == "'yes'"
        finally:
            for copy in copies:
                copy.destroy()
        assert not {c.sandbox_id for c in copies} & set(lizard_local.sandboxes())


def test_a_fork_of_a_volume_backed_session_is_refused_clearly_before_any_request(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer
) -> None:
    volume = "fork-" + uuid.uuid4().hex[:8]
    with Session(sandbox_config, volume=volume) as session:
        session.sandbox()
        lizard_counters.reset_counters()
        with pytest.raises(SandboxStateError, match="volume") as caught:
            fork_sessions(session)
        assert caught.value.code == "FORK_VOLUME"
        assert lizard_counters.counters()["routes"].get(FORK, 0) == 0


def test_the_platforms_own_refusal_is_the_same_clear_error(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    # A sandbox this session attached to, whose volume it did not choose: the 409 says why.
    volume = "fork-" + uuid.uuid4().hex[:8]
    with Session(sandbox_config, volume=volume) as owner:
        owner.sandbox()
        attached = Session(sandbox_config, sandbox_id=owner.sandbox_id)
        with pytest.raises(SandboxStateError, match="cannot be forked") as caught:
            fork_sessions(attached)
        assert caught.value.status_code == 409
        attached.close()


async def test_async_fork(sandbox_config: SandboxConfig, lizard_local: LocalServer) -> None:
    async with Session(sandbox_config) as source:
        [copy] = await afork_sessions(source)
        async with copy:
            assert copy.sandbox_id in lizard_local.sandboxes()
        assert copy.sandbox_id not in lizard_local.sandboxes()


@pytest.mark.parametrize(("count", "error"), [(0, ValueError), (101, ValueError), ("2", TypeError)])
def test_bad_counts_raise_before_any_request(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer, count: object, error: type
) -> None:
    lizard_counters.reset_counters()
    with pytest.raises(error):
        fork_sessions(Session(sandbox_config), count)  # type: ignore[arg-type]
    assert lizard_counters.counters()["total"] == 0


def test_an_interrupt_while_the_copies_are_taken_in_leaves_none_running(
    sandbox_config: SandboxConfig,
    lizard_local: LocalServer,
    no_new_sandboxes: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adopt = Session.adopt_copy
    calls: list[int] = []

    def adopt_then_interrupt(self: Session, sandbox: object, notice: str) -> Session:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C after the platform made all three copies
        return adopt(self, sandbox, notice)

    monkeypatch.setattr(Session, "adopt_copy", adopt_then_interrupt)
    with Session(sandbox_config) as source:
        with pytest.raises(KeyboardInterrupt):
            fork_sessions(source, 3)
        assert set(lizard_local.sandboxes()) >= {source.sandbox_id}


def test_an_interrupt_during_the_fork_request_leaves_no_copy_running(
    sandbox_config: SandboxConfig,
    lizard_local: LocalServer,
    no_new_sandboxes: None,
    restore_latency: None,
    ctrl_c_handler: None,
) -> None:
    # Ctrl-C while the fork's answer is awaited: the platform makes the copies all the same,
    # and only that answer names them.
    import _thread
    import threading

    with Session(sandbox_config) as source:
        source.sandbox()
        lizard_local.set_latency(800)
        timer = threading.Timer(0.3, _thread.interrupt_main)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                fork_sessions(source, 2)
        finally:
            timer.cancel()
            lizard_local.set_latency(0)


def test_a_fork_refused_for_another_reason_does_not_blame_a_volume(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    import lizard

    from lizard_core.errors import SandboxPausedError

    with Session(sandbox_config) as source:
        sandbox_id = str(source.sandbox().sandbox_id)
        # Paused by another client: this session does not know, so it sends the fork.
        lizard.Sandbox(sandbox_id, api_key=lizard_local.api_key, api_url=lizard_local.url).pause()
        with pytest.raises(SandboxPausedError) as caught:
            fork_sessions(source, 1)
        assert "volume" not in str(caught.value)
