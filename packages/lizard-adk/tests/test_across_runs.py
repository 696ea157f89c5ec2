"""Sessions across runs through ADK's Runner: run 1 keeps its sandbox paused, run 2 (a new
process) attaches by the saved id and finds its files; a kernel says its variables were lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from adk_support import ScriptedModel, call, code_results, run_agent, text
from google.adk.agents import LlmAgent
from google.adk.runners import InMemoryRunner
from google.adk.tools.environment import EnvironmentToolset

from lizard_adk import LizardCodeExecutor, LizardEnvironment
from lizard_core.config import SandboxConfig
from lizard_core.errors import CredentialsError, TransientError
from lizard_core.inventory import destroy_sandboxes, find_sandboxes
from lizard_core.prepared import prepare_snapshot
from lizard_core.snapshots import delete_snapshots
from lizard_local import LocalServer

TESTS = Path(__file__).parent


def _status(sandbox_id: str) -> str | None:
    config = SandboxConfig.from_env()
    return next((r.status for r in find_sandboxes(config) if r.sandbox_id == sandbox_id), None)


def _second_run(script: str, tmp_path: Path) -> object:
    """Run ``script`` in a new interpreter (a later run); it prints one JSON line."""
    path = tmp_path / "second_run.py"
    path.write_text(textwrap.dedent(script), encoding="utf-8")
    paths = [str(TESTS), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=180, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


async def test_an_environment_kept_by_one_run_is_attached_by_the_next(
    lizard_local: LocalServer, tmp_path: Path
) -> None:
    environment = LizardEnvironment(lifetime_ms=300_000, keep=True)
    model = ScriptedModel([call("WriteFile", path="notes.txt", content="run one\n"), text("ok")])
    agent = LlmAgent(name="w", model=model, tools=[EnvironmentToolset(environment=environment)])
    runner = InMemoryRunner(agent=agent, app_name="lizard_adk_tests")
    try:
        await run_agent(agent, "Write.", runner=runner)
    finally:
        await runner.close()  # closes the toolset: the environment pauses its sandbox
    kept = environment.sandbox_id
    assert kept is not None
    assert _status(kept) == "paused"
    try:
        answer = _second_run(
            f"""
            import asyncio, json
            from adk_support import ScriptedModel, call, function_responses, run_agent, text
            from google.adk.agents import LlmAgent
            from google.adk.runners import InMemoryRunner
            from google.adk.tools.environment import EnvironmentToolset
            from lizard_adk import LizardEnvironment

            async def main():
                environment = LizardEnvironment(sandbox_id={kept!r}, keep=True)
                model = ScriptedModel([call("Execute", command="cat notes.txt"), text("ok")])
                agent = LlmAgent(
                    name="w", model=model, tools=[EnvironmentToolset(environment=environment)]
                )
                runner = InMemoryRunner(agent=agent, app_name="second")
                try:
                    events = await run_agent(agent, "Read.", runner=runner)
                finally:
                    await runner.close()
                print(json.dumps(function_responses(events)[0][1]))

            asyncio.run(main())
            """,
            tmp_path,
        )
        assert answer == {"status": "ok", "stdout": "run one\n"}
        assert _status(kept) == "paused"  # kept again by the second run
    finally:
        destroy_sandboxes(SandboxConfig.from_env(), [kept])


async def test_a_kept_code_executor_is_attached_and_says_its_variables_were_lost(
    lizard_local: LocalServer, tmp_path: Path
) -> None:
    executor = LizardCodeExecutor(stateful=True, lifetime_ms=300_000)
    block = "```python\nx = 41\nopen('kept.txt', 'w').write('from run one')\nprint(x + 1)\n```"
    model = ScriptedModel([text(block), text("Done.")])
    agent = LlmAgent(name="coder", model=model, code_executor=executor)
    try:
        events = await run_agent(agent, "Go.")
    finally:
        executor.close(keep=True)
    assert "42" in (code_results(events)[0].output or "")
    kept = executor.sandbox_id
    assert kept is not None
    assert _status(kept) == "paused"
    try:
        answer = _second_run(
            f"""
            import asyncio, json
            from adk_support import ScriptedModel, code_results, run_agent, text
            from google.adk.agents import LlmAgent
            from lizard_adk import LizardCodeExecutor

            first = "```python\\nprint(x)\\n```"
            second = "```python\\nprint(open('kept.txt').read())\\n```"
            executor = LizardCodeExecutor(stateful=True, sandbox_id={kept!r})
            model = ScriptedModel([text(first), text(second), text("Done.")])
            agent = LlmAgent(name="coder", model=model, code_executor=executor)
            try:
                events = asyncio.run(run_agent(agent, "Go."))
            finally:
                executor.close(keep=True)
            print(json.dumps([result.output for result in code_results(events)]))
            """,
            tmp_path,
        )
        assert isinstance(answer, list)
        lost, files = answer
        assert "paused and has been resumed" in lost  # the model is told why x is gone
        assert "NameError" in lost
        assert "from run one" in files  # the files survived the pause
    finally:
        destroy_sandboxes(SandboxConfig.from_env(), [kept])


PAUSE = "POST /api/sandboxes/{id}/pause"
KILL = "DELETE /api/sandboxes/{id}"


async def test_a_kept_environment_whose_pause_fails_is_destroyed_at_the_runners_close(
    lizard_local: LocalServer,
) -> None:
    environment = LizardEnvironment(lifetime_ms=300_000, keep=True)
    model = ScriptedModel([call("Execute", command="true"), text("ok")])
    agent = LlmAgent(name="w", model=model, tools=[EnvironmentToolset(environment=environment)])
    runner = InMemoryRunner(agent=agent, app_name="lizard_adk_tests")
    try:
        await run_agent(agent, "Run.", runner=runner)
        sandbox_id = environment.sandbox_id
        assert sandbox_id in lizard_local.sandboxes()
        lizard_local.inject_fault(PAUSE, status=400)  # refused: not retried
    finally:
        await runner.close()  # ADK logs a toolset's failed close and goes on
    assert sandbox_id not in lizard_local.sandboxes()  # not left running, billing


async def test_close_keep_retries_a_destroy_that_failed_after_a_failed_pause(
    lizard_local: LocalServer,
) -> None:
    environment = LizardEnvironment(lifetime_ms=300_000)
    await environment.initialize()
    sandbox_id = environment.sandbox_id
    lizard_local.inject_fault(PAUSE, status=400)
    lizard_local.inject_fault(KILL, status=403)
    with pytest.raises(CredentialsError):  # the destroy's error: the sandbox still runs
        await environment.close(keep=True)
    assert sandbox_id in lizard_local.sandboxes()
    await environment.close(keep=True)  # tries the destroy again rather than leave it running
    assert sandbox_id not in lizard_local.sandboxes()


async def test_a_kept_executor_whose_pause_fails_is_destroyed(lizard_local: LocalServer) -> None:
    executor = LizardCodeExecutor(stateful=True, lifetime_ms=300_000)
    try:
        assert "2" in (code_results(await _run(executor, "print(1 + 1)"))[0].output or "")
        sandbox_id = executor.sandbox_id
        lizard_local.inject_fault(PAUSE, status=500, count=3)  # every retry of the pause fails
        with pytest.raises(TransientError):
            executor.close(keep=True)
        assert sandbox_id not in lizard_local.sandboxes()  # not left running, billing
    finally:
        executor.close()


async def test_a_kept_executor_whose_sandbox_is_gone_closes_quietly(
    lizard_local: LocalServer,
) -> None:
    executor = LizardCodeExecutor(stateful=True, lifetime_ms=300_000)
    await _run(executor, "x = 1")
    lizard_local.expire(str(executor.sandbox_id))
    executor.close(keep=True)  # nothing to pause, nothing billing: no error


async def test_the_executor_starts_from_a_snapshot_also_after_its_sandbox_expired(
    lizard_local: LocalServer,
) -> None:
    config = SandboxConfig.from_env(template="interpreter", integration="adk")
    snapshot = prepare_snapshot(config, "echo prepared > /home/user/base.txt").snapshot_id
    executor = LizardCodeExecutor(stateful=True, lifetime_ms=1_500, snapshot_id=snapshot)
    try:
        code = "print(open('/home/user/base.txt').read())"
        assert "prepared" in (code_results(await _run(executor, code))[0].output or "")
        lizard_local.expire(str(executor.sandbox_id))
        again = code_results(await _run(executor, code))[0].output or ""
        assert "replaced by a new one" in again
        assert "prepared" in again  # the replacement started from the snapshot too
    finally:
        executor.close()
        delete_snapshots(config, [snapshot])


async def _run(executor: LizardCodeExecutor, code: str) -> list[object]:
    model = ScriptedModel([text(f"```python\n{code}\n```"), text("Done.")])
    return await run_agent(LlmAgent(name="coder", model=model, code_executor=executor), "Go.")


def test_keep_must_be_a_bool() -> None:
    with pytest.raises(TypeError):
        LizardEnvironment(keep="yes")  # type: ignore[arg-type]
