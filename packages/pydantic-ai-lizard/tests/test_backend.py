"""`LizardSandboxBackend` behaviour beyond the conformance suite, against lizard-local.

What is proven here: no request before first use and none for invalid input; one sandbox and a
ref that survives cancellation; attaching never replaces; the request budget of one per operation;
partial output on timeout and output limit; a dead guest cannot hang `run()`; a 10,000-entry
listing; `remove()` refusing the working directory through a symlinked ancestor; how transient and
terminal API failures surface; nothing from the host environment reaches the sandbox.
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from pydantic_ai.workspaces import (
    WorkspaceError,
    WorkspaceOutputLimitError,
    WorkspaceRef,
    WorkspaceTimeoutError,
    WorkspaceUnavailableError,
)

from lizard_core.errors import TransientError
from lizard_local import LocalServer
from pydantic_ai_lizard import LizardSandboxBackend
from pydantic_ai_lizard._backend import OUTPUT_LIMIT

BackendFactory = Callable[..., LizardSandboxBackend]

CREATE = "POST /api/sandboxes"
EXEC = "POST /api/sandboxes/{id}/exec"


def _total(server: Any) -> int:
    return int(server.counters()["total"])


def _routes(server: Any) -> dict[str, int]:
    return {route: n for route, n in server.counters()["routes"].items() if n}


# ── construction: validation, no I/O ─────────────────────────────────────────


def test_construction_makes_no_request(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    fresh = make_backend()
    attached = make_backend(ref=WorkspaceRef(provider="lizard", id="sbx-unknown"))
    assert fresh.ref is None
    assert attached.ref == WorkspaceRef(provider="lizard", id="sbx-unknown")
    assert "sbx-unknown" in repr(attached)
    assert _total(lizard_counters) == 0


def test_the_0_1_0_constructor_arguments_still_work(lizard_local: LocalServer) -> None:
    backend = LizardSandboxBackend(
        ref=None,
        project_id=lizard_local.project_id,
        api_key=lizard_local.api_key,
        size="small",
        lifetime_ms=600_000,
        working_dir="/workspace",
        env={"GREETING": "hi"},
    )
    assert backend.ref is None


def test_only_a_backend_that_would_create_needs_a_project(
    lizard_counters: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIZARD_PROJECT_ID")
    with pytest.raises(ValueError, match="LIZARD_PROJECT_ID"):
        LizardSandboxBackend()
    attached = LizardSandboxBackend(ref=WorkspaceRef(provider="lizard", id="sbx-some-id"))
    assert attached.ref == WorkspaceRef(provider="lizard", id="sbx-some-id")
    assert _total(lizard_counters) == 0


async def test_an_attached_backend_works_without_a_project(
    lizard_counters: LocalServer, make_backend: BackendFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = make_backend()
    await owner.working_dir()
    monkeypatch.delenv("LIZARD_PROJECT_ID")
    attached = make_backend(ref=owner.ref)
    assert (await attached.run(["echo", "attached"])).stdout == "attached\n"
    await attached.destroy()
    assert owner.ref is not None
    assert owner.ref.id not in lizard_counters.sandboxes()


def test_new_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        LizardSandboxBackend(None)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"working_dir": "relative/dir"}, ValueError),
        ({"working_dir": "/work\0space"}, ValueError),
        ({"size": "xl"}, ValueError),
        ({"lifetime_ms": 0}, ValueError),
        ({"lifetime_ms": True}, TypeError),
        ({"ref": WorkspaceRef(provider="e2b", id="x")}, ValueError),
        ({"ref": WorkspaceRef(provider="lizard", id="../etc")}, ValueError),
        ({"ref": "sbx-1"}, TypeError),
        ({"env": {"A": 1}}, TypeError),
        ({"env": {"A=B": "x"}}, ValueError),
        ({"env": ["A"]}, TypeError),
        ({"envs": {"": "x"}}, ValueError),
        ({"api_url": "http://lizard.example.com"}, ValueError),
        ({"region": "Not A Region"}, ValueError),
        ({"internet_access": None}, TypeError),
        ({"keep_alive": "yes"}, TypeError),
    ],
)
def test_invalid_configuration_fails_before_any_request(
    lizard_counters: LocalServer, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        LizardSandboxBackend(**kwargs)
    assert _total(lizard_counters) == 0


@pytest.mark.parametrize(
    ("command", "options", "error"),
    [
        ("true", {}, TypeError),
        (["true"], {"shell": True}, TypeError),
        (b"true", {}, TypeError),
        ([], {}, ValueError),
        ([1], {}, TypeError),
        (["x\0y"], {}, ValueError),
        (["true"], {"timeout": 0}, ValueError),
        (["true"], {"timeout": float("nan")}, ValueError),
        (["true"], {"timeout": float("inf")}, ValueError),
        (["true"], {"timeout": "10"}, ValueError),
        (["true"], {"env": {"A": None}}, TypeError),
        (["true"], {"env": {"A\0": "x"}}, ValueError),
    ],
)
async def test_invalid_commands_fail_before_any_request(
    lizard_counters: LocalServer,
    make_backend: BackendFactory,
    command: Any,
    options: dict[str, Any],
    error: type[Exception],
) -> None:
    backend = make_backend()
    with pytest.raises(error):
        await backend.run(command, **options)
    assert backend.ref is None
    assert _total(lizard_counters) == 0


async def test_relative_paths_are_refused_before_any_request(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    with pytest.raises(ValueError, match="absolute"):
        await backend.read_bytes("relative.txt")
    with pytest.raises(TypeError):
        await backend.write_bytes("/workspace/x", "text")  # type: ignore[arg-type]
    assert _total(lizard_counters) == 0


# ── lifecycle: one sandbox, a stable ref, never a replacement ────────────────


async def test_concurrent_first_use_creates_one_sandbox(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    results: list[str] = []

    async def use() -> None:
        results.append(await backend.working_dir())

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(use)
    assert len(set(results)) == 1
    assert lizard_counters.counters()["routes"].get(CREATE) == 1
    assert backend.ref is not None
    assert backend.ref.id in lizard_counters.sandboxes()


async def test_ref_is_kept_when_first_use_is_cancelled(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    lizard_counters.set_latency(400)
    try:
        with anyio.move_on_after(0.1) as scope:
            await backend.working_dir()
    finally:
        lizard_counters.set_latency(0)
    assert scope.cancelled_caught
    ref = backend.ref
    assert ref is not None, "a sandbox created during a cancelled first use must keep its ref"
    assert ref.id in lizard_counters.sandboxes()
    await backend.working_dir()
    assert backend.ref == ref
    assert lizard_counters.counters()["routes"].get(CREATE) == 1


async def test_attaching_to_an_unknown_sandbox_never_creates_one(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    ref = WorkspaceRef(provider="lizard", id="sbx-does-not-exist")
    backend = make_backend(ref=ref)
    with pytest.raises(WorkspaceUnavailableError, match="sbx-does-not-exist"):
        await backend.run(["true"])
    with pytest.raises(WorkspaceUnavailableError):
        await backend.read_bytes("/workspace/anything")
    assert backend.ref == ref
    assert CREATE not in _routes(lizard_counters)


async def test_an_expired_sandbox_is_unavailable(
    lizard_local: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    await backend.write_bytes("/workspace/kept.txt", b"data")
    assert backend.ref is not None
    lizard_local.expire(backend.ref.id)
    with pytest.raises(WorkspaceUnavailableError):
        await backend.run(["cat", "/workspace/kept.txt"])
    with pytest.raises(WorkspaceUnavailableError):
        await backend.read_bytes("/workspace/kept.txt")


async def test_destroy_is_idempotent_and_final(
    lizard_local: LocalServer, make_backend: BackendFactory
) -> None:
    never_used = make_backend()
    await never_used.destroy()  # nothing was created: nothing to do
    backend = make_backend()
    await backend.working_dir()
    ref = backend.ref
    assert ref is not None
    await backend.destroy()
    await backend.destroy()
    assert ref.id not in lizard_local.sandboxes()
    assert backend.ref == ref
    with pytest.raises(WorkspaceUnavailableError):
        await backend.run(["true"])


async def test_a_transient_api_failure_propagates_for_retry(
    lizard_local: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    await backend.working_dir()
    lizard_local.inject_fault(EXEC, status=503, count=1)
    with pytest.raises(TransientError):
        await backend.run(["true"])
    assert (await backend.run(["true"])).exit_code == 0


async def test_a_failed_create_leaves_no_ref_and_the_next_use_creates(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    lizard_counters.inject_fault(CREATE, status=503, count=1)
    with pytest.raises(TransientError):
        await backend.working_dir()
    failed = backend.ref
    assert failed is None
    await backend.working_dir()
    created = backend.ref
    assert created is not None
    assert created.id in lizard_counters.sandboxes()


async def test_a_failed_working_dir_setup_keeps_the_ref_and_can_be_retried(
    make_backend: BackendFactory,
) -> None:
    owner = make_backend()
    await owner.write_bytes("/workspace/blocker", b"a file where a directory should be")
    assert owner.ref is not None
    backend = make_backend(ref=owner.ref, working_dir="/workspace/blocker/project")
    with pytest.raises(WorkspaceError, match="working directory"):
        await backend.working_dir()
    assert backend.ref == owner.ref
    await owner.remove("/workspace/blocker")
    assert await backend.working_dir() == "/workspace/blocker/project"


async def test_rejected_credentials_are_unavailable_without_the_key(
    lizard_local: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend(api_key="liz_wrong_key_0123456789")
    with pytest.raises(WorkspaceUnavailableError) as raised:
        await backend.working_dir()
    assert "liz_wrong_key" not in str(raised.value)
    assert backend.ref is None


async def test_a_policy_refusal_says_what_the_platform_said_not_bad_credentials(
    lizard_local: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend(size="big")
    lizard_local.inject_fault(CREATE, status=403, count=1)  # carries code INJECTED_FAULT
    with pytest.raises(WorkspaceUnavailableError) as raised:
        await backend.working_dir()
    message = str(raised.value)
    assert "HTTP 403, code INJECTED_FAULT" in message
    assert "Set a valid LIZARD_API_KEY" not in message
    assert lizard_local.api_key not in message
    assert backend.ref is None


@pytest.mark.parametrize("first", [True, False], ids=["first-run", "later-run"])
async def test_a_command_over_the_argv_limit_is_e2big(
    lizard_counters: LocalServer, make_backend: BackendFactory, first: bool
) -> None:
    import errno

    backend = make_backend()
    if not first:
        await backend.working_dir()
    with pytest.raises(OSError, match="Argument list too long") as raised:
        await backend.run("echo " + "x" * 1_900_000, shell=True)
    assert raised.value.errno == errno.E2BIG  # the harness turns this into a retry hint
    assert (await backend.run(["echo", "ok"])).stdout == "ok\n"


# ── the request budget ───────────────────────────────────────────────────────


async def test_one_request_per_operation(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    root = await backend.working_dir()
    path = posixpath.join(root, "budget.txt")
    small = b"x" * (64 * 1024)

    async def cost(operation: Callable[[], Any]) -> int:
        lizard_counters.reset_counters()
        await operation()
        return _total(lizard_counters)

    costs = {
        "run": await cost(lambda: backend.run(["sh", "-c", "echo out; echo err >&2"])),
        "write_bytes": await cost(lambda: backend.write_bytes(path, small)),
        "read_bytes": await cost(lambda: backend.read_bytes(path)),
        "stat": await cost(lambda: backend.stat(path)),
        "list_dir": await cost(lambda: backend.list_dir(root)),
        "exists": await cost(lambda: backend.exists(path)),
        "realpath": await cost(lambda: backend.realpath(path)),
        "make_dir": await cost(lambda: backend.make_dir(posixpath.join(root, "a", "b"))),
        "remove": await cost(lambda: backend.remove(posixpath.join(root, "a"))),
    }
    assert costs == dict.fromkeys(costs, 1)


async def test_a_mebibyte_text_file_moves_in_one_request_each_way(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    # A 1 MiB write fits the exec's argv; a read is one GET files of any size.
    backend = make_backend()
    path = posixpath.join(await backend.working_dir(), "mebibyte.txt")
    line = b"def handler(request):  # a line of source code, as agents read and write\n"
    data = (line * (1024 * 1024 // len(line) + 1))[: 1024 * 1024]
    lizard_counters.reset_counters()
    await backend.write_bytes(path, data)
    assert _total(lizard_counters) == 1
    lizard_counters.reset_counters()
    assert await backend.read_bytes(path) == data
    assert _total(lizard_counters) == 1


async def test_first_use_costs_create_then_one_request_per_step(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    # GET /api/projects is the SDK resolving the project, once per process: not counted here.
    backend = make_backend()
    await backend.working_dir()
    routes = _routes(lizard_counters)
    routes.pop("GET /api/projects", None)
    assert routes == {CREATE: 1, EXEC: 1}, "working_dir() on a new sandbox: create + 1"
    lizard_counters.reset_counters()
    first_run = make_backend()
    result = await first_run.run(["pwd", "-P"])
    routes = _routes(lizard_counters)
    routes.pop("GET /api/projects", None)
    assert routes == {CREATE: 1, EXEC: 1}, "run() first: create + 1 (the command makes its cwd)"
    assert result.stdout == "/workspace\n"
    lizard_counters.reset_counters()
    assert await first_run.working_dir() == "/workspace"  # learnt by the first run: no request
    assert _total(lizard_counters) == 0
    lizard_counters.reset_counters()
    attached = make_backend(ref=first_run.ref)
    await attached.write_bytes("/workspace/attached.txt", b"x")
    assert _routes(lizard_counters) == {"GET /api/sandboxes/{id}": 1, EXEC: 1}
    lizard_counters.reset_counters()
    assert (await attached.run(["cat", "attached.txt"])).stdout == "x"
    assert _routes(lizard_counters) == {EXEC: 1}, "first run() on an attached sandbox: 1"


async def test_the_first_run_creates_and_resolves_the_working_dir(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    owner = make_backend(working_dir="/workspace/real")
    assert (await owner.run(["ln", "-s", "/workspace/real", "/workspace/alias"])).exit_code == 0
    lizard_counters.reset_counters()
    second = make_backend(ref=owner.ref, working_dir="/workspace/alias/new/project")
    result = await second.run(["pwd", "-P"])
    assert result.stdout == "/workspace/real/new/project\n"
    assert await second.working_dir() == "/workspace/real/new/project"
    assert _routes(lizard_counters) == {"GET /api/sandboxes/{id}": 1, EXEC: 1}
    # Protected from remove() from the first run on, also through the symlink.
    with pytest.raises(ValueError, match=r"protected|Refusing"):
        await second.remove("/workspace/alias/new")


async def test_a_first_run_that_cannot_create_the_working_dir_is_a_workspace_error(
    make_backend: BackendFactory,
) -> None:
    owner = make_backend()
    await owner.write_bytes("/workspace/blocker", b"a file where a directory should be")
    backend = make_backend(ref=owner.ref, working_dir="/workspace/blocker/project")
    with pytest.raises(WorkspaceError, match="working directory"):
        await backend.run(["true"])
    await owner.remove("/workspace/blocker")
    assert (await backend.run(["pwd"])).stdout == "/workspace/blocker/project\n"
    assert await backend.working_dir() == "/workspace/blocker/project"


async def test_keep_alive_extends_the_lifetime_while_in_use(
    lizard_counters: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend(lifetime_ms=2_000)  # keep-alive is on by default
    await backend.working_dir()
    await anyio.sleep(1.2)  # past half the lifetime: the next use extends it
    await backend.run(["true"])
    await anyio.sleep(1.2)
    assert (await backend.run(["echo", "alive"])).stdout == "alive\n"
    assert lizard_counters.counters()["routes"].get("POST /api/sandboxes/{id}/timeout", 0) >= 1


async def test_without_internet_access_the_sandbox_has_no_network(
    lizard_local: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend(internet_access=False)
    probe = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('10.255.255.1', 9), timeout=3)\n"
        "except OSError as e:\n"
        "    print(e.errno)\n"
    )
    result = await backend.run(["python3", "-c", probe])
    assert result.exit_code == 0
    if lizard_local.isolation != "namespace":
        pytest.skip("lizard-local runs without network namespaces here (not root)")
    # ENETUNREACH at once: no route at all, where a connected sandbox would time out instead.
    assert result.stdout.strip() == str(errno.ENETUNREACH)


# ── commands ─────────────────────────────────────────────────────────────────


async def test_timeout_keeps_partial_output(make_backend: BackendFactory) -> None:
    backend = make_backend()
    with anyio.fail_after(30):
        with pytest.raises(WorkspaceTimeoutError) as raised:
            await backend.run(
                ["sh", "-c", "printf partial; printf oops >&2; exec sleep 3600"], timeout=1
            )
    assert (raised.value.stdout, raised.value.stderr) == ("partial", "oops")


@pytest.mark.slow
async def test_output_limit_keeps_partial_output(make_backend: BackendFactory) -> None:
    backend = make_backend()
    too_much = OUTPUT_LIMIT + 1024 * 1024
    with pytest.raises(WorkspaceOutputLimitError) as raised:
        await backend.run(["sh", "-c", f"head -c {too_much} /dev/zero | tr '\\0' x; echo done >&2"])
    error = raised.value
    assert error.limit == OUTPUT_LIMIT
    assert 0 < len(error.stdout) <= OUTPUT_LIMIT
    assert set(error.stdout) == {"x"}


async def test_a_dead_guest_cannot_hang_run(make_backend: BackendFactory) -> None:
    backend = make_backend()
    await backend.working_dir()
    # The command's parent is the guest program that frames its output: kill it mid-command.
    with anyio.fail_after(60), pytest.raises(WorkspaceError):
        await backend.run(["sh", "-c", "kill -9 $PPID; exec sleep 3600"])
    assert (await backend.run(["echo", "still usable"])).stdout == "still usable\n"


async def test_a_sandbox_destroyed_mid_command_is_unavailable(
    lizard_local: LocalServer, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    await backend.working_dir()
    ref = backend.ref
    assert ref is not None

    async def expire_soon() -> None:
        await anyio.sleep(1.0)
        await anyio.to_thread.run_sync(lizard_local.expire, ref.id)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(expire_soon)
            with pytest.raises(WorkspaceUnavailableError, match=ref.id):
                await backend.run(["sleep", "60"])
    lizard_local.reset_counters()
    with pytest.raises(WorkspaceUnavailableError):
        await backend.read_bytes("/workspace/anything")  # known gone: no request
    await backend.destroy()
    assert _total(lizard_local) == 0


@pytest.mark.slow
async def test_a_stuck_guest_cannot_hang_run(make_backend: BackendFactory) -> None:
    backend = make_backend()
    await backend.working_dir()
    # A stopped guest sends no frames, heartbeats included: the host's stall limit ends the call.
    with anyio.fail_after(60), pytest.raises(WorkspaceError):
        await backend.run(["sh", "-c", "kill -STOP $PPID; exec sleep 3600"])
    assert (await backend.run(["echo", "still usable"])).stdout == "still usable\n"


async def test_a_command_killed_by_a_signal_is_a_result(make_backend: BackendFactory) -> None:
    backend = make_backend()
    result = await backend.run(["sh", "-c", "printf before; kill -9 $$"])
    assert (result.exit_code, result.stdout) == (128 + 9, "before")


async def test_env_layers_over_the_backend_env(make_backend: BackendFactory) -> None:
    backend = make_backend(env={"A": "backend", "B": "backend"}, envs={"C": "sandbox"})
    result = await backend.run(
        ["sh", "-c", 'printf "%s %s %s" "$A" "$B" "$C"'], env={"B": "command"}
    )
    assert result.stdout == "backend command sandbox"


async def test_host_environment_is_never_copied_in(
    monkeypatch: pytest.MonkeyPatch, make_backend: BackendFactory
) -> None:
    monkeypatch.setenv("PYDANTIC_AI_LIZARD_HOST_ONLY", "host-secret-value")
    backend = make_backend()
    result = await backend.run(["env"])
    assert result.exit_code == 0
    assert "host-secret-value" not in result.stdout
    assert os.environ["LIZARD_API_KEY"] not in result.stdout


# ── files ────────────────────────────────────────────────────────────────────


async def test_listing_ten_thousand_entries(make_backend: BackendFactory) -> None:
    backend = make_backend()
    root = posixpath.join(await backend.working_dir(), "many")
    script = (
        "import os, sys\nos.makedirs(sys.argv[1])\nfor i in range(10000):\n"
        "    open(os.path.join(sys.argv[1], 'f%05d' % i), 'w').close()\n"
    )
    assert (await backend.run(["python3", "-c", script, root])).exit_code == 0
    entries = await backend.list_dir(root)
    assert [entry.name for entry in entries] == [f"f{i:05d}" for i in range(10000)]
    assert all(
        not entry.is_dir and entry.path == posixpath.join(root, entry.name) for entry in entries
    )


async def test_remove_refuses_the_working_dir_through_a_symlinked_ancestor(
    make_backend: BackendFactory,
) -> None:
    backend = make_backend(working_dir="/workspace/project")
    working_dir = await backend.working_dir()
    assert working_dir == "/workspace/project"
    links = "/workspace/links"
    await backend.make_dir(links)
    assert (await backend.run(["ln", "-s", "/", f"{links}/root"])).exit_code == 0
    assert (await backend.run(["ln", "-s", "/workspace", f"{links}/ws"])).exit_code == 0
    for path in (
        f"{links}/root/workspace",
        f"{links}/ws/project",
        f"{links}/root/workspace/project",
    ):
        with pytest.raises(ValueError, match=r"protected|Refusing"):
            await backend.remove(path)
    assert await backend.exists(working_dir)
    await backend.remove(f"{links}/ws")  # the link itself goes, not what it points to
    assert not await backend.exists(f"{links}/ws")
    assert await backend.exists(working_dir)


async def test_working_dir_is_created_and_resolved(make_backend: BackendFactory) -> None:
    first = make_backend(working_dir="/workspace/real/nested")
    assert await first.working_dir() == "/workspace/real/nested"
    assert (await first.run(["ln", "-s", "/workspace/real", "/workspace/alias"])).exit_code == 0
    assert first.ref is not None
    second = make_backend(ref=first.ref, working_dir="/workspace/alias/./nested/../nested")
    assert await second.working_dir() == "/workspace/real/nested"
    assert (await second.run(["pwd", "-P"])).stdout == "/workspace/real/nested\n"
