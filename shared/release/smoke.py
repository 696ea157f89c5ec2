"""Smoke test of built distributions, run by ``release_check.py`` in a fresh virtual environment.

It must see only what was installed from the built files, so the release check runs it with the
environment's own interpreter in isolated mode (``python -I``: no script folder, no ``PYTHONPATH``,
no user site), and it imports nothing from the repository: standard library and installed packages.

``serve``
    Start lizard-local's ``LocalServer`` from the installed (built) lizard-local, print one JSON
    line ``{"url", "api_key", "project_id"}`` on stdout, serve until stdin closes, then print one
    JSON line ``{"leftover": [...], "requests": N}`` and exit 1 if any sandbox is still alive: every
    smoke step must clean up after itself. Exit 3 when ``LocalServer`` has not landed yet.
``check --dist DIR --version X.Y.Z [--strict] NAME...``
    For each named distribution: installed at X.Y.Z and not editable; every file of its built wheel
    installed byte for byte (so it is the built one, not a copy from an index or a stale cache);
    its top-level packages imported from this environment. Then one tiny real use of each package's
    public API, against the lizard-local that ``LIZARD_API_URL`` names.

Each use calls documented public names only. While the packages are still being written a name may
not exist yet: that use prints ``skip: ...`` and is not a failure, unless ``--strict`` is given (the
release workflow gives it). A name that exists but misbehaves is always a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import importlib.util
import json
import os
import shlex
import sys
import traceback
import urllib.request
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

EXIT_NOT_LANDED = 3
COMMAND = ["python3", "-c", "print(6 * 7)"]  # one command, one known answer


class NotLanded(Exception):
    """A public name a smoke step needs is not in the installed package yet."""


class SmokeFailure(Exception):
    """An installed package is not what was built, or its public API misbehaved."""


def public(module_name: str, *names: str) -> list[Any]:
    """Return ``names`` from ``module_name``; raise ``NotLanded`` if the module or a name is absent.

    Only absence is tolerated: an import that fails for any other reason (a missing dependency, a
    syntax error) propagates and fails the smoke test.
    """
    if importlib.util.find_spec(module_name) is None:
        raise NotLanded(f"{module_name} does not exist yet")
    module = importlib.import_module(module_name)
    missing = [name for name in names if not hasattr(module, name)]
    if missing:
        raise NotLanded(f"{module_name} has no {', '.join(missing)} yet")
    return [getattr(module, name) for name in names]


def public_served(module_name: str, *names: str) -> list[Any]:
    """:func:`public`, for a use that runs against the shared lizard-local (:func:`need_server`)."""
    need_server()
    return public(module_name, *names)


def expect(condition: bool, message: str) -> None:
    """Raise ``SmokeFailure`` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise SmokeFailure(message)


def expect_answer(package: str, exit_code: int, stdout: str, *, stream: str = "stdout") -> None:
    """Raise ``SmokeFailure`` unless ``COMMAND`` exited 0 and printed its answer (42)."""
    expect(
        exit_code == 0 and stdout.strip() == "42",
        f"{package}: {COMMAND} gave exit {exit_code}, {stream} {stdout!r}",
    )


def run_and_clean_up(
    open_: Callable[[], Awaitable[Any]],
    use: Callable[[Any], Awaitable[Any]],
    clean_up: Callable[[Any], Awaitable[object]],
) -> Any:
    """Open a resource, use it and clean it up whatever happens, in one event loop."""

    async def run() -> Any:
        resource = await open_()
        try:
            return await use(resource)
        finally:
            await clean_up(resource)

    return asyncio.run(run())


def wheel_path(dist_dir: Path, name: str, version: str) -> Path:
    """The one built wheel of ``name`` at ``version`` in ``dist_dir``."""
    wheels = sorted(dist_dir.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    expect(
        len(wheels) == 1,
        f"{name}: expected one wheel at {version} in the dist folder, found {wheels}",
    )
    return wheels[0]


def verify_installed(name: str, version: str, dist_dir: Path) -> tuple[int, list[str]]:
    """Prove the installed ``name`` is the built wheel; return (files compared, top-level names)."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise SmokeFailure(f"{name} is not installed") from None
    expect(dist.version == version, f"{name}: installed version {dist.version}, expected {version}")
    direct_url = dist.read_text("direct_url.json")
    if direct_url:
        editable = json.loads(direct_url).get("dir_info", {}).get("editable", False)
        expect(not editable, f"{name}: installed editable from {json.loads(direct_url).get('url')}")
    compared = 0
    top_level: set[str] = set()
    with zipfile.ZipFile(wheel_path(dist_dir, name, version)) as wheel:
        for info in wheel.infolist():
            first = info.filename.split("/", 1)[0]
            # The installer rewrites the dist-info (RECORD, INSTALLER) and moves .data elsewhere.
            if info.is_dir() or first.endswith((".dist-info", ".data")):
                continue
            installed = Path(str(dist.locate_file(info.filename)))
            expect(
                installed.is_file(), f"{name}: {info.filename} is in the wheel but not installed"
            )
            expect(
                installed.read_bytes() == wheel.read(info),
                f"{name}: installed {info.filename} differs from the built wheel",
            )
            compared += 1
            top_level.add(first.removesuffix(".py"))
    expect(compared > 0, f"{name}: the built wheel holds no files")
    return compared, sorted(top_level)


def import_from_environment(module_name: str) -> None:
    """Import ``module_name`` and check it comes from this environment, not a source checkout."""
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # whatever breaks an import, the package is not usable as built
        raise SmokeFailure(f"import {module_name}: {type(exc).__name__}: {exc}") from exc
    origin = Path(module.__file__ or "").resolve()
    expect(
        origin.is_relative_to(Path(sys.prefix).resolve()),
        f"{module_name} was imported from {origin}, outside this environment",
    )


def need_server() -> None:
    """Skip a use that needs the shared lizard-local when the release check could not start one."""
    if not os.environ.get("LIZARD_API_URL"):
        raise NotLanded(
            "no lizard-local server to run against (lizard_local.LocalServer not landed)"
        )


# Uses of each package's public API. Each returns a short line saying what it proved.


def use_lizard_core() -> str:
    """Create a sandbox with lizard-core's Session, run one command in it, destroy it."""
    (sandbox_config,) = public_served("lizard_core.config", "SandboxConfig")
    (session_class,) = public("lizard_core.session", "Session")
    with session_class(sandbox_config.from_env()) as session:
        result = session.sandbox().process.exec_(COMMAND)
        sandbox_id = session.sandbox_id
    expect_answer("lizard-core", result.exit_code, result.stdout)
    return f"Session created {sandbox_id}, ran python3 (42), destroyed it"


def use_lizard_local() -> str:
    """Start a private LocalServer, create a sandbox over plain HTTP, run one command, kill it."""
    (local_server,) = public("lizard_local", "LocalServer")
    server = local_server()
    server.start()
    try:
        headers = {"X-API-Key": server.api_key}
        created = http_json(
            "POST",
            f"{server.url}/api/sandboxes",
            {"template": "base", "timeoutMs": 60_000, "projectId": server.project_id},
            headers,
        )
        sandbox = f"{server.url}/api/sandboxes/{created['sandboxId']}"
        try:
            result = http_json("POST", f"{sandbox}/exec", {"cmd": COMMAND}, headers)
        finally:
            http_json("DELETE", sandbox, None, headers)
        leftover = list(server.sandboxes())
    finally:
        server.stop()
    expect(
        result.get("exitCode") == 0 and str(result.get("stdout", "")).strip() == "42",
        f"lizard-local: {COMMAND} answered {result!r}",
    )
    expect(not leftover, f"lizard-local: sandboxes alive after kill: {leftover}")
    return f"LocalServer served create, exec (42) and kill of {created['sandboxId']}"


def use_smolagents_lizard() -> str:
    """Run one step through LizardExecutor, the way a CodeAgent calls it, then clean up."""
    (executor_class,) = public_served("smolagents_lizard", "LizardExecutor")
    executor = executor_class(additional_imports=[])
    try:
        output = executor("print('smoke')\n6 * 7")
    finally:
        executor.cleanup()
    expect(
        str(output.output).strip() == "42"
        and "smoke" in output.logs
        and not output.is_final_answer,
        f"smolagents-lizard: step gave output {output.output!r}, logs {output.logs!r}",
    )
    return "LizardExecutor ran a step (logs 'smoke', value 42) and cleaned up"


def use_pydantic_ai_lizard() -> str:
    """Run one command through LizardSandboxBackend, destroy it; build the capability (no I/O)."""
    backend_class, capability_class = public_served(
        "pydantic_ai_lizard", "LizardSandboxBackend", "LizardSandbox"
    )
    capability_class()

    async def open_backend() -> Any:
        return backend_class()

    result = run_and_clean_up(
        open_backend, lambda backend: backend.run(COMMAND), lambda backend: backend.destroy()
    )
    expect_answer("pydantic-ai-lizard", result.exit_code, result.stdout)
    return "LizardSandboxBackend ran python3 (42) and destroyed its sandbox"


def use_inspect_lizard() -> str:
    """Run one command in a sample's sandbox the way an Inspect eval does, then clean up."""
    environment_class, config_class = public_served(
        "inspect_lizard", "LizardSandboxEnvironment", "LizardSandboxConfig"
    )
    config = config_class(template="base", lifetime_ms=60_000)
    result = run_and_clean_up(
        lambda: environment_class.sample_init("smoke", config, {}),
        lambda environments: environments["default"].exec(COMMAND),
        lambda environments: environment_class.sample_cleanup("smoke", config, environments, False),
    )
    expect_answer("inspect-lizard", result.returncode, result.stdout)
    return "LizardSandboxEnvironment ran python3 (42) in a sample's sandbox and destroyed it"


def use_lizard_adk() -> str:
    """Run one command through LizardEnvironment and one block through LizardCodeExecutor."""
    environment_class, executor_class = public_served(
        "lizard_adk", "LizardEnvironment", "LizardCodeExecutor"
    )
    from google.adk.code_executors.code_execution_utils import CodeExecutionInput

    async def open_environment() -> Any:
        environment = environment_class(template="base")
        await environment.initialize()
        return environment

    result = run_and_clean_up(
        open_environment,
        lambda environment: environment.execute(shlex.join(COMMAND)),
        lambda environment: environment.close(),
    )
    executor = executor_class(stateful=True, template="base")
    try:
        block = executor.execute_code(None, CodeExecutionInput(code="6 * 7", execution_id="smoke"))
    finally:
        executor.close()
    expect(
        result.exit_code == 0 and result.stdout.strip() == "42" and block.stdout.strip() == "42",
        f"lizard-adk: command gave {result!r}, code block gave {block!r}",
    )
    return "LizardEnvironment ran python3 (42) and LizardCodeExecutor a block (42); both cleaned up"


def use_langchain_lizard() -> str:
    """Run one command and a file round trip through the Deep Agents backend, then destroy it."""
    (backend_class,) = public_served("langchain_lizard", "LizardSandbox")
    with backend_class() as backend:
        result = backend.execute(shlex.join(COMMAND))
        written = backend.write("/tmp/smoke/hello.txt", "hello")
        [download] = backend.download_files(["/tmp/smoke/hello.txt"])
    expect_answer("langchain-lizard", result.exit_code, result.output, stream="output")
    expect(
        written.error is None and download.content == b"hello",
        f"langchain-lizard: write gave {written!r}, download {download!r}",
    )
    return "LizardSandbox ran python3 (42), wrote and downloaded a file, destroyed its sandbox"


def use_strands_lizard() -> str:
    """Stream one command and round-trip a file through the Strands sandbox, then destroy it."""
    (sandbox_class,) = public_served("strands_lizard", "LizardSandbox")
    from strands.sandbox import ExecutionResult

    async def use() -> tuple[Any, bytes]:
        async with sandbox_class(template="base") as sandbox:
            items = [item async for item in sandbox.execute_streaming(shlex.join(COMMAND))]
            await sandbox.write_file("/tmp/smoke/hello.txt", b"hello")
            return items[-1], await sandbox.read_file("/tmp/smoke/hello.txt")

    result, content = asyncio.run(use())
    expect(isinstance(result, ExecutionResult), f"strands-lizard: the stream ended with {result!r}")
    expect_answer("strands-lizard", result.exit_code, result.stdout)
    expect(content == b"hello", f"strands-lizard: read back {content!r}")
    return "LizardSandbox streamed python3 (42), wrote and read a file, destroyed its sandbox"


def use_openai_agents_lizard() -> str:
    """Create a session the way the SDK's runner does, run one command, delete the sandbox."""
    client_class, options_class = public_served(
        "openai_agents_lizard", "LizardSandboxClient", "LizardSandboxClientOptions"
    )
    client = client_class()

    async def open_session() -> Any:
        session = await client.create(options=options_class(template="base", lifetime_ms=60_000))
        try:
            await session.start()
        except BaseException:
            await client.delete(session)
            raise
        return session

    result = run_and_clean_up(
        open_session,
        lambda session: session.exec(*COMMAND, shell=False),
        client.delete,
    )
    expect_answer("openai-agents-lizard", result.exit_code, result.stdout.decode())
    return "LizardSandboxClient's session ran python3 (42) and deleted its sandbox"


USES: dict[str, Callable[[], str]] = {
    "langchain-lizard": use_langchain_lizard,
    "lizard-core": use_lizard_core,
    "lizard-local": use_lizard_local,
    "smolagents-lizard": use_smolagents_lizard,
    "pydantic-ai-lizard": use_pydantic_ai_lizard,
    "inspect-lizard": use_inspect_lizard,
    "lizard-adk": use_lizard_adk,
    "strands-lizard": use_strands_lizard,
    "openai-agents-lizard": use_openai_agents_lizard,
}


def http_json(method: str, url: str, body: object, headers: dict[str, str]) -> dict[str, Any]:
    """One loopback JSON request, never through a proxy from the environment."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=60) as response:
        raw = response.read()
    return json.loads(raw) if raw.strip() else {}


def check(names: list[str], version: str, dist_dir: Path, strict: bool) -> int:
    """Verify and use each named distribution; print one line per step; return the exit status."""
    failed = skipped = 0
    for name in names:
        try:
            compared, top_level = verify_installed(name, version, dist_dir)
            for module_name in top_level:
                import_from_environment(module_name)
            print(
                f"ok: {name} {version}: {compared} files as built; imported {', '.join(top_level)}"
            )
        except SmokeFailure as exc:
            print(f"FAIL: {exc}")
            failed += 1
            continue
        use = USES.get(name)
        if use is None:
            print(
                f"note: {name}: no smoke step defined in smoke.py; checked install and import only"
            )
            continue
        try:
            print(f"ok: {name} smoke: {use()}")
        except NotLanded as exc:
            print(f"skip: {name} smoke: {exc}")
            skipped += 1
        except Exception as exc:  # a smoke failure of any kind is reported, then the next package
            print(f"FAIL: {name} smoke: {type(exc).__name__}: {exc}")
            if not isinstance(exc, SmokeFailure):
                traceback.print_exc(file=sys.stdout)
            failed += 1
    sys.stdout.flush()
    return 1 if failed or (strict and skipped) else 0


def serve(protocol: TextIO) -> int:
    """Run the shared lizard-local for the other environments until stdin closes."""
    try:
        (local_server,) = public("lizard_local", "LocalServer")
    except NotLanded as exc:
        print(json.dumps({"not_landed": str(exc)}), file=protocol, flush=True)
        return EXIT_NOT_LANDED
    server = local_server()
    server.start()
    try:
        ready = {"url": server.url, "api_key": server.api_key, "project_id": server.project_id}
        print(json.dumps(ready), file=protocol, flush=True)
        sys.stdin.read()  # the release check closes our stdin when every smoke step is done
        leftover = list(server.sandboxes())
        requests = server.counters().get("total")
    finally:
        server.stop()
    print(json.dumps({"leftover": leftover, "requests": requests}), file=protocol, flush=True)
    return 1 if leftover else 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve")
    checking = commands.add_parser("check")
    checking.add_argument("--dist", type=Path, required=True)
    checking.add_argument("--version", required=True)
    checking.add_argument("--strict", action="store_true")
    checking.add_argument("names", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "serve":
        # Only the protocol lines go to stdout; whatever the server logs goes to stderr.
        protocol, sys.stdout = sys.stdout, sys.stderr
        return serve(protocol)
    return check(args.names, args.version, args.dist, args.strict)


if __name__ == "__main__":
    sys.exit(main())
