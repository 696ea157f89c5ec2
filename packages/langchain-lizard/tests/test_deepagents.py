"""``LizardSandbox`` under Deep Agents: request costs, both templates, 0.7 semantics, an agent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from deepagents import create_deep_agent
from deepagents.backends.sandbox import BaseSandbox
from langchain_core.messages import AIMessage
from scripted_agent import PROGRAM, SCRIPT, ScriptedModel, agent_model, call, tool_results

from langchain_lizard import LizardSandbox
from langchain_lizard._sandbox import WRITE_REPLACES
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"
CAPTURE_OFFLOAD = hasattr(BaseSandbox, "execute_with_offload")
"""Deep Agents 0.7 can save a large output in the sandbox (capture offload); 0.6 cannot."""
NOTES = "/workspace/notes.txt"


@pytest.fixture(scope="module")
def shared(lizard_local: LocalServer) -> Iterator[LizardSandbox]:
    """One sandbox for the cost tests, with a file to read, edit and search."""
    with LizardSandbox(lifetime_ms=600_000) as backend:
        assert backend.upload_files([(NOTES, b"alpha\nbeta\ngamma\n")])[0].error is None
        yield backend


TOOLS: dict[str, Callable[[LizardSandbox], Any]] = {
    "ls": lambda b: b.ls("/workspace"),
    "read": lambda b: b.read(NOTES),
    "write": lambda b: b.write("/workspace/new/written.txt", "text"),
    "edit": lambda b: b.edit(NOTES, "beta", "BETA"),
    "grep": lambda b: b.grep("gamma", "/workspace"),
    "glob": lambda b: b.glob("*.txt", "/workspace"),
}
ATOOLS: dict[str, Callable[[LizardSandbox], Any]] = {
    "ls": lambda b: b.als("/workspace"),
    "read": lambda b: b.aread(NOTES),
    "write": lambda b: b.awrite("/workspace/new/awritten.txt", "text"),
    "edit": lambda b: b.aedit(NOTES, "gamma", "GAMMA"),
    "grep": lambda b: b.agrep("alpha", "/workspace"),
    "glob": lambda b: b.aglob("*.txt", "/workspace"),
}


def _expected_cost(tool: str) -> int:
    # deepagents 0.6 keeps its own write, which checks for an existing file in a command first.
    return 2 if tool == "write" and not WRITE_REPLACES else 1


def _assert_cost(server: LocalServer, tool: str, result: Any) -> None:
    assert getattr(result, "error", None) is None, result
    counters = server.counters()
    assert counters["routes"] == {EXEC: _expected_cost(tool)}
    assert counters["total"] == _expected_cost(tool)


@pytest.mark.parametrize("tool", list(TOOLS))
def test_each_file_tool_is_one_request(
    shared: LizardSandbox, lizard_counters: LocalServer, tool: str
) -> None:
    _assert_cost(lizard_counters, tool, TOOLS[tool](shared))


@pytest.mark.parametrize("tool", list(ATOOLS))
async def test_each_async_file_tool_is_one_request(
    shared: LizardSandbox, lizard_counters: LocalServer, tool: str
) -> None:
    _assert_cost(lizard_counters, tool, await ATOOLS[tool](shared))


def test_a_small_upload_and_download_are_one_request_each(
    shared: LizardSandbox, lizard_counters: LocalServer
) -> None:
    shared.upload_files([("/tmp/one", b"x" * 10_000)])
    assert lizard_counters.counters()["total"] == 1
    lizard_counters.reset_counters()
    assert shared.download_files(["/tmp/one"])[0].content == b"x" * 10_000
    assert lizard_counters.counters()["total"] == 1


@pytest.mark.parametrize("template", ["base", "interpreter"])
def test_every_tool_works_on_both_templates(lizard_local: LocalServer, template: str) -> None:
    with LizardSandbox(template=template, lifetime_ms=300_000) as backend:
        assert backend.write("/workspace/src/app.py", "print('hi')\n# TODO fix\n").error is None
        assert backend.edit("/workspace/src/app.py", "hi", "hello").occurrences == 1
        read = backend.read("/workspace/src/app.py")
        assert read.file_data is not None
        assert "print('hello')" in read.file_data["content"]
        ls = backend.ls("/workspace/src")
        assert ls.entries == [{"path": "/workspace/src/app.py", "is_dir": False}]
        grep = backend.grep("TODO", "/workspace")
        assert grep.matches is not None
        assert [(m["path"], m["line"]) for m in grep.matches] == [("/workspace/src/app.py", 2)]
        glob = backend.glob("**/*.py", "/workspace")
        assert glob.matches is not None
        # deepagents 0.7 returns absolute paths, 0.6 paths relative to the search root.
        assert [m["path"] for m in glob.matches] == [
            "/workspace/src/app.py" if WRITE_REPLACES else "src/app.py"
        ]
        assert backend.execute("python3 --version").exit_code == 0


@pytest.mark.skipif(not WRITE_REPLACES, reason="deepagents 0.6 refuses to write an existing file")
def test_write_replaces_an_existing_file_as_deepagents_0_7_does(backend: LizardSandbox) -> None:
    assert backend.write("/tmp/w.txt", "first").error is None
    assert backend.write("/tmp/w.txt", "second").error is None
    assert backend.download_files(["/tmp/w.txt"])[0].content == b"second"


@pytest.mark.skipif(not WRITE_REPLACES, reason="deepagents 0.6 returns relative glob paths")
def test_glob_returns_absolute_paths_of_files_as_deepagents_0_7_does(
    backend: LizardSandbox,
) -> None:
    backend.upload_files([("/tmp/g/a.txt", b""), ("/tmp/g/sub/b.txt", b""), ("/tmp/g/c", b"")])
    result = backend.glob("**/*.txt", "/tmp/g")
    assert result.matches is not None
    assert sorted(m["path"] for m in result.matches) == ["/tmp/g/a.txt", "/tmp/g/sub/b.txt"]


# ── an agent ─────────────────────────────────────────────────────────────


def test_a_deep_agent_writes_runs_and_reads_a_file_in_the_sandbox(backend: LizardSandbox) -> None:
    agent = create_deep_agent(model=agent_model(), backend=backend)
    state = agent.invoke({"messages": [{"role": "user", "content": "Print Fibonacci numbers."}]})
    results = tool_results(state["messages"])
    assert "0 1 1 2 3 5 8 13 21 34" in results["x"]
    assert "0 1 1 2 3 5 8 13 21 34" in results["r"]
    assert backend.download_files([SCRIPT])[0].content == PROGRAM.encode()
    assert state["messages"][-1].content.startswith("The first ten Fibonacci")


async def test_a_deep_agent_runs_asynchronously(abackend: LizardSandbox) -> None:
    agent = create_deep_agent(model=agent_model(), backend=abackend)
    state = await agent.ainvoke({"messages": [{"role": "user", "content": "Fibonacci, async."}]})
    results = tool_results(state["messages"])
    assert "0 1 1 2 3 5 8 13 21 34" in results["x"]
    assert "0 1 1 2 3 5 8 13 21 34" in results["r"]


# ── long sessions and long output, as a deep agent meets them ───────────


def _scripted(*commands: str) -> ScriptedModel:
    steps = [call("execute", f"c{n}", command=command) for n, command in enumerate(commands)]
    return ScriptedModel(messages=iter([*steps, AIMessage(content="Done.")]))


def test_a_deep_agent_keeps_its_sandbox_past_the_lifetime_while_it_works(
    lizard_local: LocalServer,
) -> None:
    # The defaults keep a working session's sandbox: a 2 s lifetime here (30 minutes by
    # default), outlived by three commands 1.5 s apart.
    with LizardSandbox(lifetime_ms=2_000) as backend:
        steps = [f"sleep 1.5; echo step{n}" for n in range(3)]
        agent = create_deep_agent(model=_scripted(*steps), backend=backend)
        state = agent.invoke({"messages": [{"role": "user", "content": "Work slowly."}]})
        results = tool_results(state["messages"])
        assert [results[f"c{n}"].split("\n")[0] for n in range(3)] == ["step0", "step1", "step2"]
        assert backend.sandbox_id in lizard_local.sandboxes()


def test_a_deep_agent_gets_the_end_and_exit_code_of_a_huge_output(
    lizard_local: LocalServer,
) -> None:
    # 15 MB of output, past the 10 MiB a command may write: under Deep Agents' capture offload
    # the command runs to its end (it is not stopped), what Deep Agents keeps of the output is
    # saved in the sandbox, and the model gets a preview of its head and tail and the exit code.
    with LizardSandbox(lifetime_ms=300_000) as backend:
        agent = create_deep_agent(
            model=_scripted("seq 1 2000000; echo the-end; exit 3"), backend=backend
        )
        state = agent.invoke({"messages": [{"role": "user", "content": "Count."}]})
        seen = tool_results(state["messages"])["c0"]
    assert len(seen) < 100_000
    if not CAPTURE_OFFLOAD:
        # deepagents 0.6 has no capture offload: the command is stopped at 10 MiB, and the model
        # gets Deep Agents' preview of the head and tail kept, which says so.
        assert "was stopped" in seen
        return
    assert "[Command failed with exit code 3]" in seen
    assert "\n1\n2\n3\n" in seen
    assert "lines truncated" in seen


def test_output_past_the_limit_gives_its_head_and_tail_and_says_so(
    backend: LizardSandbox,
) -> None:
    limited = LizardSandbox(sandbox_id=backend.id, output_limit=64 * 1024)
    response = limited.execute("seq 1 100000")
    assert response.truncated
    assert response.output.startswith("1\n2\n")
    assert "cut from the middle of the output" not in response.output  # 64 KiB fits
    assert "was stopped" in response.output
    huge = LizardSandbox(sandbox_id=backend.id, output_limit=1024 * 1024)
    clipped = huge.execute("seq 1 1000000")
    head, _, rest = clipped.output.partition("\n[... ")
    assert head.startswith("1\n2\n")
    assert "cut from the middle of the output" in rest
    assert "was stopped" in rest
    assert len(clipped.output) < 101_000
