"""``lizard_core.interactive``: a process kept in the sandbox, fed and read per call."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from typing import Any

import pytest

from lizard_core import interactive
from lizard_core.commands import arun_command
from lizard_core.errors import GuestProtocolError
from lizard_core.interactive import astart_interactive
from lizard_local import LocalServer
from lizard_local.contract import pids_carrying

ECHO_LINES = "printf 'ready\\n'; while IFS= read -r line; do printf 'got:%s\\n' \"$line\"; done"
EXEC = "POST /api/sandboxes/{id}/exec"


async def test_a_terminal_process_is_kept_and_fed_one_request_per_call(
    module_session: Any, lizard_counters: LocalServer
) -> None:
    lizard_counters.reset_counters()
    process, first = await astart_interactive(
        module_session, ["sh", "-c", ECHO_LINES], tty=True, wait=0.3
    )
    assert first.output == b"ready\r\n"
    assert first.exit_code is None
    update = await process.afeed(b"hello pty\n", wait=0.3)
    assert update.output == b"hello pty\r\ngot:hello pty\r\n"  # the terminal echoes input
    assert lizard_counters.counters()["routes"] == {EXEC: 2}
    tty = await astart_interactive(
        module_session, ["python3", "-c", "import sys; print(sys.stdin.isatty())"], tty=True, wait=2
    )
    assert tty[1].output.strip() == b"True"
    await process.aterminate()
    await process.aterminate()  # harmless


async def test_a_pipe_process_ends_with_its_exit_code_and_refuses_input(
    module_session: Any,
) -> None:
    process, update = await astart_interactive(
        module_session, ["sh", "-c", "echo out; echo err >&2; exit 3"], wait=5
    )
    assert update == type(update)(b"out\nerr\n", 3)
    with pytest.raises(BrokenPipeError):
        await process.afeed(b"late", wait=0.1)
    await process.aterminate()


async def test_output_comes_in_order_across_calls_and_a_timeout_kills(module_session: Any) -> None:
    process, update = await astart_interactive(module_session, ["cat"], wait=0.1)
    assert update.output == b""
    assert (await process.afeed(b"abc\n", wait=0.3)).output == b"abc\n"
    assert (await process.afeed(b"def\n", wait=0.3)).output == b"def\n"
    await process.aterminate()
    slow, _ = await astart_interactive(module_session, ["sleep", "30"], wait=0.1, timeout=0.5)
    assert (await slow.afeed(b"", wait=3)).exit_code == 124


async def test_bad_arguments_fail_before_any_request(
    module_session: Any, lizard_counters: LocalServer
) -> None:
    lizard_counters.reset_counters()
    with pytest.raises(TypeError):
        await astart_interactive(module_session, [])
    with pytest.raises(ValueError, match="timeout"):
        await astart_interactive(module_session, ["true"], timeout=0)
    assert lizard_counters.counters()["total"] == 0


async def test_a_cancelled_start_ends_its_process(module_session: Any) -> None:
    token = "interactive-cancel-3f7a"
    task = asyncio.create_task(
        astart_interactive(module_session, ["sh", "-c", f"sleep 600 # {token}"], wait=20)
    )
    for _ in range(200):
        if pids_carrying(token):
            break
        await asyncio.sleep(0.05)
    assert pids_carrying(token)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not pids_carrying(token)


async def test_a_start_cancelled_before_its_pid_is_written_has_ended_on_return(
    module_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stop can reach the folder after the process has started but before the daemon has
    # written its pid (here held open for a second): it waits for the pid, then for the group.
    written = 'with open(P("pid.tmp"), "w") as f:'
    assert interactive._GUEST.count(written) == 1
    monkeypatch.setattr(
        interactive,
        "_GUEST",
        interactive._GUEST.replace(written, f"time.sleep(1)\n        {written}"),
    )
    token = "interactive-early-cancel-8d1e"
    command = f"sleep 600 # {token}"
    task = asyncio.create_task(astart_interactive(module_session, ["sh", "-c", command], wait=20))
    for _ in range(200):
        started = [pid for pid in pids_carrying(token) if _argv(pid) == ["sh", "-c", command]]
        if started:
            break
        await asyncio.sleep(0.01)
    group = os.getpgid(started[0])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not _running_in_group(group)


def _running_in_group(group: int) -> list[int]:
    """Host pids of the process group ``group`` that have not ended (zombies have)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def _argv(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().decode().split("\0")[:-1]


async def test_terminate_returns_once_the_process_has_ended(module_session: Any) -> None:
    # A SIGKILL is only queued: a process holding much memory takes a while to end after it,
    # and whatever the process held must be free once aterminate has returned.
    token = "interactive-heavy-51c2"
    hold = f"b = bytearray({512 << 20}); print('ready', flush=True); import time; time.sleep(600)"
    process, update = await astart_interactive(
        module_session, ["python3", "-c", f"{hold} # {token}"], wait=0.5
    )
    output = update.output
    for _ in range(100):  # each call waits its whole `wait` unless the process ends
        if output:
            break
        output += (await process.afeed(b"", wait=0.2)).output
    assert output == b"ready\n"
    # The guest daemon's argv carries the token too: the process is the one that runs `hold`.
    [pid] = [pid for pid in pids_carrying(token) if _argv(pid)[2:3] == [f"{hold} # {token}"]]
    group = os.getpgid(pid)
    await process.aterminate()
    assert not _running_in_group(group)


_STOP_WITHOUT_PROC = """
import json, os, subprocess, sys
guest, start, stop = json.loads(sys.argv[1])
def nobody():
    os.setgid(65534)
    os.setuid(65534)
def call(request):
    argv = ["python3", "-c", guest, json.dumps(request)]
    return subprocess.run(argv, capture_output=True, preexec_fn=nobody).returncode
assert call(start) == 0
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=000", "none", "/proc"], check=True)
print(call(stop), os.path.isdir(start["dir"]))
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("python3"),
    reason="hiding /proc from a stop needs root, unshare and python3",
)
def test_a_stop_that_cannot_read_proc_still_stops() -> None:
    # The wait for the group is best effort: where /proc cannot be read (none mounted, or not
    # for this user) the stop still kills the group, removes the folder and succeeds.
    directory = f"{interactive._PREFIX}{uuid.uuid4().hex}"
    base = {"dir": directory, "offset": 0, "budget": 1024, "wait": 0.1}
    start = {**base, "op": "start", "argv": ["sleep", "600"], "tty": False, "timeout": 30}
    start["backlog"] = 1024
    request = json.dumps([interactive._GUEST, start, {**base, "op": "stop"}])
    argv = ["unshare", "--mount", "--propagation", "private", sys.executable, "-c"]
    done = subprocess.run([*argv, _STOP_WITHOUT_PROC, request], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"0", b"False"]  # the stop succeeded and removed the folder


async def test_another_user_gets_its_own_process(module_session: Any) -> None:
    await astart_interactive(module_session, ["true"], wait=1)  # root's folder first
    process, update = await astart_interactive(module_session, ["id", "-un"], user="nobody", wait=5)
    assert update == type(update)(b"nobody\n", 0)
    await process.aterminate()


async def test_a_stop_that_overtakes_its_start_leaves_nothing_running(
    module_session: Any, monkeypatch: pytest.MonkeyPatch, lizard_counters: LocalServer
) -> None:
    # A cancelled start's stop can reach the sandbox before the start itself (a request still
    # in flight): the start must then run nothing.
    token = "interactive-overtaken-9c41"
    name = uuid.uuid4()
    monkeypatch.setattr(interactive.uuid, "uuid4", lambda: name)
    early = interactive.InteractiveProcess(module_session, f"{interactive._PREFIX}{name.hex}", None)
    await early.aterminate()
    lizard_counters.reset_counters()
    await early.aterminate()  # harmless, and no second request
    assert lizard_counters.counters()["total"] == 0
    with pytest.raises(GuestProtocolError):
        await astart_interactive(module_session, ["sh", "-c", f"sleep 600 # {token}"], wait=1)
    await asyncio.sleep(0.3)
    assert not pids_carrying(token)


@pytest.mark.parametrize(
    "command",
    [
        # Output past the backlog, unread: the daemon no longer reads the process.
        "yes interactive-chatty",
        # A process in its own session keeps the output pipe open after the group is killed.
        "setsid sleep 30 & printf ready; sleep 600",
    ],
    ids=["unread-backlog", "pipe-held-open"],
)
async def test_a_stop_ends_the_daemon_too(
    module_session: Any, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setattr(interactive, "BACKLOG", 64 * 1024)
    process, _ = await astart_interactive(module_session, ["sh", "-c", command], wait=1.5)
    folder = process._directory  # only the daemon (and its request) carries it
    assert pids_carrying(folder)
    await process.aterminate()
    for _ in range(50):
        if not pids_carrying(folder):
            break
        await asyncio.sleep(0.1)
    assert not pids_carrying(folder)


@pytest.mark.parametrize(
    "answer",
    [
        """b'{"read": 3000000, "exit": null}\\n' + b"x" * 3000000""",  # past the budget
        """b'{"read": 5, "exit": null}\\nabc'""",  # shorter than its header says
        """b'{"read": 0, "exit": "zero"}\\n'""",  # an exit code that is not one
        """b'no header'""",
    ],
    ids=["oversized", "short", "bad-exit", "no-header"],
)
async def test_the_host_bounds_and_checks_what_each_call_answers(
    module_session: Any, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    # The sandbox is untrusted: whatever answers in the guest's place is bounded on the host.
    script = f"import sys; sys.stdout.buffer.write({answer})"
    monkeypatch.setattr(interactive, "_GUEST", script)
    with pytest.raises(GuestProtocolError):
        await astart_interactive(module_session, ["true"], wait=0.1)


async def test_unread_output_is_bounded_in_the_sandbox_and_none_is_lost(
    module_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(interactive, "BACKLOG", 1024 * 1024)
    total = 6 * 1024 * 1024
    producer = (
        "import sys\n"
        f"for i in range({total // 65536}):\n"
        "    sys.stdout.buffer.write(bytes([65 + i % 26]) * 65536)\n"
        "sys.stdout.flush()\n"
        "import time; time.sleep(600)\n"
    )
    process, first = await astart_interactive(module_session, ["python3", "-c", producer], wait=2)
    try:
        size = await arun_command(module_session, ["stat", "-c", "%s", f"{process._directory}/out"])
        # What the first call took, plus at most the backlog and one read of the process.
        assert int(size.stdout) <= len(first.output) + 1024 * 1024 + 65536
        received = bytearray(first.output)
        while len(received) < total:
            update = await process.afeed(b"", wait=0.5)
            assert update.output, "the process stopped producing although it was read"
            received += update.output
        expected = b"".join(bytes([65 + i % 26]) * 65536 for i in range(total // 65536))
        assert bytes(received) == expected
    finally:
        await process.aterminate()
