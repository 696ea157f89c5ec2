"""Code in the sandbox is untrusted: a hostile cell against lizard_core's kernel, end to end.

Each cell attacks what the host receives (frames, spill files, lines, streams) through paths
that real cell code has: the kernel daemon's channel is on its own call stack, and the kernel
client's stdout is ``/proc/<client pid>/fd/1``. The host must stay bounded in memory (its peak
RSS is measured) and end each attack in a clear, documented error; the kernel serves the next
cell.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import GuestProtocolError
from lizard_core.kernel import Kernel
from lizard_core.session import Session
from lizard_local import LocalServer

MiB = 1024 * 1024

# Cell code reaching the daemon's ``Channel`` of the running request through its call stack.
FIND_CHANNEL = """
import sys as _sys
_f = _sys._getframe()
while _f is not None and "channel" not in _f.f_locals:
    _f = _f.f_back
channel = _f.f_locals["channel"]
"""

# ... and the kernel client's stdout (the exec stream itself), through the daemon's connection.
FIND_CLIENT_STDOUT = (
    FIND_CHANNEL
    + """
import socket as _socket
_pid = int.from_bytes(
    channel.conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)[:4], _sys.byteorder
)
client_stdout = open("/proc/%d/fd/1" % _pid, "wb", buffering=0)
"""
)


@pytest.fixture(scope="module")
def session(lizard_local: LocalServer) -> Iterator[Session]:
    config = SandboxConfig.from_env(lifetime_ms=600_000, integration="lizard-core-tests")
    session = Session(config)
    try:
        yield session
    finally:
        session.destroy()


@pytest.fixture
def kernel(session: Session) -> Iterator[Kernel]:
    kernel = Kernel(session, name=f"h{uuid.uuid4().hex[:10]}")
    try:
        yield kernel
    finally:
        kernel.close()


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


@contextmanager
def peak_rss_growth() -> Iterator[list[int]]:
    """Yields a list that receives the growth of this process's peak RSS, in bytes.

    The peak (VmHWM) is reset first where the kernel allows it (``clear_refs``); otherwise the
    growth is measured over the peak reached so far, which can only under-report past peaks,
    never an allocation made inside the block.
    """
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass
    before = _status_kib("VmHWM")
    growth: list[int] = []
    yield growth
    growth.append((_status_kib("VmHWM") - before) * 1024)


def _still_serves(kernel: Kernel) -> None:
    result = kernel.execute("6 * 7", timeout=30)
    assert result.error is None
    assert result.text == "42"


# -- forged and malformed frames (issue 15, item 9) -------------------------------------------

FORGED = {
    "stream number out of range": '{"t": "o", "s": 7}',
    "output without data": '{"t": "o", "s": 1}',
    "output that is not base64": '{"t": "o", "s": 1, "d": "***"}',
    "cut without limit": '{"t": "cut", "s": 2}',
    "result with a text index": '{"t": "res", "i": "x", "main": True, "omit": []}',
    "data for an unknown result": '{"t": "rd", "i": 99, "m": "text/plain", "d": "x"}',
    "error text for no field": '{"t": "et", "f": "name", "d": "x"}',
    "cell count that is not a number": '{"t": "cell", "kernel": "k", "n": "many"}',
    "unknown frame type": '{"t": "zzz"}',
    "pid without a pid": '{"t": "pid"}',
    "end with a text error": '{"t": "end", "error": "boom"}',
}


@pytest.mark.parametrize("frame", FORGED.values(), ids=FORGED.keys())
def test_a_forged_frame_on_the_daemons_channel_is_a_guest_protocol_error(
    kernel: Kernel, frame: str
) -> None:
    with pytest.raises(GuestProtocolError):
        kernel.execute(FIND_CHANNEL + f"channel.frame({frame})\n", timeout=30)
    _still_serves(kernel)


def test_a_forged_end_frame_on_the_exec_stream_is_a_guest_protocol_error(kernel: Kernel) -> None:
    code = FIND_CLIENT_STDOUT + (
        'client_stdout.write(b\'{"t":"end","error":{"name":1},"n":"x"}\\n\')\n'
    )
    with pytest.raises(GuestProtocolError, match="malformed"):
        kernel.execute(code, timeout=30)
    _still_serves(kernel)


# -- spill files (issue 15, item 2) ------------------------------------------------------------

SPARSE_SPILL = FIND_CHANNEL + (
    "import os\n"
    "os.makedirs(channel.job, exist_ok=True)\n"
    "path = channel.job + '/frames'\n"
    "with open(path, 'wb') as f:\n"
    "    f.truncate({size})\n"
    "channel.spill = open(path, 'ab')\n"
    "channel.spill_path = path\n"
)


def test_a_sparse_spill_file_is_refused_without_the_host_allocating_it(kernel: Kernel) -> None:
    """512 MiB of NULs named as the spill: the first line passes its bound, and reading stops."""
    with peak_rss_growth() as growth, pytest.raises(GuestProtocolError):
        kernel.execute(SPARSE_SPILL.format(size=512 * MiB), timeout=30)
    assert growth[0] < 32 * MiB, f"peak RSS grew by {growth[0] / MiB:.0f} MiB"
    _still_serves(kernel)


def test_a_spill_larger_than_the_calls_limits_is_refused_before_reading(session: Session) -> None:
    """The same attack against smaller limits: refused on its announced size alone."""
    kernel = Kernel(
        session,
        name=f"h{uuid.uuid4().hex[:10]}",
        max_output_bytes=64 * 1024,
        max_result_bytes=64 * 1024,
    )
    try:
        with peak_rss_growth() as growth, pytest.raises(GuestProtocolError, match="over the"):
            kernel.execute(SPARSE_SPILL.format(size=512 * MiB), timeout=30)
        assert growth[0] < 32 * MiB, f"peak RSS grew by {growth[0] / MiB:.0f} MiB"
        _still_serves(kernel)
    finally:
        kernel.close()


def test_a_spill_that_is_a_fifo_is_refused_within_a_bound(kernel: Kernel) -> None:
    code = FIND_CHANNEL + (
        "import os\n"
        "os.makedirs(channel.job, exist_ok=True)\n"
        "path = channel.job + '/frames'\n"
        "os.mkfifo(path)\n"
        "channel.spill = open(os.devnull, 'ab')\n"
        "channel.spill_path = path\n"
    )
    started = time.monotonic()
    with pytest.raises(GuestProtocolError):
        kernel.execute(code, timeout=30)
    # The spill's headers wait (10 s) and room for a loaded machine; the files endpoint's own
    # limit would be 60 s.
    assert time.monotonic() - started < 45
    _still_serves(kernel)


# -- huge lines and streams --------------------------------------------------------------------


def test_a_printed_line_of_100_mb_is_cut_at_the_output_limit(kernel: Kernel) -> None:
    with peak_rss_growth() as growth:
        result = kernel.execute("print('x' * 100_000_000)", timeout=60)
    assert result.output_truncated
    assert result.dropped_bytes > 90_000_000
    assert len(result.stdout) < 2 * MiB
    assert growth[0] < 64 * MiB, f"peak RSS grew by {growth[0] / MiB:.0f} MiB"
    _still_serves(kernel)


def test_a_line_of_100_mb_on_the_exec_stream_is_refused_bounded(
    kernel: Kernel, lizard_local: LocalServer
) -> None:
    """Written straight to the exec stream, on a platform that neither splits nor caps it."""
    saved = lizard_local.info()["settings"]
    lizard_local.configure(stream_cap_bytes=None, line_split_bytes=1 << 30)
    try:
        code = FIND_CLIENT_STDOUT + (
            "block = b'x' * (1 << 20)\nfor _ in range(100):\n    client_stdout.write(block)\n"
        )
        with peak_rss_growth() as growth, pytest.raises(GuestProtocolError):
            kernel.execute(code, timeout=60)
        assert growth[0] < 64 * MiB, f"peak RSS grew by {growth[0] / MiB:.0f} MiB"
    finally:
        lizard_local.configure(
            stream_cap_bytes=saved["stream_cap_bytes"], line_split_bytes=saved["line_split_bytes"]
        )
    _still_serves(kernel)


@pytest.mark.parametrize(
    "code",
    [
        "import sys\nsys.stdout.close()",
        "import os\nos.close(1)\nos.close(2)",
        "import sys\nsys.stdout = None",
    ],
    ids=["sys.stdout.close", "os.close(1, 2)", "stdout set to None"],
)
def test_a_cell_that_closes_its_stdout_leaves_the_next_cell_its_output(
    kernel: Kernel, code: str
) -> None:
    kernel.execute(code, timeout=30)
    result = kernel.execute(
        "import os, subprocess, sys\nprint('py')\nsys.stdout.flush()\n"
        "subprocess.run(['echo', 'sub'])\nos.write(2, b'fd2\\n')",
        timeout=30,
    )
    assert result.error is None, result.error
    assert result.stdout.split() == ["py", "sub"]
    assert result.stderr == "fd2\n"


def test_a_cell_that_ends_the_exec_stream_gets_a_clear_error(kernel: Kernel) -> None:
    """The cell kills its kernel client, which closes the exec stream before the end frame."""
    code = FIND_CLIENT_STDOUT + "import os, signal\nos.kill(_pid, signal.SIGKILL)\n"
    started = time.monotonic()
    with pytest.raises(GuestProtocolError, match="without its final frame"):
        kernel.execute(code, timeout=30)
    assert time.monotonic() - started < 30
    _still_serves(kernel)


# -- commands: the command can write to the agent's stdout (/proc/$PPID/fd/1) -------------------


def test_a_forged_command_end_naming_a_sparse_spill_is_refused_unread(session: Session) -> None:
    """The command forges the agent's end frame, names a 512 MiB sparse spill, kills the agent."""
    script = (
        "mkdir -p /tmp/.lizard-core/hostile && truncate -s 512M /tmp/.lizard-core/hostile/1 && "
        'printf \'{"t":"end","rc":0,"n":[536870912,0],"sp":["/tmp/.lizard-core/hostile/1",null]}'
        "\\n' > /proc/$PPID/fd/1 && kill -9 $PPID"
    )
    with peak_rss_growth() as growth, pytest.raises(GuestProtocolError):
        run_command(session, ["sh", "-c", script], timeout=30)
    assert growth[0] < 32 * MiB, f"peak RSS grew by {growth[0] / MiB:.0f} MiB"
    assert run_command(session, ["rm", "-rf", "/tmp/.lizard-core/hostile"]).exit_code == 0


def test_forged_command_output_past_the_limit_is_refused_bounded(
    session: Session, lizard_local: LocalServer
) -> None:
    """30 MB of well-formed output frames written straight to the exec stream, uncapped."""
    saved = lizard_local.info()["settings"]
    lizard_local.configure(stream_cap_bytes=None)
    forge = (
        "import base64, json, os\n"
        "frame = json.dumps({'t': 'o', 's': 1, 'd': base64.b64encode(b'x' * 24576).decode()})\n"
        "out = open('/proc/%d/fd/1' % os.getppid(), 'w')\n"
        "for _ in range(1250):\n"
        "    out.write(frame + '\\n')\n"
        "out.flush()\n"
    )
    try:
        with peak_rss_growth() as growth, pytest.raises(GuestProtocolError, match="limit"):
            run_command(session, ["python3", "-c", forge], timeout=60, output_limit=1024 * 1024)
        assert growth[0] < 48 * MiB, f"peak RSS grew by {growth[0] / MiB:.0f} MiB"
    finally:
        lizard_local.configure(stream_cap_bytes=saved["stream_cap_bytes"])
