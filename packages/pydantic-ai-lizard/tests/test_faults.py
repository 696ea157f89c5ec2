"""Faults through `LizardSandboxBackend`: lizard-local's injected failures, real SDK and processes.

Each ends in success after a bounded retry (only file requests, known not to have run), or in
the error the module contract of `_errors` documents, within `BOUND_S`, with nothing left behind
(the `make_backend` fixture destroys every sandbox; the session fails on any left alive) and the
next operation working where the sandbox survives.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import anyio
import pytest
from pydantic_ai.workspaces import WorkspaceError, WorkspaceUnavailableError

from lizard_core.errors import QuotaError, TransientError
from lizard_local import LocalServer
from pydantic_ai_lizard import LizardSandboxBackend

BackendFactory = Callable[..., LizardSandboxBackend]

CREATE = "POST /api/sandboxes"
EXEC = "POST /api/sandboxes/{id}/exec"
GET_FILE = "GET /api/sandboxes/{id}/files"
POST_FILE = "POST /api/sandboxes/{id}/files"
BOUND_S = 30.0


async def _works(backend: LizardSandboxBackend) -> None:
    assert (await backend.run(["echo", "next"])).stdout == "next\n"


@pytest.mark.parametrize("count", [1, 3], ids=["once", "repeatedly"])
@pytest.mark.parametrize(
    ("route", "status", "kind"),
    [
        (CREATE, 503, TransientError),
        (CREATE, 429, QuotaError),
        (EXEC, 503, TransientError),
        (EXEC, 429, QuotaError),
    ],
    ids=["create-503", "create-429", "exec-503", "exec-429"],
)
async def test_refused_requests_propagate_for_the_caller_to_retry(
    lizard_local: LocalServer,
    make_backend: BackendFactory,
    route: str,
    status: int,
    kind: type[Exception],
    count: int,
) -> None:
    backend = make_backend()
    if route == EXEC:
        await backend.working_dir()
    lizard_local.inject_fault(route, status=status, count=count, retry_after_s=1)
    for _ in range(count):  # never re-sent behind the caller's back: it may have run
        with anyio.fail_after(BOUND_S), pytest.raises(kind) as raised:
            await backend.run(["echo", "x"])
        if status == 429:
            assert raised.value.retry_after == 1.0  # type: ignore[attr-defined]
    await _works(backend)
    assert backend.ref is not None
    assert backend.ref.id in lizard_local.sandboxes()


@pytest.mark.parametrize(
    ("route", "status", "count"),
    [(GET_FILE, 503, 1), (GET_FILE, 503, 3), (GET_FILE, 429, 1), (POST_FILE, 503, 1)],
    ids=["get-503-once", "get-503-repeatedly", "get-429", "post-503-once"],
)
async def test_file_requests_are_retried_to_success(
    lizard_local: LocalServer, make_backend: BackendFactory, route: str, status: int, count: int
) -> None:
    backend = make_backend()
    data = os.urandom(1024 * 1024 + 10)  # past the inline write: staged with POST files
    await backend.write_bytes("/tmp/data", data)
    lizard_local.inject_fault(route, status=status, count=count, retry_after_s=1)
    with anyio.fail_after(BOUND_S):
        if route == POST_FILE:
            await backend.write_bytes("/tmp/data", data[::-1])
            assert await backend.read_bytes("/tmp/data") == data[::-1]
        else:
            assert await backend.read_bytes("/tmp/data") == data
    await _works(backend)


async def test_a_stream_dropped_mid_output_is_a_workspace_error(
    lizard_local: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    await backend.working_dir()
    lizard_local.inject_stream_drop(count=1, after_events=3)
    with anyio.fail_after(BOUND_S), pytest.raises(WorkspaceError, match="may have partly run"):
        await backend.run("for i in 1 2 3 4 5; do echo $i; sleep 0.2; done", shell=True)
    await _works(backend)


@pytest.mark.parametrize("how", ["expired", "killed"])
async def test_a_sandbox_gone_mid_command_is_unavailable(
    lizard_local: LocalServer, make_backend: BackendFactory, how: str
) -> None:
    import lizard

    backend = make_backend()
    await backend.working_dir()
    assert backend.ref is not None
    sandbox_id = backend.ref.id

    def end_it() -> None:
        if how == "expired":
            lizard_local.expire(sandbox_id)
        else:
            lizard.Sandbox(
                sandbox_id, api_key=lizard_local.api_key, api_url=lizard_local.url
            ).kill()

    timer = threading.Timer(0.5, end_it)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(WorkspaceUnavailableError):
            await backend.run(["sleep", "30"], timeout=60)
    finally:
        timer.cancel()
    assert time.monotonic() - started < BOUND_S
    with pytest.raises(WorkspaceUnavailableError):  # never replaced
        await backend.run(["true"])
    assert sandbox_id not in lizard_local.sandboxes()


async def test_a_stalled_files_response_is_read_within_the_guard(
    lizard_local: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    await backend.write_bytes("/tmp/stalled", b"data")
    lizard_local.set_latency(3500)  # the GET's headers come after the 2 s guard
    try:
        with anyio.fail_after(BOUND_S):
            assert await backend.read_bytes("/tmp/stalled") == b"data"
    finally:
        lizard_local.set_latency(0)
    await _works(backend)
