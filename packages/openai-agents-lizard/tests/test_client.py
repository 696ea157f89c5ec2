"""``LizardSandboxClient``: options, create, delete, state, against lizard-local."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from agents.sandbox.manifest import Manifest
from agents.sandbox.session.sandbox_client import BaseSandboxClientOptions
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from lifecycle import OPTIONS
from pydantic import ValidationError

from lizard_local import LocalServer
from openai_agents_lizard import (
    LizardSandboxClient,
    LizardSandboxClientOptions,
    LizardSandboxSessionState,
    SandboxCreateError,
)

CREATE = "POST /api/sandboxes"


@pytest.fixture
def slow_api(lizard_local: LocalServer) -> Iterator[LocalServer]:
    lizard_local.set_latency(1500)
    try:
        yield lizard_local
    finally:
        lizard_local.set_latency(0)


def test_options_are_frozen_typed_and_registered() -> None:
    options = LizardSandboxClientOptions(template="base", size="small", allowed_hosts=("pypi.org",))
    with pytest.raises(ValidationError):
        options.template = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        LizardSandboxClientOptions(size="enormous")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        LizardSandboxClientOptions(pause_on_exit=True)  # type: ignore[call-arg]
    parsed = BaseSandboxClientOptions.parse(json.loads(options.model_dump_json()))
    assert parsed == options


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (LizardSandboxClientOptions(lifetime_ms=-1), ValueError),
        (LizardSandboxClientOptions(envs={"A=B": "x"}), ValueError),
        (LizardSandboxClientOptions(template=""), ValueError),
        (LizardSandboxClientOptions(allowed_hosts=("",)), ValueError),
    ],
)
async def test_bad_options_fail_before_any_request(
    client: LizardSandboxClient,
    lizard_counters: LocalServer,
    options: LizardSandboxClientOptions,
    error: type[Exception],
) -> None:
    with pytest.raises(error):
        await client.create(options=options)
    assert lizard_counters.counters()["total"] == 0


async def test_the_key_goes_into_no_state(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    session = await client.create(manifest=Manifest(), options=OPTIONS)
    try:
        payload = client.serialize_session_state(session.state)
        text = json.dumps(payload)
        assert lizard_local.api_key not in text
        assert lizard_local.url not in text
        state = client.deserialize_session_state(json.loads(text))
        assert isinstance(state, LizardSandboxSessionState)
        assert state.sandbox_id == session.state.sandbox_id  # type: ignore[attr-defined]
        assert state.lifetime_ms == 300_000
        assert SandboxSessionState.parse(json.loads(text)).model_dump() == state.model_dump()
        assert lizard_local.api_key not in repr(client) + repr(session._inner)
    finally:
        await client.delete(session)
        await client.delete(session)


async def test_a_cancelled_create_leaves_no_sandbox(
    client: LizardSandboxClient, slow_api: LocalServer
) -> None:
    before = set(slow_api.sandboxes())
    slow_api.reset_counters()
    task = asyncio.create_task(client.create(options=OPTIONS))
    await asyncio.sleep(0.5)  # the create request is in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert slow_api.counters()["routes"].get(CREATE) == 1
    assert set(slow_api.sandboxes()) == before


async def test_a_failed_create_leaves_no_sandbox(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    before = set(lizard_local.sandboxes())
    lizard_local.inject_fault(CREATE, status=503)
    with pytest.raises(SandboxCreateError) as caught:
        await client.create(options=OPTIONS)
    assert caught.value.context["retryable"] is True
    assert set(lizard_local.sandboxes()) == before


async def test_resume_of_a_gone_sandbox_creates_a_replacement(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    session = await client.create(options=OPTIONS)
    first = session.state.sandbox_id  # type: ignore[attr-defined]
    payload = client.serialize_session_state(session.state)
    await client.delete(session)
    resumed = await client.resume(client.deserialize_session_state(payload))
    try:
        assert resumed.state.sandbox_id not in ("", first)  # type: ignore[attr-defined]
        assert resumed.state.workspace_root_ready is False
        await resumed.start()
        assert (await resumed.exec("pwd")).stdout == b"/workspace\n"
    finally:
        await client.delete(resumed)


async def test_foreign_sessions_and_states_are_refused(client: LizardSandboxClient) -> None:
    with pytest.raises(TypeError):
        await client.resume(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await client.create(options=object())  # type: ignore[arg-type]
