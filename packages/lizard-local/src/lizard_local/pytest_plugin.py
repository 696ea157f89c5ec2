"""pytest plugin (auto-loaded through the ``pytest11`` entry point).

Fixtures:

``lizard_local`` (session)
    A started :class:`~lizard_local.LocalServer`. For the whole session ``LIZARD_API_URL``,
    ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID`` (and ``SSL_CERT_FILE`` with TLS) point at it.
    At teardown the session fails if a sandbox is still alive or if any process the emulator
    started is still running after the server stopped: every test must clean up what it creates.
``lizard_counters`` (function)
    The same server with its request counters reset.
``lizard_cloud`` (session)
    The Lizard cloud account for tests marked ``live`` (a :class:`Cloud`), or the test is
    skipped. Mark such tests (or parameters) with :data:`LIVE`.

Live tests run only with ``LIZARD_LIVE_TESTS=1``, ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID``
(and optionally ``LIZARD_API_URL``). They are read when pytest loads this plugin, before the
``lizard_local`` fixture points ``LIZARD_*`` at the emulator, so one session can run both.

Options: ``--lizard-local-isolation=auto|namespace|host`` and ``--lizard-local-tls``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import pytest

from lizard_local.server_process import LocalServer

__all__ = ["CLOUD", "LIVE", "Cloud", "lizard_cloud", "lizard_counters", "lizard_local"]

_LEAKS_KEY = pytest.StashKey[list[str]]()
_CLOUD_URL = "https://lizard.build"  # lizard-sdk's default
_LIVE_NEEDS = "set LIZARD_LIVE_TESTS=1, LIZARD_API_KEY and LIZARD_PROJECT_ID"


@dataclass(frozen=True)
class Cloud:
    """The Lizard cloud account live tests run against."""

    api_key: str = field(repr=False)
    """The API key (never shown by ``repr``)."""
    project_id: str
    """The project the tests' sandboxes are billed to."""
    api_url: str
    """The API's base URL: ``LIZARD_API_URL``, or the SDK's default."""

    @property
    def connection(self) -> dict[str, str]:
        """``api_key``, ``project_id`` and ``api_url`` as keyword arguments."""
        return {"api_key": self.api_key, "project_id": self.project_id, "api_url": self.api_url}


def _cloud_from_env() -> Cloud | None:
    key = os.environ.get("LIZARD_API_KEY", "")
    project = os.environ.get("LIZARD_PROJECT_ID", "")
    if os.environ.get("LIZARD_LIVE_TESTS") != "1" or not key or not project:
        return None
    return Cloud(key, project, os.environ.get("LIZARD_API_URL") or _CLOUD_URL)


CLOUD: Final = _cloud_from_env()
"""The cloud account from the environment pytest started with, or None: live tests skip."""
LIVE: Final = (pytest.mark.live, pytest.mark.skipif(CLOUD is None, reason=_LIVE_NEEDS))
"""Marks for a test, module (``pytestmark``) or parameter that runs against the cloud."""


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``live`` marker."""
    config.addinivalue_line(
        "markers", "live: runs against the Lizard cloud; needs LIZARD_LIVE_TESTS=1 and credentials"
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the plugin's options."""
    group = parser.getgroup("lizard-local")
    group.addoption(
        "--lizard-local-isolation",
        default=os.environ.get("LIZARD_LOCAL_ISOLATION", "auto"),
        choices=["auto", "namespace", "host"],
        help="isolation mode of the session's lizard-local server",
    )
    group.addoption(
        "--lizard-local-tls",
        action="store_true",
        default=False,
        help="serve the session's lizard-local over https",
    )


@pytest.fixture(scope="session")
def lizard_local(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    """A lizard-local server for the whole session, with ``LIZARD_*`` pointing at it."""
    server = LocalServer(
        isolation=request.config.getoption("--lizard-local-isolation"),
        tls=request.config.getoption("--lizard-local-tls"),
    ).start()
    saved = {name: os.environ.get(name) for name in server.env}
    os.environ.update(server.env)
    problems: list[str] = []
    try:
        yield server
    finally:
        try:
            alive = server.sandboxes() if server.running else []
        except Exception as exc:  # the server died: that is a problem of its own
            alive = []
            problems.append(f"lizard-local control API failed at teardown: {exc}")
        if alive:
            problems.append(f"sandboxes left alive at the end of the session: {alive}")
        left = server.stop()
        if left:
            problems.append(f"processes started by lizard-local outlived it: pids {left}")
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if problems:
            request.config.stash.setdefault(_LEAKS_KEY, []).extend(problems)
            pytest.fail("lizard-local: " + "; ".join(problems), pytrace=False)


@pytest.fixture
def lizard_counters(lizard_local: LocalServer) -> LocalServer:
    """The session's server with its request counters reset."""
    lizard_local.reset_counters()
    return lizard_local


@pytest.fixture(scope="session")
def lizard_cloud() -> Cloud:
    """The cloud account for a live test; the test is skipped without one."""
    if CLOUD is None:
        pytest.skip(_LIVE_NEEDS)
    return CLOUD


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when the server fixture found leaks."""
    problems = session.config.stash.get(_LEAKS_KEY, [])
    if problems and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
