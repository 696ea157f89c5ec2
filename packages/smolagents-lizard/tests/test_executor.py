"""LizardExecutor under a real smolagents CodeAgent, on lizard-local (and the cloud with -m live).

Every test runs on both templates (``base``: no Jupyter; ``interpreter``).
"""

from __future__ import annotations

import _thread
import datetime
import decimal
import gc
import pathlib
import signal
import threading
import time
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import pytest
from PIL import Image
from smolagents import ActionStep, CodeAgent, Tool, ToolCallingAgent, tool
from smolagents.default_tools import FinalAnswerTool
from smolagents.monitoring import LogLevel
from smolagents.utils import AgentError
from smolagents_support import ScriptedModel, code, recording_logger

from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.session import Session
from lizard_local import LocalServer
from lizard_local.pytest_plugin import LIVE
from smolagents_lizard import LizardExecutor, PackageInstallError, SandboxUnavailableError

MakeExecutor = Callable[..., LizardExecutor]
RunAgent = Callable[..., tuple[CodeAgent, Any]]


def steps(agent: CodeAgent) -> list[ActionStep]:
    return [step for step in agent.memory.steps if isinstance(step, ActionStep)]


# ── state, errors, answers ───────────────────────────────────────────────


def test_state_persists_and_an_error_step_is_recovered_from(run_agent: RunAgent) -> None:
    agent, result = run_agent(
        code("import math\nradius = 2.0\ndef area(r):\n    return math.pi * r * r"),
        code("print('before the error')\nvalue = area(radius) / 0"),
        code("final_answer(round(area(radius), 3))"),
    )
    assert result == 12.566
    first, failed, last = steps(agent)
    assert first.error is None
    assert failed.error is not None
    message = str(failed.error)
    # What the model reads: the output printed before the error, the name, a clean traceback.
    assert message.index("before the error") < message.index("ZeroDivisionError: float division")
    assert "Traceback (most recent call last)" in message
    assert "value = area(radius) / 0" in message
    assert "\x1b" not in message
    assert last.error is None
    assert isinstance(agent.model, ScriptedModel)
    assert "ZeroDivisionError" in agent.model.last_prompt  # the model was shown the error


def test_a_python_error_is_logged_once(make_executor: MakeExecutor) -> None:
    logger, out = recording_logger()
    agent = CodeAgent(
        tools=[],
        model=ScriptedModel(code("1 / 0"), code("final_answer('done')")),
        executor=make_executor(logger=logger),
        logger=logger,
        max_steps=2,
    )
    assert agent.run("Fail once.") == "done"
    assert out.getvalue().count("ZeroDivisionError: division by zero") == 1


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("{'total': 42, 'items': [1, 2]}", {"total": 42, "items": [1, 2]}),
        ("[1, 'two', 3.5]", [1, "two", 3.5]),
        ("6 * 7", 42),
        ("'a string'", "a string"),
    ],
)
def test_final_answer_returns_plain_values(
    run_agent: RunAgent, expression: str, expected: Any
) -> None:
    _, result = run_agent(code(f"final_answer({expression})"))
    assert result == expected
    assert isinstance(result, type(expected))  # smolagents returns str as its AgentText


def test_final_answer_serializes_with_its_own_imports_only(run_agent: RunAgent) -> None:
    # The set-up cell leaves out the imports smolagents hoists from final_answer's functions,
    # which import what they use themselves: every kind of value still comes back.
    names = ("pickle", "json", "pathlib", "dataclasses", "decimal", "base64", "io")
    unbound = f"[n for n in {names!r} if n in globals()]"
    values = (
        "import datetime as dt, decimal as dc, pathlib as pl\n"
        "final_answer([b'\\x00b', (1, 2), {3}, dt.date(2026, 12, 2), dc.Decimal('1.5'), "
        f"pl.Path('/tmp/x'), {unbound}])"
    )
    _, result = run_agent(code(values))
    data, pair, group, day, amount, path, bound = result
    assert (data, pair, group, day) == (b"\x00b", (1, 2), {3}, datetime.date(2026, 12, 2))
    assert (amount, path) == (decimal.Decimal("1.5"), pathlib.Path("/tmp/x"))
    assert bound == []  # none of them bound in the namespace before a step imports them


class _Stems(Tool):  # type: ignore[misc]  # smolagents is untyped
    name = "stems"
    description = "The stems of some paths, pickled and hex-encoded."
    inputs = {"text": {"type": "string", "description": "paths, comma-separated"}}  # noqa: RUF012
    output_type = "string"

    def forward(self, text: str) -> str:
        import pathlib
        import pickle

        return pickle.dumps([pathlib.Path(p).stem for p in text.split(",")]).hex()


@tool
def loads_hex(data: str) -> str:
    """Unpickles hex-encoded data and returns it as JSON.

    Args:
        data: hex-encoded pickle
    """
    import json
    import pickle

    return json.dumps(pickle.loads(bytes.fromhex(data)))


def test_tools_importing_what_final_answer_imports_still_work(
    make_executor: MakeExecutor,
) -> None:
    # The set-up cell leaves out imports only final_answer's code has at the top: the tools
    # that use pickle, pathlib and json keep theirs, through smolagents' own CodeAgent.
    model = ScriptedModel(code("final_answer(loads_hex(stems('/a/b.txt,c.py')))"))
    agent = CodeAgent(
        tools=[_Stems(), loads_hex],
        model=model,
        executor=make_executor(),
        max_steps=1,
        verbosity_level=LogLevel.OFF,
    )
    assert agent.run("Follow the script.") == '["b", "c"]'


def test_final_answer_returns_a_pil_image(run_agent: RunAgent, third_party: str) -> None:
    _, result = run_agent(
        code(third_party + "from PIL import Image\nfinal_answer(Image.new('RGB', (5, 3), 'red'))")
    )
    # smolagents wraps image answers in AgentImage; to_raw() is the decoded PIL image.
    assert isinstance(result, Image.Image)
    image = result.to_raw()  # type: ignore[attr-defined]
    assert image.size == (5, 3)
    assert image.convert("RGB").getpixel((0, 0)) == (255, 0, 0)


def test_defining_final_answer_imports_neither_numpy_nor_pil(
    run_agent: RunAgent, third_party: str
) -> None:
    # The patched tool imports them itself when an answer holds an array or an image; importing
    # them up front (numpy takes 150 ms and more) would only slow every executor's start.
    _, result = run_agent(
        code(
            third_party
            + "import sys\nfinal_answer([m for m in ('numpy', 'PIL') if m in sys.modules])"
        )
    )
    assert result == []
    _, array = run_agent(code(third_party + "import numpy as np\nfinal_answer(np.arange(3))"))
    assert array.tolist() == [0, 1, 2]


def test_large_final_answers_come_back_whole(run_agent: RunAgent, third_party: str) -> None:
    _, text = run_agent(code("final_answer('x' * 300_000)"))
    assert text == "x" * 300_000
    _, image = run_agent(
        code(
            third_party + "import numpy as np\nfrom PIL import Image\n"
            "pixels = np.random.default_rng(0).integers(0, 255, (300, 300, 3), dtype=np.uint8)\n"
            "final_answer(Image.fromarray(pixels))"
        )
    )
    raw = image.to_raw()
    assert raw.size == (300, 300)  # about 360 KB of base64 PNG in the exception message


def test_an_answer_over_the_size_limit_is_a_step_error_the_model_sees(
    run_agent: RunAgent, make_executor: MakeExecutor
) -> None:
    agent, result = run_agent(
        code("final_answer('x' * 20_000)"),
        code("final_answer('short')"),
        executor=make_executor(max_final_answer_bytes=10_000),
    )
    assert result == "short"
    assert "over the 10,000-byte limit" in str(steps(agent)[0].error)


def test_an_agent_can_run_twice_on_one_executor(
    make_executor: MakeExecutor, run_agent: RunAgent
) -> None:
    executor = make_executor()
    run_agent(code("kept = 1\nfinal_answer('first')"), executor=executor)
    # The second run sends the tools again: the final_answer patch must not be applied twice.
    _, result = run_agent(code("final_answer(kept + 1)"), executor=executor)
    assert result == 2


def test_additional_args_reach_the_sandbox(run_agent: RunAgent) -> None:
    _, result = run_agent(
        code("final_answer(f'{label}: {sum(numbers)}')"),
        additional_args={"numbers": [1, 2, 3], "label": "sum"},
    )
    assert result == "sum: 6"


def test_tools_run_in_the_sandbox(make_executor: MakeExecutor) -> None:
    @tool  # type: ignore[untyped-decorator]  # smolagents is untyped
    def shout(text: str) -> str:
        """Return the text in capitals.

        Args:
            text: what to shout.
        """
        return text.upper() + "!"

    agent = CodeAgent(
        tools=[shout],
        model=ScriptedModel(code("final_answer(shout('hello'))")),
        executor=make_executor(),
        max_steps=1,
        verbosity_level=LogLevel.OFF,
    )
    assert agent.run("Shout.") == "HELLO!"


def test_managed_agents_are_refused_before_any_sandbox_exists(make_executor: MakeExecutor) -> None:
    helper = ToolCallingAgent(
        tools=[], model=ScriptedModel(), name="helper", description="Helps.", max_steps=1
    )
    executor = make_executor()
    agent = CodeAgent(
        tools=[],
        model=ScriptedModel(),
        executor=executor,
        managed_agents=[helper],
        verbosity_level=LogLevel.OFF,
    )
    with pytest.raises(ValueError, match=r"does not support managed agents \(helper\)"):
        agent.run("Delegate.")
    assert executor.sandbox_id is None


# ── outputs ──────────────────────────────────────────────────────────────


def test_the_final_expression_is_the_output_and_prints_are_logs(
    make_executor: MakeExecutor,
) -> None:
    with make_executor() as executor:
        executor("x = 40")
        result = executor("print('out'); import sys; print('err', file=sys.stderr)\nx + 2")
        assert result.output == "42"
        assert result.logs == "out\nerr\n"
        assert not result.is_final_answer


def test_images_come_back_as_pil_images(make_executor: MakeExecutor, third_party: str) -> None:
    executor = make_executor()
    executor(third_party)
    image = executor("from PIL import Image\nImage.new('RGB', (4, 2), (0, 0, 255))").output
    assert isinstance(image, Image.Image)
    assert image.size == (4, 2)
    assert image.getpixel((0, 0)) == (0, 0, 255)


def test_figures_and_dataframes_are_not_lost(make_executor: MakeExecutor, third_party: str) -> None:
    executor = make_executor()
    executor(third_party)
    # A figure beats an uninformative value such as matplotlib's list of Line2D objects.
    figure = executor(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3])"
    ).output
    assert isinstance(figure, Image.Image)
    hidden = executor("plt.figure()\nplt.plot([3, 2, 1]);").output  # ';' hides the value
    assert isinstance(hidden, Image.Image)
    titled = executor("plt.title('kept as text')").output
    assert titled == "Text(0.5, 1.0, 'kept as text')"
    table = executor("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})").output
    assert table.split() == ["a", "b", "0", "1", "x", "1", "2", "y"]


def test_two_megabytes_of_output_are_capped_with_a_marker(run_agent: RunAgent) -> None:
    agent, result = run_agent(
        code("for i in range(20000):\n    print(f'{i:06d}' + 'x' * 94)"),  # 20000 * 101 bytes
        code("final_answer('still here')"),
    )
    assert result == "still here"
    observations = steps(agent)[0].observations or ""
    assert "characters of output cut by smolagents-lizard" in observations
    assert observations.count("\n") < 1000
    assert len(observations) < 52_000
    assert "000000" + "x" * 94 in observations  # the beginning is kept


def test_long_steps_stream_their_output_while_they_run(make_executor: MakeExecutor) -> None:
    logger, out = recording_logger()
    executor = make_executor(logger=logger, live_logs_after=0.3)
    executor("import time")
    started = time.monotonic()
    seen_at: list[float] = []

    class Watch:
        def write(self, text: str) -> int:
            if "first line" in text and not seen_at:
                seen_at.append(time.monotonic() - started)
            return out.write(text)

        def flush(self) -> None:
            pass

    logger.console.file = Watch()
    executor("print('first line', flush=True)\ntime.sleep(2.5)\nprint('second line')")
    finished = time.monotonic() - started
    assert seen_at, out.getvalue()
    assert seen_at[0] < finished - 1.5  # shown while the step was still running
    assert "second line" in out.getvalue()


# ── timeouts and lost state ──────────────────────────────────────────────


def test_a_timeout_interrupts_the_step_and_keeps_state(
    run_agent: RunAgent, make_executor: MakeExecutor
) -> None:
    started: list[float] = []

    def sleeper() -> str:
        started.append(time.time())  # ActionStep timings are wall-clock
        return code("import time\nprint('sleeping')\ntime.sleep(10)")

    agent, result = run_agent(
        code("kept = 'earlier value'"),
        sleeper,
        code("final_answer(kept)"),
        executor=make_executor(command_timeout_ms=1000),
    )
    assert result == "earlier value"
    timed_out = steps(agent)[1]
    message = str(timed_out.error)
    assert "sleeping" in message
    assert "TimeoutError: the code ran longer than the 1 s step timeout" in message
    assert "Variables from earlier steps are kept" in message
    assert timed_out.timing.end_time is not None
    assert timed_out.timing.end_time - started[0] < 4


def test_a_cell_that_ignores_the_interrupt_restarts_the_kernel(
    run_agent: RunAgent, make_executor: MakeExecutor
) -> None:
    agent, result = run_agent(
        code("lost = 'gone after the restart'"),
        code(
            "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "print('ignoring interrupts')\ntime.sleep(30)"
        ),
        code("final_answer(['lost' in globals(), seed])"),
        executor=make_executor(command_timeout_ms=1000),
        additional_args={"seed": 7},
    )
    # Tools (final_answer) and the agent's variables (seed) were sent to the new kernel.
    assert result == [False, 7]
    message = str(steps(agent)[1].error)
    assert "ignoring interrupts" in message
    assert "TimeoutError" in message
    assert "every variable, import and function defined in earlier steps is gone" in message


def test_a_step_stopped_by_ctrl_c_whose_cell_will_not_stop_is_told_as_lost_state(
    make_executor: MakeExecutor,
) -> None:
    """Issue 15, item 1: the orphaned cell once wedged the kernel for every later step."""
    executor = make_executor(command_timeout_ms=300_000)
    executor.send_variables({"seed": 7})
    executor("kept = 1")
    # Python leaves SIGINT ignored when it started ignored (a background job of a shell), and
    # interrupt_main() then does nothing: Ctrl-C's own handler, for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            executor(
                "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(120)"
            )
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    started = time.monotonic()
    output = executor("'kept' in globals()")
    # The cell's grace (3 s) plus a second and a restart, with room for a loaded machine;
    # without the bound the step waited out its host deadline (minutes).
    assert time.monotonic() - started < 40
    assert output.output == "False"  # the step ran, in a fresh kernel
    assert "was cancelled did not stop" in output.logs
    assert "every variable, import and function defined in earlier steps is gone" in output.logs
    assert executor("seed").output == "7"  # the agent's variables were sent again


def test_variables_larger_than_the_argv_limit_reach_the_sandbox(run_agent: RunAgent) -> None:
    """Issue 15, item 6: a cell travelled in argv, and 3 MB of variables aborted the run."""
    big = "v" * 3_000_000
    _, result = run_agent(
        code("final_answer([len(big), big[:3], len(code)])"),
        code("final_answer(len(big))"),
        additional_args={"big": big, "code": "x = 1\n" * 300_000},
    )
    assert result == [3_000_000, "vvv", 1_800_000]


def test_a_final_answer_nested_100_000_deep_is_a_step_error_the_model_sees(
    run_agent: RunAgent,
) -> None:
    """Issue 15, item 9: the host once raised RecursionError decoding it."""
    agent, result = run_agent(
        code(
            "class FinalAnswerException(Exception):\n    pass\n"
            "raise FinalAnswerException('safe:' + '[' * 100_000 + ']' * 100_000)"
        ),
        code("final_answer('flat')"),
    )
    assert result == "flat"
    message = str(steps(agent)[0].error)
    assert "FinalAnswerError" in message
    assert "nested too deeply" in message


def test_a_gone_sandbox_ends_the_run_at_once(
    make_executor: MakeExecutor, local_server: LocalServer
) -> None:
    executor = make_executor()

    def expire_then_reply() -> str:
        assert executor.sandbox_id is not None
        local_server.expire(executor.sandbox_id)
        return code("print('never runs')")

    model = ScriptedModel(code("x = 1"), expire_then_reply, code("x"), code("x"))
    agent = CodeAgent(
        tools=[], model=model, executor=executor, max_steps=4, verbosity_level=LogLevel.OFF
    )
    with pytest.raises(SandboxUnavailableError, match="can no longer run code") as raised:
        agent.run("Work.")
    assert model.calls == 2  # no step after the one that found the sandbox gone
    assert type(raised.value.__cause__).__name__ == "SandboxGoneError"


def test_a_kernel_that_dies_is_replaced_and_the_model_told(
    run_agent: RunAgent, make_executor: MakeExecutor
) -> None:
    agent, result = run_agent(
        code("before = 1"),
        code("import os\nos._exit(1)"),
        code("final_answer(['before' in globals(), seed])"),
        executor=make_executor(),
        additional_args={"seed": 3},
    )
    assert result == [False, 3]
    assert "every variable, import and function defined in earlier steps is gone" in str(
        steps(agent)[1].error
    )


def _kill_from_outside(backend: Any, executor: LizardExecutor, pid: int) -> None:
    """Kill the kernel between two runs, from another session on the executor's sandbox."""
    other = Session(SandboxConfig.from_env(**backend.connection), sandbox_id=executor.sandbox_id)
    try:
        run_command(other, ["kill", "-9", str(pid)])
    finally:
        other.close()


def test_a_kernel_lost_before_install_packages_is_restored_and_the_model_told(
    make_executor: MakeExecutor, backend: Any
) -> None:
    @tool  # type: ignore[untyped-decorator]  # smolagents is untyped
    def shout(text: str) -> str:
        """Return the text in capitals.

        Args:
            text: what to shout.
        """
        return text.upper() + "!"

    executor = make_executor()
    agent = CodeAgent(
        tools=[shout],
        model=ScriptedModel(
            # A module in the working directory: importable in any kernel of this sandbox.
            code("import os\nopen('lizard_probe.py', 'w').close()\nbefore = 1"),
            code("final_answer(os.getpid())"),
        ),
        executor=executor,
        max_steps=2,
        verbosity_level=LogLevel.OFF,
    )
    pid = agent.run("Work.", additional_args={"seed": 3})
    _kill_from_outside(backend, executor, pid)
    # The package check is the call that finds the kernel dead.
    assert executor.install_packages(["lizard_probe"]) == ["lizard_probe"]
    step = executor("[shout('back'), seed, 'before' in globals()]")
    assert step.output == "['BACK!', 3, False]"  # the tool and the variables were restored
    assert "every variable, import and function defined in earlier steps is gone" in step.logs
    assert "gone" not in executor("1 + 1").logs  # told once


def test_a_kernel_lost_between_runs_is_told_on_the_next_runs_first_step(
    make_executor: MakeExecutor, backend: Any
) -> None:
    executor = make_executor()
    model = ScriptedModel(
        code("kept = 1\nimport os\nfinal_answer(os.getpid())"),
        code("final_answer(['kept' in globals(), seed])"),
    )
    agent = CodeAgent(
        tools=[], model=model, executor=executor, max_steps=2, verbosity_level=LogLevel.OFF
    )
    pid = agent.run("Work.", additional_args={"seed": 3})
    _kill_from_outside(backend, executor, pid)
    # The second run's set-up (variables, then tools) finds the kernel dead and defines both in
    # the fresh one; its first step tells the model what was lost.
    assert agent.run("Again.", reset=False, additional_args={"seed": 4}) == [False, 4]
    observation = agent.memory.steps[-1].observations or ""
    assert "every variable, import and function defined in earlier steps is gone" in observation


def test_a_dropped_stream_is_a_step_error_and_the_run_goes_on(
    run_agent: RunAgent, make_executor: MakeExecutor, local_server: LocalServer
) -> None:
    def drop_then_reply() -> str:
        local_server.inject_stream_drop(count=1, after_events=2)
        return code("print('partial')\nimport time\ntime.sleep(1)\nprint('rest')")

    agent, result = run_agent(
        code("kept = 'yes'"),
        drop_then_reply,
        code("final_answer(kept)"),
        executor=make_executor(),
    )
    assert result == "yes"
    assert "Whether the code ran is unknown" in str(steps(agent)[1].error)


def test_a_rate_limited_step_is_a_step_error_saying_when_to_retry(
    run_agent: RunAgent, make_executor: MakeExecutor, local_server: LocalServer
) -> None:
    def limit_then_reply() -> str:
        local_server.inject_fault(
            "POST /api/sandboxes/{id}/exec", status=429, count=1, retry_after_s=2
        )
        return code("print('refused')")

    agent, result = run_agent(
        code("kept = 'yes'"),
        limit_then_reply,
        code("final_answer(kept)"),
        executor=make_executor(),
    )
    assert result == "yes"  # the sandbox was fine: the run went on
    message = str(steps(agent)[1].error)
    assert "HTTP 429" in message
    assert "retry after 2 s" in message


# ── requests ─────────────────────────────────────────────────────────────


def test_one_request_per_step(make_executor: MakeExecutor, local_server: LocalServer) -> None:
    executor = make_executor()
    agent = CodeAgent(
        tools=[],
        model=ScriptedModel(*(code(f"v{i} = {i}") for i in range(4)), code("final_answer(v3)")),
        executor=executor,
        max_steps=5,
        verbosity_level=LogLevel.OFF,
    )
    assert agent.run("Count.") == 3
    routes = local_server.counters()["routes"]
    execs = routes.pop("POST /api/sandboxes/{id}/exec")
    routes.pop("GET /api/projects", None)  # the SDK resolves the project once per process
    assert execs == 1 + 5  # the tools, then one per step
    assert routes == {"POST /api/sandboxes": 1}


class _UnserializableTool(Tool):  # type: ignore[misc]  # smolagents is untyped
    name = "scale"
    description = "Repeats a text."
    inputs = {"text": {"type": "string", "description": "the text"}}  # noqa: RUF012
    output_type = "string"

    def __init__(self, factor: int) -> None:  # smolagents cannot write this tool's code
        super().__init__()
        self.factor = factor

    def forward(self, text: str) -> str:
        return text * self.factor


def test_a_tool_smolagents_cannot_serialize_fails_before_any_request(
    make_executor: MakeExecutor, local_server: LocalServer
) -> None:
    executor = make_executor()
    with pytest.raises(ValueError, match="must have default values"):
        executor.send_tools({"scale": _UnserializableTool(2)})
    assert executor.sandbox_id is None
    assert local_server.counters()["total"] == 0


def test_a_new_executors_start_is_two_requests(
    make_executor: MakeExecutor, local_server: LocalServer
) -> None:
    # The create runs while smolagents writes the tools' code; the set-up cell is the exec.
    executor = make_executor()
    executor.send_variables(variables={})
    executor.send_tools({"final_answer": FinalAnswerTool()})
    routes = local_server.counters()["routes"]
    routes.pop("GET /api/projects", None)  # the SDK resolves the project once per process
    assert routes == {"POST /api/sandboxes": 1, "POST /api/sandboxes/{id}/exec": 1}
    assert executor("final_answer(6 * 7)").output == 42


def test_the_constructor_makes_no_request(local_server: LocalServer) -> None:
    executor = LizardExecutor(["numpy"], None, command_timeout_ms=5000, template="base")
    assert executor.sandbox_id is None
    executor.cleanup()
    assert local_server.counters()["total"] == 0


# ── packages ─────────────────────────────────────────────────────────────


def test_present_packages_are_not_installed(
    make_executor: MakeExecutor, third_party: str, local_server: LocalServer
) -> None:
    executor = make_executor()
    executor(third_party)
    local_server.reset_counters()
    assert executor.install_packages(["numpy", "PIL"]) == ["numpy", "pillow"]
    assert local_server.counters()["routes"] == {"POST /api/sandboxes/{id}/exec": 1}


def test_a_failed_install_shows_pips_output(make_executor: MakeExecutor) -> None:
    executor = make_executor()
    # pip refuses the version without touching the network (or is missing: also reported).
    with pytest.raises(PackageInstallError, match="surely-missing-package") as raised:
        executor.install_packages(["surely-missing-package==!!"])
    assert "pip" in str(raised.value).lower()
    assert raised.value.output.strip()


def test_missing_additional_imports_fail_the_run_clearly(make_executor: MakeExecutor) -> None:
    executor = make_executor(additional_imports=["surely-missing-package==!!"])
    agent = CodeAgent(
        tools=[], model=ScriptedModel(), executor=executor, verbosity_level=LogLevel.OFF
    )
    with pytest.raises(PackageInstallError, match="surely-missing-package"):
        agent.run("Use the package.")


# ── direct use, cleanup, attach ──────────────────────────────────────────


def test_a_step_error_is_an_agent_error_when_called_directly(make_executor: MakeExecutor) -> None:
    executor = make_executor()
    with pytest.raises(AgentError, match="ValueError: bad input"):
        executor("raise ValueError('bad input')")


def test_cleanup_is_idempotent_and_the_executor_closed(
    make_executor: MakeExecutor, backend: Any
) -> None:
    executor = make_executor()
    executor("x = 1")
    sandbox_id = executor.sandbox_id
    executor.cleanup()
    executor.cleanup()
    with pytest.raises(RuntimeError, match="closed"):
        executor("x")
    if backend.server is not None:
        assert sandbox_id not in backend.server.sandboxes()


def test_delete_is_cleanup_as_in_the_built_in_executors(
    make_executor: MakeExecutor, local_server: LocalServer
) -> None:
    executor = make_executor()
    executor("x = 1")
    sandbox_id = executor.sandbox_id
    executor.delete()
    assert sandbox_id not in local_server.sandboxes()
    with pytest.raises(RuntimeError, match="closed"):
        executor("x")


def test_a_failed_deletion_keeps_the_handle_for_a_retry(
    make_executor: MakeExecutor, local_server: LocalServer
) -> None:
    executor = make_executor()
    executor("x = 1")
    sandbox_id = executor.sandbox_id
    local_server.inject_fault("DELETE /api/sandboxes/{id}", status=400, count=1)
    with pytest.raises(Exception, match="400"):
        executor.cleanup()
    assert sandbox_id in local_server.sandboxes()
    executor.cleanup()
    assert sandbox_id not in local_server.sandboxes()


def test_cleanup_never_hides_the_exception_that_ended_the_run(
    make_executor: MakeExecutor, local_server: LocalServer
) -> None:
    executor = make_executor()

    def run_that_fails() -> None:
        with executor:
            executor("x = 1")
            local_server.inject_fault("DELETE /api/sandboxes/{id}", status=400, count=1)
            raise RuntimeError("the real failure")

    with pytest.raises(RuntimeError, match="the real failure") as raised:
        run_that_fails()
    assert any("deleting sandbox" in note for note in raised.value.__notes__)
    executor.cleanup()  # the retry succeeds
    assert executor.sandbox_id not in local_server.sandboxes()


def test_an_executor_dropped_without_cleanup_deletes_its_sandbox(local_server: LocalServer) -> None:
    executor = LizardExecutor(logger=recording_logger()[0], template="base")
    executor("x = 1")
    sandbox_id = executor.sandbox_id
    assert sandbox_id in local_server.sandboxes()
    del executor
    gc.collect()
    assert sandbox_id not in local_server.sandboxes()


def test_attaching_shares_the_namespace_and_leaves_the_sandbox_running(
    make_executor: MakeExecutor, backend: Any
) -> None:
    owner = make_executor()
    owner("shared = 'from the owner'")
    guest = make_executor(sandbox_id=owner.sandbox_id)
    assert guest("shared").output == "'from the owner'"
    guest.cleanup()
    assert owner("shared + '!'").output == "'from the owner!'"
    if backend.server is not None:
        assert owner.sandbox_id in backend.server.sandboxes()


def test_envs_reach_the_sandbox_and_the_api_key_does_not(
    make_executor: MakeExecutor, backend: Any
) -> None:
    executor = make_executor(
        envs={"TOOL_TOKEN": "tool-secret"}, internet_access=False, region="us-east-1"
    )
    assert executor("import os\nos.environ['TOOL_TOKEN']").output == "'tool-secret'"
    key = backend.api_key
    leaked = executor(f"[k for k, v in os.environ.items() if {key!r} in v]").output
    assert leaked == "[]"


def test_keep_alive_outlives_the_lifetime(make_executor: MakeExecutor) -> None:
    executor = make_executor(lifetime_ms=2000)  # keep-alive is on by default
    executor("import time")
    started = time.monotonic()
    while time.monotonic() - started < 3.5:  # well past the 2 s lifetime
        executor("time.sleep(0.5)")
    assert executor("'alive'").output == "'alive'"


def test_keep_alive_covers_one_step_longer_than_the_lifetime(
    make_executor: MakeExecutor,
) -> None:
    executor = make_executor(lifetime_ms=3000, keep_alive=True, command_timeout_ms=30_000)
    result = executor("import time\ntime.sleep(7)\n'alive'")
    assert result.output == "'alive'"
    assert executor("'still'").output == "'still'"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lifetime_ms": 60_000, "command_timeout_ms": 120_000},
        {"lifetime_ms": 60_000, "install_timeout_ms": 120_000},
    ],
)
def test_a_timeout_the_lifetime_cannot_cover_is_refused(
    kwargs: dict[str, Any], local_server: LocalServer
) -> None:
    with pytest.raises(ValueError, match="longer than lifetime_ms"):
        LizardExecutor(**kwargs, keep_alive=False)
    # With keep-alive (the default) the lifetime is extended while a step runs: accepted.
    LizardExecutor(**kwargs).cleanup()
    assert local_server.counters()["total"] == 0


@pytest.mark.parametrize("backend", [pytest.param("live", marks=LIVE)], indirect=True)
def test_install_packages_makes_a_new_package_importable(make_executor: MakeExecutor) -> None:
    # Live only: installing from PyPI needs the network.
    executor = make_executor()
    executor("x = 21")
    assert executor.install_packages(["emoji==2.15.0"]) == ["emoji==2.15.0"]
    result = executor("import emoji\nprint(emoji.emojize(':snake:'))\nx * 2")
    assert "🐍" in result.logs
    assert result.output == "42"  # installed into the running kernel, no restart


# ── construction ─────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"command_timeout_ms": 0}, ValueError),
        ({"command_timeout_ms": 1.5}, TypeError),
        ({"allow_pickle": True}, ValueError),
        ({"additional_imports": "numpy"}, TypeError),
        ({"additional_imports": ["--index-url=https://example.com"]}, ValueError),
        ({"size": "huge"}, ValueError),
        ({"api_url": "http://example.com"}, ValueError),
        ({"envs": {"A": 1}}, TypeError),
        ({"live_logs_after": -1}, ValueError),
        ({"sandbox_id": "../x"}, ValueError),
    ],
)
def test_bad_options_are_refused_before_any_request(
    kwargs: dict[str, Any], error: type[Exception], local_server: LocalServer
) -> None:
    with pytest.raises(error):
        LizardExecutor(**kwargs)
    assert local_server.counters()["total"] == 0


def test_smolagents_wildcard_imports_are_accepted(local_server: LocalServer) -> None:
    executor = LizardExecutor(additional_imports=["numpy.*", "PIL.*", "json.*"])
    assert executor._pending_imports == ["numpy", "pillow"]
    executor.cleanup()
    assert local_server.counters()["total"] == 0


def test_the_executor_registry_entry_point_loads_the_executor() -> None:
    (entry,) = [ep for ep in entry_points(group="smolagents.executors") if ep.name == "lizard"]
    assert entry.load() is LizardExecutor


def test_the_0_1_0_sandbox_attribute_warns_and_still_answers(lizard_local: LocalServer) -> None:
    executor = LizardExecutor(template="base")
    try:
        with pytest.warns(DeprecationWarning, match="sandbox_id"):
            sandbox = executor.sandbox
        assert sandbox is not None
        assert executor.sandbox_id is not None
    finally:
        executor.cleanup()
    with pytest.warns(DeprecationWarning, match="sandbox_id"):
        assert executor.sandbox is None
