"""``stateful_python=True``: Python code shares one persistent kernel; other languages do not."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from strands.sandbox import ExecutionResult, StreamChunk
from strands.sandbox.errors import SandboxTimeoutError

from lizard_local import LocalServer
from strands_lizard import LizardSandbox, LizardSandboxError


@pytest.fixture
async def sandbox(lizard_local: LocalServer) -> AsyncIterator[LizardSandbox]:
    async with LizardSandbox(stateful_python=True, lifetime_ms=300_000) as made:
        yield made


async def test_state_lives_on_between_calls_and_a_last_expression_is_printed(
    sandbox: LizardSandbox,
) -> None:
    first = await sandbox.execute_code("import math\nx = 20", "python3")
    assert first == ExecutionResult(0, "", "")
    second = await sandbox.execute_code("print('x is', x)\nmath.floor(x + 1.5)", "python")
    assert second == ExecutionResult(0, "x is 20\n21\n", "")
    # Other interpreters still get a fresh process.
    assert (await sandbox.execute_code("echo $x", "sh")).stdout == "\n"


async def test_an_exception_is_exit_code_1_with_the_traceback(sandbox: LizardSandbox) -> None:
    result = await sandbox.execute_code("def f():\n    return 1 / 0\nf()", "python3")
    assert result.exit_code == 1
    assert "ZeroDivisionError" in result.stderr
    assert "return 1 / 0" in result.stderr
    assert (await sandbox.execute_code("f.__name__", "python3")).stdout == "'f'\n"


async def test_output_streams_while_the_cell_runs(sandbox: LizardSandbox) -> None:
    await sandbox.execute_code("import time", "python3")
    code = "for i in range(4):\n    print('row', i, flush=True)\n    time.sleep(0.3)"
    started = time.monotonic()
    arrivals = []
    async for item in sandbox.execute_code_streaming(code, "python3"):
        arrivals.append((time.monotonic() - started, item))
    chunks = [item for _, item in arrivals if isinstance(item, StreamChunk)]
    assert "".join(c.data for c in chunks) == "".join(f"row {i}\n" for i in range(4))
    assert arrivals[-1][0] - arrivals[0][0] > 0.5


async def test_a_timeout_keeps_the_namespace(sandbox: LizardSandbox) -> None:
    await sandbox.execute_code("kept = 'yes'", "python3")
    with pytest.raises(SandboxTimeoutError) as caught:
        await sandbox.execute_code(
            "import time\nprint('start', flush=True)\ntime.sleep(30)", "python3", timeout=1
        )
    assert caught.value.stdout.startswith("start\n")
    assert (await sandbox.execute_code("print(kept)", "python3")).stdout == "yes\n"


async def test_cancelling_a_cell_interrupts_it(sandbox: LizardSandbox) -> None:
    await sandbox.execute_code("n = 5", "python3")
    first = asyncio.Event()

    async def consume() -> None:
        code = "import time\nprint('go', flush=True)\ntime.sleep(60)"
        async for _ in sandbox.execute_code_streaming(code, "python3"):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await sandbox.execute_code("n + 1", "python3")).stdout == "6\n"


async def test_images_come_back_as_output_files(sandbox: LizardSandbox) -> None:
    code = (
        "import base64\n"
        "class Png:\n"
        "    def _repr_png_(self):\n"
        "        return base64.b64decode("
        "'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')\n"
        "Png()"
    )
    result = await sandbox.execute_code(code, "python3")
    assert [(f.name, f.mime_type, f.content[:4]) for f in result.output_files] == [
        ("output-1.png", "image/png", b"\x89PNG")
    ]


async def test_output_past_output_limit_is_an_error_not_a_cut_success(
    sandbox: LizardSandbox,
) -> None:
    limit = 10 * 1024 * 1024  # the fixture's output_limit (the default)
    with pytest.raises(LizardSandboxError, match="output") as caught:
        await sandbox.execute_code(f"print('x' * {limit + 4096})", "python3")
    assert caught.value.stdout.startswith("x" * 1000)
    assert "x" * 100 in str(caught.value)  # the head and tail reach the model
    after = await sandbox.execute_code("print('still here')", "python3")
    assert after.stdout == "still here\n"
