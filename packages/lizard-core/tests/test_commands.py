"""lizard_core.commands against lizard-local, under each profile (capped, uncapped, latency)."""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from typing import Any

import pytest

from lizard_core import guest
from lizard_core.commands import (
    DEFAULT_OUTPUT_LIMIT,
    STREAM_BUDGET,
    CommandResult,
    arun_command,
    run_command,
)
from lizard_core.config import SandboxConfig
from lizard_core.errors import CommandTimeoutError, OutputLimitError
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_local import LocalServer

pytestmark = pytest.mark.usefixtures("profile")

EXEC = "POST /api/sandboxes/{id}/exec"
GET_FILE = "GET /api/sandboxes/{id}/files"
MiB = 1024 * 1024


# ── validation: before any request ───────────────────────────────────────


@pytest.mark.parametrize(
    ("command", "kwargs", "error"),
    [
        ("echo hi", {}, TypeError),  # a string needs shell=True
        (["echo", "hi"], {"shell": True}, TypeError),
        (b"echo", {}, TypeError),
        ([], {}, ValueError),
        (["echo", 1], {}, TypeError),
        (["echo", "a\0b"], {}, ValueError),
        ("echo \0", {"shell": True}, ValueError),
        (["true"], {"cwd": "relative"}, ValueError),
        (["true"], {"cwd": 5}, TypeError),
        (["true"], {"create_cwd": True}, ValueError),  # nothing to create
        (["true"], {"cwd": "/tmp", "create_cwd": 1}, TypeError),
        (["true"], {"env": {"A=B": "x"}}, ValueError),
        (["true"], {"env": {"": "x"}}, ValueError),
        (["true"], {"env": {"A": 1}}, TypeError),
        (["true"], {"env": ["A"]}, TypeError),
        (["true"], {"timeout": 0}, ValueError),
        (["true"], {"timeout": float("inf")}, ValueError),
        (["true"], {"timeout": True}, TypeError),
        (["true"], {"timeout": "1"}, TypeError),
        (["cat"], {"input": "text"}, TypeError),  # encode text first
        (["true"], {"user": 0}, TypeError),
        (["true"], {"user": ""}, ValueError),
        (["true"], {"user": "a:b"}, ValueError),
        (["true"], {"output_limit": 0}, ValueError),
        (["true"], {"output_limit": 1.5}, TypeError),
        (["true"], {"on_stdout": "print"}, TypeError),
    ],
)
def test_bad_arguments_fail_before_any_request(
    lizard_local: LocalServer, api_requests: Any, command: Any, kwargs: dict[str, Any], error: type
) -> None:
    session = Session(SandboxConfig.from_env(integration="lizard-core-tests"))
    with pytest.raises(error):
        run_command(session, command, **kwargs)
    with pytest.raises(error):
        asyncio.run(arun_command(session, command, **kwargs))
    assert api_requests.counts() == {}
    assert session.sandbox_id is None


# ── results ──────────────────────────────────────────────────────────────


def test_first_command_on_a_new_sandbox_costs_create_plus_one(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    config = SandboxConfig.from_env(lifetime_ms=120_000, integration="lizard-core-tests")
    with Session(config) as session:
        result = run_command(session, ["echo", "hello"])
        counts = api_requests.counts()
    assert result == CommandResult(exit_code=0, stdout=b"hello\n", stderr=b"", cwd=result.cwd)
    counts.pop("GET /api/projects", None)  # the SDK resolves a project reference once per process
    assert counts == {"POST /api/sandboxes": 1, EXEC: 1}


def test_a_new_working_directory_costs_no_extra_request(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    # What an adapter does first: create its working directory and learn where it really is,
    # in the same request as its first command.
    config = SandboxConfig.from_env(lifetime_ms=120_000, integration="lizard-core-tests")
    with Session(config) as session:
        result = run_command(
            session, ["sh", "-c", "pwd -P; echo made > here"], cwd="/workspace/a/b", create_cwd=True
        )
        counts = api_requests.counts()
        assert run_command(session, ["cat", "/workspace/a/b/here"]).stdout == b"made\n"
    assert (result.exit_code, result.stdout, result.cwd) == (
        0,
        b"/workspace/a/b\n",
        "/workspace/a/b",
    )
    counts.pop("GET /api/projects", None)
    assert counts == {"POST /api/sandboxes": 1, EXEC: 1}


def test_nine_kib_on_both_streams_comes_back_exact_in_one_request(
    module_session: Any, api_requests: Any
) -> None:
    script = (
        'i=0; while [ "$i" -lt 1024 ]; do printf workspace; printf workspace >&2; i=$((i+1)); done'
    )
    result = run_command(module_session, ["sh", "-c", script])
    expected = b"workspace" * 1024
    assert (result.exit_code, result.stdout, result.stderr) == (0, expected, expected)
    assert api_requests.counts() == {EXEC: 1}


def test_binary_output_is_exact(module_session: Any, api_requests: Any) -> None:
    result = run_command(
        module_session, ["sh", "-c", "printf 'a\\377\\000\\r\\n\\376'; printf '\\377\\n\\n' >&2"]
    )
    assert result.stdout == b"a\xff\x00\r\n\xfe"
    assert result.stderr == b"\xff\n\n"
    assert api_requests.counts() == {EXEC: 1}


def test_shell_text_and_argv_are_literal(module_session: Any) -> None:
    payload = " literal $() `quoted`; && "
    argv = run_command(module_session, ["sh", "-c", 'printf "%s" "$1"', "sh", payload])
    assert argv.stdout == payload.encode()
    shell = run_command(module_session, "printf out; printf err >&2; exit 7", shell=True)
    assert (shell.exit_code, shell.stdout, shell.stderr) == (7, b"out", b"err")


def test_exit_codes_follow_the_shell_conventions(module_session: Any, scratch: str) -> None:
    missing = run_command(module_session, ["lizard-core-no-such-program"])
    assert missing.exit_code == 127
    assert b"lizard-core-no-such-program" in missing.stderr
    script = f"{scratch}/script"
    run_command(module_session, ["sh", "-c", f"mkdir -p {scratch} && echo true > {script}"])
    assert run_command(module_session, [script]).exit_code == 126
    assert run_command(module_session, ["sh", "-c", "kill -TERM $$"]).exit_code == 128 + 15
    assert run_command(module_session, ["sh", "-c", "kill -KILL $$"]).exit_code == 128 + 9
    assert run_command(module_session, ["sh", "-c", "exit 3"]).exit_code == 3


# Output that deflate cannot shrink: the same seeded bytes are made in the guest and here.
def _noise_code(stream: str, size: int, seed: int) -> str:
    return f"import random, sys; sys.{stream}.buffer.write(random.Random({seed}).randbytes({size}))"


def _noise(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _log_text(size: int) -> bytes:
    """Log-like text, as builds and test runs print it."""
    lines = (
        b"2026-11-30 12:%02d:%02d INFO worker-%d handled request %d in %d ms\n"
        % (i // 60 % 60, i % 60, i % 8, i, i * 7919 % 1000)
        for i in range(size)
    )
    text = bytearray()
    for line in lines:
        text += line
        if len(text) >= size:
            return bytes(text[:size])
    raise AssertionError("unreachable")


def test_three_mib_of_output_is_spilled_and_returned_exactly(
    module_session: Any, api_requests: Any
) -> None:
    seen: list[bytes] = []
    code = _noise_code("stdout", 3 * MiB, 3)
    result = run_command(module_session, ["python3", "-c", code], on_stdout=seen.append)
    assert result.stdout == _noise(3 * MiB, 3)
    assert b"".join(seen) == result.stdout
    # One exec plus one GET of the spilled stdout; its job directory goes with the next request.
    assert api_requests.counts() == {EXEC: 1, GET_FILE: 1}
    api_requests.reset()
    listing = run_command(module_session, ["ls", "-A", guest.JOBS_ROOT])
    assert listing.stdout == b""
    assert api_requests.counts() == {EXEC: 1}


def test_a_mib_of_log_text_comes_back_in_one_request(
    module_session: Any, api_requests: Any, scratch: str
) -> None:
    text = _log_text(MiB)
    SandboxFiles(module_session).write_bytes(f"{scratch}/build.log", text)
    api_requests.reset()
    seen: list[bytes] = []
    result = run_command(module_session, ["cat", f"{scratch}/build.log"], on_stdout=seen.append)
    assert result.stdout == text
    assert b"".join(seen) == text
    assert len(seen) > 1  # live, in pieces as cat wrote them
    assert api_requests.counts() == {EXEC: 1}


def test_incompressible_output_fits_the_budget_in_one_request(
    module_session: Any, api_requests: Any
) -> None:
    # Past what the budget held before output was deflated (256 KiB), under what it holds now.
    size = 320 * 1024
    result = run_command(module_session, ["python3", "-c", _noise_code("stdout", size, 5)])
    assert result.stdout == _noise(size, 5)
    assert api_requests.counts() == {EXEC: 1}


def test_both_streams_spill_and_interleave_correctly(
    module_session: Any, api_requests: Any
) -> None:
    code = (
        "import random, sys\n"
        "out, err = random.Random(1), random.Random(2)\n"
        "for i in range(400):\n"
        "    sys.stdout.buffer.write(out.randbytes(1200)); sys.stdout.flush()\n"
        "    sys.stderr.buffer.write(err.randbytes(1200)); sys.stderr.flush()\n"
    )
    result = run_command(module_session, ["python3", "-c", code])
    out, err = random.Random(1), random.Random(2)
    assert result.stdout == b"".join(out.randbytes(1200) for _ in range(400))
    assert result.stderr == b"".join(err.randbytes(1200) for _ in range(400))
    assert len(result.stdout) + len(result.stderr) > STREAM_BUDGET
    assert api_requests.counts() == {EXEC: 1, GET_FILE: 2}


def test_output_past_the_limit_raises_with_the_kept_bytes(
    module_session: Any, api_requests: Any
) -> None:
    with pytest.raises(OutputLimitError) as caught:
        run_command(module_session, ["head", "-c", str(11 * MiB), "/dev/zero"])
    assert 10 * MiB == DEFAULT_OUTPUT_LIMIT
    assert caught.value.stdout == b"\0" * (10 * MiB)
    assert caught.value.stderr == b""
    assert caught.value.limit == 10 * MiB
    # Ten MiB of zeros deflate to a few KiB: nothing is spilled.
    assert api_requests.counts() == {EXEC: 1}


def test_output_exactly_at_the_limit_is_a_result(module_session: Any) -> None:
    result = run_command(module_session, ["head", "-c", "1000", "/dev/zero"], output_limit=1000)
    assert result.stdout == b"\0" * 1000
    with pytest.raises(OutputLimitError) as caught:
        run_command(module_session, ["head", "-c", "1001", "/dev/zero"], output_limit=1000)
    assert caught.value.stdout == b"\0" * 1000


def test_stderr_has_its_own_limit(module_session: Any) -> None:
    with pytest.raises(OutputLimitError) as caught:
        run_command(
            module_session, "echo out; head -c 5000 /dev/zero >&2", shell=True, output_limit=4096
        )
    assert caught.value.stdout == b"out\n"
    assert caught.value.stderr == b"\0" * 4096


# ── environment ──────────────────────────────────────────────────────────


def test_env_is_only_what_the_caller_passes(
    module_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIZARD_CORE_HOST_ONLY", "leak")
    result = run_command(
        module_session,
        ["sh", "-c", 'printf "%s|%s|%s" "$ADDED" "${LIZARD_CORE_HOST_ONLY-unset}" "$PYTHONPATH"'],
        env={"ADDED": "value", "PYTHONPATH": "/nowhere"},
    )
    assert result.stdout == b"value|unset|/nowhere"
    # The key never reaches the sandbox.
    environ = run_command(module_session, ["env"]).stdout
    assert os.environ["LIZARD_API_KEY"].encode() not in environ


def test_stdin_is_at_eof_and_cwd_is_used(module_session: Any, scratch: str) -> None:
    result = run_command(module_session, ["sh", "-c", "read value || printf eof"], timeout=30)
    assert (result.exit_code, result.stdout) == (0, b"eof")
    run_command(module_session, ["mkdir", "-p", scratch])
    assert run_command(module_session, ["pwd"], cwd=scratch).stdout == f"{scratch}\n".encode()


# ── input and users ──────────────────────────────────────────────────────


def test_input_reaches_stdin_exactly_in_one_request(module_session: Any, api_requests: Any) -> None:
    payload = b"$HOME `whoami` 'q' \\ \x00\xff\xc3\x28\nend"
    result = run_command(module_session, ["od", "-An", "-tx1", "-v"], input=payload)
    assert bytes.fromhex(result.stdout.decode()) == payload
    assert api_requests.counts() == {EXEC: 1}
    assert run_command(module_session, ["cat"], input=b"").stdout == b""


def test_large_input_is_uploaded_first_and_fed_whole(
    module_session: Any, api_requests: Any
) -> None:
    from lizard_core.files import CHUNK_SIZE

    size = 3 * CHUNK_SIZE + 5
    result = run_command(module_session, ["wc", "-c"], input=b"a" * size)
    assert result.stdout.split()[0] == str(size).encode()
    assert api_requests.counts() == {EXEC: 1, "POST /api/sandboxes/{id}/files": 4}
    # The guest emptied the upload as it fed it, and the next request removes its directory.
    leftover = run_command(module_session, ["sh", "-c", "find /tmp/.lizard-core -type f | wc -l"])
    assert leftover.stdout.strip() == b"0"


def test_a_command_that_stops_reading_is_not_an_error(module_session: Any) -> None:
    result = run_command(module_session, ["head", "-c", "3"], input=b"x" * (2 * 1024 * 1024))
    assert (result.exit_code, result.stdout) == (0, b"xxx")


def test_a_command_runs_as_another_user_with_its_home(module_session: Any) -> None:
    result = run_command(module_session, ["sh", "-c", 'id -un; echo "$HOME $USER"'], user="user")
    assert result.stdout == b"user\n/home/user user\n"
    by_uid = run_command(module_session, ["id", "-u"], user="1000", env={"HOME": "/tmp"})
    assert by_uid.stdout == b"1000\n"


def test_an_unknown_user_starts_nothing(module_session: Any) -> None:
    result = run_command(module_session, ["touch", "/tmp/never"], user="nonexistent")
    assert (result.exit_code, result.start_errno) == (126, None)
    assert b"nonexistent" in result.stderr
    assert run_command(module_session, ["ls", "/tmp/never"]).exit_code != 0


def test_a_program_that_cannot_start_reports_its_errno(module_session: Any) -> None:
    import errno

    denied = run_command(module_session, ["/etc/passwd"])
    assert (denied.exit_code, denied.start_errno) == (126, errno.EACCES)
    missing = run_command(module_session, ["no-such-program-here"])
    assert (missing.exit_code, missing.start_errno) == (127, errno.ENOENT)
    assert run_command(module_session, ["true"]).start_errno is None


def test_the_path_search_passes_over_what_cannot_run(module_session: Any, scratch: str) -> None:
    import errno

    # As execvp does: a candidate that is not executable gives way to a later one, and its
    # error is the one reported when no candidate starts.
    setup = f"mkdir -p {scratch}/a {scratch}/b && echo x > {scratch}/a/tool && "
    setup += f"printf '#!/bin/sh\\necho from-b\\n' > {scratch}/b/tool && chmod +x {scratch}/b/tool"
    assert run_command(module_session, ["sh", "-c", setup]).exit_code == 0
    both = run_command(module_session, ["tool"], env={"PATH": f"{scratch}/a:{scratch}/b"})
    assert (both.exit_code, both.stdout) == (0, b"from-b\n")
    only = run_command(module_session, ["tool"], env={"PATH": f"/nowhere:{scratch}/a"})
    assert (only.exit_code, only.start_errno) == (126, errno.EACCES)


def test_a_missing_cwd_is_file_not_found(module_session: Any, scratch: str) -> None:
    with pytest.raises(FileNotFoundError):
        run_command(module_session, ["pwd"], cwd=f"{scratch}/missing")


def test_the_result_reports_the_resolved_working_directory(
    module_session: Any, scratch: str, api_requests: Any
) -> None:
    run_command(module_session, ["mkdir", "-p", f"{scratch}/real"])
    run_command(module_session, ["ln", "-s", f"{scratch}/real", f"{scratch}/alias"])
    api_requests.reset()
    through_link = run_command(module_session, ["pwd", "-P"], cwd=f"{scratch}/alias/.")
    assert through_link.stdout == f"{scratch}/real\n".encode()
    assert through_link.cwd == f"{scratch}/real"
    default = run_command(module_session, ["pwd", "-P"])
    assert default.cwd is not None
    assert default.stdout == f"{default.cwd}\n".encode()
    assert api_requests.counts() == {EXEC: 2}


def test_create_cwd_makes_missing_parents_through_symlinks(
    module_session: Any, scratch: str, api_requests: Any
) -> None:
    run_command(module_session, ["mkdir", "-p", f"{scratch}/real"])
    run_command(module_session, ["ln", "-s", f"{scratch}/real", f"{scratch}/alias"])
    api_requests.reset()
    result = run_command(
        module_session, ["pwd", "-P"], cwd=f"{scratch}/alias/new/deeper", create_cwd=True
    )
    assert result.cwd == f"{scratch}/real/new/deeper"
    assert result.stdout == f"{scratch}/real/new/deeper\n".encode()
    again = run_command(module_session, ["true"], cwd=f"{scratch}/real/new", create_cwd=True)
    assert (again.exit_code, again.cwd) == (0, f"{scratch}/real/new")  # an existing one is fine
    assert api_requests.counts() == {EXEC: 2}


def test_create_cwd_refuses_a_file_in_the_way(module_session: Any, scratch: str) -> None:
    run_command(module_session, ["mkdir", "-p", scratch])
    run_command(module_session, ["touch", f"{scratch}/file"])
    for cwd in (f"{scratch}/file", f"{scratch}/file/below"):
        with pytest.raises(NotADirectoryError):
            run_command(module_session, ["true"], cwd=cwd, create_cwd=True)
    assert run_command(module_session, ["test", "-f", f"{scratch}/file"]).exit_code == 0


# ── completion, timeout, cancellation ────────────────────────────────────


def test_a_background_child_holding_stdout_does_not_hold_up_the_result(
    module_session: Any,
) -> None:
    started = time.monotonic()
    result = run_command(module_session, ["sh", "-c", "sleep 30 & echo $!; echo done"])
    elapsed = time.monotonic() - started
    pid, done = result.stdout.split()
    assert (result.exit_code, done) == (0, b"done")
    assert elapsed < 5
    assert run_command(module_session, ["kill", pid.decode()]).exit_code == 0


def test_timeout_kills_the_command_and_keeps_partial_output(
    module_session: Any, scratch: str
) -> None:
    run_command(module_session, ["mkdir", "-p", scratch])
    started = time.monotonic()
    with pytest.raises(CommandTimeoutError) as caught:
        run_command(
            module_session,
            ["sh", "-c", f"echo start; echo $$ > {scratch}/pid; echo warn >&2; sleep 3600"],
            timeout=1,
        )
    assert time.monotonic() - started < 3
    assert (caught.value.stdout, caught.value.stderr) == (b"start\n", b"warn\n")
    assert caught.value.timeout == 1
    pid = run_command(module_session, ["cat", f"{scratch}/pid"]).stdout.strip().decode()
    assert run_command(module_session, ["kill", "-0", pid]).exit_code != 0


def _processes(session: Any) -> list[Any]:
    return list(session.call(session.sandbox().process.list))


async def test_cancelling_the_task_leaves_no_process_behind(
    module_session: Any, scratch: str
) -> None:
    await arun_command(module_session, ["mkdir", "-p", scratch])
    pid_file = f"{scratch}/pid"
    task = asyncio.create_task(
        arun_command(module_session, ["sh", "-c", f'echo $$ > "{pid_file}"; exec sleep 3600'])
    )
    deadline = time.monotonic() + 30
    while (await arun_command(module_session, ["test", "-s", pid_file])).exit_code != 0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    pid = (await arun_command(module_session, ["cat", pid_file])).stdout.strip().decode()
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 5
    # The guest exec is gone from the platform's process list...
    assert await asyncio.to_thread(_processes, module_session) == []
    # ...and so is the command it ran.
    assert (await arun_command(module_session, ["kill", "-0", pid])).exit_code != 0


async def test_cancellation_spares_processes_detached_with_setsid(
    module_session: Any, scratch: str
) -> None:
    await arun_command(module_session, ["mkdir", "-p", scratch])
    pid_file = f"{scratch}/detached"
    detached = f'echo $$ > "{pid_file}"; exec sleep 3600'
    script = f"setsid sh -c '{detached}' </dev/null >/dev/null 2>&1 & exec sleep 3600"
    task = asyncio.create_task(arun_command(module_session, ["sh", "-c", script]))
    deadline = time.monotonic() + 30
    while (await arun_command(module_session, ["test", "-s", pid_file])).exit_code != 0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pid = (await arun_command(module_session, ["cat", pid_file])).stdout.strip().decode()
    assert (await arun_command(module_session, ["kill", "-0", pid])).exit_code == 0
    assert (await arun_command(module_session, ["kill", pid])).exit_code == 0


# ── live output ──────────────────────────────────────────────────────────


def test_callbacks_see_output_as_it_arrives(module_session: Any) -> None:
    arrivals: list[tuple[float, bytes]] = []
    result = run_command(
        module_session,
        ["sh", "-c", "echo first; echo oops >&2; sleep 1; echo second"],
        on_stdout=lambda data: arrivals.append((time.monotonic(), data)),
        on_stderr=lambda data: arrivals.append((time.monotonic(), b"ERR " + data)),
    )
    finished = time.monotonic()
    assert result.stdout == b"first\nsecond\n"
    assert [data for _, data in arrivals] == [b"first\n", b"ERR oops\n", b"second\n"]
    assert finished - arrivals[0][0] > 0.7  # the first line came before the sleep ended


async def test_async_callbacks_run_in_the_event_loop_thread(module_session: Any) -> None:
    threads: set[int] = set()
    chunks: list[bytes] = []

    def on_stdout(data: bytes) -> None:
        threads.add(threading.get_ident())
        chunks.append(data)

    result = await arun_command(
        module_session, ["sh", "-c", "echo a; sleep 0.2; echo b"], on_stdout=on_stdout
    )
    assert b"".join(chunks) == result.stdout == b"a\nb\n"
    assert threads == {threading.get_ident()}


@pytest.mark.parametrize(
    "argv",
    [
        ["echo", "x" * (128 * 1024)],  # one argument past the kernel's per-argument limit
        ["echo", *["y" * 1000] * 1800],  # 1.8 MB in all: past what one exec can carry
    ],
    ids=["one-huge-argument", "1.8-MB-in-all"],
)
def test_a_command_over_the_argv_limit_is_e2big_before_any_request(
    lizard_local: LocalServer, argv: list[str]
) -> None:
    import errno

    session = Session(SandboxConfig.from_env(lifetime_ms=60_000))
    with pytest.raises(OSError, match="Argument list too long") as raised:
        run_command(session, argv)
    assert raised.value.errno == errno.E2BIG
    assert session.sandbox_id is None  # refused before any sandbox exists
    session.destroy()


def test_argv_just_under_the_limits_runs(module_session: Any) -> None:
    result = run_command(
        module_session, ["sh", "-c", 'printf %s "$1" | wc -c', "sh", "z" * 100_000]
    )
    assert result.stdout.strip() == b"100000"
    many = ["a" * 1000] * 900  # 0.9 MB in all
    result = run_command(module_session, ["sh", "-c", 'echo "$#"', "sh", *many])
    assert result.stdout.strip() == b"900"
