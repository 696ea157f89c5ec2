"""Fixtures: executors on lizard-local (or the Lizard cloud), for both templates, and models.

Every executor test runs on the ``base`` template (no Jupyter, no third-party packages) and on
``interpreter``. The ``backend`` fixture runs it on lizard-local, and once more on the Lizard cloud
when ``LIZARD_LIVE_TESTS=1`` and credentials are set (``-m live``). Tests that need lizard-local's
control API (counters, expiry, faults) ask for ``local_server`` and are skipped on the cloud.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from smolagents import CodeAgent
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents_support import ScriptedModel

from lizard_local import LocalServer
from lizard_local.pytest_plugin import LIVE
from smolagents_lizard import LizardExecutor


@dataclass
class Backend:
    """Where sandboxes come from: lizard-local (with its control API) or the cloud."""

    name: str
    server: LocalServer | None  # None on the cloud
    connection: dict[str, Any]
    api_key: str


@pytest.fixture(params=["local", pytest.param("live", marks=LIVE)])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "local":
        server = request.getfixturevalue("lizard_local")
        # LIZARD_* point at the emulator for the session.
        return Backend("local", server, {}, server.api_key)
    cloud = request.getfixturevalue("lizard_cloud")
    return Backend("live", None, cloud.connection, cloud.api_key)


@pytest.fixture
def local_server(backend: Backend) -> LocalServer:
    """lizard-local with fresh counters; the test is skipped on the cloud."""
    if backend.server is None:
        pytest.skip("needs lizard-local's control API")
    backend.server.reset_counters()
    return backend.server


@pytest.fixture(params=["base", "interpreter"])
def template(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_executor(backend: Backend, template: str) -> Iterator[Callable[..., LizardExecutor]]:
    """Build executors on the current backend and template; all are cleaned up afterwards."""
    made: list[LizardExecutor] = []

    def make(**kwargs: Any) -> LizardExecutor:
        kwargs.setdefault("logger", AgentLogger(LogLevel.OFF))
        kwargs.setdefault("template", template)
        kwargs.setdefault("lifetime_ms", 300_000)
        executor = LizardExecutor(**backend.connection, **kwargs)
        made.append(executor)
        return executor

    yield make
    for executor in made:
        executor.cleanup()


@pytest.fixture
def run_agent(
    make_executor: Callable[..., LizardExecutor],
) -> Callable[..., tuple[CodeAgent, Any]]:
    """Run a CodeAgent with a scripted model on a fresh executor; return (agent, result)."""

    def run(
        *replies: str | Callable[[], str],
        executor: LizardExecutor | None = None,
        additional_args: dict[str, Any] | None = None,
        **agent_kwargs: Any,
    ) -> tuple[CodeAgent, Any]:
        model = ScriptedModel(*replies)
        agent_kwargs.setdefault("max_steps", len(replies))
        agent_kwargs.setdefault("verbosity_level", LogLevel.OFF)
        agent = CodeAgent(
            tools=[], model=model, executor=executor or make_executor(), **agent_kwargs
        )
        result = agent.run("Follow the script.", additional_args=additional_args)
        return agent, result

    return run


@pytest.fixture
def third_party(backend: Backend, template: str) -> str:
    """Code that makes pillow, numpy, pandas and matplotlib importable in the sandbox, or skips.

    On lizard-local sandboxes run the host's Python: ``base`` without site-packages, and
    ``interpreter`` with the server's only when Jupyter is installed there. Pointing the sandbox
    at the server's copies stands in for a sandbox where they were installed. In the cloud the
    ``interpreter`` template has them and ``base`` has none.
    """
    if backend.server is None:
        if template == "interpreter":
            return ""
        pytest.skip("the base template has no pillow, numpy, pandas or matplotlib in the cloud")
    modules = [pytest.importorskip(name) for name in ("PIL", "numpy", "pandas", "matplotlib")]
    if backend.server.isolation == "namespace":
        # Namespace sandboxes see none of the host's folders: the interpreter template's
        # site-packages (the server's, read-only in the sandbox) stand in for them.
        prefix = backend.server.info()["templates"]["interpreter"]["prefix"]
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        site_dir = f"{prefix}/lib/{version}/site-packages"
        return f"import site\nsite.addsitedir({site_dir!r})\n"
    paths = sorted({str(Path(m.__file__ or "").parent.parent) for m in modules})
    return f"import sys\nsys.path.extend({paths!r})\n"


@pytest.fixture
def source_lookups(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The objects ``inspect.getsource`` is asked for from here on (it still answers)."""
    looked_up: list[object] = []
    getsource = inspect.getsource

    def counting(obj: Any) -> str:
        looked_up.append(obj)
        return getsource(obj)

    monkeypatch.setattr(inspect, "getsource", counting)
    return looked_up
