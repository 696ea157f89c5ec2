"""A prepared environment per task: Inspect's eval loop, a setup run once, samples restored."""

from __future__ import annotations

from pathlib import Path

import anyio
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
from inspect_ai.tool import ToolChoice, ToolInfo, bash

from inspect_lizard import LizardSandboxConfig, LizardSandboxEnvironment
from inspect_lizard._environment import SETUP_LABEL
from lizard_core.config import SandboxConfig
from lizard_core.prepared import prepare_snapshot
from lizard_core.snapshots import delete_snapshots, find_snapshots
from lizard_local import LocalServer

MODEL = "mockllm/model"
SETUP = "mkdir -p /opt/prepared && echo ready-$((6 * 7)) > /opt/prepared/state"


def reads_the_prepared_file(
    messages: list[ChatMessage], tools: list[ToolInfo], choice: ToolChoice, config: GenerateConfig
) -> ModelOutput:
    results = [m.text.strip() for m in messages if isinstance(m, ChatMessageTool)]
    if not results:
        command = "cat /opt/prepared/state; echo $RANDOM > mine.txt; ls | wc -l"
        output = ModelOutput.for_tool_call(MODEL, "bash", {"command": command})
    else:
        output = ModelOutput.from_content(MODEL, results[0].replace("\n", " "))
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def _setup_snapshots() -> list[str]:
    config = SandboxConfig.from_env(integration="inspect")
    found = find_snapshots(config, {"integration": "inspect"})
    return [r.snapshot_id for r in found if r.label == SETUP_LABEL]


def test_ten_samples_start_from_the_tasks_setup_which_runs_once(
    lizard_counters: LocalServer, tmp_path: Path
) -> None:
    before = set(lizard_counters.sandboxes())
    config = LizardSandboxConfig(template="base", lifetime_ms=300_000, setup=SETUP)
    task = Task(
        dataset=[Sample(input=str(n), target="ready-42 1") for n in range(10)],
        solver=[use_tools(bash(timeout=60)), generate()],
        scorer=includes(),
        sandbox=("lizard", config),
    )
    [log] = inspect_eval(
        task,
        model=get_model(MODEL, custom_outputs=reads_the_prepared_file),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    assert log.samples is not None
    assert len(log.samples) == 10
    for sample in log.samples:
        assert sample.scores is not None
        # The prepared file, and only its own new file in its working directory.
        assert sample.scores["includes"].value == "C", sample.output.completion
    routes = lizard_counters.counters()["routes"]
    assert routes["POST /api/sandboxes/{id}/snapshot"] == 1
    # One sandbox for the setup, one per sample: no sample pays the setup.
    assert routes["POST /api/sandboxes"] == 1 + 10
    # The setup once; per sample, Inspect's root probe and the one tool call.
    assert routes["POST /api/sandboxes/{id}/exec"] == 1 + 10 * 2
    assert set(lizard_counters.sandboxes()) == before
    assert _setup_snapshots() == []  # the run's end deleted it


def test_a_failed_setup_fails_the_task_before_any_sample(
    lizard_counters: LocalServer, tmp_path: Path
) -> None:
    before = set(lizard_counters.sandboxes())
    config = LizardSandboxConfig(template="base", setup="echo no such package >&2; exit 4")
    task = Task(
        dataset=[Sample(input="0", target="x")],
        solver=[generate()],
        sandbox=("lizard", config),
    )
    with pytest.raises(Exception, match="exited with code 4"):
        inspect_eval(task, model=MODEL, log_dir=str(tmp_path), display="none")
    assert lizard_counters.counters()["routes"].get("POST /api/sandboxes/{id}/snapshot", 0) == 0
    assert set(lizard_counters.sandboxes()) == before


def test_a_given_snapshot_starts_every_sample_and_is_never_deleted(
    lizard_local: LocalServer,
) -> None:
    settings = SandboxConfig.from_env(integration="inspect")
    mine = prepare_snapshot(settings, SETUP, "my environment").snapshot_id
    given = LizardSandboxConfig(template="base", snapshot=mine)

    async def sample() -> str:
        await LizardSandboxEnvironment.task_init("startup", given)
        environments = await LizardSandboxEnvironment.sample_init("t", given, {})
        try:
            return await environments["default"].read_file("/opt/prepared/state")
        finally:
            await LizardSandboxEnvironment.sample_cleanup("t", given, environments, False)
            await LizardSandboxEnvironment.task_cleanup("shutdown", given, True)

    try:
        assert anyio.run(sample) == "ready-42\n"
        # A snapshot the run was given is the user's: still there.
        assert mine in [r.snapshot_id for r in find_snapshots(settings)]
    finally:
        delete_snapshots(settings, [mine])


@pytest.mark.parametrize(
    "fields", [{"snapshot": "../x"}, {"snapshot": 3}, {"setup": ""}, {"setup": ()}]
)
def test_a_bad_snapshot_or_setup_is_refused_when_the_config_is_built(fields: object) -> None:
    with pytest.raises(ValueError, match=r"snapshot|setup"):
        LizardSandboxConfig(**fields)  # type: ignore[arg-type]
