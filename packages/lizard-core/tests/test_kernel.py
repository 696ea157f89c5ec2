"""lizard_core.kernel against lizard-local: the host API, end to end, on both templates.

The guest half (daemon and client) has its own fast tests in ``test_kernel_daemon.py``; these prove
the contract through the real SDK, real HTTP and real sandbox processes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import SandboxGoneError
from lizard_core.kernel import OUTPUT_CUT_MARKER, ExecutionResult, Kernel
from lizard_core.session import Session
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"
CREATE = "POST /api/sandboxes"


def _session(template: str, lifetime_ms: int = 600_000) -> Session:
    config = SandboxConfig.from_env(
        template=template, lifetime_ms=lifetime_ms, integration="lizard-core-tests"
    )
    return Session(config)


@pytest.fixture(scope="module", params=["base", "interpreter"])
def template_session(
    request: pytest.FixtureRequest, lizard_local: LocalServer
) -> Iterator[Session]:
    """One sandbox per template for the module; each test gets its own kernel in it."""
    session = _session(request.param)
    try:
        yield session
    finally:
        session.destroy()


@pytest.fixture(scope="module")
def interpreter_session(lizard_local: LocalServer) -> Iterator[Session]:
    session = _session("interpreter")
    try:
        yield session
    finally:
        session.destroy()


def _kernel(session: Session, **kwargs: Any) -> Iterator[Kernel]:
    kernel = Kernel(session, name=f"t{uuid.uuid4().hex[:10]}", **kwargs)
    try:
        yield kernel
    finally:
        kernel.close()


@pytest.fixture
def kernel(template_session: Session) -> Iterator[Kernel]:
    yield from _kernel(template_session)


@pytest.fixture(scope="module")
def rich_kernel(interpreter_session: Session) -> Iterator[Kernel]:
    """One kernel for the rich-result tests, so matplotlib and pandas are imported once."""
    yield from _kernel(interpreter_session)


@pytest.fixture
def timed_kernel(interpreter_session: Session) -> Iterator[Kernel]:
    """For the tests that wait on real time: run once, on the template smolagents uses.

    The guest code is the same on both templates (only site-packages differ), and the rest of
    the module covers both.
    """
    yield from _kernel(interpreter_session)


def _run(kernel: Kernel, code: str, timeout: float = 30, **kwargs: Any) -> ExecutionResult:
    return kernel.execute(code, timeout=timeout, **kwargs)


# -- state ----------------------------------------------------------------------------------------


def test_state_persists_between_cells(kernel: Kernel) -> None:
    assert _run(kernel, "x = 21").error is None
    result = _run(kernel, "x * 2")
    assert result.text == "42"
    assert result.main_result is not None
    assert result.main_result.data == {"text/plain": "42"}
    _run(
        kernel,
        "import json\ndef double(v):\n    return v * 2\nclass Box:\n    def __init__(self, v):\n"
        "        self.v = v",
    )
    assert _run(kernel, "json.dumps(double(Box(4).v))").text == "'8'"
    assert _run(kernel, "x").execution_count == 5


def test_first_execute_costs_create_plus_one_and_later_ones_one(
    lizard_counters: LocalServer,
) -> None:
    session = _session("base")
    try:
        kernel = Kernel(session)
        lizard_counters.reset_counters()
        first = _run(kernel, "x = 1")
        routes = {r: n for r, n in lizard_counters.counters()["routes"].items() if n}
        routes.pop("GET /api/projects", None)  # the SDK resolves the project once per process
        assert routes == {CREATE: 1, EXEC: 1}
        assert first.error is None
        for code in ("x + 1", "print(x)", "1/0"):
            lizard_counters.reset_counters()
            _run(kernel, code)
            routes = {r: n for r, n in lizard_counters.counters()["routes"].items() if n}
            assert routes == {EXEC: 1}, code
        kernel.close()
    finally:
        session.destroy()


def test_cells_share_the_sessions_one_connection(lizard_counters: LocalServer) -> None:
    session = _session("base")
    try:
        kernel = Kernel(session)
        _run(kernel, "x = 1")  # creates the sandbox and opens the session's connection
        lizard_counters.reset_counters()
        for code in ("x + 1", "print(x)", "x * 3", "1/0", "x"):
            _run(kernel, code)
        counters = lizard_counters.counters()
        assert counters["routes"][EXEC] == 5
        assert counters["connections"] <= 1  # five cells, at most one new connection
        kernel.close()
    finally:
        session.destroy()


def test_nothing_is_requested_for_bad_arguments(lizard_counters: LocalServer) -> None:
    session = _session("base")
    kernel = Kernel(session)
    lizard_counters.reset_counters()
    with pytest.raises(TypeError):
        kernel.execute(b"1", timeout=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        kernel.execute("1", timeout=0)
    with pytest.raises(TypeError, match="timeout"):
        kernel.execute("1", timeout="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="environment"):
        kernel.execute("1", timeout=1, env={"A=B": "c"})
    with pytest.raises(TypeError):
        kernel.execute("1", timeout=1, on_output="print")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="packages"):
        kernel.install([])
    with pytest.raises(TypeError):
        kernel.install("numpy")
    with pytest.raises(ValueError, match="name"):
        Kernel(session, name="../x")
    with pytest.raises(ValueError, match="cwd"):
        Kernel(session, cwd="relative")
    with pytest.raises(ValueError, match="grace"):
        Kernel(session, grace=-1)
    kernel.close()  # no sandbox yet: nothing to close
    assert kernel.interrupt() is False
    assert lizard_counters.counters()["total"] == 0
    assert session.sandbox_id is None


def test_env_reaches_one_cell(kernel: Kernel) -> None:
    code = "import os\nrepr(os.environ.get('LZ_SECRET'))"
    assert _run(kernel, code, env={"LZ_SECRET": "tool-token"}).text == "\"'tool-token'\""
    assert _run(kernel, code).text == "'None'"


def test_kernels_with_different_names_are_separate(template_session: Session) -> None:
    for one, two in zip(_kernel(template_session), _kernel(template_session), strict=True):
        _run(one, "owner = 'one'")
        assert _run(two, "'owner' in dir()").text == "False"
        assert _run(one, "owner").text == "'one'"


# -- output ---------------------------------------------------------------------------------------


def test_output_streams_in_order_before_the_cell_ends(timed_kernel: Kernel) -> None:
    kernel = timed_kernel
    seen: list[tuple[float, str, str]] = []
    started = time.monotonic()

    def on_output(stream: str, text: str) -> None:
        seen.append((time.monotonic() - started, stream, text))

    result = _run(
        kernel,
        "import sys, time, subprocess\nprint('first line', flush=True)\ntime.sleep(2)\n"
        "subprocess.run(['echo', 'from a child'])\nprint('oops', file=sys.stderr)\nprint('last')",
        on_output=on_output,
    )
    ended = time.monotonic() - started
    assert result.error is None
    assert result.stdout == "first line\nfrom a child\nlast\n"
    assert result.stderr == "oops\n"
    first = next(t for t, stream, text in seen if "first line" in text)
    assert first < ended - 1.5  # arrived while the cell was still sleeping
    assert "".join(text for _, stream, text in seen if stream == "stdout") == result.stdout


def test_output_past_the_limit_is_cut_with_a_marker(template_session: Session) -> None:
    for kernel in _kernel(template_session, max_output_bytes=100_000):
        result = _run(kernel, "print('z' * 300_000)\nprint('more')")
        assert result.output_truncated
        assert result.stdout == "z" * 100_000 + OUTPUT_CUT_MARKER.format(limit=100_000)
        assert result.dropped_bytes == 200_001 + 5


def test_async_execute_streams_to_the_loop_thread(kernel: Kernel) -> None:
    async def main() -> tuple[ExecutionResult, list[str], set[int]]:
        chunks: list[str] = []
        threads: set[int] = set()

        def on_output(stream: str, text: str) -> None:
            chunks.append(text)
            threads.add(threading.get_ident())

        result = await kernel.aexecute(
            "print('a')\nprint('b')\n6 * 7", timeout=30, on_output=on_output
        )
        return result, chunks, threads

    result, chunks, threads = asyncio.run(main())
    assert result.text == "42"
    assert "".join(chunks) == "a\nb\n"
    assert threads == {threading.get_ident()}


# -- rich results ---------------------------------------------------------------------------------


def test_pil_image_is_a_png(rich_kernel: Kernel) -> None:
    pytest.importorskip("PIL")  # lizard-local's interpreter template has what the tests have
    result = _run(rich_kernel, "from PIL import Image\nImage.new('RGB', (8, 6), 'blue')")
    main = result.main_result
    assert main is not None
    assert main.png is not None
    assert main.png.startswith(b"\x89PNG\r\n\x1a\n")
    assert main.text is not None
    assert "size=8x6" in main.text


def test_matplotlib_figure_is_a_png_and_closed(rich_kernel: Kernel) -> None:
    pytest.importorskip("matplotlib")
    result = _run(
        rich_kernel,
        "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.title('squares')\nplt.show()",
    )
    assert result.error is None
    figures = [r for r in result.results if r.png is not None]
    assert len(figures) == 1
    assert figures[0].png is not None
    assert figures[0].png.startswith(b"\x89PNG")
    assert not figures[0].is_main_result
    assert _run(rich_kernel, "plt.get_fignums()").text == "[]"


def test_dataframe_is_html_and_json(rich_kernel: Kernel) -> None:
    pytest.importorskip("pandas")
    result = _run(rich_kernel, "import pandas as pd\npd.DataFrame({'n': [1, 2, 3]})")
    main = result.main_result
    assert main is not None
    assert set(main.data) == {"text/plain", "text/html", "application/json"}
    assert "<table" in main.data["text/html"]
    assert main.data["application/json"] == '{"columns":["n"],"index":[0,1,2],"data":[[1],[2],[3]]}'


def test_a_large_png_arrives_whole(rich_kernel: Kernel) -> None:
    pytest.importorskip("PIL")
    result = _run(
        rich_kernel,
        "import os\nfrom PIL import Image\nImage.frombytes('RGB', (400, 400), os.urandom(480000))",
    )
    main = result.main_result
    assert main is not None
    assert main.png is not None
    assert len(main.png) > 480_000
    check = _run(
        rich_kernel,
        f"import base64, io\nfrom PIL import Image\n"
        f"Image.open(io.BytesIO(base64.b64decode({base64.b64encode(main.png).decode()!r}))).size",
    )
    assert check.text == "(400, 400)"


def test_an_answer_past_the_stream_cap_costs_one_file_read(
    timed_kernel: Kernel, lizard_counters: LocalServer
) -> None:
    # lizard-local caps an exec's stdout at 512 KiB, as the platform does: 1.5 MB of frames
    # can only arrive through the spill file.
    kernel = timed_kernel
    _run(kernel, "1")
    lizard_counters.reset_counters()
    chunks: list[str] = []
    result = _run(
        kernel,
        "for i in range(100_000):\n    print(i)\n'w' * 400_000",
        on_output=lambda stream, text: chunks.append(text),
    )
    assert result.stdout == "".join(f"{i}\n" for i in range(100_000))
    assert "".join(chunks) == result.stdout
    assert result.text == repr("w" * 400_000)
    routes = {r: n for r, n in lizard_counters.counters()["routes"].items() if n}
    assert routes == {EXEC: 1, "GET /api/sandboxes/{id}/files": 1}
    # The job directory goes with the next request, which costs nothing extra.
    lizard_counters.reset_counters()
    probe = _run(kernel, "import os\nsorted(os.listdir('/tmp/.lizard-core'))")
    assert probe.text == "[]"
    assert {r: n for r, n in lizard_counters.counters()["routes"].items() if n} == {EXEC: 1}


# -- errors ---------------------------------------------------------------------------------------


def test_final_answer_exception_keeps_its_name_and_message(kernel: Kernel) -> None:
    _run(kernel, "answer = 42")
    result = _run(
        kernel,
        "class FinalAnswerException(BaseException):\n    pass\n"
        "raise FinalAnswerException('safe:42')",
    )
    assert result.error is not None
    assert result.error.name == "FinalAnswerException"
    assert result.error.message == "safe:42"
    assert "\x1b[" not in result.error.traceback
    assert _run(kernel, "answer").text == "42"


def test_a_long_final_answer_arrives_whole(kernel: Kernel) -> None:
    answer = "safe:" + "[" + ", ".join(str(i) for i in range(60_000)) + "]"
    result = _run(
        kernel,
        "class FinalAnswerException(BaseException):\n    pass\n"
        "raise FinalAnswerException('safe:' + repr(list(range(60_000))))",
    )
    assert result.error is not None
    assert result.error.name == "FinalAnswerException"
    assert result.error.message == answer


def test_error_traceback_shows_the_cell(kernel: Kernel) -> None:
    result = _run(kernel, "print('before')\n{}['missing']")
    assert result.stdout == "before\n"
    assert result.error is not None
    assert (result.error.name, result.error.message) == ("KeyError", "'missing'")
    assert 'File "<cell-1>", line 2, in <module>' in result.error.traceback


# -- timeouts and lost kernels --------------------------------------------------------------------


def test_timeout_interrupts_and_keeps_the_namespace(timed_kernel: Kernel) -> None:
    kernel = timed_kernel
    _run(kernel, "x = 21\nimport time")
    started = time.monotonic()
    result = kernel.execute("time.sleep(10)", timeout=1)
    assert time.monotonic() - started < 4  # interrupted at 1 s, not after the 10 s sleep
    assert result.timed_out
    assert result.error is not None
    assert result.error.name == "TimeoutError"
    assert not result.state_lost
    assert _run(kernel, "x * 2").text == "42"


def test_a_cell_ignoring_sigint_restarts_the_kernel(interpreter_session: Session) -> None:
    grace = 1.0
    for kernel in _kernel(interpreter_session, grace=grace):
        _run(kernel, "x = 1")
        started = time.monotonic()
        result = kernel.execute(
            "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
            timeout=1,
        )
        assert time.monotonic() - started < 1 + grace + 1.5
        assert result.timed_out
        assert result.state_lost
        assert result.notice is not None
        assert "restarted" in result.notice
        assert "lost" in result.notice
        after = _run(kernel, "'x' in dir()")
        assert after.text == "False"
        assert not after.state_lost
        assert after.execution_count == 1


def test_os_exit_is_detected_and_the_next_cell_works(kernel: Kernel) -> None:
    _run(kernel, "x = 1")
    result = _run(kernel, "import os\nos._exit(1)")
    assert result.state_lost
    assert result.error is not None
    assert result.error.name == "KernelDied"
    assert result.notice is not None
    assert "lost" in result.notice
    after = _run(kernel, "1 + 1")
    assert after.text == "2"
    assert after.execution_count == 1


def test_a_kernel_killed_between_cells_is_reported(kernel: Kernel) -> None:
    first = _run(kernel, "import os\npid = os.getpid()\npid")
    assert first.text is not None
    run_command(kernel.session, ["kill", "-9", first.text])
    result = _run(kernel, "'pid' in dir()")
    assert result.text == "False"
    assert result.state_lost
    assert result.notice is not None
    assert "died" in result.notice


def test_interrupt_from_another_thread(timed_kernel: Kernel) -> None:
    kernel = timed_kernel
    _run(kernel, "import time\nkept = 'yes'")
    outcome: list[ExecutionResult] = []
    worker = threading.Thread(target=lambda: outcome.append(_run(kernel, "time.sleep(30)")))
    worker.start()
    deadline = time.monotonic() + 10
    time.sleep(0.5)
    while not kernel.interrupt():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    worker.join(15)
    assert outcome[0].error is not None
    assert outcome[0].error.name == "KeyboardInterrupt"
    assert _run(kernel, "kept").text == "'yes'"


def test_cancelling_aexecute_interrupts_the_cell_and_keeps_the_kernel(
    timed_kernel: Kernel,
) -> None:
    kernel = timed_kernel
    _run(kernel, "import time\nstopped = False\nkept = 1")

    async def main() -> None:
        task = asyncio.create_task(
            kernel.aexecute(
                "try:\n    time.sleep(30)\n"
                "except KeyboardInterrupt:\n    stopped = True\n    raise",
                timeout=60,
            )
        )
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - started < 10
    assert _run(kernel, "stopped, kept").text == "(True, 1)"


@pytest.mark.parametrize(
    "stubborn",
    [
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(120)",
        "import time\nwhile True:\n    try:\n        time.sleep(120)\n"
        "    except KeyboardInterrupt:\n        pass",
        # Catastrophic backtracking: C code that holds the GIL, so no handler or thread runs.
        "import re\nre.match(r'(a*)*b', 'a' * 64)",
    ],
    ids=["SIG_IGN", "swallows KeyboardInterrupt", "native code"],
)
def test_a_cancelled_cell_that_will_not_stop_is_replaced_by_the_next_call(
    interpreter_session: Session, stubborn: str
) -> None:
    """Issue 15, item 1: the orphaned cell once kept the daemon, and later calls waited minutes."""
    grace = 1.0

    async def cancel_a_stubborn_cell(kernel: Kernel) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(kernel.aexecute(stubborn, timeout=300), 1.5)

    for kernel in _kernel(interpreter_session, grace=grace):
        _run(kernel, "kept = 1")
        asyncio.run(cancel_a_stubborn_cell(kernel))
        started = time.monotonic()
        result = _run(kernel, "'kept' in dir()", timeout=5)
        # The orphan's grace plus a second, a restart, and room for a loaded machine; without
        # the bound the call waited out its host deadline (timeout + grace + 150 s).
        assert time.monotonic() - started < 30
        assert result.error is None
        assert result.text == "False"
        assert result.state_lost
        assert result.notice is not None
        assert "cancelled" in result.notice
        assert "restarted" in result.notice
        after = _run(kernel, "1 + 1")
        assert after.text == "2"
        assert not after.state_lost


def test_a_cell_larger_than_the_argv_limit_runs_staged_through_files(
    kernel: Kernel, lizard_counters: LocalServer
) -> None:
    """Issue 15, item 6: a cell of more than about 1.5 MB once failed before it started."""
    _run(kernel, "import os")
    lizard_counters.reset_counters()
    result = _run(kernel, f"data = {'d' * 3_000_000!r}\nlen(data)")
    assert result.error is None
    assert result.text == "3000000"
    routes = {r: n for r, n in lizard_counters.counters()["routes"].items() if n}
    assert routes == {EXEC: 1, "POST /api/sandboxes/{id}/files": 1}
    # The staged body is gone from the sandbox once read.
    left = _run(kernel, "import glob\nglob.glob('/tmp/.lizard-core/*/b0*')")
    assert left.text == "[]"


def test_restart_starts_a_fresh_namespace(kernel: Kernel) -> None:
    before = _run(kernel, "x = 1")
    kernel.restart()
    after = _run(kernel, "'x' in dir()")
    assert after.text == "False"
    assert after.kernel_id != before.kernel_id
    assert not after.state_lost  # we asked for it: no surprise to report


def test_close_stops_the_daemon(template_session: Session) -> None:
    kernel = Kernel(template_session, name=f"t{uuid.uuid4().hex[:10]}")
    pid = _run(kernel, "import os\nos.getpid()").text
    assert pid is not None
    kernel.close()
    check = run_command(template_session, ["sh", "-c", f"kill -0 {pid} 2>/dev/null; echo $?"])
    assert check.stdout.strip() == b"1"
    kernel.close()  # idempotent


def test_context_managers_close_the_kernel(template_session: Session) -> None:
    with Kernel(template_session, name=f"t{uuid.uuid4().hex[:10]}") as kernel:
        pid = _run(kernel, "import os\nos.getpid()").text

    async def main() -> str | None:
        async with Kernel(template_session, name=f"t{uuid.uuid4().hex[:10]}") as other:
            return (await other.aexecute("import os\nos.getpid()", timeout=30)).text

    other_pid = asyncio.run(main())
    for gone in (pid, other_pid):
        assert gone is not None
        check = run_command(template_session, ["sh", "-c", f"kill -0 {gone} 2>/dev/null; echo $?"])
        assert check.stdout.strip() == b"1"


def test_close_after_the_sandbox_is_gone_is_quiet(lizard_local: LocalServer) -> None:
    session = _session("base")
    kernel = Kernel(session)
    _run(kernel, "1")
    session.destroy()
    kernel.close()
    with pytest.raises(SandboxGoneError):
        _run(kernel, "1")


# -- packages -------------------------------------------------------------------------------------


def test_failed_install_is_reported_with_pips_words(kernel: Kernel) -> None:
    result = kernel.install(["/nonexistent/lizard_missing-1.0-py3-none-any.whl"], timeout=120)
    assert result.error is not None
    assert result.error.name == "PipError"
    # lizard-local's templates are virtualenvs that may or may not carry pip.
    assert "pip" in result.error.message
    assert _run(kernel, "1 + 1").text == "2"
