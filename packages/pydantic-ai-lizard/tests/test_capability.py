"""`LizardSandbox`: selecting, attaching and destroying workspaces, with no I/O until used."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest
from pydantic_ai.exceptions import UserError
from pydantic_ai.workspaces import WorkspaceRef, WorkspaceUnavailableError

import pydantic_ai_lizard
from lizard_local import LocalServer
from pydantic_ai_lizard import LizardSandbox, LizardSandboxBackend


def _ctx() -> Any:
    # get_workspace ignores its context, as the protocol lets it: selecting is configuration only.
    return None


def test_get_workspace_leaves_other_providers_refs_alone(lizard_counters: LocalServer) -> None:
    capability = LizardSandbox()
    assert capability.get_workspace(_ctx(), ref=WorkspaceRef(provider="e2b", id="x")) is None
    assert lizard_counters.counters()["total"] == 0


def test_get_workspace_builds_a_lazy_backend(lizard_counters: LocalServer) -> None:
    capability = LizardSandbox(size="medium", working_dir="/workspace/project", env={"A": "1"})
    fresh = capability.get_workspace(_ctx(), ref=None)
    assert isinstance(fresh, LizardSandboxBackend)
    assert fresh.ref is None
    ref = WorkspaceRef(provider="lizard", id="sbx-abc")
    attached = capability.get_workspace(_ctx(), ref=ref)
    assert isinstance(attached, LizardSandboxBackend)
    assert attached.ref == ref
    assert capability.backend(ref).ref == ref
    assert lizard_counters.counters()["total"] == 0


def test_backend_refuses_another_providers_ref() -> None:
    with pytest.raises(ValueError, match="provider"):
        LizardSandbox().backend(WorkspaceRef(provider="modal", id="x"))


def test_defer_loading_is_refused() -> None:
    with pytest.raises(UserError, match="defer"):
        LizardSandbox(defer_loading=True, id="sandbox")


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"working_dir": "relative"}, ValueError),
        ({"size": "huge"}, ValueError),
        ({"lifetime_ms": 0}, ValueError),
        ({"lifetime_ms": 1.5}, TypeError),
        ({"env": {"A": 1}}, TypeError),
        ({"envs": {"A=B": "x"}}, ValueError),
        ({"api_url": "http://example.com"}, ValueError),
        ({"template": "no spaces allowed"}, ValueError),
        ({"internet_access": "no"}, TypeError),
        ({"keep_alive": 1}, TypeError),
    ],
)
def test_invalid_fields_fail_at_construction(
    lizard_counters: LocalServer, fields: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        LizardSandbox(**fields)
    assert lizard_counters.counters()["total"] == 0


def test_the_key_is_needed_by_a_run_not_by_the_capability(
    lizard_counters: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIZARD_API_KEY")
    capability = LizardSandbox(size="mini")  # e.g. an agent defined at import time
    with pytest.raises(ValueError, match="LIZARD_API_KEY"):
        capability.get_workspace(_ctx(), ref=None)
    with pytest.raises(ValueError, match="size"):
        LizardSandbox(size="huge")  # every other field is still checked at once
    assert lizard_counters.counters()["total"] == 0


def test_repr_hides_the_key_and_environment() -> None:
    capability = LizardSandbox(api_key="liz_very_secret_key_123", env={"TOKEN": "hidden-value"})
    assert "liz_very_secret" not in repr(capability)
    assert "hidden-value" not in repr(capability)


async def test_destroy_kills_the_sandbox_without_attaching(lizard_counters: LocalServer) -> None:
    capability = LizardSandbox()
    backend = capability.get_workspace(_ctx(), ref=None)
    assert backend is not None
    try:
        await backend.working_dir()
        ref = backend.ref
        assert ref is not None
        assert ref.id in lizard_counters.sandboxes()
        lizard_counters.reset_counters()
        await capability.destroy(ref)
        assert ref.id not in lizard_counters.sandboxes()
        routes = lizard_counters.counters()["routes"]
        assert routes == {"DELETE /api/sandboxes/{id}": 1}
        await capability.destroy(ref)  # already gone: still fine
        with pytest.raises(WorkspaceUnavailableError):
            await capability.backend(ref).working_dir()
    finally:
        await backend.destroy()


async def test_reattaching_and_destroying_need_no_project(
    lizard_counters: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = LizardSandboxBackend()
    try:
        await owner.write_bytes("/workspace/kept.txt", b"kept")
        ref = owner.ref
        assert ref is not None
        monkeypatch.delenv("LIZARD_PROJECT_ID")  # as with 0.1.0: a ref is enough
        capability = LizardSandbox()
        attached = capability.get_workspace(_ctx(), ref=ref)
        assert attached is not None
        assert await attached.read_bytes("/workspace/kept.txt") == b"kept"
        lizard_counters.reset_counters()
        with pytest.raises(ValueError, match="LIZARD_PROJECT_ID"):
            capability.get_workspace(_ctx(), ref=None)  # would create: refused, no request
        assert lizard_counters.counters()["total"] == 0
        await capability.destroy(ref)
        assert ref.id not in lizard_counters.sandboxes()
    finally:
        await owner.destroy()


def test_the_0_1_0_module_paths_still_import_with_a_warning() -> None:
    for name, attribute in (("backend", "LizardSandboxBackend"), ("capability", "LizardSandbox")):
        sys.modules.pop(f"pydantic_ai_lizard.{name}", None)
        with pytest.warns(DeprecationWarning, match="import"):
            module = importlib.import_module(f"pydantic_ai_lizard.{name}")
        assert getattr(module, attribute) is getattr(pydantic_ai_lizard, attribute)
