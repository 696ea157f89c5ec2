"""``LizardPlugin`` keeps 0.1.1's interface, now on ``lizard_core``, without its limits."""

from __future__ import annotations

import base64
import os
from types import SimpleNamespace
from typing import Any

import pytest
from adk_support import ScriptedModel, call, function_responses, run_agent, text
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import InMemoryRunner
from google.adk.tools.function_tool import FunctionTool

from lizard_adk import LizardPlugin
from lizard_adk.plugin import LizardPlugin as FromPluginModule
from lizard_local import LocalServer


def tool_context(invocation_id: str = "inv") -> Any:
    return SimpleNamespace(invocation_id=invocation_id)


def test_the_0_1_import_paths_and_tools_are_kept(lizard_counters: LocalServer) -> None:
    assert FromPluginModule is LizardPlugin
    plugin = LizardPlugin(command_timeout_ms=3_600_000)  # 0.1.1 capped this at 120 000
    assert plugin.name == "lizard_sandboxes"
    declared = {}
    for tool in plugin.get_tools():
        assert isinstance(tool, FunctionTool)
        declaration = tool._get_declaration()
        assert declaration is not None
        # ADK builds a JSON schema or a genai Schema, depending on its version.
        json_schema: Any = declaration.parameters_json_schema
        if json_schema is not None:
            names = json_schema["properties"]
        else:
            assert declaration.parameters is not None
            names = declaration.parameters.properties or {}
        declared[tool.name] = sorted(names)
    assert declared == {
        "lizard_execute_command": ["command", "cwd"],
        "lizard_execute_code": ["code"],
        "lizard_read_file": ["path"],
        "lizard_write_file": ["content", "encoding", "path"],
    }
    assert lizard_counters.counters()["total"] == 0


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"command_timeout_ms": 0}, ValueError),
        ({"command_timeout_ms": 1.5}, TypeError),
        ({"size": "enormous"}, ValueError),
        ({"project_id": ""}, ValueError),
        ({"sandbox_id": "sbx-1"}, ValueError),  # a sandbox per invocation: nothing to attach
    ],
)
def test_bad_options_are_refused_before_any_request(
    lizard_counters: LocalServer, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        LizardPlugin(**kwargs)
    assert lizard_counters.counters()["total"] == 0


async def test_files_of_any_content_within_max_read_bytes(connection: dict[str, Any]) -> None:
    plugin = LizardPlugin(max_read_bytes=4 * 1024 * 1024, **connection)
    context = tool_context()
    try:
        big = "é" * (800 * 1024)  # 1.6 MB of UTF-8: over the default 1 MiB, under 4 MiB
        await plugin.lizard_write_file("/tmp/big.txt", big, context)
        assert await plugin.lizard_read_file("/tmp/big.txt", context) == {"content": big}
        raw = os.urandom(1024) + b"\xff\xfe"
        encoded = base64.b64encode(raw).decode()
        written = await plugin.lizard_write_file("/tmp/raw.bin", encoded, context, "base64")
        assert written == {"path": "/tmp/raw.bin", "written": True}
        assert await plugin.lizard_read_file("/tmp/raw.bin", context) == {"content_base64": encoded}
        with pytest.raises(ValueError, match="encoding"):
            await plugin.lizard_write_file("/tmp/x", "x", context, "latin-1")
    finally:
        await plugin.close()


async def test_the_model_gets_bounded_files_and_head_and_tail_of_output(
    lizard_local: LocalServer,
) -> None:
    # Through the Runner: a 64 MiB file is refused in the tool's answer (not read, not put in
    # the model's context); long output keeps its end and exit code; a command past
    # output_limit is stopped and says so; the invocation goes on.
    plugin = LizardPlugin()  # the defaults: 1 MiB reads, 100,000 characters, 10 MiB a stream
    model = ScriptedModel(
        [
            call("lizard_execute_command", command="head -c 67108864 /dev/zero > /tmp/huge"),
            call("lizard_read_file", path="/tmp/huge"),
            call("lizard_execute_command", command="seq 1 20000; exit 5"),
            call("lizard_execute_command", command="yes | head -c 20000000"),
            call("lizard_execute_code", code="print('x' * 150_000 + 'END')"),
            text("Done."),
        ]
    )
    agent = LlmAgent(name="sandboxed", model=model, tools=plugin.get_tools())
    runner = InMemoryRunner(app=App(name="lizard_adk_tests", root_agent=agent, plugins=[plugin]))
    try:
        responses = [r for _, r in function_responses(await run_agent(agent, "Go.", runner=runner))]
    finally:
        await runner.close()
    _, huge, long, stopped, code = responses
    assert set(huge) == {"error"}
    assert "more than 1048576 bytes" in huge["error"]
    assert long["exit_code"] == 5
    assert long["stdout"].startswith("1\n2\n")
    assert long["stdout"].endswith("20000\n")
    assert "cut from the middle of the output" in long["stdout"]
    assert len(long["stdout"]) < 100_200
    assert stopped["exit_code"] == -1
    assert stopped["stdout"].startswith("y\ny\n")
    assert "was stopped" in stopped["stderr"]
    assert code["stdout"].endswith("END\n")
    assert len(code["stdout"]) < 100_200
    assert len(stopped["stdout"]) < 100_200
    assert model.unused == 0


async def test_commands_and_code_report_timeouts_with_the_output_so_far(
    connection: dict[str, Any],
) -> None:
    plugin = LizardPlugin(command_timeout_ms=1000, **connection)
    context = tool_context()
    try:
        command = await plugin.lizard_execute_command("printf so-far; sleep 30", context)
        assert command == {"stdout": "so-far", "stderr": "", "exit_code": -1, "timed_out": True}
        code = await plugin.lizard_execute_code(
            "print('so-far')\nimport time; time.sleep(30)", context
        )
        assert code["timed_out"] is True
        assert code["stdout"] == "so-far\n"
        assert code["error"]["name"] == "TimeoutError"
    finally:
        await plugin.close()


async def test_close_destroys_every_sandbox_and_refuses_later_use(
    lizard_local: LocalServer,
) -> None:
    plugin = LizardPlugin()
    for invocation in ("a", "b"):
        await plugin.lizard_execute_command("true", tool_context(invocation))
    ids = {box.session.sandbox_id for box in plugin._sandboxes.values()}
    assert len(ids) == 2
    assert ids <= set(lizard_local.sandboxes())
    await plugin.close()
    await plugin.close()
    assert not ids & set(lizard_local.sandboxes())
    with pytest.raises(RuntimeError, match="closed"):
        await plugin.lizard_execute_command("true", tool_context())


async def test_an_agent_gets_one_sandbox_per_invocation(lizard_local: LocalServer) -> None:
    plugin = LizardPlugin()
    model = ScriptedModel(
        [
            call("lizard_write_file", path="/home/user/note.txt", content="hi"),
            call("lizard_execute_command", command="cat note.txt; echo; pwd"),
            call("lizard_execute_code", code="x = 20"),
            call("lizard_execute_code", code="x * 2"),
            call("lizard_read_file", path="/home/user/note.txt"),
            text("Done."),
            call("lizard_execute_code", code="x"),  # the next invocation: a fresh sandbox
            text("Done again."),
        ]
    )
    agent = LlmAgent(name="sandboxed", model=model, tools=plugin.get_tools())
    runner = InMemoryRunner(app=App(name="lizard_adk_tests", root_agent=agent, plugins=[plugin]))
    before = set(lizard_local.sandboxes())
    try:
        first = function_responses(await run_agent(agent, "Go.", runner=runner))
        assert set(lizard_local.sandboxes()) == before  # destroyed when the invocation ended
        second = function_responses(await run_agent(agent, "Again.", runner=runner))
    finally:
        await runner.close()
    assert first[0][1] == {"path": "/home/user/note.txt", "written": True}
    assert first[1][1] == {"stdout": "hi\n/home/user\n", "stderr": "", "exit_code": 0}
    assert first[3][1]["results"] == [{"mime": "text/plain", "data": "40"}]
    assert first[3][1]["error"] is None
    assert first[4][1] == {"content": "hi"}
    assert second[0][1]["error"]["name"] == "NameError"
    assert set(lizard_local.sandboxes()) == before
    assert model.unused == 0
