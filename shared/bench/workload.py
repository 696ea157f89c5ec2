"""The operations themselves, written once against the adapters' public names.

The same code drives both environments: ``pydantic_ai_lizard.LizardSandboxBackend``,
``smolagents_lizard.LizardExecutor`` and ``inspect_lizard.LizardSandboxEnvironment`` (made by
Inspect's ``sample_init``) exist with compatible interfaces in 0.1.0 and in this repository, so
whatever differs in the numbers is the packages, not the benchmark.

Every operation is split into ``prepare`` (untimed: fixtures, a fresh backend for a cold
operation), the timed ``act`` and ``finish`` (untimed: clean-up). The orchestrator resets
lizard-local's counters between ``prepare`` and ``act`` and reads them before ``finish``. Each
``act`` checks its own result after the clock stops, so a broken or truncated operation is
reported as a failure, never as a fast one.

Connection settings come from ``LIZARD_API_URL``, ``LIZARD_API_KEY``, ``LIZARD_PROJECT_ID`` and
``SSL_CERT_FILE`` (lizard-local's CA), which both packages read.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final

from workload_lifecycle import LifecycleOps

__all__ = ["Prepared", "Workload", "WorkloadError", "pool_sdk_connections", "timed"]

LIFETIME_MS: Final = 3_600_000  # warm sandboxes outlive a full run
COLD_LIFETIME_MS: Final = 600_000
SMALL: Final = os.urandom(1024)
BIG: Final = os.urandom(8 * 1024 * 1024)
LINE: Final = "0123456789abcdef" * 4  # 63 characters and a newline: 64 bytes a line
PRINT_1MIB: Final = f"yes {LINE[:-1]} | head -c {1024 * 1024}"
LIST_ENTRIES: Final = 1000
MAKE_FIXTURES: Final = (
    "import os, sys\n"
    "root = sys.argv[1]\n"
    "os.makedirs(os.path.join(root, 'many'), exist_ok=True)\n"
    "for i in range(int(sys.argv[2])):\n"
    "    open(os.path.join(root, 'many', 'f%04d' % i), 'w').close()\n"
    "link = os.path.join(root, 'link')\n"
    "if not os.path.islink(link):\n"
    "    os.symlink('small.bin', link)\n"
)
# One reply per step, as a model would write them: compute, use the state, answer.
AGENT_SCRIPT: Final = (
    "Thought: store the prices.\n<code>\nprices = [3.5, 4.25, 2.0]\ntotal = sum(prices)\n"
    "print(total)\n</code>",
    "Thought: the average, from the state of step 1.\n<code>\n"
    "average = total / len(prices)\nprint(round(average, 2))\n</code>",
    "Thought: done.\n<code>\nfinal_answer({'total': total, 'average': round(average, 2)})\n</code>",
)
AGENT_ANSWER: Final = {"total": 9.75, "average": 3.25}
TEXT_1K: Final = (LINE * 16)[:1024]


class WorkloadError(Exception):
    """An operation failed or returned a wrong result."""


@dataclass
class Prepared:
    """A prepared repetition: ``act`` is timed, then ``check`` and ``finish`` run untimed."""

    act: Callable[[], object]
    check: Callable[[object], None] = lambda _result: None
    finish: Callable[[], None] = lambda: None


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise WorkloadError(message)


class Workload(LifecycleOps):
    """Warm resources (one workspace backend, one executor) and the operations on them.

    The lifecycle operations (ours only) come from :mod:`workload_lifecycle`.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._backend: Any = None
        self._root = ""
        self._fixtures: set[str] = set()
        self._executor: Any = None
        self._inspect: Any = None  # the environments sample_init gave
        self._probe_client: Any = None
        self._deepagents: Any = None  # (lizard.Sandbox, langchain_lizard.LizardSandbox)
        self._strands: Any = None  # strands_lizard.LizardSandbox
        self._probe_ssl: ssl.SSLContext | None = None
        self._bare: Any = None  # (lizard.Sandbox on the warm backend's sandbox, httpx.Client)
        self._plugin: Any = None
        self._openai: Any = None  # (LizardSandboxClient, its started SandboxSession)
        # What ADK's ToolContext gives a tool: the invocation's id (one warm invocation here).
        self._adk_context = SimpleNamespace(invocation_id="bench")

    # ── plumbing ─────────────────────────────────────────────────────────

    def _sync(self, coroutine_fn: Callable[[], Awaitable[object]]) -> Callable[[], object]:
        return lambda: self.loop.run_until_complete(coroutine_fn())

    def _workspace(self, *fixtures: str) -> tuple[Any, str]:
        """The warm backend and its fixture directory, with ``fixtures`` made (all untimed).

        Fixtures: ``small`` (1 KiB), ``big`` (8 MiB), ``tree`` (1,000 files and a symlink).
        """
        if self._backend is None:
            from pydantic_ai_lizard import LizardSandboxBackend

            self._backend = LizardSandboxBackend(lifetime_ms=LIFETIME_MS)
            working_dir = self.loop.run_until_complete(self._backend.working_dir())
            self._root = working_dir.rstrip("/") + "/bench"
        backend, root = self._backend, self._root
        for name in fixtures:
            if name in self._fixtures:
                continue
            if name == "small":
                self.loop.run_until_complete(backend.write_bytes(f"{root}/small.bin", SMALL))
            elif name == "big":
                self.loop.run_until_complete(backend.write_bytes(f"{root}/big.bin", BIG))
            elif name == "tree":
                argv = ["python3", "-c", MAKE_FIXTURES, root, str(LIST_ENTRIES)]
                made = self.loop.run_until_complete(backend.run(argv))
                _expect(made.exit_code == 0, f"fixtures failed: {made.stderr[-500:]}")
            else:
                raise ValueError(f"unknown fixture {name!r}")
            self._fixtures.add(name)
        return backend, root

    @staticmethod
    def _new_executor(lifetime_ms: int = COLD_LIFETIME_MS) -> Any:
        from smolagents.monitoring import AgentLogger, LogLevel

        from smolagents_lizard import LizardExecutor

        return LizardExecutor(logger=AgentLogger(LogLevel.OFF), lifetime_ms=lifetime_ms)

    @staticmethod
    def _start(executor: Any) -> None:
        """What ``CodeAgent.run`` does before its first step."""
        from smolagents.default_tools import FinalAnswerTool

        executor.send_variables(variables={})
        executor.send_tools({"final_answer": FinalAnswerTool()})

    def _warm_executor(self) -> Any:
        if self._executor is None:
            self._executor = self._new_executor(LIFETIME_MS)
            self._start(self._executor)
        return self._executor

    def _inspect_env(self) -> Any:
        """The warm Inspect sandbox environment, made as an eval makes one for a sample."""
        from inspect_lizard import LizardSandboxEnvironment

        if self._inspect is None:
            init = LizardSandboxEnvironment.sample_init("bench", None, {})
            self._inspect = self.loop.run_until_complete(init)
            _python_on_path(self._inspect["default"])
        return self._inspect["default"]

    def _adk_plugin(self) -> Any:
        """The warm ``LizardPlugin``, its invocation's sandbox made by one untimed command."""
        if self._plugin is None:
            from lizard_adk import LizardPlugin

            self._plugin = LizardPlugin(lifetime_ms=LIFETIME_MS)
            tool = self._plugin.lizard_write_file
            self.loop.run_until_complete(tool("/tmp/bench-adk.txt", TEXT_1K, self._adk_context))
        return self._plugin

    def close(self) -> None:
        """Destroy the warm sandboxes."""
        errors: list[str] = []
        if self._inspect is not None:
            from inspect_lizard import LizardSandboxEnvironment

            cleanup = LizardSandboxEnvironment.sample_cleanup("bench", None, self._inspect, False)
            try:
                self.loop.run_until_complete(cleanup)
            except Exception as exc:  # keep closing the rest
                errors.append(f"inspect cleanup: {exc!r}")
            self._inspect = None
        if self._plugin is not None:
            try:
                self.loop.run_until_complete(self._plugin.close())
            except Exception as exc:  # keep closing the rest
                errors.append(f"plugin close: {exc!r}")
            self._plugin = None
        if self._executor is not None:
            try:
                self._executor.cleanup()
            except Exception as exc:  # keep closing the rest
                errors.append(f"executor cleanup: {exc!r}")
            self._executor = None
        if self._openai is not None:
            try:
                self.loop.run_until_complete(self._openai[0].delete(self._openai[1]))
            except Exception as exc:  # keep closing the rest
                errors.append(f"OpenAI Agents session delete: {exc!r}")
            self._openai = None
        if self._deepagents is not None:
            try:
                self._deepagents[0].kill()
            except Exception as exc:
                errors.append(f"Deep Agents sandbox kill: {exc!r}")
            self._deepagents = None
        if self._strands is not None:
            try:
                self.loop.run_until_complete(self._strands.aclose())
            except Exception as exc:
                errors.append(f"Strands sandbox close: {exc!r}")
            self._strands = None
        if self._backend is not None:
            try:
                self.loop.run_until_complete(self._backend.destroy())
            except Exception as exc:
                errors.append(f"backend destroy: {exc!r}")
            self._backend = None
        if self._probe_client is not None:
            self._probe_client.close()
            self._probe_client = None
        if self._bare is not None:
            self._bare[1].close()  # the sandbox is the workspace backend's, closed with it
            self._bare = None
        errors += self.close_lifecycle()
        self.loop.close()
        if errors:
            raise WorkloadError("; ".join(errors))

    # ── operations ───────────────────────────────────────────────────────

    def prepare(self, name: str) -> Prepared:
        """Set up one repetition of operation ``name``."""
        method = getattr(self, "_op_" + name, None)
        if method is None:
            raise WorkloadError(f"this driver does not implement {name!r}")
        prepared: Prepared = method()
        return prepared

    def _op_first_use(self) -> Prepared:
        from pydantic_ai_lizard import LizardSandboxBackend

        made: list[Any] = []

        async def act() -> object:
            made.append(LizardSandboxBackend(lifetime_ms=COLD_LIFETIME_MS))
            return await made[0].run(["true"])

        def check(result: object) -> None:
            _expect(getattr(result, "exit_code", None) == 0, f"`true` failed: {result!r}")

        def finish() -> None:
            if made:
                self.loop.run_until_complete(made[0].destroy())

        return Prepared(act=self._sync(act), check=check, finish=finish)

    def _op_command_true(self) -> Prepared:
        backend, _ = self._workspace()

        def check(result: object) -> None:
            _expect(getattr(result, "exit_code", None) == 0, f"`true` failed: {result!r}")

        return Prepared(act=self._sync(lambda: backend.run(["true"])), check=check)

    def _op_command_1mib(self) -> Prepared:
        backend, _ = self._workspace()

        def check(result: object) -> None:
            stdout = getattr(result, "stdout", "")
            _expect(getattr(result, "exit_code", None) == 0, f"failed: {result!r:.300}")
            _expect(len(stdout) == 1024 * 1024, f"got {len(stdout)} bytes of output, not 1 MiB")
            _expect(stdout.count("\n") == 16384, "the output lines are not all there")

        return Prepared(act=self._sync(lambda: backend.run(["sh", "-c", PRINT_1MIB])), check=check)

    def _write(self, name: str, data: bytes) -> Prepared:
        backend, root = self._workspace()
        path = f"{root}/written-{name}.bin"

        def finish() -> None:
            entry = self.loop.run_until_complete(backend.stat(path))
            _expect(entry.size == len(data), f"wrote {entry.size} bytes, not {len(data)}")

        return Prepared(act=self._sync(lambda: backend.write_bytes(path, data)), finish=finish)

    def _read(self, name: str, data: bytes) -> Prepared:
        backend, root = self._workspace()

        def check(result: object) -> None:
            _expect(result == data, f"the {len(data)} bytes read back differ from those written")

        return Prepared(act=self._sync(lambda: backend.read_bytes(f"{root}/{name}")), check=check)

    def _op_write_1k(self) -> Prepared:
        return self._write("1k", SMALL)

    def _op_read_1k(self) -> Prepared:
        self._workspace("small")
        return self._read("small.bin", SMALL)

    def _op_write_8m(self) -> Prepared:
        return self._write("8m", BIG)

    def _op_read_8m(self) -> Prepared:
        self._workspace("big")
        return self._read("big.bin", BIG)

    def _op_stat(self) -> Prepared:
        backend, root = self._workspace("small")

        def check(result: object) -> None:
            _expect(getattr(result, "size", None) == len(SMALL), f"wrong stat: {result!r}")

        return Prepared(act=self._sync(lambda: backend.stat(f"{root}/small.bin")), check=check)

    def _op_list_dir(self) -> Prepared:
        backend, root = self._workspace("tree")

        def check(result: object) -> None:
            count = len(result)  # type: ignore[arg-type]
            _expect(count == LIST_ENTRIES, f"listed {count} entries, not {LIST_ENTRIES}")

        return Prepared(act=self._sync(lambda: backend.list_dir(f"{root}/many")), check=check)

    def _op_exists(self) -> Prepared:
        backend, root = self._workspace("small")

        def check(result: object) -> None:
            _expect(result is True, f"exists returned {result!r}")

        return Prepared(act=self._sync(lambda: backend.exists(f"{root}/small.bin")), check=check)

    def _op_realpath(self) -> Prepared:
        backend, root = self._workspace("small", "tree")

        def check(result: object) -> None:
            _expect(result == f"{root}/small.bin", f"realpath returned {result!r}")

        return Prepared(act=self._sync(lambda: backend.realpath(f"{root}/link")), check=check)

    def _op_executor_start(self) -> Prepared:
        made: list[Any] = []

        def act() -> None:
            made.append(self._new_executor())
            self._start(made[0])

        def finish() -> None:
            if made:
                made[0].cleanup()

        return Prepared(act=act, finish=finish)

    def _step(self, code: str, check: Callable[[Any], None]) -> Prepared:
        executor = self._warm_executor()
        return Prepared(act=lambda: executor(code), check=check)

    def _op_step_trivial(self) -> Prepared:
        def check(out: Any) -> None:
            _expect(str(out.output) == "2" and not out.is_final_answer, f"wrong step: {out!r}")

        return self._step("x = 1 + 1\nx", check)

    def _op_step_print_100(self) -> Prepared:
        def check(out: Any) -> None:
            lines = out.logs.split()
            _expect(lines == [str(i) for i in range(100)], f"wrong logs: {out.logs!r:.300}")

        return self._step("for i in range(100):\n    print(i)", check)

    def _op_step_final_answer(self) -> Prepared:
        def check(out: Any) -> None:
            _expect(out.is_final_answer and out.output == 42, f"wrong final answer: {out!r}")

        return self._step("final_answer(42)", check)

    def _op_code_agent_3_steps(self) -> Prepared:
        from smolagents import CodeAgent
        from smolagents.monitoring import LogLevel

        made: list[Any] = []

        def act() -> object:
            executor = self._new_executor()
            made.append(executor)
            agent = CodeAgent(
                tools=[],
                model=scripted_model(AGENT_SCRIPT),
                executor=executor,
                max_steps=len(AGENT_SCRIPT),
                verbosity_level=LogLevel.OFF,
            )
            return agent.run("Work out the total and the average of 3.5, 4.25 and 2.0.")

        def check(result: object) -> None:
            _expect(result == AGENT_ANSWER, f"the agent answered {result!r}")

        def finish() -> None:
            if made:
                made[0].cleanup()

        return Prepared(act=act, check=check, finish=finish)

    # ── Inspect ──────────────────────────────────────────────────────────

    def _op_inspect_exec(self) -> Prepared:
        environment = self._inspect_env()

        def check(result: object) -> None:
            _expect(getattr(result, "returncode", None) == 0, f"`true` failed: {result!r}")

        return Prepared(act=self._sync(lambda: environment.exec(["true"])), check=check)

    def _op_inspect_write_1k(self) -> Prepared:
        environment = self._inspect_env()
        text = SMALL.hex()[:1024]

        def finish() -> None:
            read = self.loop.run_until_complete(environment.read_file("bench-written.txt"))
            _expect(read == text, "the 1 KiB written is not what reads back")

        return Prepared(
            act=self._sync(lambda: environment.write_file("bench-written.txt", text)),
            finish=finish,
        )

    def _op_inspect_read_1k(self) -> Prepared:
        environment = self._inspect_env()
        self.loop.run_until_complete(environment.write_file("bench-small.bin", SMALL))

        def check(result: object) -> None:
            _expect(result == SMALL, "the 1 KiB read back differs from what was written")

        return Prepared(
            act=self._sync(lambda: environment.read_file("bench-small.bin", text=False)),
            check=check,
        )

    # ── ADK: the four tools of LizardPlugin, called as ADK calls them ──

    def _adk(self, tool: str, *args: str) -> Callable[[], object]:
        call = getattr(self._adk_plugin(), tool)
        return self._sync(lambda: call(*args, self._adk_context))

    def _op_adk_execute(self) -> Prepared:
        def check(result: Any) -> None:
            _expect(result.get("exit_code") == 0, f"`true` failed: {result!r}")

        return Prepared(act=self._adk("lizard_execute_command", "true"), check=check)

    def _op_adk_code_block(self) -> Prepared:
        def check(result: Any) -> None:
            _expect(result.get("error") is None, f"the cell failed: {result!r:.300}")

        return Prepared(act=self._adk("lizard_execute_code", "x = 1 + 1"), check=check)

    def _op_adk_write_1k(self) -> Prepared:
        def check(result: Any) -> None:
            _expect(result.get("written") is True, f"the write failed: {result!r}")

        act = self._adk("lizard_write_file", "/tmp/bench-adk-w.txt", TEXT_1K)
        return Prepared(act=act, check=check)

    def _op_adk_read_1k(self) -> Prepared:
        def check(result: Any) -> None:
            _expect(result.get("content") == TEXT_1K, f"wrong content: {result!r:.300}")

        return Prepared(act=self._adk("lizard_read_file", "/tmp/bench-adk.txt"), check=check)

    # ── Deep Agents: langchain_lizard.LizardSandbox on an SDK sandbox (0.1.0's form) ──

    def _deep_agents_backend(self) -> Any:
        if self._deepagents is None:
            from lizard import Sandbox

            from langchain_lizard import LizardSandbox

            sandbox = Sandbox.create(
                "interpreter", project_id=os.environ["LIZARD_PROJECT_ID"], timeout_ms=LIFETIME_MS
            )
            backend = LizardSandbox(sandbox)
            _expect(backend.execute("true").exit_code == 0, "the Deep Agents backend failed")
            self._deepagents = (sandbox, backend)
        return self._deepagents[1]

    def _op_deepagents_execute(self) -> Prepared:
        backend = self._deep_agents_backend()

        def check(result: object) -> None:
            _expect(getattr(result, "exit_code", None) == 0, f"`true` failed: {result!r}")

        return Prepared(act=lambda: backend.execute("true"), check=check)

    def _op_deepagents_upload_1k(self) -> Prepared:
        backend = self._deep_agents_backend()

        def check(result: object) -> None:
            _expect([r.error for r in result] == [None], f"upload failed: {result!r}")  # type: ignore[attr-defined]

        return Prepared(act=lambda: backend.upload_files([("/tmp/da-up.bin", SMALL)]), check=check)

    def _op_deepagents_download_1k(self) -> Prepared:
        backend = self._deep_agents_backend()
        _expect(backend.upload_files([("/tmp/da-down.bin", SMALL)])[0].error is None, "fixture")

        def check(result: object) -> None:
            _expect([r.content for r in result] == [SMALL], "the bytes read back differ")  # type: ignore[attr-defined]

        return Prepared(act=lambda: backend.download_files(["/tmp/da-down.bin"]), check=check)

    # ── Strands (ours only: strands-lizard has no 0.1.x) ───────────────────

    def _strands_sandbox(self) -> Any:
        if self._strands is None:
            from strands_lizard import LizardSandbox

            sandbox = LizardSandbox(lifetime_ms=LIFETIME_MS)
            result = self.loop.run_until_complete(sandbox.execute("true"))
            _expect(result.exit_code == 0, "the Strands sandbox failed")
            self._strands = sandbox
        return self._strands

    def _op_strands_execute(self) -> Prepared:
        sandbox = self._strands_sandbox()

        def check(result: object) -> None:
            _expect(getattr(result, "exit_code", None) == 0, f"`true` failed: {result!r}")

        return Prepared(
            act=lambda: self.loop.run_until_complete(sandbox.execute("true")), check=check
        )

    def _op_strands_first_chunk(self) -> Prepared:
        """Timed: from the call to the first chunk; the rest is read and checked untimed."""
        sandbox = self._strands_sandbox()
        stream = sandbox.execute_streaming(
            "for i in 1 2 3 4 5 6 7 8 9 10; do echo tick $i; sleep 0.2; done"
        )

        async def rest() -> list[Any]:
            return [item async for item in stream]

        def check(first: object) -> None:
            items = [first, *self.loop.run_until_complete(rest())]
            text = "".join(getattr(item, "data", "") for item in items[:-1])
            _expect(getattr(first, "data", "").startswith("tick 1"), f"first chunk: {first!r}")
            _expect(text == "".join(f"tick {i}\n" for i in range(1, 11)), "output differs")
            _expect(getattr(items[-1], "exit_code", None) == 0, f"result: {items[-1]!r}")

        def finish() -> None:
            self.loop.run_until_complete(stream.aclose())

        return Prepared(
            act=lambda: self.loop.run_until_complete(anext(stream)), check=check, finish=finish
        )

    # ── OpenAI Agents: the SandboxSession LizardSandboxClient creates (ours only) ──

    def _openai_session(self) -> tuple[Any, Any]:
        if self._openai is None:
            from openai_agents_lizard import LizardSandboxClient, LizardSandboxClientOptions

            client = LizardSandboxClient()
            options = LizardSandboxClientOptions(lifetime_ms=LIFETIME_MS)
            session = self.loop.run_until_complete(client.create(options=options))
            self._openai = (client, session)
            self.loop.run_until_complete(session.start())
            self.loop.run_until_complete(session.write("small.bin", io.BytesIO(SMALL)))
            self.loop.run_until_complete(session.write("big.bin", io.BytesIO(BIG)))
        return self._openai  # type: ignore[no-any-return]

    def _op_openai_exec(self) -> Prepared:
        _, session = self._openai_session()

        def check(result: Any) -> None:
            _expect(result.exit_code == 0, f"`true` failed: {result!r}")

        return Prepared(act=self._sync(lambda: session.exec("true", shell=False)), check=check)

    def _openai_write(self, data: bytes) -> Prepared:
        _, session = self._openai_session()
        name = f"written-{len(data)}.bin"

        async def act() -> object:
            await session.write(name, io.BytesIO(data))
            return None

        def finish() -> None:  # read back here, where its requests are not counted
            back = self.loop.run_until_complete(session.read(name))
            _expect(back.read() == data, "the bytes written differ")

        return Prepared(act=self._sync(act), finish=finish)

    def _openai_read(self, name: str, data: bytes) -> Prepared:
        _, session = self._openai_session()

        async def act() -> object:
            return (await session.read(name)).read()

        def check(result: object) -> None:
            _expect(result == data, "the bytes read back differ")

        return Prepared(act=self._sync(act), check=check)

    def _op_openai_write_1k(self) -> Prepared:
        return self._openai_write(SMALL)

    def _op_openai_read_1k(self) -> Prepared:
        return self._openai_read("small.bin", SMALL)

    def _op_openai_write_8m(self) -> Prepared:
        return self._openai_write(BIG)

    def _op_openai_read_8m(self) -> Prepared:
        return self._openai_read("big.bin", BIG)

    def _op_openai_resume(self) -> Prepared:
        client, session = self._openai_session()
        payload = client.serialize_session_state(session.state)
        resumed: list[Any] = []

        async def act() -> object:
            resumed.append(await client.resume(client.deserialize_session_state(payload)))
            await resumed[0].start()
            return await resumed[0].exec("cat", "small.bin", shell=False)

        def check(result: Any) -> None:
            _expect(result.stdout == SMALL, "the resumed session lost the warm sandbox's files")

        def finish() -> None:
            if resumed:  # the warm sandbox stays: only the resumed handle's connection closes
                self.loop.run_until_complete(resumed[0]._inner._session.aclose())

        return Prepared(act=self._sync(act), check=check, finish=finish)

    def _op_openai_create(self) -> Prepared:
        from openai_agents_lizard import LizardSandboxClient, LizardSandboxClientOptions

        client = LizardSandboxClient()
        made: list[Any] = []

        async def act() -> object:
            options = LizardSandboxClientOptions(lifetime_ms=COLD_LIFETIME_MS)
            made.append(await client.create(options=options))
            await made[0].start()
            return await made[0].exec("true", shell=False)

        def check(result: Any) -> None:
            _expect(result.exit_code == 0, f"`true` failed: {result!r}")

        def finish() -> None:
            if made:
                self.loop.run_until_complete(client.delete(made[0]))

        return Prepared(act=self._sync(act), check=check, finish=finish)

    # ── probes: what a reused connection would save (raw HTTP, no adapter) ──

    def _probe(self, send: Callable[[str, dict[str, str], dict[str, Any]], Any]) -> Prepared:
        backend, _ = self._workspace()
        sandbox_id = backend.ref.id
        url = f"{os.environ['LIZARD_API_URL']}/api/sandboxes/{sandbox_id}/exec"
        headers = {"X-API-Key": os.environ["LIZARD_API_KEY"], "Content-Type": "application/json"}
        # The smallest useful exec, in the SDK's JSON mode: the same request for every probe.
        body = {"cmd": ["true"], "timeoutMs": 30_000}

        def check(response: Any) -> None:
            _expect(response.status_code == 200, f"HTTP {response.status_code}")
            _expect(response.json().get("exitCode") == 0, f"exec failed: {response.text:.300}")

        return Prepared(act=lambda: send(url, headers, body), check=check)

    def _op_probe_new_connection(self) -> Prepared:
        import httpx

        # What lizard-sdk does on every call: a module-level request, so a new client, a new
        # SSL context from the CA bundle and a new TCP + TLS connection.
        return self._probe(lambda url, h, body: httpx.post(url, headers=h, json=body, timeout=60))

    def _op_probe_new_connection_cached_ssl(self) -> Prepared:
        import httpx

        if self._probe_ssl is None:
            self._probe_ssl = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
        context = self._probe_ssl

        def send(url: str, h: dict[str, str], body: dict[str, Any]) -> Any:
            with httpx.Client(verify=context, timeout=60) as client:
                return client.post(url, headers=h, json=body)

        return self._probe(send)

    def _op_probe_pooled(self) -> Prepared:
        import httpx

        if self._probe_client is None:
            self._probe_client = httpx.Client(timeout=60)
        client = self._probe_client
        prepared = self._probe(lambda url, h, body: client.post(url, headers=h, json=body))
        # Open (or refresh) the kept-alive connection now, so the timed request reuses it.
        prepared.check(prepared.act())
        return prepared

    # ── the cold limit: lizard-sdk's own create and exec, nothing of ours ──

    def _op_sdk_first_use(self) -> Prepared:
        from lizard import Sandbox

        made: list[Any] = []

        def act() -> object:
            # As a first use does it, but with lizard-sdk alone: a new connection per request,
            # the project given by id (lizard_core resolves it once per process), no adapter.
            made.append(
                Sandbox.create(
                    project_id=os.environ["LIZARD_PROJECT_ID"], timeout_ms=COLD_LIFETIME_MS
                )
            )
            return made[0].process.exec_(["true"], timeout_ms=30_000)

        def check(result: object) -> None:
            _expect(getattr(result, "exit_code", None) == 0, f"`true` failed: {result!r}")

        def finish() -> None:
            if made:
                made[0].kill()

        return Prepared(act=act, check=check, finish=finish)

    # ── the limit: lizard-sdk's own exec, one kept-alive connection, nothing else ──

    def _op_bare_exec(self) -> Prepared:
        import httpx
        from lizard import Sandbox

        if self._bare is None:
            backend, _ = self._workspace()
            client = httpx.Client(limits=httpx.Limits(keepalive_expiry=4.0))
            self._bare = (Sandbox.connect(backend.ref.id), client)
        sandbox, client = self._bare

        def act() -> object:
            # lizard-sdk's JSON-mode exec calls the module-level ``httpx.post``: for this one
            # call it goes through the kept-alive client, so the SDK's request, parsing and
            # error handling are measured without a connection set-up.
            original = httpx.post
            httpx.post = client.post
            try:
                return sandbox.process.exec_(["true"], timeout_ms=30_000)
            finally:
                httpx.post = original

        def check(result: object) -> None:
            _expect(getattr(result, "exit_code", None) == 0, f"`true` failed: {result!r}")

        prepared = Prepared(act=act, check=check)
        # Open (or refresh) the kept-alive connection now, so the timed call reuses it.
        prepared.check(prepared.act())
        return prepared


_HOT_PATHS: Final = re.compile(r"/api/sandboxes/[^/]+/(exec|files)")
_HTTPX_CALLS: Final = ("post", "get", "delete", "request", "stream")


def pool_sdk_connections() -> None:
    """What-if: one pooled client for exec and files, lifecycle calls left to lizard-sdk.

    This is the change the issue allows in lizard_core, measured without building it. lizard-sdk
    sends every request through module-level ``httpx`` calls (imported inside its functions), so
    each one opens a new connection with a new SSL context. Here those calls are routed: a
    request to an exec or files URL goes through one shared ``httpx.Client`` and its kept-alive
    connections, anything else (create, connect, kill) through the original function. The
    requests, the SDK's parsing and its error handling are unchanged.
    """
    import httpx

    # Below the server's 5 s keep-alive, so an idle connection is never reused as it closes.
    client = httpx.Client(limits=httpx.Limits(keepalive_expiry=4.0))

    def routed(name: str) -> Callable[..., Any]:
        original = getattr(httpx, name)
        pooled = getattr(client, name)
        url_index = 1 if name in ("request", "stream") else 0  # (method, url) or (url)

        def call(*args: Any, **kwargs: Any) -> Any:
            url = kwargs["url"] if "url" in kwargs else args[url_index]
            return (pooled if _HOT_PATHS.search(str(url)) else original)(*args, **kwargs)

        return call

    for name in _HTTPX_CALLS:
        setattr(httpx, name, routed(name))


def _scripted_model_class() -> type:
    from smolagents import ChatMessage, Model

    class _ScriptedModel(Model):  # type: ignore[misc]  # smolagents is untyped
        """Plays back one canned reply per step, like a model that always answers the same."""

        def __init__(self, replies: tuple[str, ...]) -> None:
            super().__init__(model_id="scripted")
            self._replies = list(replies)

        def generate(self, messages: list[Any], **kwargs: Any) -> Any:
            return ChatMessage(role="assistant", content=self._replies.pop(0))

    return _ScriptedModel


def scripted_model(replies: tuple[str, ...]) -> Any:
    """A smolagents model that replies with ``replies``, one per step (smolagents imported late)."""
    return _scripted_model_class()(replies)


def _python_on_path(environment: Any) -> None:
    """Let 0.1.0's Inspect worker find python3 on lizard-local's templates.

    0.1.0 runs its worker as ``/usr/local/bin/python3``, where the cloud's image has it;
    lizard-local's templates have ``python3`` on ``PATH`` instead. The same exec, one word
    changed: the timing is 0.1.0's own. This repository's environment has no ``sandbox``.
    """
    process = getattr(getattr(environment, "sandbox", None), "process", None)
    if process is None:
        return
    exec_ = process.exec_

    def on_path(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(cmd, list) and cmd[:1] == ["/usr/local/bin/python3"]:
            cmd = ["python3", *cmd[1:]]
        return exec_(cmd, *args, **kwargs)

    process.exec_ = on_path


def timed(act: Callable[[], object]) -> tuple[float, object]:
    """Run ``act``; return its wall time in seconds and its result."""
    start = time.perf_counter()
    result = act()
    return time.perf_counter() - start, result
