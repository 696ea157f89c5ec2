"""The session's pooled connection (``lizard_core._transport``), against lizard-local."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import lizard
import pytest

from lizard_core._transport import ReadAbandonedError, Transport
from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import SandboxGoneError, TransientError, translate
from lizard_core.files import WRITE_INLINE, SandboxFiles
from lizard_core.session import Session
from lizard_local import LocalServer


def test_a_sessions_commands_and_file_operations_share_one_connection(
    sandbox_config: SandboxConfig,
    lizard_local: LocalServer,
    api_requests: Any,
    no_new_sandboxes: None,
) -> None:
    big = os.urandom(WRITE_INLINE + 1)  # past the inline budget: POST files and an exec
    with Session(sandbox_config) as session:
        files = SandboxFiles(session)
        session.sandbox()  # the create opens the pooled connection (see test_create)
        api_requests.reset()
        for index in range(4):
            assert run_command(session, ["true"]).exit_code == 0
            files.write_bytes(f"/tmp/pooled-{index}", b"x" * index)
        files.write_bytes("/tmp/pooled-big", big)
        assert files.read_bytes("/tmp/pooled-big") == big
        counters = lizard_local.counters()
        routes = api_requests.counts()
    # The same requests as through the SDK: 4 commands, 4 inline writes, an upload and the exec
    # assembling it, a read's GET.
    assert routes == {
        api_requests.EXEC: 9,
        api_requests.POST_FILE: 1,
        api_requests.GET_FILE: 1,
    }
    assert counters["total"] == 11
    assert counters["connections"] == 0, counters  # all on the connection the create opened


def test_the_wire_contract_matches_the_sdk(
    lizard_counters: LocalServer, module_session: Any
) -> None:
    """The same exec through the SDK and through the pool gives the same result and counts."""
    sandbox = module_session.sandbox()
    argv = ["sh", "-c", "echo out; echo err >&2; exit 3"]
    sdk_pids: list[int] = []
    sdk = sandbox.process.exec_(
        argv, timeout_ms=5000, on_stdout=lambda _: None, on_pid=sdk_pids.append
    )
    pool_pids: list[int] = []
    lines: list[str] = []
    ours = module_session.transport().exec_stream(
        sandbox.sandbox_id, argv, timeout_ms=5000, on_stdout=lines.append, on_pid=pool_pids.append
    )
    assert (ours.stdout, ours.stderr, ours.exit_code) == (sdk.stdout, sdk.stderr, sdk.exit_code)
    assert (ours.stdout, ours.stderr, ours.exit_code) == ("out", "err", 3)
    assert lines == ["out"]
    assert len(pool_pids) == len(sdk_pids) == 1
    assert lizard_counters.counters()["routes"]["POST /api/sandboxes/{id}/exec"] == 2


def test_api_errors_are_the_sdks_own(module_session: Any, lizard_local: LocalServer) -> None:
    transport = module_session.transport()
    sandbox_id = module_session.sandbox_id
    with pytest.raises(lizard.NotFoundError):
        transport.read_bytes(sandbox_id, "/no/such/file")
    with pytest.raises(lizard.NotFoundError) as caught:
        transport.exec_stream("sbx_doesnotexist", ["true"], timeout_ms=5000)
    assert isinstance(translate(caught.value), SandboxGoneError)
    lizard_local.inject_fault("POST /api/sandboxes/{id}/exec", status=503)
    with pytest.raises(lizard.LizardError) as caught:
        transport.exec_stream(sandbox_id, ["true"], timeout_ms=5000)
    assert isinstance(translate(caught.value), TransientError)


def test_the_key_is_only_in_the_header(sandbox_config: SandboxConfig) -> None:
    key = sandbox_config.api_key.reveal()
    session = Session(sandbox_config)
    transport = session.transport()  # no request: the client is made on first use
    assert key not in repr(transport)
    assert key not in repr(session)
    transport.close()
    with pytest.raises(SandboxGoneError) as caught:
        transport.read_bytes("sbx_x", "/x")
    assert key not in str(caught.value)


def test_destroy_closes_the_pool_and_later_use_is_refused(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer, no_new_sandboxes: None
) -> None:
    session = Session(sandbox_config)
    try:
        run_command(session, ["true"])
        transport = session.transport()
        assert "open" in repr(transport)
    finally:
        session.destroy()
    assert "closed" in repr(transport)
    with pytest.raises(SandboxGoneError):
        session.transport()
    with pytest.raises(SandboxGoneError):
        transport.exec_stream("sbx_x", ["true"])


def test_transport_errors_surface_as_httpx_errors() -> None:
    transport = Transport("http://127.0.0.1:9", "secret-key")  # discard port: refused
    try:
        with pytest.raises(httpx.ConnectError) as caught:
            transport.read_bytes("sbx_x", "/x")
        assert isinstance(translate(caught.value), TransientError)
        assert "secret-key" not in str(caught.value)
    finally:
        transport.close()


@contextlib.contextmanager
def stalling_server(headers_after: float, body_after: float) -> Iterator[str]:
    """A loopback HTTP server that answers ``hello`` with its headers and body each late."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                if not done.wait(headers_after):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
                    if not done.wait(body_after):
                        conn.sendall(b"hello")
                done.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        listener.close()
        thread.join(10)


def test_headers_timeout_bounds_the_headers_not_the_body() -> None:
    # Headers at once, the body after twice the guard: read under the 60 s limit, so it arrives.
    with stalling_server(headers_after=0, body_after=1.0) as url:
        transport = Transport(url, "secret-key")
        try:
            assert transport.read_bytes("sbx_x", "/x", headers_timeout=0.5) == b"hello"
        finally:
            transport.close()


def test_headers_that_miss_the_guard_abandon_the_request() -> None:
    with stalling_server(headers_after=30, body_after=0) as url:
        transport = Transport(url, "secret-key")
        try:
            started = time.monotonic()
            with pytest.raises(ReadAbandonedError):
                transport.read_bytes("sbx_x", "/x", headers_timeout=0.3)
            assert time.monotonic() - started < 5
        finally:
            transport.close()
    # Not an httpx error: the session's translation and retries leave it alone.
    assert not issubclass(ReadAbandonedError, httpx.HTTPError)
