"""Who owns the sandbox: created lazily once, destroyed by close, attached to by id."""

from __future__ import annotations

import asyncio

import pytest
from conftest import CREATE, Requests

from lizard_local import LocalServer
from strands_lizard import LizardSandbox, SandboxUnavailableError


async def test_close_destroys_the_sandbox_it_created(lizard_local: LocalServer) -> None:
    sandbox = LizardSandbox(lifetime_ms=120_000)
    await sandbox.execute("true")
    sandbox_id = sandbox.sandbox_id
    assert sandbox_id in lizard_local.sandboxes()
    await sandbox.aclose()
    await sandbox.aclose()  # idempotent
    assert sandbox_id not in lizard_local.sandboxes()
    with pytest.raises(SandboxUnavailableError):
        await sandbox.execute("true")


def test_with_block_closes_and_an_unused_sandbox_costs_nothing(
    lizard_local: LocalServer, requests: Requests
) -> None:
    with LizardSandbox(lifetime_ms=120_000):
        pass
    assert requests.counts() == {}


async def test_attaching_by_id_uses_the_sandbox_and_leaves_it_running(
    lizard_local: LocalServer, requests: Requests
) -> None:
    async with LizardSandbox(lifetime_ms=120_000) as owner:
        await owner.write_text("/tmp/shared.txt", "from the owner")
        requests.reset()
        async with LizardSandbox(sandbox_id=owner.sandbox_id) as attached:
            assert await attached.read_text("/tmp/shared.txt") == "from the owner"
        assert CREATE not in requests.counts()
        assert owner.sandbox_id in lizard_local.sandboxes()
        assert (await owner.execute("echo still here")).stdout == "still here\n"


async def test_an_attached_sandbox_that_is_gone_is_never_replaced(
    lizard_local: LocalServer, requests: Requests
) -> None:
    owner = LizardSandbox(lifetime_ms=120_000)
    await owner.execute("true")
    sandbox_id = owner.sandbox_id
    await owner.aclose()
    requests.reset()
    attached = LizardSandbox(sandbox_id=sandbox_id)
    with pytest.raises(SandboxUnavailableError):
        await attached.execute("true")
    assert CREATE not in requests.counts()
    await attached.akill()


async def test_kill_destroys_an_attached_sandbox(lizard_local: LocalServer) -> None:
    owner = LizardSandbox(lifetime_ms=120_000)
    await owner.execute("true")
    attached = LizardSandbox(sandbox_id=owner.sandbox_id)
    await attached.akill()
    assert owner.sandbox_id not in lizard_local.sandboxes()
    await owner.aclose()


async def test_close_during_the_first_calls_create_destroys_what_it_creates(
    lizard_local: LocalServer, requests: Requests
) -> None:
    before = set(lizard_local.sandboxes())
    sandbox = LizardSandbox(lifetime_ms=120_000)
    lizard_local.set_latency(2000)  # every request is handled 2 s after it arrives
    try:
        first = asyncio.create_task(sandbox.execute("true"))
        # It has arrived, so it is in flight (handled 2 s later) when the close comes.
        await asyncio.to_thread(lizard_local.wait_for_request, CREATE)
        await sandbox.aclose()
    finally:
        lizard_local.set_latency(0)
    with pytest.raises(SandboxUnavailableError):
        await first  # it waited for the create, and the session was closed meanwhile
    assert set(lizard_local.sandboxes()) == before
