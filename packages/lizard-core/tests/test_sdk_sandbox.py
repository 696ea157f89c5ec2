"""``session_for_sdk_sandbox``: attach to a caller's ``lizard.Sandbox``, never own it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lizard
import pytest

from lizard_core.commands import run_command
from lizard_core.errors import SandboxGoneError
from lizard_core.sdk_sandbox import session_for_sdk_sandbox
from lizard_local import LocalServer


@pytest.fixture
def sdk_sandbox(lizard_local: LocalServer) -> Iterator[Any]:
    sandbox = lizard.Sandbox.create(
        "base",
        project_id=lizard_local.project_id,
        api_key=lizard_local.api_key,
        api_url=lizard_local.url,
    )
    yield sandbox
    sandbox.kill()


def test_building_the_session_makes_no_request_and_hides_the_key(
    sdk_sandbox: Any, lizard_counters: LocalServer
) -> None:
    session = session_for_sdk_sandbox(sdk_sandbox, integration="lizard-core-tests")
    assert session.sandbox_id == sdk_sandbox.sandbox_id
    assert lizard_counters.api_key not in repr(session) + repr(session.config)
    assert lizard_counters.counters()["total"] == 0


def test_the_session_attaches_and_leaves_the_sandbox_running(
    sdk_sandbox: Any, lizard_counters: LocalServer
) -> None:
    with session_for_sdk_sandbox(sdk_sandbox) as session:
        result = run_command(session, ["echo", "hi"])
        assert not session.created
    assert result.stdout == b"hi\n"
    routes = lizard_counters.counters()["routes"]
    assert routes.get("POST /api/sandboxes", 0) == 0  # attached, nothing created
    assert routes["GET /api/sandboxes/{id}"] == 1
    assert sdk_sandbox.sandbox_id in lizard_counters.sandboxes()


def test_destroy_kills_it_and_a_gone_sandbox_is_never_replaced(
    sdk_sandbox: Any, lizard_local: LocalServer
) -> None:
    session_for_sdk_sandbox(sdk_sandbox).destroy()
    assert sdk_sandbox.sandbox_id not in lizard_local.sandboxes()
    with pytest.raises(SandboxGoneError):
        run_command(session_for_sdk_sandbox(sdk_sandbox), ["true"])
    assert sdk_sandbox.sandbox_id not in lizard_local.sandboxes()


@pytest.mark.parametrize("not_a_sandbox", [None, "lzl_123", object()])
def test_anything_but_an_sdk_sandbox_is_a_type_error(not_a_sandbox: object) -> None:
    with pytest.raises(TypeError, match=r"lizard\.Sandbox"):
        session_for_sdk_sandbox(not_a_sandbox)


def test_an_insecure_url_is_refused(lizard_local: LocalServer) -> None:
    remote = lizard.Sandbox("sbx_1", api_key="k" * 20, api_url="http://lizard.invalid")
    with pytest.raises(ValueError, match="https"):
        session_for_sdk_sandbox(remote)
