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
    lizard_local: Any, no_new_sandboxes: None
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
    lizard_local: Any, no_new_sandboxes: None, restore_latency: None
) -> None:
    assert threading.current_thread() is threading.main_thread()
    session = Session(SandboxConfig.from_env(lifetime_ms=60_000))
    lizard_local.set_latency(1500)  # the create is answered 1.5 s after it is sent
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            session.sandbox()
    finally:
        timer.cancel()
        lizard_local.set_latency(0)
    assert time.monotonic() - started >= 1.0  # the interrupt waited for the create
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
