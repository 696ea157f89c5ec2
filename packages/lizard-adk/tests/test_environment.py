"""``LizardEnvironment`` against lizard-local (and the cloud with ``-m live``).

The classes ``TestUpstreamFileBehaviours`` and ``TestUpstreamTimeouts`` hold the behaviours that
ADK's own environment tests (``tests/unittests/environment/``) prove for ``LocalEnvironment``,
checked against this environment; the one deliberate difference (paths outside the working
directory) is a test of its own.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from adk_support import ScriptedModel, call, function_responses, run_agent, text
from google.adk.agents import LlmAgent
from google.adk.runners import InMemoryRunner
from google.adk.tools.environment import EnvironmentToolset

from lizard_adk import LizardEnvironment
from lizard_core.errors import CredentialsError, SandboxGoneError
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"


@pytest.fixture
async def env(connection: dict[str, Any]) -> AsyncIterator[LizardEnvironment]:
    environment = LizardEnvironment(lifetime_ms=300_000, **connection)
    await environment.initialize()
    yield environment
    await environment.close()


# ── construction and lifecycle ───────────────────────────────────────────────


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"working_dir": "relative"}, ValueError),
        ({"working_dir": 3}, TypeError),
        ({"output_limit": 0}, ValueError),
        ({"output_limit": "1"}, TypeError),
        ({"api_url": "http://lizard.invalid"}, ValueError),
        ({"size": "huge"}, ValueError),
        ({"env_vars": {"A": 1}}, TypeError),
        ({"envs": {"A": "1"}}, TypeError),  # ADK's environments call them env_vars
    ],
)
def test_bad_arguments_are_refused_before_any_request(
    lizard_counters: LocalServer, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        LizardEnvironment(**kwargs)
    assert lizard_counters.counters()["total"] == 0


async def test_use_before_initialize_or_after_close_is_a_runtime_error(
    lizard_counters: LocalServer,
) -> None:
    environment = LizardEnvironment(working_dir="/workspace")
    assert environment.working_dir == Path("/workspace")
    assert not environment.is_initialized
    with pytest.raises(RuntimeError, match="initialize"):
        await environment.execute("true")
    with pytest.raises(RuntimeError, match="initialize"):
        await environment.read_file("x")
    assert lizard_counters.counters()["total"] == 0
    await environment.initialize()
    await environment.close()
    with pytest.raises(RuntimeError, match="initialize"):
        await environment.write_file("x", "y")


async def test_initialize_creates_one_sandbox_and_close_destroys_it(
    lizard_counters: LocalServer,
) -> None:
    environment = LizardEnvironment(lifetime_ms=300_000)
    await environment.initialize()
    await environment.initialize()
    sandbox_id, initialized = environment.sandbox_id, environment.is_initialized
    assert initialized
    assert sandbox_id in lizard_counters.sandboxes()
    assert lizard_counters.counters()["routes"]["POST /api/sandboxes"] == 1
    await environment.execute("true")
    assert lizard_counters.counters()["routes"][EXEC] == 1  # the first command: one request
    await environment.close()
    await environment.close()
    assert sandbox_id not in lizard_counters.sandboxes()
    assert not environment.is_initialized
    await environment.initialize()  # starts over with a new sandbox
    assert environment.sandbox_id not in (None, sandbox_id)
    await environment.close()


async def test_an_attached_sandbox_is_left_running_at_close(lizard_local: LocalServer) -> None:
    async with _owned() as owner:
        attached = LizardEnvironment(sandbox_id=owner.sandbox_id)
        await attached.initialize()
        await attached.write_file("shared.txt", "from the attached one")
        await attached.close()
        assert owner.sandbox_id in lizard_local.sandboxes()
        assert await owner.read_file("shared.txt") == b"from the attached one"


async def test_attaching_to_a_gone_sandbox_fails_and_creates_nothing(
    lizard_local: LocalServer,
) -> None:
    async with _owned() as owner:
        gone = owner.sandbox_id
    before = set(lizard_local.sandboxes())
    environment = LizardEnvironment(sandbox_id=gone)
    with pytest.raises(SandboxGoneError):
        await environment.initialize()
    assert set(lizard_local.sandboxes()) == before
    await environment.close()


async def test_a_sandbox_killed_underneath_raises_and_is_not_replaced(
    lizard_local: LocalServer,
) -> None:
    async with _owned() as environment:
        before = set(lizard_local.sandboxes())
        assert environment.sandbox_id is not None
        lizard_local.expire(environment.sandbox_id)
        with pytest.raises(SandboxGoneError):
            await environment.execute("true")
        assert set(lizard_local.sandboxes()) == before - {environment.sandbox_id}


class _owned:
    """An environment of its own for a test that needs lizard-local's control API."""

    async def __aenter__(self) -> LizardEnvironment:
        self.environment = LizardEnvironment(lifetime_ms=300_000)
        await self.environment.initialize()
        return self.environment

    async def __aexit__(self, *exc_info: object) -> None:
        await self.environment.close()


# ── commands ─────────────────────────────────────────────────────────────────


async def test_execute_returns_exit_code_and_both_streams(env: LizardEnvironment) -> None:
    result = await env.execute("printf out; printf err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr, result.timed_out) == (
        3,
        "out",
        "err",
        False,
    )


async def test_commands_run_in_the_working_dir_with_env_vars_only(
    connection: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_ONLY", "from the host")
    environment = LizardEnvironment(
        working_dir="/tmp/adk work", env_vars={"GREETING": "hi"}, **connection
    )
    await environment.initialize()
    try:
        result = await environment.execute('pwd; printf "%s|%s" "$GREETING" "${HOST_ONLY-unset}"')
        assert result.stdout == "/tmp/adk work\nhi|unset"
        await environment.write_file("relative.txt", "here")
        assert (await environment.execute("cat relative.txt")).stdout == "here"
    finally:
        await environment.close()


async def test_output_that_is_not_utf8_is_replaced_not_dropped(env: LizardEnvironment) -> None:
    result = await env.execute(r"printf 'a\377b'")
    assert result.stdout == "a\ufffdb"


async def test_a_timeout_returns_the_output_so_far_and_timed_out(env: LizardEnvironment) -> None:
    result = await env.execute("printf partial; sleep 30", timeout=1)
    assert result.timed_out
    assert result.exit_code == -1
    assert result.stdout == "partial"


async def test_the_model_gets_head_tail_and_exit_code_of_a_long_output(
    lizard_local: LocalServer,
) -> None:
    # Through ADK's own Execute tool: a long output keeps its end (the error, the summary) and
    # its exit code; one past output_limit is stopped and says so, and the run goes on.
    environment = LizardEnvironment(lifetime_ms=300_000, output_limit=256 * 1024)
    model = ScriptedModel(
        [
            call("Execute", command="seq 1 20000; echo 'the end' >&2; exit 3"),
            call("Execute", command="yes line | head -c 1000000; echo never"),
            call("Execute", command="echo still here"),
            text("Done."),
        ]
    )
    agent = LlmAgent(
        name="worker", model=model, tools=[EnvironmentToolset(environment=environment)]
    )
    runner = InMemoryRunner(agent=agent, app_name="lizard_adk_tests")
    try:
        events = await run_agent(agent, "Run them.", runner=runner)
    finally:
        await runner.close()
    long, stopped, after = (response for _, response in function_responses(events))
    assert long["exit_code"] == 3
    assert long["stdout"].startswith("1\n2\n3\n")
    assert long["stdout"].endswith("19999\n20000\n")
    assert "lines) cut from the middle of the output" in long["stdout"]
    assert "truncated" not in long["stdout"]  # ADK's own head-only cut was not needed
    assert long["stderr"] == "the end\n"
    assert stopped["exit_code"] == -1
    assert stopped["stdout"].startswith("line\n")
    assert "never" not in stopped["stdout"]
    assert "was stopped" in stopped["stderr"]
    assert after == {"status": "ok", "stdout": "still here\n"}


async def test_a_failed_destroy_can_be_retried_through_close(lizard_local: LocalServer) -> None:
    environment = LizardEnvironment(lifetime_ms=300_000)
    await environment.initialize()
    sandbox_id = environment.sandbox_id
    lizard_local.inject_fault("DELETE /api/sandboxes/{id}", status=403, count=1)
    with pytest.raises(CredentialsError):
        await environment.close()
    assert sandbox_id in lizard_local.sandboxes()
    await environment.close()
    assert sandbox_id not in lizard_local.sandboxes()


# ── files ────────────────────────────────────────────────────────────────────


async def test_files_of_any_size_are_byte_exact(env: LizardEnvironment) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    await env.write_file("big/blob.bin", data)
    assert await env.read_file("big/blob.bin") == data
    listed = await env.execute("wc -c < big/blob.bin")
    assert listed.stdout.strip() == str(len(data))


async def test_small_reads_and_writes_cost_one_request_each(lizard_counters: LocalServer) -> None:
    async with _owned() as environment:
        lizard_counters.reset_counters()
        await environment.write_file("one.txt", "x" * 1000)
        await environment.read_file("one.txt")
        assert lizard_counters.counters()["total"] == 2


async def test_paths_outside_the_working_dir_are_allowed_unlike_local_environment(
    connection: dict[str, Any],
) -> None:
    # ADK's LocalEnvironment confines paths to its folder (ValueError "escapes working
    # directory") to protect the host; like ADK's E2B and Daytona environments, a sandbox
    # is the boundary, so relative escapes and absolute paths elsewhere are allowed.
    env = LizardEnvironment(working_dir="/tmp/adk/inner", **connection)
    await env.initialize()
    try:
        await env.write_file(Path("..") / "outside.txt", "ok")
        assert await env.read_file("/tmp/adk/outside.txt") == b"ok"
        await env.write_file("/tmp/elsewhere/a.txt", "anywhere")
        assert await env.read_file("/tmp/elsewhere/a.txt") == b"anywhere"
    finally:
        await env.close()


class TestUpstreamFileBehaviours:
    """ADK's ``TestReadFileWriteFile`` behaviours, for this environment."""

    @pytest.mark.parametrize(
        ("write_as", "read_as"), [(str, str), (Path, Path), (str, Path), (Path, str)]
    )
    async def test_str_and_path_arguments_round_trip(
        self, env: LizardEnvironment, write_as: type[Any], read_as: type[Any]
    ) -> None:
        await env.write_file(write_as("hello.txt"), "hello world")
        assert await env.read_file(read_as("hello.txt")) == b"hello world"

    async def test_bytes_content_round_trips(self, env: LizardEnvironment) -> None:
        await env.write_file(Path("binary.bin"), b"\x00\x01\x02\xff")
        assert await env.read_file("binary.bin") == b"\x00\x01\x02\xff"

    async def test_explicit_crlf_is_kept(self, env: LizardEnvironment) -> None:
        await env.write_file("crlf.txt", "first\r\nsecond\r\n")
        assert await env.read_file("crlf.txt") == b"first\r\nsecond\r\n"

    async def test_unencodable_text_leaves_the_file_intact(self, env: LizardEnvironment) -> None:
        await env.write_file("existing.txt", b"keep these bytes\n")
        with pytest.raises(UnicodeEncodeError):
            await env.write_file("existing.txt", "replacement \ud800")
        assert await env.read_file("existing.txt") == b"keep these bytes\n"

    async def test_invalid_content_leaves_the_file_intact(self, env: LizardEnvironment) -> None:
        await env.write_file("existing.txt", b"keep these bytes\n")
        with pytest.raises(TypeError, match="content must be str or bytes"):
            await env.write_file("existing.txt", 123)  # type: ignore[arg-type]
        assert await env.read_file("existing.txt") == b"keep these bytes\n"

    async def test_parent_directories_are_created(self, env: LizardEnvironment) -> None:
        await env.write_file(Path("sub/dir/file.txt"), "nested")
        assert await env.read_file("sub/dir/file.txt") == b"nested"

    async def test_an_absolute_path_inside_the_working_dir(self, env: LizardEnvironment) -> None:
        path = env.working_dir / "absolute.txt"
        await env.write_file(path, "absolute")
        assert await env.read_file(path) == b"absolute"
        assert await env.read_file("absolute.txt") == b"absolute"

    async def test_reading_a_missing_file_raises_file_not_found(
        self, env: LizardEnvironment
    ) -> None:
        with pytest.raises(FileNotFoundError) as caught:
            await env.read_file(Path("does_not_exist.txt"))
        assert caught.value.errno == errno.ENOENT  # as open() raises it in LocalEnvironment


class TestUpstreamTimeouts:
    """ADK's ``TestExecuteTimeout``: a timeout and a cancellation reach the whole process tree."""

    HEARTBEAT = "while true; do echo x >> beat; sleep 0.05; done\n"
    COMMAND = "sh heartbeat.sh & sleep 60"

    @staticmethod
    async def _size(env: LizardEnvironment) -> int:
        return int((await env.execute("wc -c < beat 2>/dev/null || echo 0")).stdout.strip())

    async def _assert_stopped(self, env: LizardEnvironment) -> None:
        before = await self._size(env)
        await asyncio.sleep(0.5)
        assert await self._size(env) == before, "the background command is still running"

    async def test_a_timeout_returns_and_stops_descendants(self, env: LizardEnvironment) -> None:
        await env.write_file("heartbeat.sh", self.HEARTBEAT)
        result = await asyncio.wait_for(env.execute(self.COMMAND, timeout=0.5), timeout=60)
        assert result.timed_out
        await self._assert_stopped(env)

    async def test_cancellation_stops_descendants(self, env: LizardEnvironment) -> None:
        await env.write_file("heartbeat.sh", self.HEARTBEAT)
        task = asyncio.create_task(env.execute(self.COMMAND))
        for _ in range(600):
            await asyncio.sleep(0.1)
            if await self._size(env):
                break
        else:
            pytest.fail("the background command never started")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=60)
        await self._assert_stopped(env)


# ── ADK's EnvironmentToolset, in a Runner with a scripted model ──────────────


async def test_an_agent_uses_the_environment_toolset(lizard_local: LocalServer) -> None:
    environment = LizardEnvironment(lifetime_ms=300_000)
    model = ScriptedModel(
        [
            call("WriteFile", path="notes/plan.txt", content="step one\nstep two\n"),
            call("EditFile", path="notes/plan.txt", old_string="two", new_string="2"),
            call("Execute", command="wc -l < notes/plan.txt && cat notes/plan.txt"),
            call("ReadFile", path="notes/plan.txt", start_line=2),
            call("Execute", command="exit 4"),
            text("All done."),
        ]
    )
    agent = LlmAgent(
        name="worker", model=model, tools=[EnvironmentToolset(environment=environment)]
    )
    before = set(lizard_local.sandboxes())
    runner = InMemoryRunner(agent=agent, app_name="lizard_adk_tests")
    try:
        events = await run_agent(agent, "Write the plan.", runner=runner)
        assert environment.sandbox_id in lizard_local.sandboxes()
    finally:
        await runner.close()
    assert model.unused == 0
    responses = function_responses(events)
    assert [name for name, _ in responses] == [
        "WriteFile",
        "EditFile",
        "Execute",
        "ReadFile",
        "Execute",
    ]
    assert responses[2][1] == {"status": "ok", "stdout": "2\nstep one\nstep 2\n"}
    assert responses[3][1]["content"] == "     2\tstep 2\n"
    assert responses[4][1] == {"status": "error", "exit_code": 4}
    instruction = model.requests[0].config.system_instruction
    assert "/home/user" in str(instruction)
    assert events[-1].content is not None
    assert events[-1].content.parts is not None
    assert events[-1].content.parts[0].text == "All done."
    # Runner.close() closed the toolset, which closed the environment: no sandbox is left.
    assert set(lizard_local.sandboxes()) == before
