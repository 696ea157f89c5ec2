"""lizard_core.streaming: stream_command and Kernel.stream against lizard-local."""

from __future__ import annotations

import asyncio
import shlex
import signal
import threading
import time
from typing import Any

import pytest
import trio

from lizard_core.commands import run_command, stream_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import CommandTimeoutError, OutputLimitError
from lizard_core.kernel import Kernel
from lizard_core.session import Session
from lizard_core.streaming import OutputChunk, OutputStream
from lizard_local import LocalServer

# A line every 200 ms for 2 s, each line flushed as written.
TICKS = "for i in 1 2 3 4 5 6 7 8 9 10; do echo tick $i; sleep 0.2; done"


def _ticks_seen(chunks: list[OutputChunk]) -> bytes:
    return b"".join(chunk.data for chunk in chunks if chunk.stream == "stdout")


def test_chunks_arrive_while_the_command_runs(module_session: Session) -> None:
    started = time.monotonic()
    arrivals: list[float] = []
    chunks: list[OutputChunk] = []
    stream = stream_command(module_session, TICKS, shell=True)
    for chunk in stream:
        arrivals.append(time.monotonic() - started)
        chunks.append(chunk)
    finished = time.monotonic() - started
    assert _ticks_seen(chunks) == b"".join(b"tick %d\n" % i for i in range(1, 11))
    assert stream.result.exit_code == 0
    assert stream.result.stdout == _ticks_seen(chunks)
    # Generous bounds for a loaded machine: the first line long before the command ends.
    assert arrivals[0] < 1.5
    assert finished - arrivals[0] > 1.0
    assert len(chunks) >= 5


def test_stdout_and_stderr_chunks_are_told_apart(module_session: Session) -> None:
    stream = stream_command(module_session, ["sh", "-c", "echo out; sleep 0.3; echo err >&2"])
    chunks = list(stream)
    assert [(c.stream, c.data) for c in chunks] == [("stdout", b"out\n"), ("stderr", b"err\n")]
    assert (stream.result.stdout, stream.result.stderr) == (b"out\n", b"err\n")


def test_one_request_per_command(module_session: Session, api_requests: Any) -> None:
    api_requests.reset()
    assert list(stream_command(module_session, ["echo", "hi"])) == [OutputChunk("stdout", b"hi\n")]
    assert api_requests.counts() == {api_requests.EXEC: 1}


def test_bad_arguments_fail_before_any_request(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    session = Session(SandboxConfig.from_env(lifetime_ms=60_000))
    with pytest.raises(TypeError):
        stream_command(session, "echo hi")  # a string needs shell=True
    with pytest.raises(ValueError, match="timeout"):
        stream_command(session, ["true"], timeout=-1)
    stream = stream_command(session, ["true"])  # built, not started
    assert isinstance(stream, OutputStream)
    with pytest.raises(RuntimeError):
        _ = stream.result
    assert api_requests.counts() == {}
    assert session.sandbox_id is None


def test_a_timeout_is_raised_at_the_end_with_the_partial_output(module_session: Session) -> None:
    stream = stream_command(module_session, ["sh", "-c", "echo early; sleep 30"], timeout=1)
    seen = []

    def read() -> None:
        seen.extend(chunk.data for chunk in stream)

    with pytest.raises(CommandTimeoutError) as caught:
        read()
    assert seen == [b"early\n"]
    assert caught.value.stdout == b"early\n"


def test_the_output_limit_stops_the_command(module_session: Session) -> None:
    stream = stream_command(module_session, ["sh", "-c", "yes | head -c 100000"], output_limit=4096)
    with pytest.raises(OutputLimitError) as caught:
        list(stream)
    assert len(caught.value.stdout) <= 4096


def _running(session: Session, marker: str) -> bool:
    script = f"ps -eo args | grep -v grep | grep -c {shlex.quote(marker)}"
    ps = run_command(session, ["sh", "-c", script])
    return ps.stdout.strip() not in (b"", b"0")


@pytest.fixture
def marker() -> str:
    import uuid

    return f"sleep {3000 + uuid.uuid4().int % 600}"


async def test_cancelling_the_consuming_task_stops_the_command(
    module_session: Session, marker: str
) -> None:
    got_first = asyncio.Event()

    async def consume() -> None:
        async for _ in stream_command(module_session, ["sh", "-c", f"echo go; {marker}"]):
            got_first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_first.wait(), 30)
    assert await asyncio.to_thread(_running, module_session, marker)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 15
    assert not await asyncio.to_thread(_running, module_session, marker)


def test_closing_a_stream_early_stops_the_command(module_session: Session, marker: str) -> None:
    with stream_command(module_session, ["sh", "-c", f"echo go; {marker}"]) as stream:
        assert next(stream).data == b"go\n"
    assert not _running(module_session, marker)
    assert list(stream) == []


def test_ctrl_c_while_iterating_stops_the_command(module_session: Session, marker: str) -> None:
    # Python leaves SIGINT ignored when it started ignored (a shell's background job): install
    # Ctrl-C's own handler for the test's duration.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    main = threading.get_ident()
    stream = stream_command(module_session, ["sh", "-c", f"echo go; {marker}"])

    def read() -> None:
        for _ in stream:  # the first chunk arms Ctrl-C; the next read waits until it lands
            threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT)).start()

    try:
        with pytest.raises(KeyboardInterrupt):
            read()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not _running(module_session, marker)


def test_trio_consumes_a_stream(module_session: Session) -> None:
    async def main() -> tuple[list[bytes], int]:
        stream = stream_command(module_session, ["sh", "-c", "echo a; sleep 0.2; echo b"])
        data = [chunk.data async for chunk in stream]
        return data, stream.result.exit_code

    assert trio.run(main) == ([b"a\n", b"b\n"], 0)


def test_a_new_session_is_created_by_the_first_read(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    with Session(SandboxConfig.from_env(lifetime_ms=60_000)) as session:
        stream = stream_command(session, ["echo", "x"])
        assert session.sandbox_id is None
        assert [c.data for c in stream] == [b"x\n"]
        assert api_requests.counts() == {api_requests.CREATE: 1, api_requests.EXEC: 1}


def test_a_kernel_cell_streams_its_output_and_keeps_state(module_session: Session) -> None:
    kernel = Kernel(module_session, name="streaming")
    try:
        code = (
            "import time\nfor i in range(3):\n"
            "    print('row', i, flush=True); time.sleep(0.3)\nx = 41"
        )
        started = time.monotonic()
        arrivals = []
        stream = kernel.stream(code, timeout=30)
        for chunk in stream:
            arrivals.append((time.monotonic() - started, chunk))
        assert b"".join(c.data for _, c in arrivals) == b"row 0\nrow 1\nrow 2\n"
        assert arrivals[-1][0] - arrivals[0][0] > 0.3  # not all at the end
        assert stream.result.error is None
        follow = kernel.stream("x + 1", timeout=30)
        assert list(follow) == []
        assert follow.result.text == "42"
    finally:
        kernel.close()


async def test_cancelling_a_kernel_stream_interrupts_the_cell(module_session: Session) -> None:
    kernel = Kernel(module_session, name="streamcancel")
    try:
        await kernel.aexecute("y = 1", timeout=30)
        first = asyncio.Event()

        async def consume() -> None:
            code = "import time\nprint('go', flush=True)\ntime.sleep(60)"
            async for _ in kernel.stream(code, timeout=120):
                first.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(first.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await kernel.aexecute("y + 1", timeout=30)
        assert after.text == "2"  # interrupted, namespace kept
    finally:
        await kernel.aclose()


def test_a_stream_dropped_unfinished_asks_the_command_to_stop(
    module_session: Session, marker: str
) -> None:
    stream: Any = stream_command(module_session, ["sh", "-c", f"echo go; {marker}"])
    assert next(stream).data == b"go\n"
    outcome = stream._outcome
    del stream
    outcome.exception(timeout=30)  # the guest was stopped and the call ended
    assert not _running(module_session, marker)


async def test_a_second_concurrent_reader_is_refused_and_the_first_reads_on(
    module_session: Session,
) -> None:
    stream = stream_command(module_session, ["sh", "-c", "echo a; sleep 0.3; echo b"])
    first = asyncio.create_task(anext(stream))
    await asyncio.sleep(0)  # the first read is under way (starting the command)
    with pytest.raises(RuntimeError, match="already being read"):
        await anext(stream)
    chunks = [(await first).data] + [chunk.data async for chunk in stream]
    assert chunks == [b"a\n", b"b\n"]
    assert stream.result.exit_code == 0


def test_the_result_of_a_stream_closed_early_is_an_error_not_a_hang(
    module_session: Session,
) -> None:
    unstarted = stream_command(module_session, ["echo", "x"])
    unstarted.close()
    assert list(unstarted) == []
    with pytest.raises(RuntimeError, match="closed before"):
        _ = unstarted.result


def test_output_waiting_for_a_slow_reader_is_joined_into_one_chunk(
    module_session: Session,
) -> None:
    code = "import os, time\nfor i in range(2000):\n    os.write(1, b'a'); time.sleep(0.0005)\n"
    stream = stream_command(module_session, ["python3", "-c", code])
    with stream:
        first = next(stream)
        time.sleep(4)  # the rest arrives, in many frames, while nobody reads
        rest = list(stream)
    assert first.data + b"".join(c.data for c in rest) == b"a" * 2000
    assert len(rest) <= 5  # not one per frame (hundreds)
