"""lizard_core.inventory against lizard-local: find sandboxes by their tags, destroy them."""

from __future__ import annotations

from typing import Any

import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import CredentialsError
from lizard_core.inventory import (
    adestroy_sandboxes,
    afind_sandboxes,
    destroy_sandboxes,
    find_sandboxes,
)
from lizard_core.session import Session
from lizard_local import LocalServer

LIST = "GET /api/sandboxes"


def _config(**kwargs: Any) -> SandboxConfig:
    return SandboxConfig.from_env(lifetime_ms=120_000, **kwargs)


def test_find_keeps_only_sandboxes_with_every_tag(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    tagged = Session(_config(integration="inventory-a", metadata={"run": "r1"}))
    other_run = Session(_config(integration="inventory-a", metadata={"run": "r2"}))
    other_integration = Session(_config(integration="inventory-b", metadata={"run": "r1"}))
    sessions = [tagged, other_run, other_integration]
    try:
        for session in sessions:
            session.sandbox()
        api_requests.reset()
        found = find_sandboxes(_config(), {"integration": "inventory-a", "run": "r1"})
        assert api_requests.counts() == {LIST: 1}
        assert [record.sandbox_id for record in found] == [tagged.sandbox_id]
        assert found[0].metadata["run"] == "r1"
        assert found[0].template == "base"
        every_a = find_sandboxes(_config(), {"integration": "inventory-a"})
        assert {r.sandbox_id for r in every_a} == {tagged.sandbox_id, other_run.sandbox_id}
    finally:
        for session in sessions:
            session.destroy()


def test_destroy_kills_each_and_counts_a_gone_one_as_destroyed(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    first, second = Session(_config()), Session(_config())
    run_command(first, ["true"])
    run_command(second, ["true"])
    ids = [first.sandbox_id or "", second.sandbox_id or ""]
    second.destroy()
    api_requests.reset()
    assert destroy_sandboxes(_config(), ids) == ids
    assert api_requests.counts() == {"DELETE /api/sandboxes/{id}": 2}
    assert not set(ids) & set(lizard_local.sandboxes())
    first.close()


async def test_async_faces_find_and_destroy(lizard_local: LocalServer) -> None:
    session = Session(_config(integration="inventory-async"))
    await session.asandbox()
    found = await afind_sandboxes(_config(), {"integration": "inventory-async"})
    assert [r.sandbox_id for r in found] == [session.sandbox_id]
    assert await adestroy_sandboxes(_config(), [r.sandbox_id for r in found]) == [
        session.sandbox_id
    ]
    assert session.sandbox_id not in lizard_local.sandboxes()
    session.close()


def test_bad_arguments_fail_before_any_request(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    with pytest.raises(TypeError):
        find_sandboxes(_config(), {"integration": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="not a sandbox id"):
        destroy_sandboxes(_config(), ["../etc"])
    assert api_requests.counts() == {}


def test_a_rejected_key_is_a_credentials_error(lizard_local: LocalServer) -> None:
    with pytest.raises(CredentialsError):
        find_sandboxes(_config(api_key="lzl_wrong_key_for_inventory"), {})


def test_find_scopes_by_integration_run_machine_and_age(lizard_local: LocalServer) -> None:
    here = _config(integration="inventory-scope")
    mine = Session(here)
    teammate = Session(here.replace(machine_id="teammates-laptop", run_id="their-run"))
    earlier_run = Session(here.replace(run_id="an-earlier-run"))
    sessions = [mine, teammate, earlier_run]
    try:
        for session in sessions:
            session.sandbox()
        found = find_sandboxes(here, integration="inventory-scope", machine_id=here.machine_id)
        assert {r.sandbox_id for r in found} == {mine.sandbox_id, earlier_run.sandbox_id}
        [run] = find_sandboxes(here, integration="inventory-scope", run_id=here.run_id)
        assert run.sandbox_id == mine.sandbox_id
        assert (run.integration, run.run_id, run.machine_id) == (
            "inventory-scope",
            here.run_id,
            here.machine_id,
        )
        age = run.age_s()
        assert age is not None
        assert 0 <= age < 60
        assert find_sandboxes(here, integration="inventory-scope", older_than_s=3600) == []
        every = find_sandboxes(here, integration="inventory-scope", older_than_s=0)
        assert len(every) == 3
    finally:
        for session in sessions:
            session.destroy()


def test_scope_filters_are_checked_before_any_request(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    with pytest.raises(TypeError):
        find_sandboxes(_config(), run_id=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="older_than_s"):
        find_sandboxes(_config(), older_than_s=-1)
    with pytest.raises(TypeError):
        find_sandboxes(_config(), older_than_s=True)
    assert api_requests.counts() == {}


def test_find_retries_a_listing_that_failed_transiently(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    session = Session(_config(integration="inventory-retry"))
    try:
        session.sandbox()
        lizard_local.inject_fault(LIST, status=503, count=2, retry_after_s=0)
        api_requests.reset()
        found = find_sandboxes(_config(), integration="inventory-retry")
        assert api_requests.counts() == {LIST: 3}  # two refused, the third answered
        assert [record.sandbox_id for record in found] == [session.sandbox_id]
    finally:
        session.destroy()
