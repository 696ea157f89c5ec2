"""Sessions across runs: pause at a run's end, attach from a new process, snapshot, volume.

Through Pydantic AI's own entry point: an `Agent` with a scripted `FunctionModel` and a plain
tool that uses `ctx.workspace` (so it runs without pydantic-ai-harness, at both bounds). The
conformance suite runs once more on every path a sandbox can come from: a snapshot, a volume,
and an attach that resumes a paused sandbox.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from lizard import Sandbox
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.workspaces import WorkspaceBackend, WorkspaceRef
from pydantic_ai.workspaces.conformance import WorkspaceBackendSuite

from lizard_core import SandboxConfig, Session, run_command
from lizard_core._pausing import _seconds_left
from lizard_core.snapshots import delete_snapshots, take_snapshot
from lizard_core.volumes import delete_volume
from lizard_local import LocalServer
from pydantic_ai_lizard import LizardSandbox, LizardSandboxBackend

BackendFactory = Callable[..., LizardSandboxBackend]


def _info(sandbox_id: str) -> Any:
    return Sandbox(sandbox_id, **SandboxConfig.from_env().api_kwargs()).get_info()


def shell_agent(command: str, sandbox: LizardSandbox) -> Agent[None, str]:
    """An agent whose model runs `command` with the `sh` tool, then answers with its output."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len([m for m in messages if isinstance(m, ModelResponse)]) == 0:
            return ModelResponse(parts=[ToolCallPart("sh", {"command": command})])
        return ModelResponse(parts=[TextPart(str(messages[-1].parts[0].content))])

    agent = Agent(FunctionModel(respond), capabilities=[sandbox])

    @agent.tool
    async def sh(ctx: RunContext[None], command: str) -> str:
        """Run a shell command in the workspace."""
        result = await ctx.workspace.run(command, shell=True)
        return result.stdout + result.stderr

    return agent


# Run 2 of the acceptance test, in a process of its own: only the saved ref crosses over.
RUN_2 = """
import asyncio, json, sys
from pydantic_ai.workspaces import WorkspaceRef
from pydantic_ai_lizard import LizardSandbox
from test_sessions import shell_agent

async def main():
    ref = WorkspaceRef(provider="lizard", id=sys.argv[1])
    sandbox = LizardSandbox(pause_after_run=True, lifetime_ms=600_000)
    result = await shell_agent("cat notes.txt", sandbox).run("Read.", workspace=ref)
    print(json.dumps({"output": result.output, "ref": result.workspace.ref.id}))

asyncio.run(main())
"""


async def test_a_paused_workspace_is_attached_from_a_new_process(
    lizard_local: LocalServer,
) -> None:
    sandbox = LizardSandbox(pause_after_run=True, lifetime_ms=60_000)
    first = await shell_agent("echo kept > notes.txt && echo written", sandbox).run("Write.")
    assert first.output == "written\n"
    ref = first.workspace.ref
    assert ref is not None
    try:
        assert _info(ref.id).status == "paused"  # the run ended: nothing bills but the disk
        env = {**os.environ, **lizard_local.env, "PYTHONPATH": str(Path(__file__).parent)}
        with anyio.fail_after(180):
            run = await anyio.run_process(
                [sys.executable, "-c", RUN_2, ref.id], env=env, check=False
            )
        assert run.returncode == 0, run.stderr.decode()
        outcome = json.loads(run.stdout.decode().strip().splitlines()[-1])
        assert outcome == {"output": "kept\n", "ref": ref.id}  # same sandbox, files there
        info = _info(ref.id)
        assert info.status == "paused"  # paused again at run 2's end
        # Run 2's attach renewed the lifetime to its own configuration's (10 minutes).
        assert _seconds_left(info) > 300
    finally:
        await sandbox.destroy(ref)


async def test_a_run_that_fails_still_pauses_and_keeps_its_error(
    lizard_local: LocalServer,
) -> None:
    sandbox = LizardSandbox(pause_after_run=True)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("boom", {})])

    agent = Agent(FunctionModel(respond), capabilities=[sandbox])
    seen: list[WorkspaceRef] = []

    @agent.tool
    async def boom(ctx: RunContext[None]) -> str:
        """Fail after using the workspace."""
        await ctx.workspace.run("true", shell=True)
        assert ctx.workspace.ref is not None
        seen.append(ctx.workspace.ref)
        raise RuntimeError("the tool broke")

    with pytest.raises(RuntimeError, match="the tool broke"):
        await agent.run("Go.")
    try:
        assert _info(seen[0].id).status == "paused"
    finally:
        await sandbox.destroy(seen[0])


async def test_a_run_that_never_used_the_workspace_creates_nothing(
    lizard_counters: LocalServer,
) -> None:
    agent = Agent(
        FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("no tools")])),
        capabilities=[LizardSandbox(pause_after_run=True)],
    )
    assert (await agent.run("Hi.")).output == "no tools"
    assert lizard_counters.counters()["total"] == 0


def test_bad_session_options_fail_before_any_request(lizard_counters: LocalServer) -> None:
    ref = WorkspaceRef(provider="lizard", id="sbx_0123456789ab")
    with pytest.raises(ValueError, match="not with ref"):
        LizardSandboxBackend(ref=ref, snapshot="snap_1")
    with pytest.raises(ValueError, match="not with ref"):
        LizardSandboxBackend(ref=ref, volume="data")
    with pytest.raises(ValueError, match="snapshot"):
        LizardSandbox(snapshot="../x")
    with pytest.raises(ValueError, match="volume"):
        LizardSandbox(volume="Not A Slug!")
    with pytest.raises(TypeError, match="pause_after_run"):
        LizardSandbox(pause_after_run="yes")  # type: ignore[arg-type]
    assert lizard_counters.counters()["total"] == 0


async def test_snapshot_and_volume_reach_the_runs_workspace(lizard_local: LocalServer) -> None:
    config = SandboxConfig.from_env()
    with Session(config) as builder:
        run_command(builder, ["sh", "-c", "mkdir -p /opt/tool && echo ready > /opt/tool/state"])
        snapshot = take_snapshot(builder, "tool")
    volume = f"pai-{uuid.uuid4().hex[:8]}"
    try:
        sandbox = LizardSandbox(snapshot=snapshot.snapshot_id, volume=volume)
        first = await shell_agent("cat /opt/tool/state; echo 1 > saved", sandbox).run("Go.")
        assert first.output == "ready\n"
        assert first.workspace.ref is not None
        await sandbox.destroy(first.workspace.ref)
        # A new sandbox, the same volume at /workspace (the working directory).
        second = await shell_agent("cat saved", sandbox).run("Again.")
        assert second.output == "1\n"
        assert second.workspace.ref is not None
        await sandbox.destroy(second.workspace.ref)
    finally:
        delete_snapshots(config, [snapshot.snapshot_id])
        delete_volume(config, volume)


# ── the conformance suite on every path ──────────────────────────────────


class _Suite(WorkspaceBackendSuite):
    """The suite under asyncio only (test_conformance.py covers trio on the plain path)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def backend(self, fresh_backend: Callable[[], WorkspaceBackend]) -> WorkspaceBackend:
        return fresh_backend()

    @pytest.fixture
    def attach_backend(
        self, make_backend: BackendFactory
    ) -> Callable[[WorkspaceRef], WorkspaceBackend]:
        return lambda ref: make_backend(ref=ref)

    @pytest.fixture
    def destroy_environment(self) -> Callable[[WorkspaceBackend], Awaitable[None]]:
        async def destroy(backend: WorkspaceBackend) -> None:
            assert isinstance(backend, LizardSandboxBackend)
            await backend.destroy()

        return destroy


@pytest.fixture(scope="module")
def prepared_snapshot(lizard_local: LocalServer) -> Iterator[str]:
    config = SandboxConfig.from_env()
    with Session(config) as builder:
        run_command(builder, ["sh", "-c", "echo prepared > /opt/prepared"])
        snapshot = take_snapshot(builder, "conformance")
    yield snapshot.snapshot_id
    delete_snapshots(config, [snapshot.snapshot_id])


class TestConformanceFromASnapshot(_Suite):
    @pytest.fixture
    def fresh_backend(
        self, make_backend: BackendFactory, prepared_snapshot: str
    ) -> Callable[[], WorkspaceBackend]:
        return lambda: make_backend(snapshot=prepared_snapshot)

    async def test_the_snapshots_files_are_there(self, backend: LizardSandboxBackend) -> None:
        assert await backend.read_bytes("/opt/prepared") == b"prepared\n"


@pytest.fixture
def volumes(lizard_local: LocalServer) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:  # after make_backend's teardown destroyed the sandboxes
        delete_volume(SandboxConfig.from_env(), name)


class TestConformanceOnAVolume(_Suite):
    @pytest.fixture
    def fresh_backend(
        self, volumes: list[str], make_backend: BackendFactory
    ) -> Callable[[], WorkspaceBackend]:
        def fresh() -> WorkspaceBackend:
            volumes.append(f"pai-{uuid.uuid4().hex[:8]}")  # one sandbox per volume at a time
            return make_backend(volume=volumes[-1])

        return fresh


def _paused_sandbox() -> str:
    with Session(SandboxConfig.from_env(), destroy_on_exit=False) as session:
        run_command(session, ["sh", "-c", "echo before > /tmp/before-the-pause"])
        session.pause()
        return str(session.sandbox_id)


class TestConformanceAttachedAfterAPause(_Suite):
    """Every rule on a backend attached to a paused sandbox (its first operation resumes it)."""

    @pytest.fixture
    def fresh_backend(self, make_backend: BackendFactory) -> Callable[[], WorkspaceBackend]:
        return make_backend  # the suite's fresh environments are new ones (their ref is None)

    @pytest.fixture
    def backend(self, make_backend: BackendFactory) -> WorkspaceBackend:
        return make_backend(ref=WorkspaceRef(provider="lizard", id=_paused_sandbox()))

    async def test_concurrent_first_uses_resume_it_once(
        self, backend: LizardSandboxBackend
    ) -> None:
        async def read(results: list[bytes]) -> None:
            results.append(await backend.read_bytes("/tmp/before-the-pause"))

        results: list[bytes] = []
        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(read, results)
        assert results == [b"before\n"] * 5
        assert backend._session.boot_epoch == 1  # one resume, shared by the five
