from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import lizard
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lizard_core import (
    CredentialsError,
    QuotaError,
    RetryPolicy,
    SandboxConfig,
    SandboxGoneError,
    Session,
    TransientError,
)
from lizard_core._pausing import _seconds_left
from lizard_local import LocalServer

CREATE = "POST /api/sandboxes"
CONNECT = "GET /api/sandboxes/{id}"
KILL = "DELETE /api/sandboxes/{id}"
EXTEND = "POST /api/sandboxes/{id}/timeout"
READ = "GET /api/sandboxes/{id}/files"

pytestmark = pytest.mark.usefixtures("no_new_sandboxes")


def count(server: Any, route: str) -> int:
    routes: dict[str, int] = server.counters()["routes"]
    return routes.get(route, 0)


def sdk_sandbox(server: Any) -> Any:
    """A sandbox made directly with the SDK, as another process would."""
    return lizard.Sandbox.create(
        "base", project_id=server.project_id, api_key=server.api_key, api_url=server.url
    )


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


# ── construction ─────────────────────────────────────────────────────────


@pytest.fixture
def offline_config() -> SandboxConfig:
    return SandboxConfig.from_env(
        environ={"LIZARD_API_KEY": "liz_offline_key_123", "LIZARD_PROJECT_ID": "p"}
    )


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"sandbox_id": 12}, TypeError),
        ({"sandbox_id": ""}, ValueError),
        ({"sandbox_id": "../projects"}, ValueError),
        ({"sandbox_id": "sbx/1"}, ValueError),
        ({"sandbox_id": "sbx?x=1"}, ValueError),
        ({"keep_alive": 1}, TypeError),
        ({"destroy_on_exit": "yes"}, TypeError),
        ({"retry": 3}, TypeError),
    ],
)
def test_invalid_session_arguments_raise(
    offline_config: SandboxConfig, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        Session(offline_config, **kwargs)


def test_a_config_is_required() -> None:
    with pytest.raises(TypeError, match="SandboxConfig"):
        Session({"api_key": "x"})  # type: ignore[arg-type]


def test_repr_shows_state_not_the_key(offline_config: SandboxConfig) -> None:
    session = Session(offline_config, sandbox_id="sbx_abc")
    assert "sbx_abc" in repr(session)
    assert "lazy" in repr(session)
    assert "liz_offline_key_123" not in repr(session)
    assert session.api_kwargs()["api_key"] == "liz_offline_key_123"


def test_a_session_that_would_create_needs_a_project_before_any_request(
    lizard_counters: LocalServer,
) -> None:
    no_project = SandboxConfig.from_env(
        environ={"LIZARD_API_KEY": lizard_counters.api_key, "LIZARD_API_URL": lizard_counters.url}
    )
    assert no_project.project_id is None
    with pytest.raises(ValueError, match="LIZARD_PROJECT_ID"):
        Session(no_project)
    attached = Session(no_project, sandbox_id="sbx_some_id")  # attaching needs no project
    assert attached.sandbox_id == "sbx_some_id"
    assert lizard_counters.counters()["total"] == 0


def test_attach_and_destroy_work_without_a_project(
    lizard_local: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing = sdk_sandbox(lizard_local)
    monkeypatch.delenv("LIZARD_PROJECT_ID")
    config = SandboxConfig.from_env()
    assert config.project_id is None
    session = Session(config, sandbox_id=existing.sandbox_id)
    assert session.sandbox().sandbox_id == existing.sandbox_id
    Session(config, sandbox_id=existing.sandbox_id).destroy()
    assert existing.sandbox_id not in lizard_local.sandboxes()


# ── no request before first use ──────────────────────────────────────────


async def test_no_request_before_first_use(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config)
    attached = Session(sandbox_config, sandbox_id="sbx_never_used", keep_alive=True)
    assert session.sandbox_id is None
    assert attached.sandbox_id == "sbx_never_used"
    assert "lazy" in repr(session)
    assert "lazy" in repr(attached)
    with session:
        pass
    async with attached:
        pass
    assert lizard_counters.counters()["total"] == 0


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kwargs=st.fixed_dictionaries(
        {},
        optional={
            "template": st.one_of(st.sampled_from(["base", "", "no such/../x"]), st.integers()),
            "size": st.one_of(st.sampled_from(["small", "huge"]), st.none(), st.integers()),
            "lifetime_ms": st.one_of(st.integers(-5, 3_000_000_000), st.floats(), st.booleans()),
            "envs": st.one_of(
                st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
                st.lists(st.text(max_size=2)),
            ),
            "api_url": st.sampled_from(
                ["http://example.com", "http://127.0.0.1:1", "https://", "ftp://x", ""]
            ),
            "allowed_hosts": st.one_of(st.text(max_size=5), st.lists(st.text(max_size=5))),
            "internet_access": st.one_of(st.booleans(), st.integers(0, 1)),
        },
    ),
    sandbox_id=st.one_of(st.none(), st.text(max_size=12), st.integers()),
)
def test_configuration_never_reaches_the_api(
    lizard_counters: LocalServer, kwargs: dict[str, Any], sandbox_id: Any
) -> None:
    before = lizard_counters.counters()["total"]
    try:
        session = Session(SandboxConfig.from_env(**kwargs), sandbox_id=sandbox_id)
    except (TypeError, ValueError):
        pass
    else:
        repr(session)
        with session:
            pass
    assert lizard_counters.counters()["total"] == before == 0


# ── exactly one sandbox ──────────────────────────────────────────────────


def test_first_use_is_one_create_and_no_read_back(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    with Session(sandbox_config) as session:
        sandbox = session.sandbox()
        assert session.sandbox_id == sandbox.sandbox_id
        assert session.created
        assert session.sandbox() is sandbox
        assert session.sandbox_id in lizard_counters.sandboxes()
        assert count(lizard_counters, CREATE) == 1
        assert count(lizard_counters, CONNECT) == 0
        routes = lizard_counters.counters()["routes"]
        # The SDK resolves the project reference once per process; nothing else is sent.
        assert set(routes) - {CREATE, "GET /api/projects"} == set()
    assert session.destroyed
    assert session.sandbox_id not in lizard_counters.sandboxes()
    assert count(lizard_counters, KILL) == 1


@pytest.mark.usefixtures("restore_latency")
def test_twenty_threads_create_exactly_one_sandbox(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    lizard_counters.set_latency(300)  # keep the create in flight while the others arrive
    session = Session(sandbox_config)
    barrier = threading.Barrier(20)

    def first_use() -> Any:
        barrier.wait()
        return session.sandbox()

    try:
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            sandboxes = list(pool.map(lambda _: first_use(), range(20)))
        assert len({id(s) for s in sandboxes}) == 1
        assert count(lizard_counters, CREATE) == 1
    finally:
        session.destroy()


@pytest.mark.usefixtures("restore_latency")
async def test_twenty_tasks_create_exactly_one_sandbox(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    lizard_counters.set_latency(300)
    session = Session(sandbox_config)
    try:
        sandboxes = await asyncio.gather(*(session.asandbox() for _ in range(20)))
        assert len({id(s) for s in sandboxes}) == 1
        assert count(lizard_counters, CREATE) == 1
    finally:
        await session.adestroy()
    assert session.sandbox_id not in lizard_counters.sandboxes()


@pytest.mark.usefixtures("restore_latency")
async def test_threads_and_tasks_together_create_exactly_one_sandbox(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    lizard_counters.set_latency(300)
    session = Session(sandbox_config)
    try:
        threads = [asyncio.to_thread(session.sandbox) for _ in range(10)]
        tasks = [session.asandbox() for _ in range(10)]
        sandboxes = await asyncio.gather(*threads, *tasks)
        assert len({id(s) for s in sandboxes}) == 1
        assert count(lizard_counters, CREATE) == 1
    finally:
        await session.adestroy()


def test_one_session_serves_trio_asyncio_and_threads(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config)

    async def under_trio() -> Any:
        return await session.asandbox()

    try:
        from_trio = trio.run(under_trio)
        from_asyncio = asyncio.run(session.asandbox())
        assert from_trio is from_asyncio is session.sandbox()
        assert count(lizard_counters, CREATE) == 1
    finally:
        session.destroy()


# ── cancellation never loses the id ──────────────────────────────────────


async def _first_use_in_flight(
    server: LocalServer, config: SandboxConfig, latency_ms: int
) -> tuple[Session, asyncio.Task[Any]]:
    """A new session whose first ``asandbox()`` has its create at the server, answered later."""
    server.set_latency(latency_ms)
    session = Session(config)
    task = asyncio.create_task(session.asandbox())
    await asyncio.to_thread(wait_for, lambda: count(server, CREATE) == 1)
    return session, task


@pytest.mark.usefixtures("restore_latency")
async def test_cancelled_create_is_recorded_and_destroy_removes_it(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session, task = await _first_use_in_flight(lizard_counters, sandbox_config, 800)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The cancelled await waited for the create; the worker thread recorded its result.
    assert session.sandbox_id is not None
    assert session.created
    assert session.sandbox_id in lizard_counters.sandboxes()
    lizard_counters.set_latency(0)
    await session.adestroy()
    assert session.sandbox_id not in lizard_counters.sandboxes()
    assert count(lizard_counters, CREATE) == 1


@pytest.mark.usefixtures("restore_latency")
async def test_waiters_get_the_sandbox_when_the_creating_task_is_cancelled(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session, creator = await _first_use_in_flight(lizard_counters, sandbox_config, 500)
    waiters = [asyncio.create_task(session.asandbox()) for _ in range(5)]
    await asyncio.sleep(0.05)
    creator.cancel()
    try:
        sandboxes = await asyncio.gather(*waiters)
        assert len({id(s) for s in sandboxes}) == 1
        with pytest.raises(asyncio.CancelledError):
            await creator
        assert count(lizard_counters, CREATE) == 1
    finally:
        await session.adestroy()


def test_trio_cancellation_before_the_thread_starts_strands_nobody(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config)

    async def main() -> Any:
        with trio.CancelScope() as scope:
            scope.cancel()
            await session.asandbox()
        with trio.fail_after(30):
            return await session.asandbox()

    try:
        sandbox = trio.run(main)
        assert sandbox.sandbox_id == session.sandbox_id
        assert count(lizard_counters, CREATE) == 1
    finally:
        session.destroy()


@pytest.mark.usefixtures("restore_latency")
def test_destroy_during_create_waits_and_removes_the_new_sandbox(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    lizard_counters.set_latency(500)
    session = Session(sandbox_config)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first_use = pool.submit(session.sandbox)
        lizard_counters.wait_for_request(CREATE)
        session.destroy()
        with pytest.raises(SandboxGoneError, match="destroyed or closed"):
            first_use.result(timeout=30)  # it waited for the create: no sandbox being killed
    assert session.destroyed
    assert session.sandbox_id is not None
    assert session.sandbox_id not in lizard_counters.sandboxes()
    with pytest.raises(SandboxGoneError, match="destroyed"):
        session.sandbox()


@pytest.mark.timeout(60)  # before the fix it waited forever, the loop blocked
@pytest.mark.parametrize("end", ["close", "release", "keep_paused"])
async def test_a_synchronous_end_on_the_loops_thread_before_the_create_starts_returns(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig, end: str
) -> None:
    session = Session(sandbox_config)
    first_use = asyncio.create_task(session.asandbox())
    await asyncio.sleep(0)  # it claimed the create; the loop has not yet started its thread
    getattr(session, end)()  # on the loop's own thread: nothing to wait for, none sent
    with pytest.raises(SandboxGoneError, match="destroyed or closed"):
        await first_use
    assert session.sandbox_id is None
    assert count(lizard_counters, CREATE) == 0


@pytest.mark.usefixtures("restore_latency")
async def test_a_call_waiting_for_the_create_when_the_session_closes_is_refused(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session, first_use = await _first_use_in_flight(lizard_counters, sandbox_config, 1000)
    await session.aclose()  # no request: the sandbox is left running, for an attach
    with pytest.raises(SandboxGoneError, match="destroyed or closed"):
        await first_use
    assert session.sandbox_id in lizard_counters.sandboxes()
    lizard_counters.set_latency(0)
    Session(sandbox_config, sandbox_id=session.sandbox_id).destroy()


@pytest.mark.usefixtures("restore_latency")
@pytest.mark.parametrize("first_use", ["sandbox", "open_ahead"])
def test_keep_paused_during_the_create_leaves_the_new_sandbox_paused(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig, first_use: str
) -> None:
    lizard_counters.set_latency(1000)
    session = Session(sandbox_config)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiter = pool.submit(session.sandbox if first_use == "sandbox" else session.open_ahead)
        lizard_counters.wait_for_request(CREATE)
        session.keep_paused()  # the create is in flight: what it makes is kept, paused
        if first_use == "sandbox":
            with pytest.raises(SandboxGoneError, match="destroyed or closed"):
                waiter.result(timeout=30)
    lizard_counters.set_latency(0)
    assert session.sandbox_id is not None
    assert not session.destroyed
    status = (
        lizard.Sandbox(
            session.sandbox_id, api_key=lizard_counters.api_key, api_url=lizard_counters.url
        )
        .get_info()
        .status
    )
    Session(sandbox_config, sandbox_id=session.sandbox_id).destroy()
    assert status == "paused"  # not left running (billing) behind a closed session


def test_open_ahead_creates_once_in_the_background(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    with Session(sandbox_config) as session:
        session.open_ahead()
        session.open_ahead()  # under way: nothing more
        wait_for(lambda: session.sandbox_id is not None)
        assert session.sandbox_id in lizard_counters.sandboxes()
        sandbox = session.sandbox()
        session.open_ahead()  # there: nothing more
        assert session.sandbox() is sandbox
        assert count(lizard_counters, CREATE) == 1
    assert session.sandbox_id not in lizard_counters.sandboxes()


@pytest.mark.usefixtures("restore_latency")
def test_destroy_during_an_open_ahead_removes_the_new_sandbox(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    lizard_counters.set_latency(300)
    session = Session(sandbox_config)
    session.open_ahead()
    lizard_counters.wait_for_request(CREATE)
    session.destroy()
    assert session.sandbox_id is not None
    assert session.sandbox_id not in lizard_counters.sandboxes()
    session.open_ahead()  # destroyed: nothing
    assert count(lizard_counters, CREATE) == 1


@pytest.mark.usefixtures("restore_latency")
@pytest.mark.parametrize("wait", [True, False], ids=["failed-before-use", "fails-during-use"])
def test_a_failed_open_ahead_is_the_next_callers_error_once(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig, wait: bool
) -> None:
    lizard_counters.inject_fault(CREATE, status=429, count=1, retry_after_s=5)
    lizard_counters.set_latency(1000)  # the 429 comes a second after the create is sent
    session = Session(sandbox_config)
    session.open_ahead()
    assert "state=opening" in repr(session)
    if wait:
        wait_for(lambda: "state=lazy" in repr(session))  # the create failed
    with pytest.raises(QuotaError) as caught:
        session.sandbox()
    lizard_counters.set_latency(0)
    assert caught.value.retry_after == 5
    assert count(lizard_counters, CREATE) == 1  # not retried behind the caller's back
    try:
        session.sandbox()  # the caller's own next use tries again
        assert count(lizard_counters, CREATE) == 2
    finally:
        session.destroy()


def test_an_open_ahead_whose_thread_cannot_start_leaves_the_session_usable(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No thread to be had (a process at its thread limit, an interpreter shutting down): the
    # next use creates the sandbox itself instead of waiting for a create nobody runs.
    start = threading.Thread.start

    def refuse(thread: threading.Thread) -> None:
        if thread.name == "lizard-core-acquire":
            raise RuntimeError("can't start new thread")
        start(thread)

    session = Session(sandbox_config)
    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refuse)
        session.open_ahead()  # an optimisation: no error of its own
    user = threading.Thread(target=session.sandbox, daemon=True)
    user.start()
    user.join(timeout=30)
    assert not user.is_alive(), "sandbox() waits for a create that never runs"
    assert count(lizard_counters, CREATE) == 1
    session.destroy()
    assert session.sandbox_id not in lizard_counters.sandboxes()


# ── attach never replaces ────────────────────────────────────────────────


@pytest.mark.parametrize("how", ["killed", "expired"])
def test_attaching_to_a_gone_sandbox_raises_and_creates_nothing(
    lizard_local: LocalServer, sandbox_config: SandboxConfig, how: str
) -> None:
    gone = sdk_sandbox(lizard_local)
    if how == "killed":
        assert gone.kill()
    else:
        lizard_local.expire(gone.sandbox_id)
    lizard_local.reset_counters()
    session = Session(sandbox_config, sandbox_id=gone.sandbox_id)
    with pytest.raises(SandboxGoneError) as caught:
        session.sandbox()
    assert caught.value.sandbox_id == gone.sandbox_id
    with pytest.raises(SandboxGoneError):
        session.sandbox()  # remembered: no second request
    session.destroy()  # nothing left to kill
    assert count(lizard_local, CREATE) == 0
    assert count(lizard_local, CONNECT) == 1
    assert count(lizard_local, KILL) == 0


async def test_attaching_asynchronously_to_a_gone_sandbox_raises(
    lizard_local: LocalServer, sandbox_config: SandboxConfig
) -> None:
    gone = sdk_sandbox(lizard_local)
    gone.kill()
    lizard_local.reset_counters()
    session = Session(sandbox_config, sandbox_id=gone.sandbox_id)
    results = await asyncio.gather(*(session.asandbox() for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, SandboxGoneError) for r in results)
    assert count(lizard_local, CREATE) == 0
    assert count(lizard_local, CONNECT) == 1


def test_attached_sandbox_survives_the_with_block(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    existing = sdk_sandbox(lizard_counters)
    lizard_counters.reset_counters()
    try:
        with Session(sandbox_config, sandbox_id=existing.sandbox_id) as session:
            assert session.sandbox().sandbox_id == existing.sandbox_id
            assert not session.created
        assert existing.sandbox_id in lizard_counters.sandboxes()
        assert count(lizard_counters, CREATE) == 0
        assert count(lizard_counters, CONNECT) == 1
        assert count(lizard_counters, KILL) == 0
        with pytest.raises(SandboxGoneError, match="closed"):
            session.sandbox()
    finally:
        existing.kill()


def test_destroy_on_exit_true_destroys_an_attached_sandbox(
    lizard_local: LocalServer, sandbox_config: SandboxConfig
) -> None:
    existing = sdk_sandbox(lizard_local)
    with Session(sandbox_config, sandbox_id=existing.sandbox_id, destroy_on_exit=True) as s:
        s.sandbox()
    assert existing.sandbox_id not in lizard_local.sandboxes()


def test_destroy_on_exit_false_keeps_a_created_sandbox(
    lizard_local: LocalServer, sandbox_config: SandboxConfig
) -> None:
    with Session(sandbox_config, destroy_on_exit=False) as session:
        session.sandbox()
    sandbox_id = session.sandbox_id
    assert sandbox_id in lizard_local.sandboxes()
    # Another session can pick it up, and destroy it explicitly.
    Session(sandbox_config, sandbox_id=sandbox_id).destroy()
    assert sandbox_id not in lizard_local.sandboxes()


def test_transient_failure_of_attach_is_retried(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    existing = sdk_sandbox(lizard_counters)
    lizard_counters.reset_counters()
    try:
        lizard_counters.inject_fault(CONNECT, status=503, count=1)
        session = Session(sandbox_config, sandbox_id=existing.sandbox_id)
        assert session.sandbox().sandbox_id == existing.sandbox_id
        assert count(lizard_counters, CONNECT) == 2
    finally:
        existing.kill()


# ── is the sandbox still there? ──────────────────────────────────────────


def test_check_alive_is_one_unretried_get_and_remembers_a_gone_sandbox(
    lizard_local: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config)
    sandbox = session.sandbox()
    lizard_local.reset_counters()
    session.check_alive()  # alive: returns
    assert {r: n for r, n in lizard_local.counters()["routes"].items() if n} == {CONNECT: 1}
    lizard_local.inject_fault(CONNECT, status=503, count=1)
    with pytest.raises(TransientError):
        session.check_alive()  # the check itself failed: said so, not retried
    assert count(lizard_local, CONNECT) == 2
    lizard_local.expire(sandbox.sandbox_id)
    with pytest.raises(SandboxGoneError) as caught:
        session.check_alive()
    assert caught.value.sandbox_id == sandbox.sandbox_id
    assert "gone" in repr(session)
    lizard_local.reset_counters()
    with pytest.raises(SandboxGoneError):
        session.sandbox()  # remembered: no request
    with pytest.raises(SandboxGoneError):
        session.check_alive()
    session.destroy()  # a 404 already said it is gone: nothing to kill
    assert lizard_local.counters()["total"] == 0
    assert session.destroyed


async def test_acheck_alive_and_an_unused_session(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    unused = Session(sandbox_config)
    await unused.acheck_alive()  # no sandbox yet: nothing to ask
    assert lizard_counters.counters()["total"] == 0
    existing = sdk_sandbox(lizard_counters)
    lizard_counters.reset_counters()
    attached = Session(sandbox_config, sandbox_id=existing.sandbox_id)
    await attached.acheck_alive()
    assert count(lizard_counters, CONNECT) == 1
    existing.kill()
    with pytest.raises(SandboxGoneError):
        await attached.acheck_alive()
    with pytest.raises(SandboxGoneError):
        await attached.asandbox()
    assert count(lizard_counters, CONNECT) == 2
    assert count(lizard_counters, CREATE) == 0


def test_a_terminal_status_is_gone_and_destroy_still_deletes_it(
    lizard_local: LocalServer, sandbox_config: SandboxConfig
) -> None:
    # A platform may keep the record of a sandbox that is over, with a terminal status.
    class Over:
        status = "stopped"

    session = Session(sandbox_config)
    sandbox = session.sandbox()
    real_get_info = sandbox.get_info
    sandbox.get_info = lambda: Over()
    with pytest.raises(SandboxGoneError, match="stopped"):
        session.check_alive()
    sandbox.get_info = real_get_info
    lizard_local.reset_counters()
    session.destroy()
    assert count(lizard_local, KILL) == 1
    assert sandbox.sandbox_id not in lizard_local.sandboxes()


def test_check_alive_after_destroy_or_close_raises_without_a_request(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config)
    session.sandbox()
    session.destroy()
    lizard_counters.reset_counters()
    with pytest.raises(SandboxGoneError, match="destroyed or closed"):
        session.check_alive()
    assert lizard_counters.counters()["total"] == 0


# ── destroy ──────────────────────────────────────────────────────────────


def test_destroy_twice_is_fine_and_the_second_sends_nothing(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config)
    session.sandbox()
    session.destroy()
    session.destroy()
    assert count(lizard_counters, KILL) == 1
    assert session.destroyed


def test_destroy_without_use_sends_nothing(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config)
    session.destroy()
    assert lizard_counters.counters()["total"] == 0
    with pytest.raises(SandboxGoneError):
        session.sandbox()
    assert lizard_counters.counters()["total"] == 0


@pytest.mark.parametrize("how", ["killed", "expired"])
def test_a_sandbox_already_gone_counts_as_destroyed(
    lizard_local: LocalServer, sandbox_config: SandboxConfig, how: str
) -> None:
    session = Session(sandbox_config)
    sandbox = session.sandbox()
    if how == "killed":
        lizard.Sandbox(sandbox.sandbox_id, **session.api_kwargs()).kill()
    else:
        lizard_local.expire(sandbox.sandbox_id)
    session.destroy()
    assert session.destroyed


def test_destroy_after_a_5xx_can_be_retried(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config, retry=RetryPolicy(attempts=1))
    session.sandbox()
    lizard_counters.inject_fault(KILL, status=503, count=1)
    with pytest.raises(TransientError) as caught:
        session.destroy()
    assert caught.value.status_code == 503
    # The failed destroy kept the handle and the sandbox still runs.
    assert session.destroyed is False
    assert session.sandbox_id in lizard_counters.sandboxes()
    session.destroy()
    assert session.sandbox_id not in lizard_counters.sandboxes()
    assert count(lizard_counters, KILL) == 2
    assert "destroyed" in repr(session)


async def test_adestroy_after_a_5xx_can_be_retried(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config, retry=RetryPolicy(attempts=1))
    await session.asandbox()
    lizard_counters.inject_fault(KILL, status=502, count=1)
    with pytest.raises(TransientError):
        await session.adestroy()
    assert session.sandbox_id in lizard_counters.sandboxes()
    await session.adestroy()
    assert session.sandbox_id not in lizard_counters.sandboxes()


def test_destroy_retries_a_transient_failure_by_itself(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config, retry=RetryPolicy(attempts=3, base_delay=0.01))
    session.sandbox()
    lizard_counters.inject_fault(KILL, status=503, count=2)
    session.destroy()
    assert session.destroyed
    assert count(lizard_counters, KILL) == 3


def test_a_failed_destroy_on_exit_is_noted_on_the_blocks_exception(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config, retry=RetryPolicy(attempts=1))

    def use_then_fail() -> None:
        with session:
            session.sandbox()
            lizard_counters.inject_fault(KILL, status=503, count=1)
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError) as caught:
        use_then_fail()
    assert any("destroying sandbox" in note for note in caught.value.__notes__)
    assert session.sandbox_id in lizard_counters.sandboxes()
    session.destroy()


def test_a_failed_destroy_on_a_clean_exit_is_raised(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session = Session(sandbox_config, retry=RetryPolicy(attempts=1))

    def use() -> None:
        with session:
            session.sandbox()
            lizard_counters.inject_fault(KILL, status=500, count=1)

    with pytest.raises(TransientError):
        use()
    assert session.sandbox_id in lizard_counters.sandboxes()
    session.destroy()
    assert session.destroyed


async def test_async_with_destroys_what_it_created(
    lizard_local: LocalServer, sandbox_config: SandboxConfig
) -> None:
    async with Session(sandbox_config) as session:
        await session.asandbox()
        sandbox_id = session.sandbox_id
        assert sandbox_id in lizard_local.sandboxes()
    assert sandbox_id not in lizard_local.sandboxes()


@pytest.mark.usefixtures("restore_latency")
async def test_release_during_the_create_destroys_what_it_creates(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    session, task = await _first_use_in_flight(lizard_counters, sandbox_config, 800)
    assert not session.created  # the create has not answered yet
    await session.arelease()
    with pytest.raises(SandboxGoneError):
        await task  # the create finished and was recorded before the release decided
    assert session.created
    assert session.destroyed
    assert session.sandbox_id not in lizard_counters.sandboxes()


async def test_release_leaves_an_attached_sandbox_running(
    lizard_local: LocalServer, sandbox_config: SandboxConfig
) -> None:
    with Session(sandbox_config) as owner:
        owner.sandbox()
        attached = Session(sandbox_config, sandbox_id=owner.sandbox_id)
        attached.sandbox()
        attached.release()
        assert not attached.destroyed
        assert owner.sandbox_id in lizard_local.sandboxes()


# ── create failures are never retried ────────────────────────────────────


def test_429_on_create_surfaces_retry_after(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    lizard_counters.inject_fault(CREATE, status=429, count=1, retry_after_s=7)
    session = Session(sandbox_config)
    with pytest.raises(QuotaError) as caught:
        session.sandbox()
    assert caught.value.retry_after == 7
    assert caught.value.status_code == 429
    assert session.sandbox_id is None
    assert count(lizard_counters, CREATE) == 1
    # The next use tries again (the caller decided to); the fault was used up.
    try:
        session.sandbox()
        assert count(lizard_counters, CREATE) == 2
    finally:
        session.destroy()


@pytest.mark.usefixtures("restore_latency")
def test_a_failed_create_is_shared_by_concurrent_callers_not_repeated(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    lizard_counters.set_latency(300)
    lizard_counters.inject_fault(CREATE, status=429, count=1, retry_after_s=3)
    session = Session(sandbox_config)
    barrier = threading.Barrier(20)

    def first_use() -> BaseException | None:
        barrier.wait()
        try:
            session.sandbox()
        except QuotaError as error:
            return error
        return None

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        errors = list(pool.map(lambda _: first_use(), range(20)))
    assert all(isinstance(e, QuotaError) and e.retry_after == 3 for e in errors)
    assert count(lizard_counters, CREATE) == 1
    session.destroy()


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_on_create_is_not_retried(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig, status: int
) -> None:
    lizard_counters.inject_fault(CREATE, status=status, count=1)
    session = Session(sandbox_config)
    with pytest.raises(TransientError):
        session.sandbox()
    assert count(lizard_counters, CREATE) == 1
    assert session.sandbox_id is None
    session.destroy()


def test_rejected_credentials_carry_no_provider_text(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    wrong = "liz_wrong_key_for_this_test_0001"
    session = Session(sandbox_config.replace(api_key=wrong))
    with pytest.raises(CredentialsError) as caught:
        session.sandbox()
    assert caught.value.status_code == 401
    assert "Invalid API key" not in str(caught.value)
    assert wrong not in str(caught.value)
    assert caught.value.__cause__ is None
    assert count(lizard_counters, CREATE) <= 1


# ── calls, retries and keep-alive ────────────────────────────────────────


def test_call_translates_and_passes_through(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    with Session(sandbox_config) as session:
        sandbox = session.sandbox()
        session.call(sandbox.fs.write, "/tmp/x.txt", "hello")
        assert session.call(sandbox.fs.read_bytes, "/tmp/x.txt", idempotent=True) == b"hello"
        with pytest.raises(lizard.NotFoundError):
            session.call(sandbox.fs.read_bytes, "/tmp/none", passthrough=(lizard.NotFoundError,))
        with pytest.raises(SandboxGoneError):
            session.call(sandbox.fs.read_bytes, "/tmp/none")


def test_only_idempotent_calls_are_retried(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    with Session(sandbox_config, retry=RetryPolicy(base_delay=0.01)) as session:
        sandbox = session.sandbox()
        session.call(sandbox.fs.write, "/tmp/r.txt", "data")
        lizard_counters.reset_counters()
        lizard_counters.inject_fault(READ, status=503, count=1)
        assert session.call(sandbox.fs.read_bytes, "/tmp/r.txt", idempotent=True) == b"data"
        assert count(lizard_counters, READ) == 2
        lizard_counters.inject_fault(READ, status=503, count=1)
        with pytest.raises(TransientError):
            session.call(sandbox.fs.read_bytes, "/tmp/r.txt")
        assert count(lizard_counters, READ) == 3


async def test_acall_retries_idempotent_calls(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    async with Session(sandbox_config, retry=RetryPolicy(base_delay=0.01)) as session:
        sandbox = await session.asandbox()
        await session.acall(sandbox.fs.write, "/tmp/a.txt", "async")
        lizard_counters.reset_counters()
        lizard_counters.inject_fault(READ, status=503, count=1)
        data = await session.acall(sandbox.fs.read_bytes, "/tmp/a.txt", idempotent=True)
        assert data == b"async"
        assert count(lizard_counters, READ) == 2


def test_keep_alive_extends_a_sandbox_in_use_without_a_request_per_operation(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    config = sandbox_config.replace(lifetime_ms=2_000)
    with Session(config, keep_alive=True) as kept, Session(config) as idle:
        kept_sandbox = kept.sandbox()
        idle.sandbox()
        operations = 0
        started = time.monotonic()
        # At least 4 s (two lifetimes) and at least 12 operations, however slow the machine.
        while time.monotonic() - started < 4.0 or operations < 12:
            kept.call(kept_sandbox.get_info, idempotent=True)
            operations += 1
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        extensions = count(lizard_counters, EXTEND)
        assert kept.sandbox_id in lizard_counters.sandboxes()
        assert idle.sandbox_id not in lizard_counters.sandboxes()  # no keep-alive: expired
        # One extension per half lifetime (1 s) at most, not one per operation.
        assert 2 <= extensions <= elapsed + 1
        assert extensions < operations


def test_sessions_created_at_once_look_the_project_up_once(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig, no_new_sandboxes: None
) -> None:
    import lizard.project

    lizard.project._project_id_cache.clear()  # as in a fresh process
    sessions = [Session(sandbox_config) for _ in range(8)]
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda session: session.sandbox(), sessions))
        routes = lizard_counters.counters()["routes"]
        assert routes.get("POST /api/sandboxes") == 8
        assert routes.get("GET /api/projects") == 1
    finally:
        for session in sessions:
            session.destroy()


def test_keep_alive_covers_one_operation_longer_than_the_lifetime(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    from lizard_core.commands import run_command

    with Session(sandbox_config.replace(lifetime_ms=3_000), keep_alive=True) as session:
        result = run_command(session, ["sh", "-c", "sleep 7 && echo done"], timeout=30)
        assert result.stdout == b"done\n"  # the sandbox outlived three lifetimes in one call
        assert session.sandbox_id in lizard_counters.sandboxes()
        # An extension the keeper sent just before the call ended may still be in flight:
        # let it land before counting, then stay idle for more than half a lifetime.
        time.sleep(0.5)
        extensions = count(lizard_counters, EXTEND)
        assert 2 <= extensions <= 8  # about one per half lifetime while the call ran
        time.sleep(2.0)
        assert count(lizard_counters, EXTEND) == extensions  # idle: no more extensions


KEEPER = "lizard-core-keep-alive"


def _keepers() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == KEEPER}


@pytest.mark.parametrize("end", ["close", "destroy"])
def test_keep_alive_has_one_thread_per_session_that_ends_with_it(
    lizard_counters: LocalServer,
    sandbox_config: SandboxConfig,
    monkeypatch: pytest.MonkeyPatch,
    end: str,
) -> None:
    from lizard_core.commands import run_command

    started: list[threading.Thread] = []
    start = threading.Thread.start

    def counted_start(thread: threading.Thread) -> None:
        if thread.name == KEEPER:
            started.append(thread)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted_start)
    before = _keepers()
    session = Session(sandbox_config.replace(lifetime_ms=2_000), keep_alive=True)
    try:
        for _ in range(10):
            assert run_command(session, ["echo", "hi"]).stdout == b"hi\n"
        [keeper] = started  # not one per operation
        assert keeper.is_alive()  # asleep between operations, not ended
        assert _keepers() - before == {keeper}
        result = run_command(session, ["sh", "-c", "sleep 5 && echo done"], timeout=30)
        assert result.stdout == b"done\n"  # the same thread kept it alive through 2.5 lifetimes
        assert session.sandbox_id in lizard_counters.sandboxes()
        assert count(lizard_counters, EXTEND) >= 2
        assert started == [keeper]
    finally:
        getattr(session, end)()
        if end == "close":  # close leaves the sandbox running: end it here
            sdk = lizard.Sandbox(
                str(session.sandbox_id),
                api_key=lizard_counters.api_key,
                api_url=lizard_counters.url,
            )
            sdk.kill()
    keeper.join(timeout=5)
    assert not keeper.is_alive()
    assert not _keepers() - before


def test_the_keeper_of_a_session_dropped_unclosed_ends(
    lizard_local: LocalServer, sandbox_config: SandboxConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    from lizard_core import _keep_alive
    from lizard_core.commands import run_command

    monkeypatch.setattr(_keep_alive, "IDLE_CHECK_S", 0.1)
    before = _keepers()
    session = Session(sandbox_config, keep_alive=True)
    run_command(session, ["true"])
    sandbox_id = str(session.sandbox_id)
    [keeper] = _keepers() - before
    try:
        del session  # the keeper holds it only weakly
        gc.collect()
        keeper.join(timeout=5)
        assert not keeper.is_alive()
    finally:
        lizard.Sandbox(sandbox_id, api_key=lizard_local.api_key, api_url=lizard_local.url).kill()


def test_keep_alive_is_off_by_default(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    with Session(sandbox_config.replace(lifetime_ms=2_000)) as session:
        sandbox = session.sandbox()
        assert not session.keep_alive
        time.sleep(1.2)  # past half the lifetime, when keep-alive would extend it
        session.call(sandbox.get_info, idempotent=True)
    assert count(lizard_counters, EXTEND) == 0


def test_keep_alive_extends_an_attached_sandbox_once_at_first_use(
    lizard_counters: LocalServer, sandbox_config: SandboxConfig
) -> None:
    existing = sdk_sandbox(lizard_counters)  # the SDK's lifetime: 5 minutes
    lizard_counters.reset_counters()
    try:
        # More than half its lifetime is left: keep-alive's rule holds, nothing to extend.
        same = Session(sandbox_config, sandbox_id=existing.sandbox_id, keep_alive=True)
        sandbox = same.sandbox()
        for _ in range(3):
            same.call(sandbox.get_info, idempotent=True)
        assert count(lizard_counters, EXTEND) == 0
        # Less than half of this configuration's lifetime is left: extended once.
        longer = sandbox_config.replace(lifetime_ms=900_000)
        session = Session(longer, sandbox_id=existing.sandbox_id, keep_alive=True)
        sandbox = session.sandbox()
        for _ in range(5):
            session.call(sandbox.get_info, idempotent=True)
        assert count(lizard_counters, EXTEND) == 1
        assert _seconds_left(sandbox.get_info()) > 600
    finally:
        existing.kill()


# ── credentials stay on the host ─────────────────────────────────────────


def test_the_api_key_never_reaches_the_sandbox(
    lizard_local: LocalServer, sandbox_config: SandboxConfig
) -> None:
    config = sandbox_config.replace(envs={"VISIBLE": "yes"}, metadata={"suite": "core"})
    with Session(config) as session:
        sandbox = session.sandbox()
        # The command's environment and the argv of its own processes: what lizard_core sends.
        # (Other host processes are out of scope: in host isolation mode a sandbox can see them.)
        result = session.call(
            sandbox.process.exec_,
            "env; tr '\\0' ' ' < /proc/self/environ; tr '\\0' ' ' < /proc/$$/cmdline",
        )
        assert "VISIBLE=yes" in result.stdout
        assert lizard_local.api_key not in result.stdout
        assert lizard_local.api_key not in result.stderr
        info = session.call(sandbox.get_info, idempotent=True)
        assert info.metadata == config.sandbox_metadata
        assert lizard_local.api_key not in repr(session)
        assert lizard_local.api_key not in repr(config)


async def test_aopen_cancelled_during_its_create_leaves_no_sandbox(
    sandbox_config: SandboxConfig, lizard_local: LocalServer, restore_latency: None
) -> None:
    before = set(lizard_local.sandboxes())
    lizard_local.reset_counters()
    lizard_local.set_latency(1500)
    session = Session(sandbox_config)
    task = asyncio.create_task(session.aopen())
    await asyncio.sleep(0.5)  # the create request is in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    lizard_local.set_latency(0)
    assert lizard_local.counters()["routes"].get("POST /api/sandboxes") == 1
    assert set(lizard_local.sandboxes()) == before
    assert session.destroyed


async def test_aopen_attaching_to_a_gone_sandbox_raises_and_creates_nothing(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    made = Session(sandbox_config)
    await made.aopen()
    assert made.sandbox_id is not None
    await made.adestroy()
    before = set(lizard_local.sandboxes())
    lizard_local.reset_counters()
    with pytest.raises(SandboxGoneError):
        await Session(sandbox_config, sandbox_id=made.sandbox_id).aopen()
    assert set(lizard_local.counters()["routes"]) == {"GET /api/sandboxes/{id}"}
    assert set(lizard_local.sandboxes()) == before
