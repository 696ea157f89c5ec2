"""Shared fixtures for lizard_core's tests.

The ``lizard_local`` (session) and ``lizard_counters`` (function) fixtures come from
lizard-local's pytest plugin, which also points ``LIZARD_API_URL``, ``LIZARD_API_KEY`` and
``LIZARD_PROJECT_ID`` at the emulator for the whole session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lizard_core.config import SandboxConfig
from lizard_local import LocalServer


@pytest.fixture
def sandbox_config(lizard_local: LocalServer) -> SandboxConfig:
    """A configuration for the running lizard-local, read from the environment it set."""
    return SandboxConfig.from_env(lifetime_ms=300_000, integration="lizard-core-tests")


@pytest.fixture
def no_new_sandboxes(lizard_local: LocalServer) -> Iterator[None]:
    """Fail the test if it leaves a sandbox behind (and kill the leftovers, so others pass)."""
    before = set(lizard_local.sandboxes())
    yield
    leftover = set(lizard_local.sandboxes()) - before
    if leftover:
        import lizard

        for sandbox_id in leftover:
            lizard.Sandbox(
                sandbox_id, api_key=lizard_local.api_key, api_url=lizard_local.url
            ).kill()
    assert not leftover, f"the test left sandboxes running: {sorted(leftover)}"


@pytest.fixture
def ctrl_c_handler() -> Iterator[None]:
    """Ctrl-C's own handler for the test: Python leaves SIGINT ignored when it started ignored
    (a shell's background job, a pytest-xdist worker), and then ``interrupt_main`` does nothing."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def restore_latency(lizard_local: LocalServer) -> Iterator[None]:
    """Reset lizard-local's injected latency after a test that sets it."""
    yield
    lizard_local.set_latency(0)


# ── guest protocol (test_guest, test_commands, test_files) ────────────────────────────────────

PROFILES = {
    # lizard-local's defaults: SSE output capped at 512 KiB per stream, like the JSON mode.
    "capped": {},
    "uncapped": {"stream_cap_bytes": None},
    "latency-20ms": {"latency_ms": 20},
}


@pytest.fixture(scope="module", params=sorted(PROFILES))
def profile(request: pytest.FixtureRequest, lizard_local: LocalServer) -> Iterator[str]:
    """Run a module's tests under each lizard-local profile: capped, uncapped, 20 ms latency."""
    settings = dict(PROFILES[request.param])
    latency = settings.pop("latency_ms", 0)
    saved = lizard_local.info()["settings"]
    if settings:
        lizard_local.configure(**settings)
    lizard_local.set_latency(latency)
    try:
        yield request.param
    finally:
        lizard_local.set_latency(0)
        lizard_local.configure(**{name: saved[name] for name in settings})


@pytest.fixture(scope="module")
def module_session(lizard_local: LocalServer) -> Iterator[Any]:
    """One sandbox shared by a module's tests (each test works in its own scratch directory)."""
    from lizard_core.session import Session

    config = SandboxConfig.from_env(lifetime_ms=900_000, integration="lizard-core-tests")
    session = Session(config)
    try:
        session.sandbox()  # created now, so that tests count only their own requests
        yield session
    finally:
        session.destroy()


@pytest.fixture
def scratch(module_session: Any) -> Iterator[str]:
    """A fresh directory path in the module's sandbox, removed afterwards (not created)."""
    import uuid

    from lizard_core.commands import run_command

    path = f"/tmp/lizard-core-test-{uuid.uuid4().hex[:12]}"
    yield path
    run_command(module_session, ["rm", "-rf", "--", path])


class RequestCounter:
    """lizard-local's request counters, per route template, since the last :meth:`reset`."""

    EXEC = "POST /api/sandboxes/{id}/exec"
    GET_FILE = "GET /api/sandboxes/{id}/files"
    POST_FILE = "POST /api/sandboxes/{id}/files"
    CREATE = "POST /api/sandboxes"

    def __init__(self, server: Any) -> None:
        self.server = server

    def reset(self) -> None:
        self.server.reset_counters()

    def counts(self) -> dict[str, int]:
        """Non-zero counts by route, e.g. ``{"POST /api/sandboxes/{id}/exec": 1}``."""
        return {route: n for route, n in self.server.counters()["routes"].items() if n}


@pytest.fixture
def api_requests(lizard_local: LocalServer) -> RequestCounter:
    """Counts the API requests a test makes (reset at the start, and by ``reset()``)."""
    counter = RequestCounter(lizard_local)
    counter.reset()
    return counter


# ── an older Python for the guest programs (they must run on Python 3.8+) ──


def _oldest_python() -> str | None:
    """The oldest Python 3.8+ on this machine (PATH, pyenv, or LIZARD_TEST_OLD_PYTHON)."""
    candidates = [os.environ.get("LIZARD_TEST_OLD_PYTHON", "")]
    candidates += [shutil.which(f"python3.{minor}") or "" for minor in range(8, 14)]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        candidates += sorted(str(p) for p in Path(root, "versions").glob("3.*/bin/python3"))
    found: list[tuple[tuple[int, int], str]] = []
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0:
            major, minor = map(int, probe.stdout.split())
            if (major, minor) >= (3, 8):
                found.append(((major, minor), candidate))
    return min(found)[1] if found else None


@pytest.fixture(scope="module")
def old_python() -> str:
    python = _oldest_python()
    if python is None:
        pytest.skip("no Python 3.8+ interpreter besides the test runner's was found")
    return python
