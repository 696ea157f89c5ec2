"""Faults at lizard_core's edges: odd API answers, injected failures, interrupts.

Each test ends in a success after a bounded retry (only where the request is known not to
have run), or in the documented error within a stated bound, with nothing left behind and the
next operation working where the sandbox survives.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from stub_api import StubApi

from lizard_core.config import SandboxConfig
from lizard_core.errors import GuestProtocolError, LizardIntegrationError, SandboxGoneError
from lizard_core.guest import fetch_file, run_guest
from lizard_core.session import Session
from lizard_local import LocalServer

CREATE = "POST /api/sandboxes"
SANDBOX = "/api/sandboxes/sbx_stub"


@pytest.fixture
def stub() -> Iterator[StubApi]:
    with StubApi() as api:
        api.routes[("GET", SANDBOX)] = (200, {"sandboxId": "sbx_stub", "status": "running"})
        api.routes[("GET", "/api/projects")] = (200, [{"id": "proj_stub", "slug": "stub"}])
        yield api


def stub_session(stub: StubApi, **kwargs: Any) -> Session:
    config = SandboxConfig.from_env(
        api_key="liz_stub_key_0123456789", api_url=stub.url, project_id="proj_stub"
    )
    return Session(config, **kwargs)


# ── 404s: a missing file is not a missing sandbox; a create has no sandbox to lose ──


def test_a_404_without_a_code_naming_a_sandbox_file_is_a_missing_file(stub: StubApi) -> None:
    stub.routes[("GET", f"{SANDBOX}/files")] = (
        404,
        {"error": "No such file: /workspace/sandbox_notes.txt"},
    )
    session = stub_session(stub, sandbox_id="sbx_stub")
    sandbox = session.sandbox()
    assert fetch_file(session, sandbox, "/workspace/sandbox_notes.txt") is None
    # The same answer once the sandbox itself is gone: one GET of its record tells.
    stub.routes[("GET", SANDBOX)] = (404, {"error": "Sandbox not found"})
    with pytest.raises(SandboxGoneError):
        fetch_file(session, sandbox, "/workspace/sandbox_notes.txt")
    session.close()


def test_a_404_on_create_is_not_sandbox_gone_and_the_next_use_creates(
    lizard_local: LocalServer, no_new_sandboxes: None
) -> None:
    session = Session(SandboxConfig.from_env(lifetime_ms=60_000))
    lizard_local.inject_fault(CREATE, status=404, count=1)
    with pytest.raises(LizardIntegrationError, match="could not create the sandbox") as raised:
        session.sandbox()
    assert not isinstance(raised.value, SandboxGoneError)
    assert raised.value.status_code == 404
    session.sandbox()  # nothing was recorded as gone: this use creates
    assert session.sandbox_id in lizard_local.sandboxes()
    session.destroy()


@pytest.mark.parametrize("body", [{}, b"not json", [1, 2]], ids=["no-id", "not-json", "a-list"])
def test_a_malformed_2xx_answer_to_create_is_translated(stub: StubApi, body: Any) -> None:
    stub.routes[("POST", "/api/sandboxes")] = (200, body)
    session = stub_session(stub)
    with pytest.raises(LizardIntegrationError, match="could not read") as raised:
        session.sandbox()
    assert type(raised.value) is LizardIntegrationError
    assert "liz_stub_key" not in str(raised.value)
    session.close()


def test_a_malformed_2xx_answer_to_the_liveness_check_is_translated(stub: StubApi) -> None:
    session = stub_session(stub, sandbox_id="sbx_stub")
    session.sandbox()
    stub.routes[("GET", SANDBOX)] = (200, b"[]")
    with pytest.raises(LizardIntegrationError, match="could not read"):
        session.check_alive()
    session.close()


# ── Ctrl-C ───────────────────────────────────────────────────────────────


def test_ctrl_c_during_a_synchronous_first_create_keeps_the_sandbox_id(
    lizard_local: LocalServer, no_new_sandboxes: None, restore_latency: None
) -> None:
    assert threading.current_thread() is threading.main_thread()
    session = Session(SandboxConfig.from_env(lifetime_ms=60_000))
    lizard_local.set_latency(3000)  # the create is answered 3 s after it is sent
    # Ctrl-C goes to the main thread itself (a process-wide signal may be taken by another
    # thread), half a second in: well inside the create even on a loaded machine.
    main = threading.main_thread().ident
    assert main is not None
    # Python leaves SIGINT ignored when it started ignored (a background job of a shell):
    # Ctrl-C's own handler, for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            session.sandbox()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
        lizard_local.set_latency(0)
    assert time.monotonic() - started >= 2.0  # the interrupt waited for the create
    assert session.sandbox_id in lizard_local.sandboxes()  # recorded, so it can be destroyed
    session.destroy()


# ── a stalled stream ─────────────────────────────────────────────────────


def test_a_stalled_exec_stream_does_not_outlive_its_call(stub: StubApi) -> None:
    release = threading.Event()

    def stall(handler: Any) -> None:  # headers, then nothing: a platform that stalls
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        handler.wfile.flush()
        release.wait(60)

    stub.routes[("POST", f"{SANDBOX}/exec")] = (200, stall)
    session = stub_session(stub, sandbox_id="sbx_stub")
    sandbox = session.sandbox()
    before = set(threading.enumerate())
    try:
        with pytest.raises(GuestProtocolError, match="stopped answering"):
            run_guest(sandbox, {"op": "exists", "path": "/"}, stall_s=1.0, session=session)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            readers = [
                t for t in set(threading.enumerate()) - before if t.name == "lizard-core-guest"
            ]
            if not readers:
                break
            time.sleep(0.05)
        # Before, the reader lived on until the exec's own timeout (600 s here).
        assert not readers, "the stalled stream's reader outlived the call"
    finally:
        release.set()
        session.close()


# ── the fault table: lizard-local's injected faults, real SDK, real processes ──────────────

EXEC = "POST /api/sandboxes/{id}/exec"
GET_FILE = "GET /api/sandboxes/{id}/files"
POST_FILE = "POST /api/sandboxes/{id}/files"
BOUND_S = 30.0
"""Every fault below ends within this many seconds (measured; generous for a loaded 2-core box)."""


@pytest.fixture
def session(lizard_local: LocalServer, no_new_sandboxes: None) -> Iterator[Session]:
    session = Session(SandboxConfig.from_env(lifetime_ms=120_000))
    try:
        yield session
    finally:
        session.destroy()


def _works(session: Session) -> None:
    """The next operation on a surviving sandbox succeeds."""
    from lizard_core.commands import run_command

    assert run_command(session, ["echo", "next"]).stdout == b"next\n"


@pytest.mark.parametrize("count", [1, 3], ids=["once", "repeatedly"])
@pytest.mark.parametrize(
    ("status", "kind"), [(503, "TransientError"), (429, "QuotaError")], ids=["503", "429"]
)
def test_a_failed_create_is_never_retried_and_the_next_use_creates(
    lizard_local: LocalServer, session: Session, status: int, kind: str, count: int
) -> None:
    lizard_local.reset_counters()
    lizard_local.inject_fault(CREATE, status=status, count=count, retry_after_s=1)
    started = time.monotonic()
    for _ in range(count):  # every use fails alone: a create may have run, so no retry
        with pytest.raises(LizardIntegrationError) as raised:
            session.sandbox()
        assert type(raised.value).__name__ == kind
    assert time.monotonic() - started < BOUND_S
    if status == 429:
        assert raised.value.retry_after == 1.0  # type: ignore[attr-defined]
    assert lizard_local.counters()["routes"][CREATE] == count
    assert session.sandbox_id is None
    _works(session)  # the fault is used up: this use creates
    assert lizard_local.counters()["routes"][CREATE] == count + 1


@pytest.mark.parametrize("count", [1, 3], ids=["once", "repeatedly"])
@pytest.mark.parametrize(
    ("status", "kind"), [(503, "TransientError"), (429, "QuotaError")], ids=["503", "429"]
)
def test_a_refused_exec_is_its_error_and_the_next_command_runs(
    lizard_local: LocalServer, session: Session, status: int, kind: str, count: int
) -> None:
    from lizard_core.commands import run_command

    session.sandbox()
    lizard_local.inject_fault(EXEC, status=status, count=count, retry_after_s=1)
    for _ in range(count):  # a command is never re-sent behind the caller's back
        started = time.monotonic()
        with pytest.raises(LizardIntegrationError) as raised:
            run_command(session, ["echo", "x"])
        assert type(raised.value).__name__ == kind
        assert time.monotonic() - started < BOUND_S
    _works(session)


@pytest.mark.parametrize(
    ("route", "status", "count"),
    [(GET_FILE, 503, 1), (GET_FILE, 503, 3), (GET_FILE, 429, 1), (POST_FILE, 503, 1)],
    ids=["get-503-once", "get-503-repeatedly", "get-429", "post-503-once"],
)
def test_files_requests_that_did_not_run_are_retried_to_success(
    lizard_local: LocalServer, session: Session, route: str, status: int, count: int
) -> None:
    from lizard_core.files import WRITE_INLINE, SandboxFiles

    files = SandboxFiles(session)
    data = os.urandom(WRITE_INLINE + 10)  # past the inline write: staged with POST files
    files.write_bytes("/tmp/fault-data", data)
    lizard_local.inject_fault(route, status=status, count=count, retry_after_s=1)
    started = time.monotonic()
    if route == POST_FILE:
        files.write_bytes("/tmp/fault-data", data[::-1])
        assert files.read_bytes("/tmp/fault-data") == data[::-1]
    else:
        assert files.read_bytes("/tmp/fault-data") == data
    assert time.monotonic() - started < BOUND_S
    _works(session)


def test_a_stream_dropped_mid_output_is_a_protocol_error_and_the_next_command_runs(
    lizard_local: LocalServer, session: Session
) -> None:
    from lizard_core.commands import run_command

    session.sandbox()
    lizard_local.inject_stream_drop(count=1, after_events=3)
    started = time.monotonic()
    with pytest.raises(GuestProtocolError, match="may have partly run"):
        run_command(session, ["sh", "-c", "for i in 1 2 3 4 5; do echo $i; sleep 0.2; done"])
    assert time.monotonic() - started < BOUND_S
    _works(session)


@pytest.mark.parametrize("how", ["expired", "killed"])
def test_a_sandbox_gone_mid_command_is_sandbox_gone_within_the_bound(
    lizard_local: LocalServer, session: Session, how: str
) -> None:
    import lizard

    from lizard_core.commands import run_command

    sandbox_id = session.sandbox().sandbox_id

    def end_it() -> None:
        if how == "expired":
            lizard_local.expire(sandbox_id)
        else:
            lizard.Sandbox(sandbox_id, **session.api_kwargs()).kill()

    timer = threading.Timer(0.5, end_it)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(SandboxGoneError):
            run_command(session, ["sleep", "30"], timeout=60)
    finally:
        timer.cancel()
    assert time.monotonic() - started < BOUND_S
    with pytest.raises(SandboxGoneError):  # remembered: no request, no replacement
        run_command(session, ["true"])
    assert sandbox_id not in lizard_local.sandboxes()


def test_a_killed_guest_is_a_protocol_error_and_the_next_command_runs(session: Session) -> None:
    from lizard_core.commands import run_command

    started = time.monotonic()
    with pytest.raises(GuestProtocolError):
        # The command kills the guest program that runs it (its parent).
        run_command(session, ["sh", "-c", "echo started; kill -9 $PPID; sleep 1"])
    assert time.monotonic() - started < BOUND_S
    _works(session)


def test_a_stalled_files_response_is_read_through_the_guest_within_the_guard(
    lizard_local: LocalServer, session: Session, restore_latency: None
) -> None:
    from lizard_core.files import READ_GUARD_S, SandboxFiles

    files = SandboxFiles(session)
    files.write_bytes("/tmp/stalled", b"data")
    lizard_local.set_latency(READ_GUARD_S * 1000 + 1500)  # the GET's headers come too late
    started = time.monotonic()
    try:
        assert files.read_bytes("/tmp/stalled") == b"data"
    finally:
        lizard_local.set_latency(0)
    assert time.monotonic() - started < BOUND_S
    _works(session)
