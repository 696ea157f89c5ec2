"""An Inspect eval end to end: a scripted model's bash() and python() calls run in Lizard.

Inspect's ``mockllm`` model plays the agent: it calls ``bash``, then ``python``, then answers
with what the tools returned, so the score proves the tools ran in the sandbox. Three samples
run concurrently, each in a sandbox of its own that sample cleanup destroys.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import (
    ChatMessage,
    ChatMessageTool,
    GenerateConfig,
    ModelOutput,
    ModelUsage,
    get_model,
)
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolChoice, ToolInfo, bash, python

from inspect_lizard import LizardSandboxConfig
from lizard_core.config import SandboxConfig
from lizard_core.inventory import find_sandboxes
from lizard_core.session import Session
from lizard_local import LocalServer

MODEL = "mockllm/model"


def scripted_agent(
    messages: list[ChatMessage], tools: list[ToolInfo], choice: ToolChoice, config: GenerateConfig
) -> ModelOutput:
    """bash first, python second, then answer with the python tool's output."""
    output = _next_step(messages)
    # Usage given, so that mockllm does not count tokens (tiktoken would fetch its tables).
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def _next_step(messages: list[ChatMessage]) -> ModelOutput:
    results = [m.text.strip() for m in messages if isinstance(m, ChatMessageTool)]
    factors = messages[-1].text.split() if not results else []
    if not results:
        command = f"echo $(({factors[0]} * {factors[1]})) > product.txt; ls *.txt | wc -l"
        return ModelOutput.for_tool_call(MODEL, "bash", {"command": command})
    if len(results) == 1:
        code = "print(open('product.txt').read().strip(), end='')"
        return ModelOutput.for_tool_call(MODEL, "python", {"code": code})
    return ModelOutput.from_content(MODEL, f"files seen: {results[0]}; product: {results[1]}")


def test_a_scripted_agent_uses_bash_and_python_in_one_sandbox_per_sample(
    lizard_counters: LocalServer, tmp_path: Path
) -> None:
    before = set(lizard_counters.sandboxes())
    task = Task(
        dataset=[Sample(input=f"{a} {b}", target=str(a * b)) for a, b in [(6, 7), (3, 5), (9, 9)]],
        solver=[use_tools(bash(timeout=60), python(timeout=60)), generate()],
        scorer=includes(),
        sandbox=("lizard", LizardSandboxConfig(template="base", lifetime_ms=300_000)),
    )
    [log] = inspect_eval(
        task,
        model=get_model(MODEL, custom_outputs=scripted_agent),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    assert log.samples is not None
    for sample in log.samples:
        assert sample.scores is not None
        assert sample.scores["includes"].value == "C", sample.output.completion
        # Each sample saw only its own file: its sandbox was its own.
        assert "files seen: 1;" in sample.output.completion
    routes = lizard_counters.counters()["routes"]
    assert routes["POST /api/sandboxes"] == 3
    assert routes["DELETE /api/sandboxes/{id}"] == 3
    # One exec per tool call (two per sample), and one for the root-access probe Inspect itself
    # runs at sample init.
    assert routes["POST /api/sandboxes/{id}/exec"] == 3 * (2 + 1)
    assert set(lizard_counters.sandboxes()) == before


def sleeping_agent(
    messages: list[ChatMessage], tools: list[ToolInfo], choice: ToolChoice, config: GenerateConfig
) -> ModelOutput:
    """Calls bash with a command that outlives the sample's time limit."""
    output = ModelOutput.for_tool_call(MODEL, "bash", {"command": "sleep 120; echo done"})
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def test_a_sample_stopped_by_its_time_limit_leaves_no_sandbox_or_command(
    lizard_counters: LocalServer, tmp_path: Path
) -> None:
    before = set(lizard_counters.sandboxes())
    task = Task(
        dataset=[Sample(input="wait", target="done")],
        solver=[use_tools(bash()), generate()],
        scorer=includes(),
        sandbox=("lizard", LizardSandboxConfig(template="base", lifetime_ms=300_000)),
        time_limit=5,
    )
    [log] = inspect_eval(
        task,
        model=get_model(MODEL, custom_outputs=sleeping_agent),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples is not None
    [sample] = log.samples
    assert sample.limit is not None
    assert sample.limit.type == "time"
    routes = lizard_counters.counters()["routes"]
    assert routes["POST /api/sandboxes"] == 1
    assert routes["DELETE /api/sandboxes/{id}"] == 1
    assert set(lizard_counters.sandboxes()) == before


def bash_once(
    messages: list[ChatMessage], tools: list[ToolInfo], choice: ToolChoice, config: GenerateConfig
) -> ModelOutput:
    """One bash call, then an answer with its output."""
    results = [m.text.strip() for m in messages if isinstance(m, ChatMessageTool)]
    if not results:
        output = ModelOutput.for_tool_call(MODEL, "bash", {"command": "echo ran"})
    else:
        output = ModelOutput.from_content(MODEL, results[0])
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def _one_sample_task(config: LizardSandboxConfig) -> Task:
    return Task(
        dataset=[Sample(input="run", target="ran")],
        solver=[use_tools(bash(timeout=60)), generate()],
        scorer=includes(),
        sandbox=("lizard", config),
    )


def test_the_runs_shutdown_cleanup_destroys_a_sandbox_whose_sample_cleanup_failed(
    lizard_counters: LocalServer, tmp_path: Path
) -> None:
    # The sample's own DELETE is refused (a lasting error, not retried): Inspect logs it and
    # goes on; at the end of the run it calls task_cleanup("shutdown", ...), which must find
    # the sandbox and destroy it.
    before = set(lizard_counters.sandboxes())
    lizard_counters.inject_fault("DELETE /api/sandboxes/{id}", status=403, count=1)
    [log] = inspect_eval(
        _one_sample_task(LizardSandboxConfig(template="base", lifetime_ms=300_000)),
        model=get_model(MODEL, custom_outputs=bash_once),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    routes = lizard_counters.counters()["routes"]
    assert routes["POST /api/sandboxes"] == 1
    assert routes["DELETE /api/sandboxes/{id}"] == 2  # the refused one, then shutdown's
    assert set(lizard_counters.sandboxes()) == before


def writes_a_file(
    messages: list[ChatMessage], tools: list[ToolInfo], choice: ToolChoice, config: GenerateConfig
) -> ModelOutput:
    """One bash call that leaves a file, then an answer with its output."""
    results = [m.text.strip() for m in messages if isinstance(m, ChatMessageTool)]
    if not results:
        output = ModelOutput.for_tool_call(MODEL, "bash", {"command": "echo ran | tee kept.txt"})
    else:
        output = ModelOutput.from_content(MODEL, results[0])
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def test_no_sandbox_cleanup_keeps_the_sandbox_paused_for_a_later_process(
    lizard_counters: LocalServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = set(lizard_counters.sandboxes())
    caplog.set_level(logging.WARNING, logger="inspect_lizard")
    [log] = inspect_eval(
        _one_sample_task(LizardSandboxConfig(template="base", lifetime_ms=300_000)),
        model=get_model(MODEL, custom_outputs=writes_a_file),
        log_dir=str(tmp_path),
        display="none",
        sandbox_cleanup=False,
    )
    assert log.status == "success", log.error
    [kept] = set(lizard_counters.sandboxes()) - before
    try:
        assert f"Kept Lizard sandbox {kept} paused" in caplog.text
        [record] = [r for r in find_sandboxes(SandboxConfig.from_env()) if r.sandbox_id == kept]
        assert record.status == "paused"
        # A later run, in a new process: the shell the log names attaches by id, resumes the
        # sandbox and finds the sample's file.
        done = subprocess.run(
            [sys.executable, "-m", "inspect_lizard.shell", kept, "--cwd", "/workspace"],
            input="cat kept.txt\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "ran\n"
    finally:
        Session(SandboxConfig.from_env(), sandbox_id=kept).destroy()


def test_keep_alive_carries_a_sample_past_its_sandboxs_lifetime(
    lizard_counters: LocalServer, tmp_path: Path
) -> None:
    # A 2 s lifetime and three tool calls 1.5 s apart: without keep-alive the sandbox expires
    # mid-sample and the tools report it unavailable.
    def slow_agent(
        messages: list[ChatMessage], tools: list[ToolInfo], choice: ToolChoice, c: GenerateConfig
    ) -> ModelOutput:
        results = [m.text.strip() for m in messages if isinstance(m, ChatMessageTool)]
        if len(results) < 3:
            command = f"sleep 1.5; echo step{len(results)}"
            output = ModelOutput.for_tool_call(MODEL, "bash", {"command": command})
        else:
            output = ModelOutput.from_content(MODEL, " ".join(results))
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return output

    task = Task(
        dataset=[Sample(input="go", target="step0 step1 step2")],
        solver=[use_tools(bash(timeout=60)), generate()],
        scorer=includes(),
        sandbox=("lizard", LizardSandboxConfig(template="base", lifetime_ms=2_000)),
    )
    [log] = inspect_eval(
        task,
        model=get_model(MODEL, custom_outputs=slow_agent),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.samples is not None
    [sample] = log.samples
    assert sample.output.completion == "step0 step1 step2", sample.output.completion
