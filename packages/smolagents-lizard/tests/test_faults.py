"""Faults through `LizardExecutor`: lizard-local's injected failures, real SDK and processes.

Each ends in the outcome `_errors` documents, within `BOUND_S`: a `StepError` the model sees
(the run goes on and the next step works, its namespace kept), or `SandboxUnavailableError`
when the sandbox is gone. Nothing is left behind: `make_executor` cleans up every executor, and
the session fails on any sandbox left alive. Run on the `base` template only: the templates
differ in the kernel, not in how faults surface.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import lizard
import pytest

from lizard_local import LocalServer
from smolagents_lizard import LizardExecutor, SandboxUnavailableError
from smolagents_lizard._errors import StepError

MakeExecutor = Callable[..., LizardExecutor]

CREATE = "POST /api/sandboxes"
EXEC = "POST /api/sandboxes/{id}/exec"
BOUND_S = 30.0


@pytest.fixture
def template() -> str:
    return "base"


@pytest.mark.parametrize("count", [1, 3], ids=["once", "repeatedly"])
@pytest.mark.parametrize(
    ("route", "status", "says"),
    [
        (CREATE, 503, "Whether the code ran is unknown"),
        (CREATE, 429, "retry after 1 s"),
        (EXEC, 503, "Whether the code ran is unknown"),
        (EXEC, 429, "retry after 1 s"),
    ],
    ids=["create-503", "create-429", "exec-503", "exec-429"],
)
def test_refused_requests_are_step_errors_and_the_next_step_works(
    make_executor: MakeExecutor,
    local_server: LocalServer,
    route: str,
    status: int,
    says: str,
    count: int,
) -> None:
    executor = make_executor()
    if route == EXEC:
        executor("kept = 'yes'")
    local_server.inject_fault(route, status=status, count=count, retry_after_s=1)
    for _ in range(count):
        started = time.monotonic()
        with pytest.raises(StepError, match=says):
            executor("print('refused')")
        assert time.monotonic() - started < BOUND_S
    if route == EXEC:
        assert executor("kept").output == "'yes'"  # the namespace survived
    else:
        assert executor("'created'").output == "'created'"
    routes = local_server.counters()["routes"]
    assert routes[CREATE] == (count + 1 if route == CREATE else 1)  # a create is never retried


def test_a_sandbox_killed_mid_step_ends_the_run_within_the_bound(
    make_executor: MakeExecutor, local_server: LocalServer
) -> None:
    executor = make_executor()
    executor("import time")
    sandbox_id = executor.sandbox_id
    assert sandbox_id is not None

    def kill() -> None:
        lizard.Sandbox(sandbox_id, api_key=local_server.api_key, api_url=local_server.url).kill()

    timer = threading.Timer(0.5, kill)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(SandboxUnavailableError, match="The agent run stops here"):
            executor("time.sleep(30)")
    finally:
        timer.cancel()
    assert time.monotonic() - started < BOUND_S
    assert sandbox_id not in local_server.sandboxes()
