"""``lizard_core.resolved_files``: the path resolved in the sandbox, in the transfer's request."""

from __future__ import annotations

import errno
import io
import os
import tracemalloc
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lizard_core.commands import STREAM_BUDGET, arun_command
from lizard_core.files import CHUNK_SIZE, SandboxFiles
from lizard_core.resolved_files import (
    RESOLVER_LIMIT,
    SMALL_WRITE,
    PathRefusedError,
    Resolver,
    aread_resolved,
    aresolve,
    awrite_resolved,
)
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"
GET_FILE = "GET /api/sandboxes/{id}/files"
POST_FILE = "POST /api/sandboxes/{id}/files"
# A few 4 MiB chunks in flight (a piece, its base64 body, the request), whatever the file's size;
# the file moved is 48 MiB.
STREAMED_PEAK_BYTES = 40 * 1024 * 1024
# A resolver confining paths to $1: symlinks resolved in the sandbox, 111 for an escape.
WITHIN = (
    'root=$(realpath -m -- "$1") && p=$(realpath -m -- "$1/$2") || exit 3; '
    'case "$p" in "$root"|"$root"/*) printf "%s\\n" "$p" ;; '
    '*) printf "escapes: %s" "$p" >&2; exit 111 ;; esac'
)


@pytest.fixture
async def root(module_session: Any) -> str:
    """A fresh workspace, writable by ``user``, with a secret file next to it."""
    folder = f"/tmp/resolved-{uuid.uuid4().hex[:8]}"
    script = (
        f"mkdir -p {folder}/ws {folder}/out && echo secret > {folder}/out/secret "
        f"&& chmod 600 {folder}/out/secret && chown user {folder}/ws && chmod 755 {folder}"
    )
    assert (await arun_command(module_session, ["sh", "-c", script])).exit_code == 0
    return f"{folder}/ws"


def within(root: str, path: str) -> Resolver:
    return Resolver(WITHIN, (root, path))


async def sh(session: Any, script: str) -> bytes:
    done = await arun_command(session, ["sh", "-c", script])
    assert done.exit_code == 0, done.stderr
    return done.stdout


async def test_a_small_read_and_write_are_one_request_each(
    module_session: Any, root: str, lizard_counters: LocalServer
) -> None:
    lizard_counters.reset_counters()
    await awrite_resolved(module_session, within(root, "a/b.txt"), b"hello")
    assert lizard_counters.counters()["routes"] == {EXEC: 1}
    lizard_counters.reset_counters()
    assert (await aread_resolved(module_session, within(root, "a/b.txt"))).read() == b"hello"
    assert lizard_counters.counters()["routes"] == {EXEC: 1}
    lizard_counters.reset_counters()
    assert await aresolve(module_session, within(root, "a/../a/b.txt")) == f"{root}/a/b.txt"
    assert lizard_counters.counters()["routes"] == {EXEC: 1}


async def test_a_symlink_out_of_the_root_is_refused_and_nothing_moves(
    module_session: Any, root: str
) -> None:
    await sh(module_session, f"ln -s ../out {root}/link")
    for call in (
        aread_resolved(module_session, within(root, "link/secret")),
        awrite_resolved(module_session, within(root, "link/new"), b"x"),
        aresolve(module_session, within(root, "link")),
    ):
        with pytest.raises(PathRefusedError) as refused:
            await call
        assert refused.value.exit_code == 111
        assert "escapes" in refused.value.detail
    assert await sh(module_session, f"ls {root}/../out") == b"secret\n"


async def test_missing_files_directories_and_failures_are_their_os_errors(
    module_session: Any, root: str
) -> None:
    with pytest.raises(FileNotFoundError) as missing:
        await aread_resolved(module_session, within(root, "nope"))
    assert missing.value.filename == f"{root}/nope"
    await sh(module_session, f"mkdir {root}/dir")
    with pytest.raises(IsADirectoryError):
        await aread_resolved(module_session, within(root, "dir"))
    with pytest.raises(IsADirectoryError):
        await awrite_resolved(module_session, within(root, "dir"), b"x")
    await sh(module_session, f"echo x > {root}/file")
    with pytest.raises(NotADirectoryError):  # a parent that is a file
        await awrite_resolved(module_session, within(root, "file/child"), b"x")
    # A resolver's own exit code never passes for ours (65 is "missing" for the script).
    with pytest.raises(PathRefusedError) as refused:
        await aread_resolved(module_session, Resolver("echo no >&2; exit 65"))
    assert (refused.value.exit_code, refused.value.detail) == (65, "no")
    with pytest.raises(OSError, match="no path"):
        await aresolve(module_session, Resolver("true"))


def test_a_bad_resolver_fails_before_any_request() -> None:
    with pytest.raises(TypeError):
        Resolver(b"true")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NUL"):
        Resolver("true", ("a\0b",))
    with pytest.raises(ValueError, match="exceed"):
        Resolver("#" * RESOLVER_LIMIT, ("x",))


@pytest.mark.parametrize(
    "size", [0, STREAM_BUDGET, STREAM_BUDGET + 1, SMALL_WRITE, SMALL_WRITE + 1, 2 * CHUNK_SIZE + 5]
)
async def test_files_of_every_size_round_trip(module_session: Any, root: str, size: int) -> None:
    data = os.urandom(size)
    await awrite_resolved(module_session, within(root, "f.bin"), io.BytesIO(data))
    assert (await aread_resolved(module_session, within(root, "f.bin"))).read() == data


async def test_large_transfers_hold_about_a_chunk_on_the_host(
    module_session: Any, root: str, tmp_path: Any
) -> None:
    size = 12 * CHUNK_SIZE + 7
    source = tmp_path / "big"
    source.write_bytes(os.urandom(size))
    tracemalloc.start()
    try:
        with source.open("rb") as data:
            await awrite_resolved(module_session, within(root, "big"), data)
        _, wrote_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        read = await aread_resolved(module_session, within(root, "big"), spool_memory=CHUNK_SIZE)
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"peak host heap for {size} bytes: write {wrote_peak}, read {read_peak}")
    assert wrote_peak < STREAMED_PEAK_BYTES, wrote_peak
    assert read_peak < STREAMED_PEAK_BYTES, read_peak
    assert read.read() == source.read_bytes()


@pytest.mark.parametrize("size", [100, STREAM_BUDGET + 1, SMALL_WRITE + 1])
async def test_as_a_user_every_byte_moves_with_that_users_rights(
    module_session: Any, root: str, size: int
) -> None:
    await sh(module_session, f"head -c {size} /dev/zero > {root}/root-only && chmod 600 {root}/*")
    with pytest.raises(OSError, match="Permission denied"):
        await aread_resolved(module_session, within(root, "root-only"), user="user")
    with pytest.raises(OSError, match="Permission denied"):
        await awrite_resolved(module_session, within(root, "root-only"), b"y" * size, user="user")
    mine = os.urandom(size)
    await awrite_resolved(module_session, within(root, "sub/mine"), mine, user="user")
    assert await sh(module_session, f"stat -c %U {root}/sub/mine") == b"user\n"
    assert (await aread_resolved(module_session, within(root, "sub/mine"), user="user")).read() == (
        mine
    )
    assert await sh(module_session, "ls -d /tmp/.lizard-stage-* 2>/dev/null || true") == b""


async def test_a_large_read_as_a_user_cannot_be_raced_to_a_file_it_may_not_read(
    module_session: Any, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The path is resolved as the user; an attacker then swaps the file for a symlink to one
    # only root reads before the bytes are fetched. What comes back is what the user could read.
    size = STREAM_BUDGET + 1
    await sh(
        module_session,
        f"head -c {size} /dev/zero | tr '\\0' s > {root}/secret && chmod 600 {root}/secret && "
        f"head -c {size} /dev/zero | tr '\\0' p > {root}/public",
    )
    fetch = SandboxFiles.aiter_bytes

    async def swapped_first(files: SandboxFiles, path: str) -> AsyncIterator[bytes]:
        await sh(module_session, f"ln -sfn secret {root}/public")
        async for piece in fetch(files, path):
            yield piece

    monkeypatch.setattr(SandboxFiles, "aiter_bytes", swapped_first)
    try:
        stream = await aread_resolved(module_session, within(root, "public"), user="user")
    except OSError:
        return
    assert stream.read() == b"p" * size


# Prints $1/dir/$3, then (a process racing the transfer) swaps $1/dir for a symlink to $2.
SWAPS_AFTER_RESOLVING = 'printf "%s\\n" "$1/dir/$3"; rm -rf -- "$1/dir"; ln -s -- "$2" "$1/dir"'


@pytest.mark.parametrize("size", [5, STREAM_BUDGET + 1, SMALL_WRITE + 1])
async def test_a_component_swapped_for_a_symlink_after_resolving_is_never_followed(
    module_session: Any, root: str, size: int
) -> None:
    outside = f"{root}/../out"
    await sh(module_session, f"head -c {size} /dev/zero > {outside}/f")
    for mode in ("read", "write"):
        await sh(module_session, f"mkdir -p {root}/dir && head -c {size} /dev/zero > {root}/dir/f")
        swap = Resolver(SWAPS_AFTER_RESOLVING, (root, outside, "f" if mode == "read" else "new"))
        transfer = (
            aread_resolved(module_session, swap)
            if mode == "read"
            else awrite_resolved(module_session, swap, b"w" * size)
        )
        with pytest.raises(OSError, match="symlink") as refused:
            await transfer
        assert refused.value.errno == errno.ELOOP, refused.value
    assert await sh(module_session, f"ls {outside}") == b"f\nsecret\n"  # nothing written there


async def test_fifos_and_devices_are_refused_at_once(module_session: Any, root: str) -> None:
    await sh(module_session, f"mkfifo {root}/fifo && ln -s /dev/null {root}/null")
    with pytest.raises(OSError, match="regular") as fifo:
        await aread_resolved(module_session, within(root, "fifo"))
    assert fifo.value.errno == errno.EINVAL
    with pytest.raises(OSError, match="No such device") as nobody_reads:
        await awrite_resolved(module_session, within(root, "fifo"), b"x")
    assert nobody_reads.value.errno == errno.ENXIO
    device = Resolver('printf "%s\\n" /dev/null')
    with pytest.raises(OSError, match="regular") as null:
        await aread_resolved(module_session, device)
    assert null.value.errno == errno.EINVAL


async def test_large_transfers_cost_what_sandbox_files_cost(
    module_session: Any, root: str, lizard_counters: LocalServer
) -> None:
    data = os.urandom(2 * CHUNK_SIZE)
    await awrite_resolved(module_session, within(root, "big"), data)
    assert lizard_counters.counters()["routes"] == {EXEC: 1, POST_FILE: 2}
    lizard_counters.reset_counters()
    assert (await aread_resolved(module_session, within(root, "big"))).read() == data
    assert lizard_counters.counters()["routes"] == {EXEC: 1, GET_FILE: 1}


async def test_a_resolved_path_is_taken_as_printed(module_session: Any, root: str) -> None:
    assert await aresolve(module_session, within(root, " spaced ")) == f"{root}/ spaced "
    await awrite_resolved(module_session, within(root, " spaced "), b"s")
    assert await sh(module_session, f"cat '{root}/ spaced '") == b"s"
    for printed in ("relative", "/a/../b", "/a//b"):
        with pytest.raises(OSError, match="canonical"):
            await aread_resolved(module_session, Resolver(f'printf "%s\\n" "{printed}"'))
