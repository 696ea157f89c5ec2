"""Shared fixtures: sandboxes on the session's lizard-local server (from the pytest plugin)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

import httpx
import pytest
from lizard import Sandbox

from lizard_local import LocalServer

pytest_plugins = ["pytester"]


@pytest.fixture
def new_sandbox(lizard_local: LocalServer) -> Iterator[Callable[..., Sandbox]]:
    """A factory for sandboxes that are all killed at the end of the test."""
    made: list[Sandbox] = []

    def make(template: str = "base", **kwargs: object) -> Sandbox:
        kwargs.setdefault("project_id", lizard_local.project_id)
        sb = Sandbox.create(template, **kwargs)  # type: ignore[arg-type]
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.kill()


@pytest.fixture
def offline_sandbox(api: httpx.Client, lizard_local: LocalServer) -> Iterator[Sandbox]:
    """A sandbox created with ``internetAccess: false`` (through the API: 0.1.82 cannot ask)."""
    res = api.post("/api/sandboxes", json={"template": "base", "internetAccess": False})
    assert res.status_code == 201, res.text
    sb = Sandbox.connect(res.json()["sandboxId"])
    yield sb
    sb.kill()


@pytest.fixture
def sandbox(new_sandbox: Callable[..., Sandbox]) -> Sandbox:
    """One ``base`` sandbox, killed after the test."""
    return new_sandbox()


@pytest.fixture
def host_canary() -> Iterator[str]:
    """A host directory with a file in it, for tests that try (and must fail) to delete it.

    Under /var/tmp: namespace sandboxes have a /var of their own and must not see it, and should
    that ever break, a test deletes this throwaway directory rather than anything that matters.
    """
    path = tempfile.mkdtemp(prefix="lizard-canary-", dir="/var/tmp")
    with open(os.path.join(path, "canary"), "w") as f:
        f.write("host")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def host_server() -> Iterator[LocalServer]:
    """A second server in host isolation mode (the fallback for non-root users)."""
    server = LocalServer(isolation="host").start()
    yield server
    server.stop()
    assert server.processes() == []


@pytest.fixture
def host_sandbox(host_server: LocalServer) -> Iterator[Sandbox]:
    """A ``base`` sandbox of :func:`host_server`, killed after the test."""
    sb = Sandbox.create(
        "base", api_key=host_server.api_key, api_url=host_server.url, project_id="proj_local"
    )
    yield sb
    sb.kill()


@pytest.fixture
def api(lizard_local: LocalServer) -> Iterator[httpx.Client]:
    """A raw HTTP client with the right key, for requests the SDK cannot make."""
    with httpx.Client(
        base_url=lizard_local.url,
        headers={"X-API-Key": lizard_local.api_key},
        timeout=30,
    ) as client:
        yield client
