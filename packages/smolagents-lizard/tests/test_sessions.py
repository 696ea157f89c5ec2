"""Sessions across runs: keep, pause, attach from a new process, files in and out, fork.

Through smolagents' own entry point (``CodeAgent`` with a scripted model) on lizard-local, on the
``base`` template (no Jupyter needed). lizard-local's pause and fork keep files only, so a
resumed or forked kernel starts fresh: the model must be told, and is.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from lizard import Sandbox
from smolagents import CodeAgent, tool
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents_support import ScriptedModel, code

from lizard_core.config import SandboxConfig
from lizard_local import LocalServer
from smolagents_lizard import LizardExecutor

LOST = "every variable, import and function defined in earlier steps is gone"
RESUMED = "The sandbox was paused and has been resumed"
# The host's heap may grow by this much moving a file either way, whatever its size (a few
# 4 MiB chunks; lizard_core's own transfer test measures the figures the README gives).
STREAMED_PEAK_BYTES = 32 * 1024 * 1024


def _executor(**kwargs: Any) -> LizardExecutor:
    kwargs.setdefault("template", "base")
    kwargs.setdefault("lifetime_ms", 300_000)
    return LizardExecutor(logger=AgentLogger(LogLevel.OFF), **kwargs)


def _agent(executor: LizardExecutor, *replies: str, **kwargs: Any) -> CodeAgent:
    return CodeAgent(
        tools=kwargs.pop("tools", []),
        model=ScriptedModel(*replies),
        executor=executor,
        max_steps=len(replies),
        verbosity_level=LogLevel.OFF,
        **kwargs,
    )


def _status(sandbox_id: str) -> str:
    return str(Sandbox(sandbox_id, **SandboxConfig.from_env().api_kwargs()).get_info().status)


# Run 2 of the acceptance test, in a process of its own: only the saved id crosses over.
RUN_2 = """
import json, sys
from smolagents import CodeAgent
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents_support import ScriptedModel, code
from smolagents_lizard import LizardExecutor

executor = LizardExecutor(sandbox_id=sys.argv[1], keep=False, logger=AgentLogger(LogLevel.OFF))
model = ScriptedModel(
    code("final_answer([open('/home/user/notes.txt').read(), 'notes' in globals(), seed])")
)
with CodeAgent(
    tools=[], model=model, executor=executor, max_steps=1, verbosity_level=LogLevel.OFF
) as agent:
    answer = agent.run("Carry on.", additional_args={"seed": 2})
print(json.dumps({"answer": answer, "told": agent.memory.steps[-1].observations or ""}))
"""


def test_a_kept_paused_session_is_attached_from_a_new_process(lizard_local: LocalServer) -> None:
    executor = _executor(keep=True)
    with _agent(
        executor,
        code("notes = 'draft 1'\nopen('/home/user/notes.txt', 'w').write(notes)\nfinal_answer(1)"),
    ) as agent:
        assert agent.run("Take notes.", additional_args={"seed": 1}) == 1
        executor.pause()
        saved = executor.sandbox_id
    # The agent's exit cleaned the executor up: with keep=True the sandbox stays, paused.
    assert saved in lizard_local.sandboxes()
    assert _status(saved) == "paused"

    tests = str(Path(__file__).parent)
    env = {**os.environ, **lizard_local.env, "PYTHONPATH": tests}
    run = subprocess.run(
        [sys.executable, "-c", RUN_2, saved],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    # The files are there; the kernel's memory is not, and the model was told why.
    assert outcome["answer"] == ["draft 1", False, 2]
    assert RESUMED in outcome["told"]
    assert LOST in outcome["told"]
    assert saved not in lizard_local.sandboxes()  # keep=False: run 2 deleted it


def test_keep_decides_what_cleanup_does(lizard_local: LocalServer) -> None:
    with pytest.raises(TypeError, match="keep"):
        _executor(keep="yes")
    owner = _executor()  # keep=None: deletes what it created...
    try:
        owner("x = 1")
        guest = _executor(sandbox_id=owner.sandbox_id)  # ...and leaves what it attached to
        assert guest("x + 1").output == "2"
        guest.cleanup()
        assert owner.sandbox_id in lizard_local.sandboxes()
        ender = _executor(sandbox_id=owner.sandbox_id, keep=False)
        ender("x")
        ender.cleanup()
        assert owner.sandbox_id not in lizard_local.sandboxes()
    finally:
        owner.cleanup()  # already gone after the test's own checks: no error


def test_an_idle_session_pauses_itself_and_the_next_step_resumes_it(
    lizard_local: LocalServer,
) -> None:
    with _executor(idle_pause_s=0.5) as executor:
        assert executor("y = 5\ny").output == "5"
        for _ in range(100):
            if _status(str(executor.sandbox_id)) == "paused":
                break
            time.sleep(0.1)
        assert _status(str(executor.sandbox_id)) == "paused"
        step = executor("'y' in globals()")
        assert step.output == "False"
        assert RESUMED in step.logs
        assert LOST in step.logs


@pytest.mark.parametrize("size", [1024, 64 * 1024 * 1024], ids=["1KiB", "64MiB"])
def test_files_go_in_and_out_streamed_with_exact_bytes(
    lizard_local: LocalServer, tmp_path: Path, size: int
) -> None:
    source, back = tmp_path / "in.bin", tmp_path / "out.bin"
    with source.open("wb") as out:
        for start in range(0, size, 1 << 20):
            out.write(os.urandom(min(1 << 20, size - start)))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    with _executor() as executor:
        tracemalloc.start()
        try:
            assert executor.upload(source, "/home/user/data/in.bin") == size
            # The code in the sandbox sees exactly these bytes, and makes a file of its own.
            step = executor(
                "import hashlib, shutil\n"
                "shutil.copy('/home/user/data/in.bin', '/home/user/data/out.bin')\n"
                "hashlib.sha256(open('/home/user/data/in.bin', 'rb').read()).hexdigest()"
            )
            assert step.output == repr(digest)
            tracemalloc.reset_peak()
            assert executor.download("/home/user/data/out.bin", back) == size
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert hashlib.sha256(back.read_bytes()).hexdigest() == digest
        assert peak < STREAMED_PEAK_BYTES, peak
        with pytest.raises(FileNotFoundError):
            executor.download("/home/user/data/missing", tmp_path / "m")
        with pytest.raises(ValueError, match="max_bytes"):
            executor.download("/home/user/data/out.bin", tmp_path / "m", max_bytes=size - 1)
        assert not (tmp_path / "m").exists()


@tool
def shout(text: str) -> str:
    """Shout.

    Args:
        text: what to shout
    """
    return text.upper() + "!"


def test_fork_gives_executors_that_continue_from_this_one(lizard_local: LocalServer) -> None:
    with _executor() as executor:
        agent = _agent(
            executor,
            code("base = 41\nopen('/tmp/plan', 'w').write('base')\nfinal_answer(base)"),
            tools=[shout],
        )
        assert agent.run("Prepare.", additional_args={"seed": 7}) == 41
        forks = executor.fork(2)
        try:
            assert len({f.sandbox_id for f in forks} | {executor.sandbox_id}) == 3
            for n, fork in enumerate(forks):
                step = fork(f"[open('/tmp/plan').read(), shout('{n}'), seed, 'base' in globals()]")
                # Files carried over, tools and variables defined again; lizard-local cannot
                # copy the kernel's memory, so the model is told what was lost.
                assert step.output == f"['base', '{n}!', 7, False]"
                assert "fork that booted fresh" in step.logs
                assert LOST in step.logs
            assert executor("base + 1").output == "42"  # the source carries on
        finally:
            for fork in forks:
                fork.cleanup()
        assert not {f.sandbox_id for f in forks} & set(lizard_local.sandboxes())
        with pytest.raises(ValueError, match="count"):
            executor.fork(0)
