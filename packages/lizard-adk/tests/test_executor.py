"""``LizardCodeExecutor`` against lizard-local (and the cloud with ``-m live``): blocks called
directly, then ADK ``Runner`` runs with a scripted model."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from typing import Any

import pytest
from adk_support import ScriptedModel, code_results, run_agent, text
from google.adk.agents import LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.code_executors.code_execution_utils import (
    CodeExecutionInput,
    CodeExecutionResult,
    File,
)
from google.adk.runners import InMemoryRunner
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types

from lizard_adk import LizardCodeExecutor
from lizard_core.errors import LizardIntegrationError, SandboxGoneError
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"


def context() -> InvocationContext:
    """What ADK hands ``execute_code``; this executor reads nothing from it."""
    services = InMemorySessionService()
    return InvocationContext(
        session_service=services,
        invocation_id="inv-1",
        agent=LlmAgent(name="coder"),
        session=Session(id="session-1", app_name="tests", user_id="tester"),
    )


@pytest.fixture
def executor(connection: dict[str, Any]) -> Iterator[LizardCodeExecutor]:
    with LizardCodeExecutor(stateful=True, lifetime_ms=300_000, **connection) as made:
        yield made


def run(
    executor: LizardCodeExecutor, code: str, execution_id: str | None = "s1", **kw: Any
) -> CodeExecutionResult:
    return executor.execute_code(
        context(), CodeExecutionInput(code=code, execution_id=execution_id, **kw)
    )


# ── construction ─────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"timeout_seconds": 0}, ValueError),
        ({"max_output_bytes": -1}, ValueError),
        ({"max_output_bytes": 1.5}, TypeError),
        ({"working_dir": "here"}, ValueError),
        ({"api_url": "http://lizard.invalid"}, ValueError),
        ({"template": "no spaces allowed"}, ValueError),
        ({"timeout": 5}, TypeError),  # a typo pydantic would drop: the field is timeout_seconds
    ],
)
def test_bad_arguments_are_refused_before_any_request(
    lizard_counters: LocalServer, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        LizardCodeExecutor(**kwargs)
    assert lizard_counters.counters()["total"] == 0


def test_the_key_is_no_field_of_the_model(lizard_counters: LocalServer) -> None:
    made = LizardCodeExecutor(api_key="lzl_secret_value_123")
    shown = repr(made) + str(made) + made.model_dump_json()
    assert "lzl_secret_value_123" not in shown
    made.close()
    assert lizard_counters.counters()["total"] == 0


# ── state ────────────────────────────────────────────────────────────────────


def test_stateful_blocks_of_one_execution_share_a_namespace(executor: LizardCodeExecutor) -> None:
    first = run(executor, "x = 41\nimport math")
    assert (first.stdout, first.stderr, first.exit_code) == ("", "", 0)
    second = run(executor, "print(x + 1)\nmath.sqrt(16)")
    assert second.stdout == "42\n4.0\n"
    other = run(executor, "x", execution_id="another session")
    assert "NameError" in other.stderr
    assert other.exit_code == 1


def test_stateless_blocks_start_fresh(connection: dict[str, Any]) -> None:
    with LizardCodeExecutor(lifetime_ms=300_000, **connection) as executor:
        assert run(executor, "y = 1\ny", execution_id=None).stdout == "1\n"
        again = run(executor, "y", execution_id=None)
    assert "NameError: name 'y' is not defined" in again.stderr


def test_a_block_costs_one_request_and_one_listing(lizard_counters: LocalServer) -> None:
    with LizardCodeExecutor(stateful=True, lifetime_ms=300_000) as executor:
        run(executor, "1")
        lizard_counters.reset_counters()
        run(executor, "2")
        assert lizard_counters.counters()["routes"] == {EXEC: 2}  # the cell, the file listing


# ── output ───────────────────────────────────────────────────────────────────


def test_failures_fill_stderr_and_warnings_of_a_success_do_not(
    executor: LizardCodeExecutor,
) -> None:
    failed = run(executor, "print('before')\n1 / 0")
    assert failed.stdout == "before\n"
    assert "ZeroDivisionError: division by zero" in failed.stderr
    assert failed.exit_code == 1
    warned = run(executor, "import warnings\nwarnings.warn('careful')\nprint('fine')")
    assert warned.stderr == ""
    assert "fine" in warned.stdout
    assert "careful" in warned.stdout


def test_a_timeout_interrupts_the_block_and_keeps_the_namespace(
    connection: dict[str, Any],
) -> None:
    with LizardCodeExecutor(stateful=True, timeout_seconds=1, **connection) as executor:
        run(executor, "kept = 'yes'")
        slow = run(executor, "print('started', flush=True)\nimport time\ntime.sleep(30)")
        assert slow.stdout == "started\n"
        assert "timed out after 1 seconds" in slow.stderr
        assert run(executor, "kept").stdout == "'yes'\n"


def test_data_frames_print_as_tables_and_figures_come_back_as_png(
    executor: LizardCodeExecutor,
) -> None:
    frame = run(executor, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    assert frame.stdout.split() == ["a", "b", "0", "1", "3", "1", "2", "4"]
    figure = run(
        executor,
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3])\nplt.show()",
    )
    assert figure.stderr == ""
    [image] = figure.output_files
    assert image.mime_type == "image/png"
    assert image.name.endswith(".png")
    assert isinstance(image.content, bytes)
    assert image.content.startswith(b"\x89PNG")


def test_input_files_are_placed_once_and_new_files_come_back(
    lizard_counters: LocalServer,
) -> None:
    csv = File("data.csv", base64.b64encode(b"a,b\n1,2\n3,4\n").decode(), "text/csv")
    with LizardCodeExecutor(stateful=True, lifetime_ms=300_000) as executor:
        used = run(
            executor,
            "import csv\nrows = list(csv.reader(open('data.csv')))\n"
            "open('report.txt', 'w').write(f'{len(rows)} rows')\n"
            "open('raw.bin', 'wb').write(bytes(range(256)))",
            input_files=[csv],
        )
        assert used.stderr == ""
        by_name = {f.name: f for f in used.output_files}
        assert set(by_name) == {"report.txt", "raw.bin"}  # the input is no output
        assert by_name["report.txt"].content == b"3 rows"
        assert by_name["report.txt"].mime_type == "text/plain"
        assert by_name["raw.bin"].content == bytes(range(256))
        lizard_counters.reset_counters()
        again = run(executor, "len(rows)", input_files=[csv])
        assert again.stdout == "3\n"
        assert again.output_files == []  # nothing changed; the input was not sent again
        assert lizard_counters.counters()["routes"] == {EXEC: 2}


def test_an_output_file_over_the_limit_stays_in_the_sandbox_and_says_so(
    connection: dict[str, Any],
) -> None:
    with LizardCodeExecutor(stateful=True, max_output_bytes=1000, **connection) as executor:
        result = run(executor, "open('big.txt', 'w').write('x' * 5000)\nNone")
    assert result.output_files == []
    assert "big.txt (5000 bytes) left in the sandbox" in result.stdout


# ── lifecycle ────────────────────────────────────────────────────────────────


def test_close_destroys_the_sandbox_and_an_attached_one_is_left(
    lizard_local: LocalServer,
) -> None:
    owner = LizardCodeExecutor(stateful=True, lifetime_ms=300_000)
    run(owner, "shared = 7")
    assert owner.sandbox_id in lizard_local.sandboxes()
    attached = LizardCodeExecutor(stateful=True, sandbox_id=owner.sandbox_id)
    assert run(attached, "shared").stdout == "7\n"  # same session id: the same kernel
    attached.close()
    assert owner.sandbox_id in lizard_local.sandboxes()
    owner.close()
    owner.close()
    assert owner.sandbox_id not in lizard_local.sandboxes()
    with pytest.raises(SandboxGoneError):
        run(owner, "1")


# ── in an ADK Runner ─────────────────────────────────────────────────────────


async def test_an_agent_runs_stateful_code_blocks(lizard_local: LocalServer) -> None:
    executor = LizardCodeExecutor(stateful=True, lifetime_ms=300_000)
    model = ScriptedModel(
        [
            text("Let me compute.\n```python\ntotal = sum(range(10))\nprint(total)\n```"),
            text(
                "```python\nimport matplotlib\nmatplotlib.use('Agg')\n"
                "import matplotlib.pyplot as plt\nplt.bar(['a'], [total])\nplt.show()\n"
                "total * 2\n```"
            ),
            text("The total is 45."),
        ]
    )
    agent = LlmAgent(name="coder", model=model, code_executor=executor)
    runner = InMemoryRunner(agent=agent, app_name="lizard_adk_tests")
    try:
        events = await run_agent(agent, "Sum 0..9.", runner=runner)
        saved = [key for event in events for key in event.actions.artifact_delta]
    finally:
        await runner.close()
        executor.close()
    assert model.unused == 0
    outputs = [result.output for result in code_results(events)]
    assert outputs[0] == "Code execution result:\n45\n\n"
    assert outputs[1] is not None
    assert "90" in outputs[1]
    assert "Saved artifacts:" in outputs[1]
    assert saved == [name for name in saved if name.endswith(".png")]
    assert len(saved) == 1
    assert executor.sandbox_id not in lizard_local.sandboxes()


async def test_an_agent_stops_after_error_retry_attempts(lizard_local: LocalServer) -> None:
    executor = LizardCodeExecutor(stateful=True, error_retry_attempts=2, lifetime_ms=300_000)
    failing = text("```python\nraise ValueError('still wrong')\n```")
    model = ScriptedModel([failing, failing, failing, text("I give up.")])
    agent = LlmAgent(name="coder", model=model, code_executor=executor)
    try:
        events = await run_agent(agent, "Try.")
    finally:
        executor.close()
    results = code_results(events)
    assert len(results) == 2  # the third block was not run: ADK's retry limit
    assert all("ValueError: still wrong" in (r.output or "") for r in results)


def _block(code: str) -> types.Part:
    return text(f"```python\n{code}\n```")


async def _run_block(
    executor: LizardCodeExecutor,
    code: str,
    *,
    runner: InMemoryRunner | None = None,
    session_id: str | None = None,
) -> str:
    """One invocation whose model writes ``code``, then ends: the block's output."""
    model = ScriptedModel([_block(code), text("Done.")])
    agent = LlmAgent(name="coder", model=model, code_executor=executor)
    events = await run_agent(agent, "Go.", runner=runner, session_id=session_id)
    [result] = code_results(events)
    return result.output or ""


async def test_an_executor_outlives_its_sandboxs_expiry(lizard_local: LocalServer) -> None:
    # ADK's usual pattern: one executor for the life of the app. Its sandbox expires while
    # nobody uses it (a 1.5 s lifetime here, 15 minutes idle in practice); the next block gets
    # a new sandbox and the model is told the state is gone, and the agent goes on.
    executor = LizardCodeExecutor(stateful=True, lifetime_ms=1_500)
    try:
        first = await _run_block(executor, "x = 41\nprint(x + 1)", session_id="s1")
        assert "42" in first
        expired = executor.sandbox_id
        await asyncio.sleep(3)
        assert expired not in lizard_local.sandboxes()
        after = await _run_block(executor, "print(x)", session_id="s1")
        assert "replaced by a new one" in after
        assert "NameError" in after
        assert executor.sandbox_id not in (None, expired)
        again = await _run_block(executor, "x = 1\nprint(x)", session_id="s1")
        assert "replaced" not in again
        assert "1" in again
    finally:
        executor.close()
    assert executor.sandbox_id not in lizard_local.sandboxes()


async def test_kernels_are_bounded_by_max_kernels_and_idle_time(lizard_local: LocalServer) -> None:
    executor = LizardCodeExecutor(
        stateful=True, lifetime_ms=300_000, max_kernels=2, kernel_idle_s=2.0
    )
    try:
        for n in (1, 2, 3):
            await _run_block(executor, f"v = {n}", session_id=f"s{n}")
        assert executor.kernel_count == 2
        # s1's kernel made room for s3: its next block says so, and its state is gone.
        dropped = await _run_block(executor, "print(v)", session_id="s1")
        assert "stopped to make room for other sessions" in dropped
        assert "NameError" in dropped
        assert "3" in await _run_block(executor, "print(v)", session_id="s3")
        await asyncio.sleep(2.5)
        await _run_block(executor, "w = 0", session_id="s4")
        assert executor.kernel_count == 1  # every other kernel was idle past 2 s
        idle = await _run_block(executor, "print(v)", session_id="s3")
        assert "after 2 s without use" in idle
    finally:
        executor.close()


async def test_one_sessions_long_block_does_not_stall_another(lizard_local: LocalServer) -> None:
    executor = LizardCodeExecutor(stateful=True, lifetime_ms=300_000)
    try:
        await _run_block(executor, "1", session_id="warm")  # the sandbox exists
        slow = asyncio.create_task(
            _run_block(executor, "import time\ntime.sleep(6)\nprint('slow')", session_id="a")
        )
        await asyncio.sleep(1)
        quick = await _run_block(executor, "print('quick')", session_id="b")
        assert "quick" in quick
        assert not slow.done()  # b ran while a's block was still running
        assert "slow" in await slow
    finally:
        executor.close()


def test_kernel_bounds_are_checked_before_any_request(lizard_counters: LocalServer) -> None:
    for kwargs, error in (
        ({"max_kernels": 0}, ValueError),
        ({"max_kernels": 1.5}, TypeError),
        ({"kernel_idle_s": 0}, ValueError),
        ({"kernel_idle_s": "1"}, TypeError),
    ):
        with pytest.raises(error):
            LizardCodeExecutor(**kwargs)
    assert lizard_counters.counters()["total"] == 0


async def test_optimize_data_file_loads_a_csv_the_user_sent(lizard_local: LocalServer) -> None:
    # ADK's flow turns the user's CSV into an input file and runs its own loader block
    # (pandas, explore_df) before the model's first turn; the model's block then uses it.
    executor = LizardCodeExecutor(stateful=True, optimize_data_file=True, lifetime_ms=300_000)
    model = ScriptedModel([_block("print(data_1_2['b'].sum())"), text("The sum is 6.")])
    agent = LlmAgent(name="analyst", model=model, code_executor=executor)
    runner = InMemoryRunner(agent=agent, app_name="lizard_adk_tests")
    csv = types.Part(inline_data=types.Blob(mime_type="text/csv", data=b"a,b\n1,2\n3,4\n"))
    try:
        session = await runner.session_service.create_session(
            app_name=runner.app_name, user_id="tester"
        )
        message = types.Content(role="user", parts=[types.Part(text="Sum column b."), csv])
        events = [
            event
            async for event in runner.run_async(
                user_id="tester", session_id=session.id, new_message=message
            )
        ]
    finally:
        await runner.close()
        executor.close()
    explored, summed = (r.output or "" for r in code_results(events))
    assert "Total rows: 2" in explored, explored
    assert summed == "Code execution result:\n6\n\n"


async def test_custom_code_block_delimiters_are_run(lizard_local: LocalServer) -> None:
    executor = LizardCodeExecutor(
        code_block_delimiters=[("<run>\n", "\n</run>")], lifetime_ms=300_000
    )
    model = ScriptedModel([text("Here:\n<run>\nprint(6 * 7)\n</run>"), text("42.")])
    agent = LlmAgent(name="coder", model=model, code_executor=executor)
    try:
        events = await run_agent(agent, "Multiply.")
    finally:
        executor.close()
    [result] = code_results(events)
    assert result.output == "Code execution result:\n42\n\n"


def test_allowed_hosts_reach_the_create_request(lizard_local: LocalServer) -> None:
    # lizard-local has no network policy and refuses the field with a 400 naming it: proof
    # that the executor sent it (with internet_access off, the SDK's rule).
    executor = LizardCodeExecutor(allowed_hosts=["pypi.org"], lifetime_ms=300_000)
    try:
        with pytest.raises(LizardIntegrationError, match="allowedHosts"):
            run(executor, "1")
        assert executor.sandbox_id is None
    finally:
        executor.close()
