"""``LizardSandboxEnvironment`` against lizard-local: what Inspect's self-check does not cover.

Request costs, the working directory, errors with partial output, the lifecycle hooks
(creation under rate limits and cancellation, sample and task cleanup, the CLI cleanup) and
the registration Inspect finds the provider by.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import anyio
import pytest
from inspect_ai.util import (
    ExecCompleted,
    ExecStderr,
    ExecStdout,
    OutputLimitExceededError,
    SandboxEnvironment,
)
from inspect_ai.util._sandbox.events import SandboxEnvironmentProxy
from inspect_ai.util._sandbox.lifecycle import sandbox_lifecycle_scope
from inspect_ai.util._sandbox.limits import override_max_exec_output_size
from inspect_ai.util._sandbox.registry import registry_find_sandboxenv
from pydantic import ValidationError

from inspect_lizard import LizardSandboxConfig, LizardSandboxEnvironment
from lizard_core.config import SandboxConfig
from lizard_core.inventory import find_sandboxes
from lizard_core.session import Session
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"
CREATE = "POST /api/sandboxes"
CONFIG = LizardSandboxConfig(template="base", lifetime_ms=600_000)


def routes(server: LocalServer) -> dict[str, int]:
    """The routes requested since the counters' reset, without the SDK's project lookup.

    The SDK resolves the project once per process: in whichever test creates first.
    """
    counts = {k: v for k, v in server.counters()["routes"].items() if v}
    counts.pop("GET /api/projects", None)
    return counts


async def init(task: str = "tests", config: Any = CONFIG) -> LizardSandboxEnvironment:
    environments = await LizardSandboxEnvironment.sample_init(task, config, {})
    environment = environments["default"]
    assert isinstance(environment, LizardSandboxEnvironment)
    return environment


# ── registration and configuration ─────────────────────────────────────


def test_inspect_finds_the_provider_as_lizard_through_its_entry_point() -> None:
    [point] = [p for p in entry_points(group="inspect_ai") if p.name == "lizard"]
    assert point.value == "inspect_lizard"
    assert registry_find_sandboxenv("lizard") is LizardSandboxEnvironment


def test_the_0_1_0_configuration_fields_are_still_accepted() -> None:
    old = {"project_id": "proj", "template": "interpreter", "size": "small", "lifetime_ms": 60_000}
    config = LizardSandboxEnvironment.config_deserialize(old)
    assert config == LizardSandboxConfig(**old)
    assert LizardSandboxEnvironment.config_deserialize(config.model_dump()) == config
    assert hash(config) == hash(LizardSandboxConfig(**old))
    with pytest.raises(ValidationError):
        LizardSandboxEnvironment.config_deserialize({"compose": "compose.yaml"})


@pytest.mark.parametrize(
    "fields",
    [
        {"working_dir": "relative"},
        {"lifetime_ms": 10},
        {"size": "huge"},
        {"envs": {"A": 1}},
    ],
)
def test_a_bad_configuration_is_refused_when_built(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        LizardSandboxConfig(**fields)


async def test_bad_settings_fail_before_any_request(lizard_counters: LocalServer) -> None:
    with pytest.raises(ValueError, match="template"):
        LizardSandboxEnvironment(LizardSandboxConfig(template="no spaces"))
    with pytest.raises(ValueError, match="compose"):
        await init(config="compose.yaml")
    with pytest.raises(ValueError, match="https"):
        LizardSandboxEnvironment(api_url="http://lizard.invalid")
    environment = LizardSandboxEnvironment(CONFIG)
    assert environment.sandbox_id is None
    assert lizard_counters.counters()["total"] == 0


async def test_task_init_refuses_what_no_sample_could_use(
    lizard_counters: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    await LizardSandboxEnvironment.task_init("tests", CONFIG)
    with pytest.raises(ValueError, match="compose"):
        await LizardSandboxEnvironment.task_init("tests", "compose.yaml")
    monkeypatch.delenv("LIZARD_PROJECT_ID")
    with pytest.raises(ValueError, match="LIZARD_PROJECT_ID"):
        await LizardSandboxEnvironment.task_init("tests", CONFIG)
    monkeypatch.delenv("LIZARD_API_KEY")
    with pytest.raises(ValueError, match="LIZARD_API_KEY"):
        await LizardSandboxEnvironment.task_init("tests", CONFIG)
    assert lizard_counters.counters()["total"] == 0


def test_the_defaults_suit_an_eval() -> None:
    assert LizardSandboxEnvironment.default_concurrency() == 10
    assert LizardSandboxConfig().template == "interpreter"  # as in 0.1.0
    assert LizardSandboxEnvironment.is_docker_compatible() is False


# ── operations ─────────────────────────────────────────────────────────


async def test_each_exec_and_small_file_operation_is_one_request(
    module_env: LizardSandboxEnvironment, lizard_counters: LocalServer
) -> None:
    await module_env.write_file("cost/one.txt", "one")
    assert routes(lizard_counters) == {EXEC: 1}
    lizard_counters.reset_counters()
    assert await module_env.read_file("cost/one.txt") == "one"
    assert routes(lizard_counters) == {EXEC: 1}
    lizard_counters.reset_counters()
    result = await module_env.exec(["cat", "cost/one.txt", "-"], input="two", cwd=".")
    assert result.stdout == "onetwo"
    assert routes(lizard_counters) == {EXEC: 1}


async def test_relative_paths_and_cwd_resolve_against_the_working_directory(
    module_env: LizardSandboxEnvironment,
) -> None:
    await module_env.write_file("nested/dir/file.txt", "x")
    assert (await module_env.exec(["pwd"])).stdout == "/workspace\n"
    assert (await module_env.exec(["ls"], cwd="nested/dir")).stdout == "file.txt\n"
    assert await module_env.read_file("/workspace/nested/dir/file.txt") == "x"
    with pytest.raises(FileNotFoundError):
        await module_env.exec(["ls"], cwd="no/such/dir")


async def test_a_timeout_raises_with_the_partial_output(
    module_env: LizardSandboxEnvironment,
) -> None:
    with pytest.raises(TimeoutError) as caught:
        await module_env.exec(["sh", "-c", "printf partial; sleep 30"], timeout=1)
    assert getattr(caught.value, "truncated_output", None) == "partial"


async def test_output_past_inspects_limit_raises_with_the_partial_output(
    module_env: LizardSandboxEnvironment,
) -> None:
    with override_max_exec_output_size(1024), pytest.raises(OutputLimitExceededError) as caught:
        await module_env.exec(["sh", "-c", "yes | head -c 100000"])
    assert caught.value.limit_str == "1 KiB"
    assert caught.value.truncated_output == "y\n" * 512


async def test_output_is_decoded_with_replacement_characters(
    module_env: LizardSandboxEnvironment,
) -> None:
    result = await module_env.exec(["printf", "ok \\377"])
    assert result.stdout == "ok \ufffd"


async def test_a_program_that_cannot_run_raises_what_inspect_names(
    module_env: LizardSandboxEnvironment,
) -> None:
    await module_env.write_file("not-executable.sh", "#!/bin/sh\necho no\n")
    with pytest.raises(PermissionError):
        await module_env.exec(["./not-executable.sh"])
    missing = await module_env.exec(["no-such-program-here"])
    assert (missing.success, missing.returncode) == (False, 127)


async def test_connection_is_a_line_shell_a_person_can_run(
    module_env: LizardSandboxEnvironment,
) -> None:
    # What Inspect's human_cli agent asks for first, and prints for the person to run.
    connection = await module_env.connection()
    assert connection.type == "lizard"
    assert module_env.sandbox_id is not None
    assert module_env.sandbox_id in connection.command
    lines = "echo hello from $(pwd)\ncd /tmp\npwd\nfalse\nexit\n"
    done = await anyio.run_process(
        shlex.split(connection.command), input=lines.encode(), check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "hello from /workspace\n/tmp\n[exit code 1]\n"


async def test_connection_before_the_sandbox_exists_is_a_connection_error() -> None:
    environment = LizardSandboxEnvironment(CONFIG)
    with pytest.raises(ConnectionError):
        await environment.connection()


def test_exec_remote_polls_as_often_as_for_docker() -> None:
    docker = registry_find_sandboxenv("docker")
    ours = LizardSandboxEnvironment(CONFIG)
    assert ours.default_polling_interval() <= docker.default_polling_interval(ours)  # type: ignore[attr-defined]
    assert ours.default_polling_interval() < SandboxEnvironment.default_polling_interval(ours)


def test_the_private_timeout_class_is_guarded() -> None:
    # An Inspect that renamed or moved its private class still gets a TimeoutError with the
    # partial output, as its tools read it.
    code = """
import inspect_ai.util._sandbox.events as events
del events.SandboxTimeoutError
from inspect_lizard._errors import inspect_errors
from lizard_core.errors import CommandTimeoutError
try:
    with inspect_errors():
        raise CommandTimeoutError("late", stdout=b"partial", stderr=b"", timeout=1.0)
except TimeoutError as error:
    print(type(error).__name__, error.truncated_output)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "SandboxTimeoutError partial", done.stderr


# ── lifecycle ──────────────────────────────────────────────────────────


async def test_sample_init_creates_a_tagged_sandbox_and_cleanup_destroys_it(
    lizard_counters: LocalServer,
) -> None:
    environment = await init("tagging-task")
    assert routes(lizard_counters) == {CREATE: 1}
    tags = {"integration": "inspect", "task": "tagging-task"}
    [record] = find_sandboxes(SandboxConfig.from_env(), tags)
    assert record.sandbox_id == environment.sandbox_id
    await LizardSandboxEnvironment.sample_cleanup(
        "tagging-task", CONFIG, {"default": environment}, True
    )
    assert environment.sandbox_id not in lizard_counters.sandboxes()


async def test_a_rate_limited_create_is_retried_when_the_platform_says(
    lizard_counters: LocalServer,
) -> None:
    lizard_counters.inject_fault(CREATE, status=429, retry_after_s=1)
    environment = await init()
    assert routes(lizard_counters)[CREATE] == 2
    await environment.close()


async def test_a_cancelled_sample_init_leaves_no_sandbox(lizard_counters: LocalServer) -> None:
    before = set(lizard_counters.sandboxes())
    lizard_counters.set_latency(1000)
    try:
        with anyio.move_on_after(0.3) as scope:
            await init()
    finally:
        lizard_counters.set_latency(0)
    assert scope.cancelled_caught
    # The create already sent was awaited, and what it made destroyed.
    assert routes(lizard_counters)[CREATE] == 1
    assert routes(lizard_counters)["DELETE /api/sandboxes/{id}"] == 1
    assert set(lizard_counters.sandboxes()) == before


async def test_sample_cleanup_destroys_even_when_its_task_is_cancelled(
    lizard_local: LocalServer,
) -> None:
    environment = await init()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await LizardSandboxEnvironment.sample_cleanup(
            "tests", CONFIG, {"default": environment}, True
        )
    assert environment.sandbox_id not in lizard_local.sandboxes()


async def test_task_cleanup_shutdown_destroys_every_sandbox_the_run_left(
    lizard_local: LocalServer,
) -> None:
    # Inspect ends a run with task_cleanup("shutdown", config, cleanup), not the task's name,
    # inside the lifecycle scope it opened for the run; what was made outside it is spared.
    outside = await init("not-this-run")
    try:
        with sandbox_lifecycle_scope():
            left = [await init("leaky-task"), await init("other-task")]
            await LizardSandboxEnvironment.task_cleanup("shutdown", CONFIG, True)
        alive = set(lizard_local.sandboxes())
        assert not {e.sandbox_id for e in left} & alive
        assert outside.sandbox_id in alive
    finally:
        await outside.close()


async def test_cli_cleanup_destroys_only_sandboxes_inspect_created(
    lizard_local: LocalServer, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = [await init("crashed-task"), await init("crashed-task")]
    other = Session(SandboxConfig.from_env(lifetime_ms=60_000, integration="someone-else"))
    try:
        other.sandbox()
        with pytest.raises(ValueError, match="was created by Inspect"):
            await LizardSandboxEnvironment.cli_cleanup(other.sandbox_id)
        await LizardSandboxEnvironment.cli_cleanup(ours[0].sandbox_id)
        assert ours[0].sandbox_id not in lizard_local.sandboxes()
        assert ours[1].sandbox_id in lizard_local.sandboxes()
        await LizardSandboxEnvironment.cli_cleanup(None)
        alive = set(lizard_local.sandboxes())
        assert ours[1].sandbox_id not in alive
        assert other.sandbox_id in alive
        assert "Destroyed 1 Lizard sandbox" in capsys.readouterr().out
    finally:
        other.destroy()
        for environment in ours:
            await environment.close()


async def test_cli_cleanup_without_an_id_spares_other_machines_runs(
    lizard_local: LocalServer, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = await init("crashed-task")
    # A teammate's eval in progress, in the same project: Inspect's tags, another machine.
    theirs = LizardSandboxConfig(template="base", lifetime_ms=60_000).sandbox_config()
    teammate = Session(theirs.replace(machine_id="teammates-laptop", run_id="their-eval"))
    try:
        teammate.sandbox()
        await LizardSandboxEnvironment.cli_cleanup(None)
        alive = set(lizard_local.sandboxes())
        assert mine.sandbox_id not in alive
        assert teammate.sandbox_id in alive
        assert "this machine's" in capsys.readouterr().out
        await LizardSandboxEnvironment.cli_cleanup("all")
        assert teammate.sandbox_id not in set(lizard_local.sandboxes())
    finally:
        teammate.destroy()
        await mine.close()


async def test_exec_remote_streams_through_inspects_sandbox_tools(
    lizard_local: LocalServer,
) -> None:
    # exec_remote is Inspect's own: it installs its sandbox tools under /var/tmp with
    # write_file and exec, then polls them with exec. Inspect calls it on the proxy it wraps
    # every environment in.
    environment = await init()
    try:
        process = await SandboxEnvironmentProxy(environment).exec_remote(
            ["sh", "-c", "echo out; sleep 1; echo err >&2; exit 3"]
        )
        events = [event async for event in process]
    finally:
        await environment.close()
    assert "".join(e.data for e in events if isinstance(e, ExecStdout)) == "out\n"
    assert "".join(e.data for e in events if isinstance(e, ExecStderr)) == "err\n"
    assert events[-1] == ExecCompleted(exit_code=3)


CRASHING_RUN = """
import os, anyio
from inspect_lizard import LizardSandboxConfig, LizardSandboxEnvironment
config = LizardSandboxConfig(template="base", lifetime_ms=120_000)
environments = anyio.run(LizardSandboxEnvironment.sample_init, "crashing-task", config, {})
print(environments["default"].sandbox_id, flush=True)
os._exit(1)  # dies without any cleanup
"""


def test_inspect_sandbox_cleanup_removes_what_a_crashed_run_left(
    lizard_local: LocalServer,
) -> None:
    crashed = subprocess.run(
        [sys.executable, "-c", CRASHING_RUN], capture_output=True, text=True, timeout=120
    )
    left = crashed.stdout.strip()
    assert crashed.returncode == 1
    assert left in lizard_local.sandboxes()
    cli = Path(sys.executable).with_name("inspect")
    cleanup = subprocess.run(
        [str(cli), "sandbox", "cleanup", "lizard"], capture_output=True, text=True, timeout=120
    )
    assert cleanup.returncode == 0, cleanup.stderr
    assert left in cleanup.stdout
    assert left not in lizard_local.sandboxes()
