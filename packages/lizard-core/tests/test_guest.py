"""The guest program and the framed channel (lizard_core._guest, lizard_core.guest)."""

from __future__ import annotations

import ast
import base64
import errno
import json
import os
import shutil
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lizard_core import guest
from lizard_core._guest import program, source
from lizard_core._guest_lines import LineReader
from lizard_core._guest_relay import PYTHON
from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import (
    GuestProtocolError,
    LizardIntegrationError,
    SandboxGoneError,
    TransientError,
)
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"
CONNECT = "GET /api/sandboxes/{id}"


# ── the program itself ───────────────────────────────────────────────────


def test_the_program_is_python_3_8_code_in_both_forms() -> None:
    ast.parse(source("agent"), feature_version=(3, 8))
    compact = program("agent")
    ast.parse(compact, feature_version=(3, 8))
    # The compact form drops what only people read: it travels in every request's argv.
    assert '"""' not in compact
    assert "# " not in compact
    assert "typing" not in compact
    assert len(compact) < 0.7 * len(source("agent"))
    assert len(compact) < 20 * 1024  # 2 KiB of it start a command without Popen (_agent_spawn)


def test_a_part_break_ends_a_part_at_the_top_level_only() -> None:
    from lizard_core._guest import PART_BREAK, _compact

    def carry(name: str) -> str:
        raise AssertionError(name)

    text = _compact("x = 1\npart_break()\nprint(x + 1)\n", carry)
    assert text.split(PART_BREAK) == ["x = 1", "print(x + 1)\n"]
    for misplaced in ("part_break()\nx = 1\n", "def f():\n    part_break()\n"):
        with pytest.raises(ValueError, match="top level"):
            _compact(misplaced, carry)
    # The kernel client starts the daemon's Python in its small first part.
    first, rest = program("kernel_client").split(PART_BREAK)
    assert "start_early(sys.argv)" in first
    assert len(first) < 0.5 * len(rest)


def test_a_wait_status_reads_as_popen_returncode() -> None:
    # The part the agent and the kernel client share, against the standard library's own
    # reading (Python 3.9+) of every status an exit or a signal (with a core dump or not) gives.
    from lizard_core._guest._wait_status import returncode

    exits = [code << 8 for code in range(256)]
    signals = [signal | core for signal in range(1, 65) for core in (0, 0x80)]
    for status in exits + signals:
        assert returncode(status) == os.waitstatus_to_exitcode(status), hex(status)
    for argv, expected in ((["true"], 0), (["sh", "-c", "exit 7"], 7), (["sleep", "60"], -9)):
        child = subprocess.Popen(argv)
        if expected < 0:
            child.kill()
        _, status = os.waitpid(child.pid, 0)
        child.returncode = 0  # reaped here, not by Popen
        assert returncode(status) == expected, argv
    assert "returncode(" in program("agent")
    assert "returncode(" in program("kernel_client")
    assert "returncode(" not in program("kernel_daemon")  # only those that use it carry it


def _run_locally(python: str, request: dict[str, Any], data: bytes = b"") -> list[dict[str, Any]]:
    """Run the compact agent directly (no sandbox) and return its frames."""
    encoded = base64.b64encode(json.dumps(request).encode()).decode()
    argv = [python, *PYTHON[1:], program("agent"), "c0ffee", "1", encoded]
    argv += guest.encode_args(data)
    done = subprocess.run(argv, capture_output=True, timeout=60, check=True)
    assert done.stderr == b""
    return [json.loads(line) for line in done.stdout.splitlines()]


def _inflated(frames: list[dict[str, Any]], stream: int) -> bytes:
    inflater = zlib.decompressobj()
    pieces = [base64.b64decode(f["d"]) for f in frames if f["t"] == "z" and f["s"] == stream]
    return b"".join(inflater.decompress(piece) for piece in pieces)


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
    reason="starting the agent as an unprivileged user needs root, setpriv and /usr/bin/python3",
)
def test_an_agent_that_is_not_root_refuses_to_switch_users() -> None:
    request = {"op": "run", "argv": ["id", "-u"], "user": "root", "limit": 1 << 20, "wire": 1 << 20}
    encoded = base64.b64encode(json.dumps(request).encode()).decode()
    unprivileged = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    argv = [*unprivileged, "/usr/bin/python3", *PYTHON[1:], program("agent"), "c0", "1"]
    done = subprocess.run([*argv, encoded], capture_output=True, timeout=60, check=True, cwd="/")
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    assert (frames[-1]["rc"], frames[-1]["se"]) == (126, errno.EPERM)
    message = b"".join(base64.b64decode(f["d"]) for f in frames if f["t"] == "o")
    assert b"not root" in message


def test_the_program_runs_under_the_oldest_local_python(old_python: str, tmp_path: Path) -> None:
    version = subprocess.run([old_python, "--version"], capture_output=True, text=True).stdout
    print("guest agent checked under", version.strip())
    base = {"limit": 1 << 20, "wire": 1 << 20}
    frames = _run_locally(
        old_python,
        {"op": "run", "argv": ["sh", "-c", "printf 'a\\377'; echo e >&2; exit 3"], **base},
    )
    assert frames[0]["t"] == "pid"
    # Output is deflated per stream, each piece flushed so it can be read at once.
    inflaters = {1: zlib.decompressobj(), 2: zlib.decompressobj()}
    output = [
        (f["s"], inflaters[f["s"]].decompress(base64.b64decode(f["d"])))
        for f in frames
        if f["t"] == "z"
    ]
    assert output == [(1, b"a\xff"), (2, b"e\n")]
    assert frames[-1] == {
        "t": "end",
        "rc": 3,
        "n": [2, 2],
        "sp": [None, None],
        "to": False,
        "ol": False,
        "x": False,
        "cwd": os.path.realpath(os.getcwd()),
    }
    cwds = tmp_path.parent / f"{tmp_path.name}-cwd"  # beside tmp_path, whose listing is checked
    (cwds / "real").mkdir(parents=True)
    (cwds / "alias").symlink_to("real")
    made = _run_locally(
        old_python,
        {
            "op": "run",
            "argv": ["pwd"],
            "cwd": str(cwds / "alias/new/dir"),
            "mkcwd": True,
            **base,
        },
    )
    assert made[-1]["cwd"] == str(cwds / "real/new/dir")
    assert (cwds / "real/new/dir").is_dir()
    timed = _run_locally(old_python, {"op": "run", "argv": ["sleep", "30"], "timeout": 0.5, **base})
    assert (timed[-1]["to"], timed[-1]["rc"]) == (True, 137)
    fed = _run_locally(
        old_python, {"op": "run", "argv": ["wc", "-c"], "stdin": "inline", **base}, b"x" * 70000
    )
    assert _inflated(fed, 1) == b"70000\n"
    if os.geteuid() == 0:  # the user switch takes the interpreter's own path on Python 3.8
        switched = _run_locally(
            old_python, {"op": "run", "argv": ["id", "-u"], "user": "65534", **base}
        )
        assert _inflated(switched, 1) == b"65534\n"

    target = tmp_path / "dir" / "file.bin"
    assert (
        _run_locally(old_python, {"op": "write", "path": str(target)}, b"\0\xff" * 70000)[-1]["n"]
        == 140000
    )
    assert target.read_bytes() == b"\0\xff" * 70000
    read = _run_locally(
        old_python, {"op": "read", "path": str(target), "inline": 1 << 20, "chunk": 1 << 22}
    )
    assert b"".join(base64.b64decode(f["d"]) for f in read if f["t"] == "d") == target.read_bytes()
    listing = _run_locally(old_python, {"op": "list", "path": str(tmp_path), "budget": 1 << 20})
    assert [row[:4] for f in listing if f["t"] == "e" for row in f["e"]] == [
        ["dir", "dir", True, None]
    ]
    (tmp_path / "link").symlink_to("dir/file.bin")
    realpath = _run_locally(old_python, {"op": "realpath", "path": str(tmp_path / "link")})
    assert realpath[-1]["v"] == str(target)
    assert _run_locally(old_python, {"op": "exists", "path": str(target)})[-1]["v"] is True
    _run_locally(old_python, {"op": "remove", "path": str(tmp_path / "dir"), "protect": []})
    assert not target.parent.exists()
    missing = _run_locally(old_python, {"op": "stat", "path": str(target)})
    assert missing[-1]["err"][0] == 2


# ── host side, offline ───────────────────────────────────────────────────


def test_request_and_data_arguments_stay_under_the_per_argument_limit() -> None:
    data = os.urandom(300_000)
    pieces = guest.encode_args(data)
    assert all(len(piece) <= guest.ARG_PART < 128 * 1024 for piece in pieces)
    assert b"".join(base64.b64decode(piece) for piece in pieces) == data


def test_line_reader_joins_split_frames_and_reports_noise() -> None:
    events: list[tuple[str, Any]] = []
    reader = LineReader(lambda kind, value: events.append((kind, value)))
    line = json.dumps({"t": "o", "d": "x" * 100})
    reader.feed(line[:40])
    reader.feed(line[40:90])
    reader.feed(line[90:])
    reader.feed("not a frame")
    reader.feed('{"t": "hb"}')
    reader.feed("{truncated")
    reader.close()
    assert events == [
        ("frame", json.loads(line)),
        ("noise", "not a frame"),
        ("frame", {"t": "hb"}),
        ("noise", "{truncated"),
    ]


def test_an_end_frame_reporting_an_errno_is_the_builtin_error() -> None:
    with pytest.raises(FileNotFoundError):
        guest.check_outcome({"t": "end", "err": [2, "No such file or directory", "/x"]})
    with pytest.raises(IsADirectoryError):
        guest.check_outcome({"t": "end", "err": [21, "Is a directory", "/x"]})
    with pytest.raises(GuestProtocolError):
        guest.check_outcome({"t": "end", "bug": "KeyError: 'op'"})
    assert guest.check_outcome({"t": "end", "v": 1}) == {"t": "end", "v": 1}


def test_cleanup_is_only_for_job_directories() -> None:
    class Fake:
        sandbox_id = "sbx_test"

    with pytest.raises(ValueError, match="not a job directory"):
        guest.schedule_cleanup(Fake(), "/tmp/elsewhere")


# ── against lizard-local ─────────────────────────────────────────────────


def _sandbox(session: Any) -> Any:
    return session.sandbox()


def _run_request(argv: list[str], **extra: Any) -> dict[str, Any]:
    return {"op": "run", "argv": argv, "limit": 1 << 20, "wire": 1 << 18, **extra}


def _wait_for_file(session: Any, path: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        result = run_command(session, ["cat", path])
        if result.exit_code == 0 and result.stdout.strip():
            return result.stdout.decode().strip()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _alive(session: Any, pid: str) -> bool:
    return run_command(session, ["kill", "-0", pid]).exit_code == 0


@pytest.fixture
def in_thread() -> Iterator[Any]:
    """Run a callable in a thread; the fixture returns (join, outcome) helpers."""
    threads: list[threading.Thread] = []

    def start(fn: Any) -> dict[str, Any]:
        outcome: dict[str, Any] = {}

        def target() -> None:
            started = time.monotonic()
            try:
                outcome["result"] = fn()
            except BaseException as exc:
                outcome["error"] = exc
            outcome["elapsed"] = time.monotonic() - started

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        threads.append(thread)
        outcome["thread"] = thread
        return outcome

    yield start
    for thread in threads:
        thread.join(60)


def test_a_guest_killed_with_sigkill_is_an_error_not_a_result(
    module_session: Any, scratch: str, in_thread: Any
) -> None:
    run_command(module_session, ["mkdir", "-p", scratch])
    outcome = in_thread(
        lambda: run_command(
            module_session,
            ["sh", "-c", f"echo $$ > {scratch}/cmd; echo $PPID > {scratch}/guest; exec sleep 60"],
        )
    )
    guest_pid = _wait_for_file(module_session, f"{scratch}/guest")
    command_pid = _wait_for_file(module_session, f"{scratch}/cmd")
    killed_at = time.monotonic()
    assert run_command(module_session, ["kill", "-KILL", guest_pid]).exit_code == 0
    outcome["thread"].join(guest.STALL_S)
    assert time.monotonic() - killed_at < 5
    assert isinstance(outcome.get("error"), GuestProtocolError), outcome
    assert "final frame" in str(outcome["error"])
    run_command(module_session, ["kill", "-KILL", command_pid])


@pytest.mark.parametrize("after_events", [1, 4])
def test_a_dropped_stream_is_an_error_not_a_result(
    lizard_local: LocalServer, module_session: Any, api_requests: Any, after_events: int
) -> None:
    lizard_local.inject_stream_drop(count=1, after_events=after_events)
    with pytest.raises(GuestProtocolError, match="may have partly run"):
        run_command(module_session, ["sh", "-c", "echo a; sleep 0.2; echo b; sleep 0.2; echo c"])
    # One GET of the sandbox record told a drop from a destroyed sandbox; it is alive.
    assert api_requests.counts().get(CONNECT) == 1
    assert run_command(module_session, ["echo", "ok"]).stdout == b"ok\n"
    assert api_requests.counts().get(CONNECT) == 1  # none on the happy path


# ── a sandbox gone under a call ──────────────────────────────────────────


@pytest.fixture
def own_session(lizard_local: LocalServer) -> Iterator[Session]:
    """A session of the test's own, for tests that destroy its sandbox under a call."""
    session = Session(SandboxConfig.from_env(lifetime_ms=120_000, integration="lizard-core-tests"))
    try:
        yield session
    finally:
        session.destroy()


def test_a_sandbox_destroyed_mid_command_is_sandbox_gone(
    lizard_local: LocalServer, own_session: Session, in_thread: Any
) -> None:
    started = threading.Event()
    outcome = in_thread(
        lambda: run_command(
            own_session,
            ["sh", "-c", "echo started; exec sleep 60"],
            on_stdout=lambda _: started.set(),
        )
    )
    assert started.wait(30)
    lizard_local.reset_counters()
    lizard_local.expire(own_session.sandbox_id)
    outcome["thread"].join(guest.STALL_S)
    error = outcome.get("error")
    assert isinstance(error, SandboxGoneError), outcome
    assert error.sandbox_id == own_session.sandbox_id
    # The stream ended without its final frame (the platform killed the guest): that error is
    # the cause, and one GET of the sandbox record turned it into "gone".
    assert isinstance(error.__cause__, GuestProtocolError)
    assert {r: n for r, n in lizard_local.counters()["routes"].items() if n} == {CONNECT: 1}
    lizard_local.reset_counters()
    with pytest.raises(SandboxGoneError):
        run_command(own_session, ["true"])  # remembered by the session: no request
    with pytest.raises(SandboxGoneError):
        SandboxFiles(own_session).exists("/")
    assert lizard_local.counters()["total"] == 0


async def test_a_sandbox_destroyed_mid_command_is_sandbox_gone_async(
    lizard_local: LocalServer, own_session: Session
) -> None:
    import anyio

    from lizard_core.commands import arun_command

    started = anyio.Event()
    sandbox = await own_session.asandbox()

    async def destroy_when_started() -> None:
        await started.wait()
        await anyio.to_thread.run_sync(lizard_local.expire, sandbox.sandbox_id)

    with anyio.fail_after(guest.STALL_S):
        async with anyio.create_task_group() as group:
            group.start_soon(destroy_when_started)
            with pytest.raises(SandboxGoneError):
                await arun_command(
                    own_session,
                    ["sh", "-c", "echo x; exec sleep 60"],
                    on_stdout=lambda _: started.set(),
                )


@pytest.mark.parametrize("with_session", [True, False], ids=["session", "bare-sandbox"])
def test_a_transport_failure_on_a_gone_sandbox_is_sandbox_gone(
    lizard_local: LocalServer, own_session: Session, with_session: bool
) -> None:
    sandbox = own_session.sandbox()
    lizard_local.expire(sandbox.sandbox_id)
    lizard_local.reset_counters()
    lizard_local.inject_fault(EXEC, status=503, count=1)  # answered before the sandbox lookup
    with pytest.raises(SandboxGoneError) as caught:
        guest.run_guest(
            sandbox, {"op": "exists", "path": "/"}, session=own_session if with_session else None
        )
    assert isinstance(caught.value.__cause__, TransientError)
    assert {r: n for r, n in lizard_local.counters()["routes"].items() if n} == {
        EXEC: 1,
        CONNECT: 1,
    }


def test_a_transport_failure_on_a_live_sandbox_keeps_its_error(
    lizard_local: LocalServer, module_session: Any, api_requests: Any
) -> None:
    lizard_local.inject_fault(EXEC, status=503, count=1)
    with pytest.raises(TransientError):
        run_command(module_session, ["true"])
    assert api_requests.counts() == {EXEC: 1, CONNECT: 1}
    assert run_command(module_session, ["echo", "ok"]).stdout == b"ok\n"


def test_when_the_check_fails_too_the_original_error_stands(
    lizard_local: LocalServer, module_session: Any, api_requests: Any
) -> None:
    lizard_local.inject_fault(EXEC, status=503, count=1)
    lizard_local.inject_fault(CONNECT, status=503, count=1)
    with pytest.raises(TransientError) as caught:
        run_command(module_session, ["true"])
    assert caught.value.status_code == 503
    assert api_requests.counts() == {EXEC: 1, CONNECT: 1}  # the check is never retried
    assert run_command(module_session, ["echo", "ok"]).stdout == b"ok\n"


def test_an_on_frame_error_is_not_checked_against_the_sandbox(
    module_session: Any, api_requests: Any
) -> None:
    def refuse(frame: dict[str, Any]) -> None:
        raise GuestProtocolError("the caller refused a frame")

    sandbox = _sandbox(module_session)
    with pytest.raises(GuestProtocolError, match="refused"):
        guest.run_guest(
            sandbox, _run_request(["echo", "x"]), on_frame=refuse, session=module_session
        )
    assert CONNECT not in api_requests.counts()


def test_a_stalled_guest_is_detected_killed_and_reported(
    module_session: Any, scratch: str, in_thread: Any
) -> None:
    run_command(module_session, ["mkdir", "-p", scratch])
    sandbox = _sandbox(module_session)
    script = f"echo $$ > {scratch}/cmd; echo $PPID > {scratch}/guest; exec sleep 60"
    outcome = in_thread(
        lambda: guest.run_guest(sandbox, _run_request(["sh", "-c", script]), stall_s=2.0)
    )
    guest_pid = _wait_for_file(module_session, f"{scratch}/guest")
    command_pid = _wait_for_file(module_session, f"{scratch}/cmd")
    stopped_at = time.monotonic()
    run_command(module_session, ["kill", "-STOP", guest_pid])  # alive, silent, no heartbeats
    outcome["thread"].join(30)
    assert isinstance(outcome.get("error"), GuestProtocolError), outcome
    assert "stopped answering" in str(outcome["error"])
    assert time.monotonic() - stopped_at < 2.0 + guest.CANCEL_GRACE_S + 3
    # Killed, not left behind: the guest and its command's process group.
    assert not _alive(module_session, guest_pid)
    assert not _alive(module_session, command_pid)


def test_heartbeats_keep_a_silent_guest_alive(module_session: Any) -> None:
    sandbox = _sandbox(module_session)
    final = guest.run_guest(sandbox, _run_request(["sleep", "2"], hb=0.3), stall_s=1.0)
    assert final["rc"] == 0


def test_the_host_deadline_bounds_a_call_and_stops_the_guest(
    module_session: Any, scratch: str
) -> None:
    run_command(module_session, ["mkdir", "-p", scratch])
    sandbox = _sandbox(module_session)
    script = f"echo $$ > {scratch}/cmd; exec sleep 60"
    started = time.monotonic()
    with pytest.raises(GuestProtocolError, match="did not finish within 1 s"):
        guest.run_guest(sandbox, _run_request(["sh", "-c", script]), deadline_s=1.0)
    assert time.monotonic() - started < 1.0 + guest.CANCEL_GRACE_S + 3
    assert not _alive(module_session, _wait_for_file(module_session, f"{scratch}/cmd"))


def test_a_raising_callback_stops_the_command(module_session: Any, scratch: str) -> None:
    run_command(module_session, ["mkdir", "-p", scratch])

    def explode(data: bytes) -> None:
        raise RuntimeError("callback failed")

    script = f"echo $$ > {scratch}/cmd; echo hello; exec sleep 60"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="callback failed"):
        run_command(module_session, ["sh", "-c", script], on_stdout=explode)
    assert time.monotonic() - started < guest.CANCEL_GRACE_S + 3
    assert not _alive(module_session, _wait_for_file(module_session, f"{scratch}/cmd"))


def test_a_cancellation_stops_the_guest_and_raises(module_session: Any, scratch: str) -> None:
    run_command(module_session, ["mkdir", "-p", scratch])
    sandbox = _sandbox(module_session)
    cancel = guest.Cancellation()
    script = f"echo $$ > {scratch}/cmd; exec sleep 60"
    seen: list[str] = []

    def on_frame(frame: dict[str, Any]) -> None:
        seen.append(frame["t"])
        if frame["t"] == "start":  # the command runs: cancel from another thread
            threading.Timer(0.2, cancel.cancel).start()

    started = time.monotonic()
    with pytest.raises(guest.GuestCancelledError):
        guest.run_guest(
            sandbox, _run_request(["sh", "-c", script]), on_frame=on_frame, cancel=cancel
        )
    assert time.monotonic() - started < guest.CANCEL_GRACE_S + 3
    assert seen == ["start"]
    assert not _alive(module_session, _wait_for_file(module_session, f"{scratch}/cmd"))


@pytest.mark.usefixtures("profile")
def test_frames_split_by_the_platform_are_joined_again(
    lizard_local: LocalServer, module_session: Any
) -> None:
    lizard_local.configure(line_split_bytes=1000)
    try:
        result = run_command(module_session, ["head", "-c", "200000", "/dev/urandom"])
        again = run_command(module_session, ["sh", "-c", 'printf %s "$1"', "sh", "x" * 5000])
    finally:
        lizard_local.configure(line_split_bytes=64 * 1024)
    assert len(result.stdout) == 200000
    assert again.stdout == b"x" * 5000


@pytest.mark.usefixtures("profile")
def test_a_request_larger_than_one_argument_is_split(
    module_session: Any, api_requests: Any
) -> None:
    big = "y" * 120_000  # one argv item of the command, so the request needs two
    result = run_command(module_session, ["printf", "%s", big])
    assert result.stdout == big.encode()
    assert api_requests.counts() == {EXEC: 1}


@pytest.mark.usefixtures("profile")
def test_cleanup_rides_on_the_next_request(module_session: Any, api_requests: Any) -> None:
    sandbox = _sandbox(module_session)
    job = f"{guest.JOBS_ROOT}/cleanup-test"
    run_command(module_session, ["mkdir", "-p", f"{job}/inner"])
    guest.schedule_cleanup(sandbox, job)
    api_requests.reset()
    assert run_command(module_session, ["test", "-e", job]).exit_code == 1
    assert api_requests.counts() == {EXEC: 1}


def test_the_guest_refuses_to_clean_up_outside_its_job_root(
    module_session: Any, scratch: str
) -> None:
    run_command(module_session, ["mkdir", "-p", scratch])
    sandbox = _sandbox(module_session)
    guest.run_guest(sandbox, {"op": "exists", "path": "/", "rm": [scratch, f"{scratch}/.."]})
    assert SandboxFiles(module_session).exists(scratch)


def test_the_api_key_is_not_in_the_guest_argv(module_session: Any) -> None:
    # Twice: the first call on a fresh directory may run the launcher, the next one a hub's child.
    for _ in range(2):
        argv = run_command(module_session, ["sh", "-c", "cat /proc/$PPID/cmdline"]).stdout
        assert os.environ["LIZARD_API_KEY"].encode() not in argv
        # The launcher's, or a hub child's: the hub's, blanked when a launcher forked it.
        args = argv.split(b"\0")
        assert args[1:4] == [b"-I", b"-S", b"-c"] or args[0] == b"lizard-hub", args[:4]


def test_async_commands_work_under_trio(module_session: Any) -> None:
    trio = pytest.importorskip("trio")
    from lizard_core.commands import arun_command

    async def main() -> bytes:
        return (await arun_command(module_session, ["echo", "trio"])).stdout

    assert trio.run(main) == b"trio\n"


def test_a_request_that_cannot_start_says_nothing_ran(module_session: Any) -> None:
    """Issue 15, item 6: argv past the sandbox's limit once read as "cannot be trusted"."""
    sandbox = module_session.sandbox()
    with pytest.raises(guest.GuestNotStartedError, match="nothing of the request ran"):
        guest.run_guest(
            sandbox,
            {"op": "exists", "path": "/"},
            data_args=guest.encode_args(b"x" * 3_000_000),
            session=module_session,
        )


def test_errors_are_lizard_integration_errors(module_session: Any) -> None:
    assert issubclass(guest.GuestNotStartedError, GuestProtocolError)
    assert issubclass(GuestProtocolError, LizardIntegrationError)


def test_a_gone_sandbox_is_sandbox_gone_not_a_missing_file(lizard_local: LocalServer) -> None:
    session = Session(SandboxConfig.from_env(lifetime_ms=120_000, integration="lizard-core-tests"))
    sandbox = session.sandbox()
    try:
        assert guest.fetch_file(session, sandbox, "/tmp/no-such-file") is None
        lizard_local.expire(session.sandbox_id)
        with pytest.raises(SandboxGoneError):
            guest.fetch_file(session, sandbox, "/tmp/no-such-file")
        with pytest.raises(SandboxGoneError):
            guest.run_guest(sandbox, {"op": "exists", "path": "/"})
        with pytest.raises(SandboxGoneError):
            run_command(session, ["true"])
        with pytest.raises(SandboxGoneError):
            SandboxFiles(session).read_bytes("/tmp/x")
    finally:
        session.destroy()
