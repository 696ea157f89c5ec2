"""``LizardSandbox`` against lizard-local: arguments, commands, files, ownership, errors."""

from __future__ import annotations

from typing import Any

import lizard
import pytest
from deepagents.backends.protocol import (
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
)

from langchain_lizard import LizardSandbox, LizardSandboxError, SandboxUnavailableError
from langchain_lizard.sandbox import LizardSandbox as LizardSandbox010
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"timeout": "60"}, TypeError),
        ({"timeout": True}, TypeError),
        ({"timeout": -1}, ValueError),
        ({"timeout": float("inf")}, ValueError),
        ({"output_limit": 0}, ValueError),
        ({"api_url": "http://lizard.invalid"}, ValueError),
        ({"api_key": 123}, TypeError),
        ({"template": "no spaces allowed"}, ValueError),
        ({"lifetime_ms": 10}, ValueError),
        ({"envs": {"NAME": 1}}, TypeError),
        ({"sandbox_id": "../etc"}, ValueError),
        ({"sandbox_id": "sbx_1", "template": "base"}, ValueError),
        ({"sandbox": object()}, TypeError),
    ],
)
def test_bad_arguments_are_refused_before_any_request(
    lizard_counters: LocalServer, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        LizardSandbox(**kwargs)
    assert lizard_counters.counters()["total"] == 0


def test_building_a_backend_makes_no_request(lizard_counters: LocalServer) -> None:
    backend = LizardSandbox()
    assert backend.sandbox_id is None
    assert lizard_counters.api_key not in repr(backend)
    assert lizard_counters.counters()["total"] == 0


# ── commands ─────────────────────────────────────────────────────────────


def test_output_keeps_the_order_the_command_wrote_in(backend: LizardSandbox) -> None:
    result = backend.execute("printf 'out1 '; printf 'err1 ' >&2; printf out2; exit 3")
    assert result == ExecuteResponse(output="out1 err1 out2", exit_code=3, truncated=False)


def test_a_syntax_error_is_output_too(backend: LizardSandbox) -> None:
    result = backend.execute("echo before; if then fi")
    assert result.exit_code == 2
    assert "Syntax error" in result.output or "syntax error" in result.output


def test_invalid_utf8_is_replaced_not_dropped(backend: LizardSandbox) -> None:
    assert backend.execute(r"printf 'a\377b'").output == "a\ufffdb"


def test_a_timeout_returns_the_partial_output_with_exit_code_124(lizard_local: LocalServer) -> None:
    with LizardSandbox(timeout=30, lifetime_ms=300_000) as backend:
        result = backend.execute("printf partial; sleep 30", timeout=1)
        assert result.exit_code == 124
        assert result.output.startswith("partial\n")
        assert "timed out after 1 seconds" in result.output
        assert backend.execute("echo still usable").output == "still usable\n"


def test_output_past_the_limit_is_marked_truncated(lizard_local: LocalServer) -> None:
    with LizardSandbox(output_limit=1000, lifetime_ms=300_000) as backend:
        result = backend.execute("yes x | head -c 100000; echo done")
    assert result.truncated is True
    assert result.exit_code is None
    assert result.output.startswith("x\n" * 500)
    assert "done" not in result.output
    assert "stopped" in result.output


def test_a_timeout_of_zero_means_no_limit_but_the_platforms(backend: LizardSandbox) -> None:
    assert backend.execute("sleep 0.2; echo ok", timeout=0).output == "ok\n"


@pytest.mark.parametrize("command", [b"echo", None])
def test_a_command_must_be_text(backend: LizardSandbox, command: Any) -> None:
    with pytest.raises(TypeError):
        backend.execute(command)


async def test_aexecute_gives_the_same_result(abackend: LizardSandbox) -> None:
    result = await abackend.aexecute("printf a; printf b >&2; exit 1")
    assert result == ExecuteResponse(output="ab", exit_code=1)
    stopped = await abackend.aexecute("printf partial; sleep 30", timeout=1)
    assert stopped.exit_code == 124
    assert stopped.output.startswith("partial")


def test_envs_reach_commands_and_the_host_environment_does_not(
    lizard_local: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_ONLY", "from the host")
    with LizardSandbox(envs={"GREETING": "hi"}, lifetime_ms=300_000) as backend:
        output = backend.execute('printf "%s|%s" "$GREETING" "${HOST_ONLY-unset}"').output
    assert output == "hi|unset"


# ── files ────────────────────────────────────────────────────────────────


def test_uploads_keep_order_and_bytes_and_create_parents(backend: LizardSandbox) -> None:
    files = [
        ("/tmp/up/deep/er/binary.bin", bytes(range(256))),
        ("relative.txt", b"never sent"),
        ("/tmp/up/empty", b""),
        ("/tmp/up", b"a directory is in the way"),
    ]
    assert backend.upload_files(files) == [
        FileUploadResponse(path="/tmp/up/deep/er/binary.bin"),
        FileUploadResponse(path="relative.txt", error="invalid_path"),
        FileUploadResponse(path="/tmp/up/empty"),
        FileUploadResponse(path="/tmp/up", error="is_directory"),
    ]
    paths = ["/tmp/up/empty", "/tmp/up/missing", "/tmp/up/deep/er/binary.bin", "/tmp/up", "x"]
    assert backend.download_files(paths) == [
        FileDownloadResponse(path="/tmp/up/empty", content=b""),
        FileDownloadResponse(path="/tmp/up/missing", error="file_not_found"),
        FileDownloadResponse(path="/tmp/up/deep/er/binary.bin", content=bytes(range(256))),
        FileDownloadResponse(path="/tmp/up", error="is_directory"),
        FileDownloadResponse(path="x", error="invalid_path"),
    ]


async def test_async_transfers_give_the_same_results(abackend: LizardSandbox) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, past the one-request inline write
    assert await abackend.aupload_files([("/tmp/a/b/big", data), ("rel", b"")]) == [
        FileUploadResponse(path="/tmp/a/b/big"),
        FileUploadResponse(path="rel", error="invalid_path"),
    ]
    assert await abackend.adownload_files(["/tmp/a/b/big", "/tmp/a/nope", "/tmp/a"]) == [
        FileDownloadResponse(path="/tmp/a/b/big", content=data),
        FileDownloadResponse(path="/tmp/a/nope", error="file_not_found"),
        FileDownloadResponse(path="/tmp/a", error="is_directory"),
    ]


def test_an_unwritable_path_is_permission_denied(backend: LizardSandbox) -> None:
    # sysfs refuses new files even to root, the sandbox's default user.
    assert backend.upload_files([("/sys/kernel/lizard-test", b"x"), ("/tmp/ok", b"x")]) == [
        FileUploadResponse(path="/sys/kernel/lizard-test", error="permission_denied"),
        FileUploadResponse(path="/tmp/ok"),
    ]


def test_an_unreadable_file_is_permission_denied(backend: LizardSandbox) -> None:
    if backend.execute("id -u").output.strip() == "0":
        pytest.skip("commands run as root (the sandbox's default user), who reads any file")
    backend.execute("echo s > /tmp/locked && chmod 000 /tmp/locked")
    assert backend.download_files(["/tmp/locked"]) == [
        FileDownloadResponse(path="/tmp/locked", error="permission_denied")
    ]


def test_bad_transfer_arguments_are_type_errors(lizard_counters: LocalServer) -> None:
    backend = LizardSandbox()
    for bad in ([("/tmp/x", "text, not bytes")], "/tmp/x", [("/tmp/x",)], [(1, b"")]):
        with pytest.raises(TypeError):
            backend.upload_files(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        backend.download_files("/tmp/x")  # type: ignore[arg-type]
    assert lizard_counters.counters()["total"] == 0


def test_rejected_credentials_are_raised_not_returned_per_file(lizard_local: LocalServer) -> None:
    backend = LizardSandbox(api_key="lzl_not-the-key", lifetime_ms=300_000)
    with pytest.raises(SandboxUnavailableError, match="credentials"):
        backend.upload_files([("/tmp/x", b"x")])
    with pytest.raises(SandboxUnavailableError, match="credentials"):
        backend.download_files(["/tmp/x"])


def test_a_quota_refusal_is_raised_from_a_transfer(
    backend: LizardSandbox, lizard_local: LocalServer
) -> None:
    backend.execute("true")
    lizard_local.inject_fault(EXEC, status=402, count=1)
    with pytest.raises(SandboxUnavailableError, match="refused"):
        backend.upload_files([("/tmp/q", b"x")])
    lizard_local.inject_fault(EXEC, status=503, count=1)
    with pytest.raises(LizardSandboxError):
        backend.execute("true")
    assert backend.upload_files([("/tmp/q", b"x")]) == [FileUploadResponse(path="/tmp/q")]


# ── ownership ────────────────────────────────────────────────────────────


def test_close_destroys_a_created_sandbox_and_may_be_repeated(lizard_local: LocalServer) -> None:
    backend = LizardSandbox(lifetime_ms=300_000)
    sandbox_id = backend.id  # reading the id creates the sandbox
    assert sandbox_id == backend.sandbox_id
    assert sandbox_id in lizard_local.sandboxes()
    sdk = lizard.Sandbox(sandbox_id, api_key=lizard_local.api_key, api_url=lizard_local.url)
    record = sdk.get_info()
    assert record.template == "interpreter"  # 0.1.0's examples' template is the default
    assert (record.metadata or {}).get("integration") == "langchain"
    backend.close()
    assert sandbox_id not in lizard_local.sandboxes()
    backend.close()
    with pytest.raises(SandboxUnavailableError):
        backend.execute("true")


def test_close_during_the_first_calls_create_destroys_what_it_creates(
    lizard_counters: LocalServer,
) -> None:
    import threading

    before = set(lizard_counters.sandboxes())
    backend = LizardSandbox(lifetime_ms=300_000)
    outcome: list[object] = []
    lizard_counters.set_latency(2000)  # every request is handled 2 s after it arrives
    try:
        first = threading.Thread(target=lambda: outcome.append(_attempt(backend)))
        first.start()
        # The create has arrived, so it is in flight when close() comes.
        lizard_counters.wait_for_request("POST /api/sandboxes")
        backend.close()
        first.join(30)
    finally:
        lizard_counters.set_latency(0)
    # The first call waited for the create, and the session was closed meanwhile.
    assert len(outcome) == 1
    assert isinstance(outcome[0], SandboxUnavailableError)
    assert set(lizard_counters.sandboxes()) == before  # nothing it created is left running


def _attempt(backend: LizardSandbox) -> object:
    try:
        return backend.execute("true")
    except SandboxUnavailableError as error:
        return error


def test_creation_options_reach_the_sandbox(lizard_local: LocalServer) -> None:
    with LizardSandbox(
        template="base",
        size="small",
        lifetime_ms=120_000,
        metadata={"team": "agents"},
        internet_access=False,  # allowed_hosts too, where the platform has them (not lizard-local)
    ) as backend:
        sdk = lizard.Sandbox(backend.id, api_key=lizard_local.api_key, api_url=lizard_local.url)
        record = sdk.get_info()
    assert (record.template, record.size) == ("base", "small")
    assert (record.metadata or {}).get("team") == "agents"
    assert record.internet_access is False


def test_attaching_by_id_leaves_the_sandbox_running(lizard_local: LocalServer) -> None:
    with LizardSandbox(lifetime_ms=300_000) as owner:
        owner.write("/tmp/shared.txt", "from the owner")
        with LizardSandbox(sandbox_id=owner.id) as attached:
            assert attached.read("/tmp/shared.txt").file_data["content"] == "from the owner"  # type: ignore[index]
        assert owner.id in lizard_local.sandboxes()
        attached.kill()
        assert owner.id not in lizard_local.sandboxes()
    with pytest.raises(SandboxUnavailableError):
        LizardSandbox(sandbox_id=owner.id).execute("true")  # gone, and never replaced
    assert owner.id not in lizard_local.sandboxes()


def test_the_0_1_0_constructor_wraps_an_sdk_sandbox_and_leaves_it_running(
    lizard_local: LocalServer,
) -> None:
    with lizard.Sandbox.create(
        "base",
        project_id=lizard_local.project_id,
        api_key=lizard_local.api_key,
        api_url=lizard_local.url,
    ) as sandbox:
        backend = LizardSandbox010(sandbox, timeout=120)
        assert backend.id == sandbox.sandbox_id
        assert backend.execute("python3 -c 'print(2 ** 10)'").output == "1024\n"
        backend.upload_files([("/tmp/input.txt", b"hello")])
        assert backend.download_files(["/tmp/input.txt"])[0].content == b"hello"
        backend.close()
        assert sandbox.sandbox_id in lizard_local.sandboxes()
    assert sandbox.sandbox_id not in lizard_local.sandboxes()


def test_an_sdk_sandbox_brings_its_own_credentials(lizard_local: LocalServer) -> None:
    sandbox = lizard.Sandbox("sbx_1", api_key=lizard_local.api_key, api_url=lizard_local.url)
    with pytest.raises(ValueError, match="its own"):
        LizardSandbox(sandbox, api_key="other")
    with pytest.raises(ValueError, match="not both"):
        LizardSandbox(sandbox, sandbox_id="sbx_1")
