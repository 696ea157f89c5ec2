"""lizard_core.files against lizard-local, under each profile (capped, uncapped, latency)."""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import time
from typing import Any

import pytest

from lizard_core import files as files_module
from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.errors import SandboxGoneError
from lizard_core.files import (
    CHUNK_SIZE,
    LIST_BUDGET,
    READ_COMPRESSED,
    READ_INLINE,
    WRITE_INLINE,
    FileStat,
    SandboxFiles,
)
from lizard_core.session import Session
from lizard_local import LocalServer

pytestmark = pytest.mark.usefixtures("profile")

EXEC = "POST /api/sandboxes/{id}/exec"
GET_FILE = "GET /api/sandboxes/{id}/files"
POST_FILE = "POST /api/sandboxes/{id}/files"


@pytest.fixture
def files(module_session: Any) -> SandboxFiles:
    return SandboxFiles(module_session)


def sh(session: Any, script: str, *args: str) -> bytes:
    result = run_command(session, ["sh", "-c", script, "sh", *args])
    assert result.exit_code == 0, result
    return result.stdout


# ── validation ───────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("method", "args", "error"),
    [
        ("read_bytes", ("relative",), ValueError),
        ("read_bytes", (b"/bytes",), TypeError),
        ("stat", ("/a\0b",), ValueError),
        ("write_bytes", ("/x", "text"), TypeError),
        ("write_bytes", ("x", b"data"), ValueError),
        ("remove", ("/",), ValueError),
        ("remove", ("//",), ValueError),
        ("list_dir", (None,), TypeError),
    ],
)
def test_bad_arguments_fail_before_any_request(
    lizard_local: LocalServer, api_requests: Any, method: str, args: tuple[Any, ...], error: type
) -> None:
    session = Session(SandboxConfig.from_env(integration="lizard-core-tests"))
    files = SandboxFiles(session)
    with pytest.raises(error):
        getattr(files, method)(*args)
    with pytest.raises(error):
        asyncio.run(getattr(files, "a" + method)(*args))
    assert api_requests.counts() == {}
    assert session.sandbox_id is None


def test_the_first_operation_on_a_new_sandbox_costs_create_plus_one(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    config = SandboxConfig.from_env(lifetime_ms=120_000, integration="lizard-core-tests")
    with Session(config) as session:
        assert SandboxFiles(session).exists("/tmp")
        counts = api_requests.counts()
    counts.pop("GET /api/projects", None)
    assert counts == {"POST /api/sandboxes": 1, EXEC: 1}


# ── reads and writes ─────────────────────────────────────────────────────


def test_small_files_round_trip_in_one_request_each(
    files: SandboxFiles, scratch: str, api_requests: Any
) -> None:
    path = f"{scratch}/nested/deeper/data.bin"
    data = bytes(range(256)) * 4
    files.write_bytes(path, data)
    assert api_requests.counts() == {EXEC: 1}
    api_requests.reset()
    assert files.read_bytes(path) == data
    assert api_requests.counts() == {GET_FILE: 1}


def test_a_one_mib_write_is_one_request(
    files: SandboxFiles, scratch: str, api_requests: Any
) -> None:
    data = os.urandom(WRITE_INLINE)
    files.write_bytes(f"{scratch}/one-mib", data)
    assert api_requests.counts() == {EXEC: 1}
    api_requests.reset()
    assert files.read_bytes(f"{scratch}/one-mib") == data
    assert api_requests.counts() == {GET_FILE: 1}


@pytest.mark.parametrize("size", [0, 1024, READ_COMPRESSED, 8 * 1024 * 1024])
def test_a_read_is_one_request_whatever_the_size_and_content(
    files: SandboxFiles, scratch: str, api_requests: Any, size: int
) -> None:
    # Incompressible bytes: past READ_INLINE they could not come back inside one exec stream.
    data = os.urandom(size)
    path = f"{scratch}/random-{size}"
    files.write_bytes(path, data)
    api_requests.reset()
    assert files.read_bytes(path) == data
    assert api_requests.counts() == {GET_FILE: 1}
    api_requests.reset()
    assert asyncio.run(files.aread_bytes(path)) == data
    assert api_requests.counts() == {GET_FILE: 1}


def test_read_errors_cost_a_get_and_the_guests_check(
    files: SandboxFiles, scratch: str, api_requests: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refused GET goes to the guest at once: with a guard this long, waiting would show.
    monkeypatch.setattr(files_module, "READ_GUARD_S", 60.0)
    files.make_dir(scratch)
    sh(files.session, 'mkfifo "$1"', f"{scratch}/fifo")
    cases = [
        (f"{scratch}/missing", FileNotFoundError),
        (scratch, IsADirectoryError),
        (f"{scratch}/fifo", OSError),
        ("/dev/zero", OSError),
    ]
    for path, error in cases:
        api_requests.reset()
        started = time.monotonic()
        with pytest.raises(error) as caught:
            files.read_bytes(path)
        assert type(caught.value) is error
        if error is OSError:
            assert caught.value.errno == errno.EINVAL
        assert time.monotonic() - started < 10
        assert api_requests.counts() == {GET_FILE: 1, EXEC: 1}


def test_a_special_file_the_platform_blocks_on_fails_after_the_guard(
    lizard_local: LocalServer, files: SandboxFiles, scratch: str, api_requests: Any
) -> None:
    fifo, regular = f"{scratch}/fifo", f"{scratch}/regular"
    files.write_bytes(regular, b"still readable")
    sh(files.session, 'mkfifo "$1"', fifo)
    lizard_local.configure(special_file_reads="block")
    try:
        api_requests.reset()
        started = time.monotonic()
        with pytest.raises(OSError, match="Not a regular file") as caught:
            files.read_bytes(fifo)
        elapsed = time.monotonic() - started
        # The abandoned GET is not retried; the guest then fails fast.
        assert api_requests.counts() == {GET_FILE: 1, EXEC: 1}
        api_requests.reset()
        assert files.read_bytes(regular) == b"still readable"
        assert api_requests.counts() == {GET_FILE: 1}
    finally:
        lizard_local.configure(special_file_reads="reject")
    assert (type(caught.value), caught.value.errno) == (OSError, errno.EINVAL)
    assert files_module.READ_GUARD_S <= elapsed < files_module.READ_GUARD_S + 5


def test_a_device_the_platform_streams_without_end_is_not_read(
    lizard_local: LocalServer, files: SandboxFiles, api_requests: Any
) -> None:
    # A platform that copies /dev/zero into its answer sends no length: the read stops at the
    # headers and the guest names the device for what it is.
    lizard_local.configure(special_file_reads="stream")
    try:
        api_requests.reset()
        with pytest.raises(OSError, match="Not a regular file") as caught:
            files.read_bytes("/dev/zero")
        assert api_requests.counts() == {GET_FILE: 1, EXEC: 1}
    finally:
        lizard_local.configure(special_file_reads="reject")
    assert (type(caught.value), caught.value.errno) == (OSError, errno.EINVAL)


def test_a_transient_get_failure_is_retried_then_left_to_the_guest(
    lizard_local: LocalServer, files: SandboxFiles, scratch: str, api_requests: Any
) -> None:
    data = os.urandom(1024)
    files.write_bytes(f"{scratch}/data", data)
    api_requests.reset()
    lizard_local.inject_fault(GET_FILE, status=503, count=1)
    assert files.read_bytes(f"{scratch}/data") == data
    assert api_requests.counts() == {GET_FILE: 2}
    api_requests.reset()
    lizard_local.inject_fault(GET_FILE, status=503, count=3)  # every attempt of the GET
    assert files.read_bytes(f"{scratch}/data") == data
    assert api_requests.counts() == {GET_FILE: 3, EXEC: 1}


def test_a_read_in_a_destroyed_sandbox_is_sandbox_gone(
    lizard_local: LocalServer, api_requests: Any
) -> None:
    session = Session(SandboxConfig.from_env(lifetime_ms=120_000, integration="lizard-core-tests"))
    try:
        session.sandbox()
        lizard_local.expire(session.sandbox_id)
        api_requests.reset()
        with pytest.raises(SandboxGoneError):
            SandboxFiles(session).read_bytes("/etc/hostname")
        # The GET's 404 names the sandbox: no guest is started for it.
        assert api_requests.counts() == {GET_FILE: 1}
    finally:
        session.destroy()


def test_a_compressible_one_mib_file_comes_back_in_one_request_either_way(
    files: SandboxFiles, scratch: str, api_requests: Any
) -> None:
    text = b"".join(b"line %06d of a log file that compresses well\n" % i for i in range(22000))
    assert READ_INLINE < len(text) <= READ_COMPRESSED
    files.write_bytes(f"{scratch}/log.txt", text)
    api_requests.reset()
    assert files.read_bytes(f"{scratch}/log.txt") == text
    assert api_requests.counts() == {GET_FILE: 1}
    api_requests.reset()
    # The guest's read (iter_bytes) sends it deflated inside the exec stream.
    assert list(files.iter_bytes(f"{scratch}/log.txt")) == [text]
    assert api_requests.counts() == {EXEC: 1}


def test_a_guest_read_up_to_the_inline_size_is_one_request(
    files: SandboxFiles, scratch: str, api_requests: Any
) -> None:
    data = os.urandom(READ_INLINE)
    files.write_bytes(f"{scratch}/inline", data)
    api_requests.reset()
    assert list(files.iter_bytes(f"{scratch}/inline")) == [data]
    assert api_requests.counts() == {EXEC: 1}
    api_requests.reset()
    assert files.read_bytes(f"{scratch}/inline") == data
    assert api_requests.counts() == {GET_FILE: 1}


def test_a_write_too_large_for_the_exec_body_falls_back_to_chunks(
    lizard_local: LocalServer,
    files: SandboxFiles,
    scratch: str,
    api_requests: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(files_module, "CHUNK_SIZE", 256 * 1024)
    saved = lizard_local.info()["settings"]["max_body_bytes"]
    lizard_local.configure(max_body_bytes=600 * 1024)  # the 1.4 MB exec body gets a 413
    try:
        data = os.urandom(WRITE_INLINE)
        files.write_bytes(f"{scratch}/fallback", data)
        counts = api_requests.counts()
    finally:
        lizard_local.configure(max_body_bytes=saved)
    # Four chunk uploads and the assembling exec (plus the refused exec, if the server counts it).
    assert counts[POST_FILE] == 4
    assert counts[EXEC] in (1, 2)
    assert files.read_bytes(f"{scratch}/fallback") == data


def test_empty_files(files: SandboxFiles, scratch: str) -> None:
    files.write_bytes(f"{scratch}/empty", b"")
    assert files.read_bytes(f"{scratch}/empty") == b""
    assert files.stat(f"{scratch}/empty").size == 0


def test_large_files_move_in_chunks(files: SandboxFiles, scratch: str, api_requests: Any) -> None:
    size = 2 * CHUNK_SIZE + 12345
    data = os.urandom(size)
    path = f"{scratch}/large.bin"
    files.write_bytes(path, data)
    # Three uploaded chunks and one exec that assembles them.
    assert api_requests.counts() == {POST_FILE: 3, EXEC: 1}
    api_requests.reset()
    pieces = list(files.iter_bytes(path))
    assert [len(piece) for piece in pieces] == [CHUNK_SIZE, CHUNK_SIZE, 12345]
    assert b"".join(pieces) == data
    # Check and first chunk, then a copy per further chunk, and a GET per chunk.
    assert api_requests.counts() == {EXEC: 3, GET_FILE: 3}
    api_requests.reset()
    assert files.read_bytes(path) == data
    # A whole read: one GET of the entire file.
    assert api_requests.counts() == {GET_FILE: 1}
    # Nothing is left in the job root once the next request has run.
    assert sh(files.session, "ls -A /tmp/.lizard-core") == b""


def test_write_chunks_takes_pieces_of_any_size(files: SandboxFiles, scratch: str) -> None:
    pieces = [os.urandom(n) for n in (1, CHUNK_SIZE - 1, 7, CHUNK_SIZE + 3, 0, 5)]
    files.write_chunks(f"{scratch}/pieces", iter(pieces))
    assert files.read_bytes(f"{scratch}/pieces") == b"".join(pieces)
    files.write_chunks(f"{scratch}/small", [b"a", b"b"])
    assert files.read_bytes(f"{scratch}/small") == b"ab"


def test_write_replaces_a_file_atomically_and_keeps_its_mode(
    files: SandboxFiles, scratch: str
) -> None:
    path = f"{scratch}/kept"
    files.write_bytes(path, b"old contents")
    sh(files.session, 'chmod 640 "$1"', path)
    inode = sh(files.session, 'stat -c %i "$1"', path)
    files.write_bytes(path, b"new")
    assert files.read_bytes(path) == b"new"
    assert files.stat(path).mode == 0o640
    assert sh(files.session, 'stat -c %i "$1"', path) != inode  # renamed over, not rewritten
    assert [entry.name for entry in files.list_dir(scratch)] == ["kept"]  # no temporary left


def test_writes_go_through_symlinks(files: SandboxFiles, scratch: str) -> None:
    target, link = f"{scratch}/target", f"{scratch}/link"
    files.write_bytes(target, b"old")
    sh(files.session, 'ln -s target "$1"', link)
    files.write_bytes(link, b"new")
    assert files.read_bytes(target) == b"new"
    assert files.stat(link).kind == "symlink"
    dangling = f"{scratch}/dangling"
    sh(files.session, 'ln -s made/by/write "$1"', dangling)
    files.write_bytes(dangling, b"created")
    assert files.read_bytes(f"{scratch}/made/by/write") == b"created"


def test_path_errors_are_the_builtin_exceptions(files: SandboxFiles, scratch: str) -> None:
    file = f"{scratch}/file"
    files.write_bytes(file, b"x")
    missing = f"{scratch}/missing"
    for operation in (files.read_bytes, files.stat, files.list_dir, files.remove):
        with pytest.raises(FileNotFoundError):
            operation(missing)
    with pytest.raises(IsADirectoryError):
        files.read_bytes(scratch)
    with pytest.raises(IsADirectoryError):
        files.write_bytes(scratch, b"data")
    with pytest.raises(NotADirectoryError):
        files.list_dir(file)
    with pytest.raises(NotADirectoryError):
        files.write_bytes(f"{file}/child", b"data")
    with pytest.raises(NotADirectoryError):
        files.make_dir(f"{file}/child")
    with pytest.raises(FileExistsError):
        files.make_dir(file)


def test_a_failed_write_names_the_path_not_its_temporary_file(files: SandboxFiles) -> None:
    # /proc takes no new files: creating the write's temporary sibling there fails.
    with pytest.raises(OSError, match="lizard-cannot-create") as caught:
        files.write_bytes("/proc/lizard-cannot-create", b"x")
    assert caught.value.filename == "/proc/lizard-cannot-create"
    assert ".tmp" not in str(caught.value)


def test_special_files_fail_fast(files: SandboxFiles, scratch: str) -> None:
    fifo = f"{scratch}/fifo"
    files.make_dir(scratch)
    sh(files.session, 'mkfifo "$1"', fifo)
    started = time.monotonic()
    for operation in (
        lambda: files.read_bytes(fifo),
        lambda: files.write_bytes(fifo, b"x"),
        lambda: files.read_bytes("/dev/zero"),
        lambda: files.write_bytes("/dev/null", b"x"),
    ):
        with pytest.raises(OSError, match="Not a regular file") as caught:
            operation()
        assert type(caught.value) is OSError
    assert time.monotonic() - started < 10
    assert files.stat(fifo).kind == "fifo"


def test_permission_denied_is_permission_error(files: SandboxFiles, scratch: str) -> None:
    if run_command(files.session, ["id", "-u"]).stdout.strip() == b"0":
        pytest.skip("root bypasses file permissions")
    path = f"{scratch}/locked"
    files.write_bytes(path, b"x")
    sh(files.session, 'chmod 000 "$1"', path)
    with pytest.raises(PermissionError):
        files.read_bytes(path)
    with pytest.raises(PermissionError):
        files.write_bytes(path, b"y")


# ── metadata ─────────────────────────────────────────────────────────────


def test_stat_describes_files_dirs_and_links(files: SandboxFiles, scratch: str) -> None:
    files.write_bytes(f"{scratch}/dir/data.bin", b"data")
    sh(
        files.session,
        'cd "$1" && ln -s dir link && ln -s data.bin dir/flink && ln -s nowhere dead',
        scratch,
    )
    data = files.stat(f"{scratch}/dir/data.bin")
    assert (data.name, data.path, data.kind, data.is_dir, data.size) == (
        "data.bin",
        f"{scratch}/dir/data.bin",
        "file",
        False,
        4,
    )
    assert abs(data.mtime - time.time()) < 120
    assert files.stat(f"{scratch}/dir/").path == f"{scratch}/dir"
    link = files.stat(f"{scratch}/link")
    assert (link.kind, link.is_dir, link.size, link.symlink_target) == (
        "symlink",
        True,
        None,
        "dir",
    )
    flink = files.stat(f"{scratch}/dir/flink")
    assert (flink.kind, flink.is_dir, flink.size) == ("symlink", False, 4)
    dead = files.stat(f"{scratch}/dead")
    assert (dead.kind, dead.is_dir, dead.size) == ("symlink", False, None)


def test_list_dir_is_sorted_and_survives_loops_and_odd_names(
    files: SandboxFiles, scratch: str, api_requests: Any
) -> None:
    files.make_dir(f"{scratch}/sub")
    files.write_bytes(f"{scratch}/b.txt", b"bb")
    sh(files.session, 'cd "$1" && ln -s loop loop && touch "$(printf "odd\\377name")"', scratch)
    api_requests.reset()
    entries = files.list_dir(scratch)
    assert api_requests.counts() == {EXEC: 1}
    assert [(e.name, e.kind, e.is_dir, e.size) for e in entries] == [
        ("b.txt", "file", False, 2),
        ("loop", "symlink", False, None),
        ("odd\udcffname", "file", False, 0),
        ("sub", "dir", True, None),
    ]
    assert all(
        isinstance(e, FileStat) and e.path == posixpath.join(scratch, e.name) for e in entries
    )
    # A name that is not UTF-8 round-trips (as surrogate escapes).
    assert files.stat(entries[2].path).size == 0


def test_a_huge_listing_spills_and_stays_complete(
    files: SandboxFiles, scratch: str, api_requests: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A smaller budget makes a few hundred entries "huge" without creating thousands of files;
    # the guest takes the budget from the request, so the spill path is the real one.
    monkeypatch.setattr(files_module, "LIST_BUDGET", 16 * 1024)
    count = 400
    files.make_dir(scratch)
    code = (
        "import os, sys\n"
        "for i in range(int(sys.argv[2])):\n"
        "    open(os.path.join(sys.argv[1], 'entry-%05d-' % i + 'n' * 80), 'w').close()\n"
    )
    run_command(files.session, ["python3", "-c", code, scratch, str(count)])
    api_requests.reset()
    entries = files.list_dir(scratch)
    assert len(entries) == count
    assert [e.name[:11] for e in entries] == [f"entry-{i:05d}" for i in range(count)]
    assert count * 100 > 2 * files_module.LIST_BUDGET
    assert api_requests.counts() == {EXEC: 1, GET_FILE: 1}
    assert LIST_BUDGET == 256 * 1024


def test_exists_and_realpath_follow_links(files: SandboxFiles, scratch: str) -> None:
    files.make_dir(f"{scratch}/target")
    files.make_dir(f"{scratch}/a/b")
    sh(
        files.session,
        'cd "$1" && ln -s target link && ln -s nowhere dead && cd a && ln -s b rel && '
        "ln -s ../out up && ln -s loop2 loop1 && ln -s loop1 loop2",
        scratch,
    )
    assert files.exists(scratch)
    assert files.exists(f"{scratch}/link")
    assert not files.exists(f"{scratch}/dead")
    assert not files.exists(f"{scratch}/missing")
    a = f"{scratch}/a"
    assert files.realpath(f"{scratch}/link/missing") == f"{scratch}/target/missing"
    assert files.realpath(f"{a}/rel/missing") == f"{a}/b/missing"
    assert files.realpath(f"{a}/up/missing") == f"{scratch}/out/missing"
    assert files.realpath(f"{a}/rel/..") == a
    assert files.realpath(f"{a}/up/..") == scratch
    looped = files.realpath(f"{a}/loop1/q")
    assert looped.startswith(a + "/")


def test_make_dir_is_mkdir_p(files: SandboxFiles, scratch: str, api_requests: Any) -> None:
    files.make_dir(f"{scratch}/x/y/z")
    files.make_dir(f"{scratch}/x/y/z")
    assert files.stat(f"{scratch}/x/y/z").is_dir
    assert api_requests.counts() == {EXEC: 3}


# ── remove ───────────────────────────────────────────────────────────────


def test_remove_deletes_files_trees_and_links_themselves(
    files: SandboxFiles, scratch: str, api_requests: Any
) -> None:
    files.write_bytes(f"{scratch}/tree/nested/file", b"x")
    files.write_bytes(f"{scratch}/file", b"x")
    sh(files.session, 'cd "$1" && ln -s tree link', scratch)
    api_requests.reset()
    files.remove(f"{scratch}/link")
    assert api_requests.counts() == {EXEC: 1}
    assert files.exists(f"{scratch}/tree/nested/file")
    files.remove(f"{scratch}/file")
    files.remove(f"{scratch}/tree")
    assert files.list_dir(scratch) == []


def test_remove_without_recursion_removes_files_and_refuses_directories(
    files: SandboxFiles, scratch: str, api_requests: Any
) -> None:
    files.write_bytes(f"{scratch}/dir/file", b"x")
    api_requests.reset()
    files.remove(f"{scratch}/dir/file", recursive=False)
    assert api_requests.counts() == {EXEC: 1}
    with pytest.raises(IsADirectoryError):
        files.remove(f"{scratch}/dir", recursive=False)
    with pytest.raises(FileNotFoundError):
        files.remove(f"{scratch}/dir/file", recursive=False)
    with pytest.raises(TypeError):
        files.remove(f"{scratch}/dir", recursive=1)  # type: ignore[arg-type]
    assert files.list_dir(scratch)[0].name == "dir"


def test_remove_refuses_root_and_the_protected_directory_after_resolving_links(
    module_session: Any, scratch: str
) -> None:
    work = f"{scratch}/project/cwd"
    files = SandboxFiles(module_session, protected=[work])
    files.make_dir(work)
    files.write_bytes(f"{work}/keep", b"x")
    sh(module_session, 'cd "$1" && ln -s project alias && ln -s project/cwd cwdlink', scratch)
    refused = [
        work,
        f"{work}/",
        f"{work}/.",
        f"{scratch}/project",
        scratch,
        "/tmp",
        f"{scratch}/alias/cwd",  # through a symlinked parent
        f"{scratch}/alias/cwd/..",
        f"{work}/../../project",
    ]
    for path in refused:
        with pytest.raises(ValueError, match="Refusing"):
            files.remove(path)
    with pytest.raises(ValueError, match="Refusing"):
        asyncio.run(files.aremove(f"{scratch}/alias/.."))
    # A symlink that points at the protected directory is only a link: removing it is fine.
    files.remove(f"{scratch}/cwdlink")
    files.remove(f"{scratch}/alias")
    assert files.read_bytes(f"{work}/keep") == b"x"


# ── async ────────────────────────────────────────────────────────────────


async def test_the_async_methods(files: SandboxFiles, scratch: str) -> None:
    path = f"{scratch}/async/file.bin"
    await files.awrite_bytes(path, b"\xff" * 10)
    assert await files.aread_bytes(path) == b"\xff" * 10
    assert (await files.astat(path)).size == 10
    assert [e.name for e in await files.alist_dir(f"{scratch}/async")] == ["file.bin"]
    await files.amake_dir(f"{scratch}/async/dir")
    assert await files.aexists(f"{scratch}/async/dir")
    assert await files.arealpath(f"{scratch}/async/dir/..") == f"{scratch}/async"
    big = os.urandom(CHUNK_SIZE + 10)
    await files.awrite_bytes(path, big)
    pieces = [piece async for piece in files.aiter_bytes(path)]
    assert [len(p) for p in pieces] == [CHUNK_SIZE, 10]
    assert b"".join(pieces) == big
    # A blocking source is read piece by piece in the worker thread, never whole.
    pieces_read: list[int] = []

    def source() -> Any:
        for size in (CHUNK_SIZE - 1, 3, 5):
            pieces_read.append(size)
            yield big[sum(pieces_read[:-1]) : sum(pieces_read)]

    await files.awrite_chunks(f"{scratch}/async/chunks", source())
    assert pieces_read == [CHUNK_SIZE - 1, 3, 5]
    assert await files.aread_bytes(f"{scratch}/async/chunks") == big[: CHUNK_SIZE + 7]
    await files.aremove(f"{scratch}/async")
    assert not await files.aexists(f"{scratch}/async")


def test_every_path_list_dir_returns_works_with_every_operation(
    files: SandboxFiles, scratch: str
) -> None:
    # A name that is not UTF-8 comes back as surrogate escapes; HTTP cannot carry it in a
    # query string, so every operation must reach it through the guest instead.
    sh(files.session, 'mkdir -p "$1/$(printf "d\\377ir")"', scratch)
    [folder] = files.list_dir(scratch)
    assert folder.name == "d\udcffir"
    assert folder.is_dir
    small, large = os.urandom(100), os.urandom(READ_INLINE + 1)
    files.write_bytes(f"{folder.path}/s\udcfe", small)
    files.write_bytes(f"{folder.path}/l\udcfe", large)
    files.write_bytes(f"{folder.path}/big\udcfe", b"x" * (WRITE_INLINE + 1))
    names = {entry.name: entry for entry in files.list_dir(folder.path)}
    assert sorted(names) == ["big\udcfe", "l\udcfe", "s\udcfe"]
    assert files.read_bytes(names["s\udcfe"].path) == small
    assert files.read_bytes(names["l\udcfe"].path) == large
    assert b"".join(files.iter_bytes(names["l\udcfe"].path)) == large
    assert files.read_bytes(names["big\udcfe"].path) == b"x" * (WRITE_INLINE + 1)
    assert files.stat(names["l\udcfe"].path).size == len(large)
    assert files.exists(names["s\udcfe"].path)
    assert files.realpath(names["s\udcfe"].path) == names["s\udcfe"].path
    files.make_dir(f"{folder.path}/sub\udcfd")
    files.remove(names["s\udcfe"].path)
    assert not files.exists(names["s\udcfe"].path)
    on_disk = sh(files.session, 'ls "$1"/*', scratch).split(b"\n")
    assert sorted(on_disk) == [b"", b"big\xfe", b"l\xfe", b"sub\xfd"]  # the real bytes
