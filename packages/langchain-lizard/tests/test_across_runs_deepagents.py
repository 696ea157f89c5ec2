"""Sessions across runs under Deep Agents: keep (paused), attach from a new process, pause and
resume, a volume's files across sandboxes, a snapshot's files in a new sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from deepagents import create_deep_agent
from langchain_core.messages import AIMessage
from scripted_agent import ScriptedModel, call

from langchain_lizard import LizardSandbox, LizardSandboxError
from lizard_core.config import SandboxConfig
from lizard_core.inventory import find_sandboxes
from lizard_core.prepared import prepare_snapshot
from lizard_core.snapshots import delete_snapshots
from lizard_core.volumes import delete_volume
from lizard_local import LocalServer

TESTS = Path(__file__).parent


def _status(sandbox_id: str) -> str | None:
    config = SandboxConfig.from_env()
    return next((r.status for r in find_sandboxes(config) if r.sandbox_id == sandbox_id), None)


def test_a_sandbox_kept_by_one_run_is_attached_by_the_next_process(
    lizard_local: LocalServer, tmp_path: Path
) -> None:
    backend = LizardSandbox(template="base", lifetime_ms=300_000)
    model = ScriptedModel(
        messages=iter(
            [
                call("write_file", "w", file_path="/workspace/plan.md", content="run one\n"),
                AIMessage(content="Saved."),
            ]
        )
    )
    create_deep_agent(model=model, backend=backend).invoke(
        {"messages": [{"role": "user", "content": "Write the plan."}]}
    )
    backend.close(keep=True)
    kept = backend.sandbox_id
    assert kept is not None
    assert _status(kept) == "paused"
    script = tmp_path / "second_run.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json
            from deepagents import create_deep_agent
            from langchain_core.messages import AIMessage
            from scripted_agent import ScriptedModel, call, tool_results
            from langchain_lizard import LizardSandbox, LizardSandboxError

            steps = [call("execute", "x", command="cat /workspace/plan.md"), AIMessage("ok")]
            with LizardSandbox(sandbox_id={kept!r}) as backend:  # attached: left as it is
                model = ScriptedModel(messages=iter(steps))
                agent = create_deep_agent(model=model, backend=backend)
                state = agent.invoke({{"messages": [{{"role": "user", "content": "Go on."}}]}})
            print(json.dumps(tool_results(state["messages"])["x"]))
            """
        ),
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    try:
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env
        )
        assert done.returncode == 0, done.stderr
        assert "run one" in json.loads(done.stdout.strip().splitlines()[-1])
        assert _status(kept) == "running"  # the attach resumed it
    finally:
        LizardSandbox(sandbox_id=kept).kill()
    assert kept not in lizard_local.sandboxes()


PAUSE = "POST /api/sandboxes/{id}/pause"


def test_close_keep_destroys_a_sandbox_whose_pause_fails(lizard_local: LocalServer) -> None:
    backend = LizardSandbox(template="base", lifetime_ms=300_000)
    assert backend.execute("true").exit_code == 0
    sandbox_id = backend.sandbox_id
    lizard_local.inject_fault(PAUSE, status=500, count=3)  # every retry of the pause fails
    with pytest.raises(LizardSandboxError):
        backend.close(keep=True)
    assert sandbox_id not in lizard_local.sandboxes()  # not left running, billing
    backend.close(keep=True)  # done: nothing left to pause or destroy


async def test_aclose_keep_destroys_a_sandbox_whose_pause_fails(lizard_local: LocalServer) -> None:
    backend = LizardSandbox(template="base", lifetime_ms=300_000)
    assert (await backend.aexecute("true")).exit_code == 0
    sandbox_id = backend.sandbox_id
    lizard_local.inject_fault(PAUSE, status=500, count=3)
    with pytest.raises(LizardSandboxError):
        await backend.aclose(keep=True)
    assert sandbox_id not in lizard_local.sandboxes()


def test_close_keep_of_a_sandbox_already_gone_is_done(lizard_local: LocalServer) -> None:
    backend = LizardSandbox(template="base", lifetime_ms=300_000)
    assert backend.execute("true").exit_code == 0
    lizard_local.expire(str(backend.sandbox_id))
    backend.close(keep=True)  # nothing to pause, nothing billing: no error


def test_pause_and_resume_keep_the_files(lizard_local: LocalServer) -> None:
    with LizardSandbox(template="base", lifetime_ms=300_000) as backend:
        backend.pause()  # no sandbox yet: nothing to do
        assert backend.sandbox_id is None
        assert backend.execute("echo kept > /tmp/f").exit_code == 0
        backend.pause()
        assert backend.paused
        assert _status(str(backend.sandbox_id)) == "paused"
        assert backend.execute("cat /tmp/f").output == "kept\n"  # resumed on use
        assert not backend.paused
        backend.pause()
        backend.resume()
        assert _status(str(backend.sandbox_id)) == "running"


async def test_a_volumes_files_outlive_the_sandbox(lizard_local: LocalServer) -> None:
    name = f"lc-{uuid.uuid4().hex[:8]}"
    try:
        async with LizardSandbox(template="base", volume=name) as first:
            await first.aupload_files([("/workspace/result.txt", b"saved")])
        async with LizardSandbox(template="base", volume=name) as later:
            [read] = await later.adownload_files(["/workspace/result.txt"])
            assert read.content == b"saved"
    finally:
        delete_volume(SandboxConfig.from_env(), name)


def test_a_sandbox_starts_from_a_snapshot(lizard_local: LocalServer) -> None:
    config = SandboxConfig.from_env(template="base")
    snapshot = prepare_snapshot(config, "echo ready > /home/user/state").snapshot_id
    try:
        with LizardSandbox(snapshot_id=snapshot) as backend:
            assert backend.execute("cat /home/user/state").output == "ready\n"
    finally:
        delete_snapshots(config, [snapshot])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sandbox_id": "sbx_1", "volume": "v"},
        {"sandbox_id": "sbx_1", "snapshot_id": "snap_1"},
        {"volume": "no spaces"},
        {"snapshot_id": "../x"},
        {"idle_pause_s": -1},
    ],
)
def test_bad_session_arguments_are_refused_before_any_request(
    lizard_counters: LocalServer, kwargs: dict[str, object]
) -> None:
    with pytest.raises((TypeError, ValueError)):
        LizardSandbox(**kwargs)  # type: ignore[arg-type]
    assert lizard_counters.counters()["total"] == 0


def test_keep_must_be_a_bool(lizard_local: LocalServer) -> None:
    with LizardSandbox(template="base") as backend, pytest.raises(TypeError):
        backend.close(keep="yes")  # type: ignore[arg-type]
