"""``LizardSandbox`` under Deep Agents: request costs, both templates, 0.7 semantics, an agent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from deepagents import create_deep_agent
from scripted_agent import PROGRAM, SCRIPT, agent_model, tool_results

from langchain_lizard import LizardSandbox
from langchain_lizard._sandbox import WRITE_REPLACES
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"
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
