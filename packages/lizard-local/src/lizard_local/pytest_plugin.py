"""pytest plugin (auto-loaded through the ``pytest11`` entry point).

Fixtures:

``lizard_local`` (session)
    A started :class:`~lizard_local.LocalServer`. For the whole session ``LIZARD_API_URL``,
    ``LIZARD_API_KEY`` and ``LIZARD_PROJECT_ID`` (and ``SSL_CERT_FILE`` with TLS) point at it.
    At teardown the session fails if a sandbox is still alive or if any process the emulator
    started is still running after the server stopped: every test must clean up what it creates.
``lizard_counters`` (function)
    The same server with its request counters reset.

Options: ``--lizard-local-isolation=auto|namespace|host`` and ``--lizard-local-tls``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lizard_local.local_server import LocalServer

__all__ = ["lizard_counters", "lizard_local"]

_LEAKS_KEY = pytest.StashKey[list[str]]()


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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when the server fixture found leaks."""
    problems = session.config.stash.get(_LEAKS_KEY, [])
    if problems and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
