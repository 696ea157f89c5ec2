"""A ``SandboxAgent`` run through the SDK's ``Runner`` on Lizard sandboxes (lizard-local)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from agents import Runner
from agents.sandbox.snapshot import LocalSnapshotSpec
from scripted_agent import PROGRAM, ScriptedModel, call, final, make_agent, run_config, tool_outputs

from lizard_local import LocalServer
from lizard_local.contract import pids_carrying
from openai_agents_lizard import LizardSandboxClient

HERE = Path(__file__).parent


async def test_a_run_writes_runs_and_reads_then_a_new_process_resumes_it(
    client: LizardSandboxClient, lizard_local: LocalServer, tmp_path: Path
) -> None:
    before = set(lizard_local.sandboxes())
    model = ScriptedModel(
        [
            [call("write_file", "c_write", path="hello.py", content=PROGRAM)],
            [call("exec_command", "c_run", cmd="python3 hello.py > out.txt")],
            [call("read_file", "c_read", path="out.txt")],
            [call("approval", "c_approval")],
        ]
    )
    snapshot = LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    first = await Runner.run(
        make_agent(model),
        "write a program, run it, read its output",
        run_config=run_config(client, snapshot=snapshot),
    )
    outputs = tool_outputs(first.new_items)
    assert outputs[0] == "wrote hello.py"
    assert "Process exited with code 0" in outputs[1]
    assert "to stderr" in outputs[1]  # the shell tool shows the command's stderr
    assert outputs[2] == "42\n"
    assert len(first.interruptions) == 1
    # The runner created the sandbox, so it deleted it at the end of the run.
    assert set(lizard_local.sandboxes()) == before

    state_json = first.to_state().to_json()
    assert lizard_local.api_key not in json.dumps(state_json)
    state_file = tmp_path / "run-state.json"
    state_file.write_text(json.dumps(state_json))

    resumed = subprocess.run(  # noqa: ASYNC221  # the second run, in a new process
        [sys.executable, str(HERE / "scripted_agent.py"), str(state_file)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(HERE)},
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    # The resumed result holds the first run's items too; the new ones come last.
    approved, read_again, listing = json.loads(resumed.stdout.strip().splitlines()[-1])[-3:]
    assert approved == "approved"
    assert read_again == "42\n"  # hydrated from the first run's snapshot
    assert "hello.py" in listing
    assert "out.txt" in listing
    assert set(lizard_local.sandboxes()) == before


async def test_cancelling_a_run_stops_its_command(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    before = set(lizard_local.sandboxes())
    token = "cancel-run-token-7c1f"
    model = ScriptedModel(
        [[call("exec_command", "c_sleep", cmd=f"sleep 600; echo {token}", yield_time_ms=600_000)]]
    )
    run = asyncio.create_task(Runner.run(make_agent(model), "sleep", run_config=run_config(client)))
    for _ in range(300):
        if pids_carrying(token):
            break
        await asyncio.sleep(0.1)
    assert pids_carrying(token), "the command never started"
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(run, 30)
    for _ in range(100):
        if not pids_carrying(token):
            break
        await asyncio.sleep(0.1)
    assert not pids_carrying(token), "the command outlived its cancelled run"
    assert set(lizard_local.sandboxes()) == before, "the cancelled run left its sandbox"


async def test_a_command_that_waits_for_input_is_fed_through_write_stdin(
    client: LizardSandboxClient,
) -> None:
    """The SDK's ``exec_command`` keeps a slow command running; ``write_stdin`` feeds it."""

    def feed(items: Any) -> list[Any]:
        last = str(items[-1]["output"])
        session_id = int(re.search(r"session ID (\d+)", last).group(1))  # type: ignore[union-attr]
        return [call("write_stdin", "c_feed", session_id=session_id, chars="lizard\n")]

    script = "echo ready; read name; echo hello $name"
    model = ScriptedModel(
        [
            [call("exec_command", "c_start", cmd=script, yield_time_ms=500)],
            feed,
            [final("done")],
        ]
    )
    result = await Runner.run(make_agent(model), "greet", run_config=run_config(client))
    assert result.final_output == "done"
    started, fed = tool_outputs(result.new_items)
    assert "ready" in started
    assert "Process running with session ID" in started
    assert "hello lizard" in fed
    assert "Process exited with code 0" in fed
    assert {"exec_command", "write_stdin"} <= model.tool_names
