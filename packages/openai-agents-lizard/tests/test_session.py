"""``LizardSandboxSession``: exec, files and persistence against lizard-local.

One sandbox serves the whole module (started once with a small manifest); each test works in its
own files.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import lifecycle
import pytest
import pytest_asyncio
from agents.sandbox.entries import File
from agents.sandbox.errors import (
    ExecTimeoutError,
    ExecTransportError,
    InvalidManifestPathError,
    PtySessionNotFoundError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.manifest import Environment, Manifest
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.workspace_paths import SandboxPathGrant

from lizard_core.commands import STREAM_BUDGET as SMALL_READ
from lizard_core.files import CHUNK_SIZE
from lizard_core.resolved_files import SMALL_WRITE
from lizard_local import LocalServer
from lizard_local.contract import pids_carrying
from openai_agents_lizard import LizardSandboxClient, LizardSandboxClientOptions
from openai_agents_lizard import _session as session_module

EXEC = "POST /api/sandboxes/{id}/exec"
OPTIONS = LizardSandboxClientOptions(
    lifetime_ms=300_000, envs={"FROM_OPTIONS": "options", "BOTH": "options"}
)


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(lizard_local: LocalServer) -> AsyncIterator[SandboxSession]:
    client = LizardSandboxClient()
    manifest = Manifest(
        root="/workspace/project",
        extra_path_grants=(
            SandboxPathGrant(path="/tmp/granted-rw"),
            SandboxPathGrant(path="/tmp/granted-ro", read_only=True),
        ),
        entries={"seed.txt": File(content=b"seed\n")},
        environment=Environment(value={"FROM_MANIFEST": "manifest", "BOTH": "manifest"}),
    )
    session = await client.create(manifest=manifest, options=OPTIONS)
    try:
        await session.start()
        yield session
    finally:
        await client.delete(session)


async def test_exec_keeps_argv_boundaries_and_raw_bytes(shared: SandboxSession) -> None:
    result = await shared.exec("printf", "%s|", "a b", "", "'q'", "$HOME", shell=False)
    assert result.stdout == b"a b||'q'|$HOME|"
    raw = await shared.exec(
        "python3", "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)))", shell=False
    )
    assert raw.stdout == bytes(range(256))
    assert (await shared.exec("exit 3")).exit_code == 3


async def test_exec_runs_in_the_manifest_root_with_its_environment(shared: SandboxSession) -> None:
    result = await shared.exec(
        "sh", "-c", 'pwd; echo "$FROM_OPTIONS $FROM_MANIFEST $BOTH"', shell=False
    )
    assert result.stdout == b"/workspace/project\noptions manifest manifest\n"
    host_only = "LIZARD_API_KEY"
    assert host_only in os.environ
    assert (await shared.exec("sh", "-c", f'echo "[${host_only}]"', shell=False)).stdout == b"[]\n"


async def test_a_timeout_is_the_sdks_error_with_the_partial_output(shared: SandboxSession) -> None:
    with pytest.raises(ExecTimeoutError) as caught:
        await shared.exec("echo started; sleep 30", timeout=0.5)
    assert caught.value.timeout_s == 0.5
    assert "started" in str(caught.value.context["stdout"])


async def test_the_sudo_prefix_becomes_a_user_switch(shared: SandboxSession) -> None:
    result = await shared.exec("id", "-un", shell=False, user="nobody")
    assert result.stdout == b"nobody\n"


async def test_cancelling_an_exec_stops_the_command(shared: SandboxSession) -> None:
    import asyncio

    token = "session-cancel-5d2e"
    task = asyncio.create_task(shared.exec(f"sleep 600 # {token}"))
    for _ in range(200):
        if pids_carrying(token):
            break
        await asyncio.sleep(0.05)
    assert pids_carrying(token)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if not pids_carrying(token):
            break
        await asyncio.sleep(0.05)
    assert not pids_carrying(token)
    assert (await shared.exec("echo", "still usable", shell=False)).stdout == b"still usable\n"


async def test_small_exec_read_and_write_are_one_request_each(
    shared: SandboxSession, lizard_counters: LocalServer
) -> None:
    await shared.exec("true", shell=False)  # the sandbox is attached already
    lizard_counters.reset_counters()
    await shared.exec("echo", "hi", shell=False)
    assert lizard_counters.counters()["routes"] == {EXEC: 1}
    lizard_counters.reset_counters()
    await shared.write(Path("counted/one.txt"), io.BytesIO(b"one"))
    assert lizard_counters.counters()["routes"] == {EXEC: 1}
    lizard_counters.reset_counters()
    assert (await shared.read(Path("counted/one.txt"))).read() == b"one"
    assert lizard_counters.counters()["routes"] == {EXEC: 1}


@pytest.mark.parametrize(
    "size", sorted({0, SMALL_WRITE, SMALL_WRITE + 1, SMALL_READ + 1, 2 * CHUNK_SIZE + 5})
)
async def test_files_of_every_size_round_trip(shared: SandboxSession, size: int) -> None:
    data = os.urandom(size)
    await shared.write(Path(f"sizes/{size}.bin"), io.BytesIO(data))
    stream = await shared.read(Path(f"sizes/{size}.bin"))
    try:
        assert stream.read() == data
    finally:
        stream.close()


async def test_a_large_write_is_streamed_from_its_source(shared: SandboxSession) -> None:
    reads: list[int] = []

    class Source(io.RawIOBase):
        def __init__(self) -> None:
            self.left = 3 * CHUNK_SIZE

        def readable(self) -> bool:
            return True

        def read(self, n: int = -1) -> bytes:
            assert n != -1, "the whole source was asked for at once"
            reads.append(n)
            piece = min(n, self.left)
            self.left -= piece
            return b"x" * piece

    await shared.write(Path("streamed.bin"), Source())
    assert max(reads) <= CHUNK_SIZE
    assert (await shared.exec("wc", "-c", "streamed.bin", shell=False)).stdout.split()[0] == str(
        3 * CHUNK_SIZE
    ).encode()


async def test_reads_and_writes_are_confined_to_the_workspace(shared: SandboxSession) -> None:
    await shared.exec("ln", "-sfn", "/etc", "etc-link", shell=False)
    for path in ("../outside.txt", "/etc/passwd", "etc-link/passwd"):
        with pytest.raises(InvalidManifestPathError):
            await shared.read(Path(path))
        with pytest.raises(InvalidManifestPathError):
            await shared.write(Path(path), io.BytesIO(b"no"))
    # A symlink that stays inside is followed.
    await shared.exec("ln", "-sfn", "seed.txt", "seed-link", shell=False)
    assert (await shared.read(Path("seed-link"))).read() == b"seed\n"


async def test_missing_files_and_directories_are_the_sdks_errors(shared: SandboxSession) -> None:
    with pytest.raises(WorkspaceReadNotFoundError):
        await shared.read(Path("no/such/file"))
    await shared.mkdir(Path("a-dir"))
    with pytest.raises(WorkspaceArchiveReadError):
        await shared.read(Path("a-dir"))
    with pytest.raises(WorkspaceArchiveWriteError):
        await shared.write(Path("a-dir"), io.BytesIO(b"x"))


async def test_persist_makes_a_workspace_relative_tar_and_hydrate_unpacks_it(
    shared: SandboxSession,
) -> None:
    await shared.write(Path("kept/deep/file.txt"), io.BytesIO(b"kept"))
    archive = await shared.persist_workspace()
    with tarfile.open(fileobj=archive) as tar:
        names = tar.getnames()
    assert "./kept/deep/file.txt" in names
    assert not any(name.startswith(("/", "workspace")) for name in names)
    archive.seek(0)
    await shared.exec("rm", "-rf", "kept", shell=False)
    await shared.hydrate_workspace(archive)
    assert (await shared.read(Path("kept/deep/file.txt"))).read() == b"kept"


def _hostile_tar(kind: str) -> io.BytesIO:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:

        def add(name: str, **fields: object) -> None:
            info = tarfile.TarInfo(name)
            for key, value in fields.items():
                setattr(info, key, value)
            data = b"x" if info.isreg() else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        if kind == "dotdot":
            add("../escaped.txt")
        elif kind == "absolute":
            add("/workspace/escaped.txt")
        elif kind == "under-symlink":
            add("inner", type=tarfile.SYMTYPE, linkname="..")
            add("inner/escaped.txt")
        elif kind == "hardlink":
            add("escaped-hard", type=tarfile.LNKTYPE, linkname="/etc/passwd")
        elif kind == "device":
            add("escaped-dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        elif kind == "many":
            for index in range(11):
                add(f"m/{index}")
    archive.seek(0)
    return archive


@pytest.mark.parametrize(
    "kind",
    ["dotdot", "absolute", "under-symlink", "hardlink", "device", "many"],
)
async def test_hydrate_refuses_a_hostile_tar_before_extracting_anything(
    shared: SandboxSession, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_module, "HYDRATE_MEMBERS", 10)  # "many": one more than that
    with pytest.raises(WorkspaceArchiveWriteError):
        await shared.hydrate_workspace(_hostile_tar(kind))
    found = await shared.exec(
        "sh", "-c", "ls -d /workspace/escaped* escaped* m 2>/dev/null", shell=False
    )
    assert found.stdout == b""


async def test_a_gone_sandbox_is_a_transport_error_and_not_running(
    client: LizardSandboxClient, lizard_local: LocalServer
) -> None:
    session = await client.create(options=OPTIONS)
    await session.start()
    assert await session.running()
    lizard_local.expire(session.state.sandbox_id)  # type: ignore[attr-defined]
    with pytest.raises(ExecTransportError) as caught:
        await session.exec("true", shell=False)
    assert caught.value.context["retryable"] is False
    assert not await session.running()
    await client.delete(session)


async def test_a_pty_process_is_kept_fed_and_read_one_request_per_call(
    shared: SandboxSession, lizard_counters: LocalServer
) -> None:
    assert shared.supports_pty()
    lizard_counters.reset_counters()
    started = await shared.pty_exec_start(
        "sh", "-c", lifecycle.ECHO_LINES, shell=False, tty=True, yield_time_s=0.25
    )
    assert started.output.replace(b"\r\n", b"\n") == b"ready\n"
    assert started.process_id is not None
    assert started.exit_code is None
    update = await shared.pty_write_stdin(
        session_id=started.process_id, chars="hello pty\n", yield_time_s=0.25
    )
    assert update.output.replace(b"\r\n", b"\n") == b"hello pty\ngot:hello pty\n"
    assert update.process_id == started.process_id
    assert lizard_counters.counters()["routes"] == {EXEC: 2}
    ended = await shared.pty_write_stdin(
        session_id=started.process_id, chars="\x04", yield_time_s=2
    )
    assert ended.exit_code == 0
    assert ended.process_id is None
    with pytest.raises(PtySessionNotFoundError):
        await shared.pty_write_stdin(session_id=started.process_id, chars="x")


async def test_a_short_pty_command_reports_its_exit_and_terminate_all_ends_the_rest(
    shared: SandboxSession,
) -> None:
    done = await shared.pty_exec_start("echo hi; exit 7", yield_time_s=5)
    assert done.output == b"hi\n"
    assert done.exit_code == 7
    assert done.process_id is None
    token = "pty-terminate-9b1c"
    kept = await shared.pty_exec_start(f"sleep 600 # {token}", yield_time_s=0.25)
    assert kept.process_id is not None
    assert pids_carrying(token)
    await shared.pty_terminate_all()
    assert not pids_carrying(token)


async def test_extra_path_grants_are_honoured_in_the_sandbox(shared: SandboxSession) -> None:
    made = await shared.exec(
        "sh",
        "-c",
        "mkdir -p /tmp/granted-rw /tmp/granted-ro && echo ro > /tmp/granted-ro/f",
        shell=False,
    )
    assert made.ok()
    await shared.write(Path("/tmp/granted-rw/f"), io.BytesIO(b"rw"))
    assert (await shared.read(Path("/tmp/granted-rw/f"))).read() == b"rw"
    assert (await shared.read(Path("/tmp/granted-ro/f"))).read() == b"ro\n"
    with pytest.raises(WorkspaceArchiveWriteError):
        await shared.write(Path("/tmp/granted-ro/f"), io.BytesIO(b"no"))
    assert (await shared.exec("cat", "/tmp/granted-ro/f", shell=False)).stdout == b"ro\n"


@pytest.mark.parametrize("size", [SMALL_READ + 1, SMALL_WRITE + 1], ids=["read", "write"])
async def test_large_transfers_honour_the_user(shared: SandboxSession, size: int) -> None:
    # Another user's operation must not read or write what that user could not, large or not.
    secret = os.urandom(size)
    await shared.write(Path("owned/root-only.bin"), io.BytesIO(secret))
    await shared.exec("chmod", "600", "owned/root-only.bin", shell=False)
    await shared.exec("chown", "user", "owned", shell=False)  # the user may create files here
    with pytest.raises((WorkspaceArchiveReadError, WorkspaceReadNotFoundError)):
        await shared.read(Path("owned/root-only.bin"), user="user")
    with pytest.raises(WorkspaceArchiveWriteError):
        await shared.write(Path("owned/root-only.bin"), io.BytesIO(b"y" * size), user="user")
    assert (await shared.read(Path("owned/root-only.bin"))).read() == secret
    # What the user may do still works, and what it writes is its own.
    mine = os.urandom(size)
    await shared.write(Path("owned/mine.bin"), io.BytesIO(mine), user="user")
    owner = await shared.exec("stat", "-c", "%U %a", "owned/mine.bin", shell=False)
    assert owner.stdout.split()[0] == b"user"
    assert (await shared.read(Path("owned/mine.bin"), user="user")).read() == mine
    leftovers = await shared.exec("sh", "-c", "ls -d /tmp/.lizard-stage-* 2>/dev/null")
    assert leftovers.stdout == b""


@pytest.fixture
def three_ptys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's limits on kept PTY processes made small, before the session is made."""
    from agents.sandbox.session import pty_types

    monkeypatch.setattr(pty_types, "PTY_PROCESSES_MAX", 3)
    monkeypatch.setattr(pty_types, "PTY_PROCESSES_PROTECTED_RECENT", 1)


async def test_kept_pty_processes_are_capped_and_the_least_recently_used_ends(
    three_ptys: None, session: SandboxSession
) -> None:
    shared = session  # made after the limits were set: it keeps at most three
    tokens = [f"pty-cap-{index}-5e0d" for index in range(4)]
    ids = []
    for token in tokens:
        update = await shared.pty_exec_start(f"sleep 600 # {token}", yield_time_s=0.25)
        ids.append(update.process_id)
    try:
        assert not pids_carrying(tokens[0])  # the oldest was ended to make room
        assert all(pids_carrying(token) for token in tokens[1:])
        with pytest.raises(PtySessionNotFoundError):
            await shared.pty_write_stdin(session_id=ids[0], chars="")
    finally:
        await shared.pty_terminate_all()
    assert not any(pids_carrying(token) for token in tokens)


async def test_writing_to_a_process_that_has_just_ended_gives_its_exit(
    shared: SandboxSession,
) -> None:
    import asyncio

    started = await shared.pty_exec_start("sleep 0.5; echo bye; exit 4", yield_time_s=0.1)
    assert started.process_id is not None
    await asyncio.sleep(1.5)
    update = await shared.pty_write_stdin(session_id=started.process_id, chars="late\n")
    assert update.exit_code == 4
    assert b"bye" in update.output
    assert update.process_id is None
