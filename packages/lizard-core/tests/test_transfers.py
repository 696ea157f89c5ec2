"""``lizard_core.transfers``: one outcome per file, in order; sandbox failures raised."""

from __future__ import annotations

import errno
import os
import stat
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from lizard_core.config import SandboxConfig
from lizard_core.errors import CredentialsError, SandboxGoneError
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_core.transfers import (
    Transfer,
    adownload_file,
    aread_each,
    aupload_file,
    awrite_each,
    download_file,
    read_each,
    upload_file,
    write_each,
)
from lizard_local import LocalServer


@pytest.fixture
def files(sandbox_config: SandboxConfig) -> Iterator[SandboxFiles]:
    with Session(sandbox_config) as session:
        yield SandboxFiles(session)


@pytest.fixture
async def afiles(sandbox_config: SandboxConfig) -> AsyncIterator[SandboxFiles]:
    async with Session(sandbox_config) as session:
        yield SandboxFiles(session)


def _errnos(done: list[Transfer]) -> list[int | None]:
    return [None if t.error is None else t.error.errno for t in done]


def test_each_file_has_its_outcome_in_input_order(files: SandboxFiles) -> None:
    written = write_each(
        files,
        [("/tmp/t/a/b.bin", bytes(range(256))), ("rel", b"x"), ("/tmp/t", b"dir in the way")],
    )
    assert [t.path for t in written] == ["/tmp/t/a/b.bin", "rel", "/tmp/t"]
    assert _errnos(written) == [None, errno.EINVAL, errno.EISDIR]
    read = read_each(files, ["/tmp/t/missing", "/tmp/t/a/b.bin", "/tmp/t", "x\0"])
    assert _errnos(read) == [errno.ENOENT, None, errno.EISDIR, errno.EINVAL]
    assert isinstance(read[0].error, FileNotFoundError)
    assert read[1] == Transfer("/tmp/t/a/b.bin", data=bytes(range(256)))


async def test_the_async_forms_give_the_same_outcomes(afiles: SandboxFiles) -> None:
    written = await awrite_each(afiles, [("/tmp/u/f", b""), ("u", b"")])
    assert _errnos(written) == [None, errno.EINVAL]
    read = await aread_each(afiles, ["/tmp/u/f", "/tmp/u/g", "/tmp/u"])
    assert read[0] == Transfer("/tmp/u/f", data=b"")
    assert _errnos(read) == [None, errno.ENOENT, errno.EISDIR]


def test_bad_paths_fail_alone_without_a_request(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer
) -> None:
    files = SandboxFiles(Session(sandbox_config))
    assert _errnos(read_each(files, ["relative", "/x\0y"])) == [errno.EINVAL, errno.EINVAL]
    assert lizard_counters.counters()["total"] == 0


@pytest.mark.parametrize(
    "batch", ["/tmp/x", [("/tmp/x", "text")], [("/tmp/x",)], [(1, b"")], b"/tmp/x"]
)
def test_shapes_are_checked_before_any_request(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer, batch: Any
) -> None:
    files = SandboxFiles(Session(sandbox_config))
    with pytest.raises(TypeError):
        write_each(files, batch)
    with pytest.raises(TypeError):
        read_each(files, [1])  # type: ignore[list-item]
    assert lizard_counters.counters()["total"] == 0


def test_sandbox_failures_are_raised_not_per_file(
    sandbox_config: SandboxConfig, lizard_local: LocalServer
) -> None:
    rejected = SandboxFiles(Session(sandbox_config.replace(api_key="lzl_not-the-key")))
    with pytest.raises(CredentialsError):
        write_each(rejected, [("/tmp/x", b"x")])
    with Session(sandbox_config) as session:
        files = SandboxFiles(session)
        files.write_bytes("/tmp/x", b"x")
        lizard_local.expire(session.sandbox_id)
        with pytest.raises(SandboxGoneError):
            read_each(files, ["/tmp/x", "/tmp/y"])


# The host's Python heap may grow by this much moving a file either way, whatever its size:
# a few 4 MiB chunks (a read piece, its base64 body, the one in flight). 64 MiB is the file.
STREAMED_PEAK_BYTES = 32 * 1024 * 1024


def _pattern(size: int) -> bytes:
    return (bytes(range(251)) * (size // 251 + 1))[:size]


@pytest.mark.parametrize("size", [1024, 64 * 1024 * 1024], ids=["1KiB", "64MiB"])
def test_a_local_file_goes_up_and_comes_back_streamed(
    files: SandboxFiles, tmp_path: Path, size: int
) -> None:
    source, back = tmp_path / "source.bin", tmp_path / "sub" / "back.bin"
    back.parent.mkdir()
    with source.open("wb") as out:  # written in pieces: the test itself stays small too
        for start in range(0, size, 1 << 20):
            out.write(_pattern(min(1 << 20, size - start)))
    tracemalloc.start()
    try:
        assert upload_file(files, source, "/tmp/transfer/data.bin") == size
        _, up_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        assert download_file(files, "/tmp/transfer/data.bin", str(back)) == size
        _, down_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert files.stat("/tmp/transfer/data.bin").size == size
    assert back.stat().st_size == size
    with source.open("rb") as a, back.open("rb") as b:
        while chunk := a.read(1 << 20):
            assert b.read(1 << 20) == chunk
    print(f"peak host heap for {size} bytes: up {up_peak}, down {down_peak}")
    assert up_peak < STREAMED_PEAK_BYTES, up_peak
    assert down_peak < STREAMED_PEAK_BYTES, down_peak
    assert [p.name for p in back.parent.iterdir()] == ["back.bin"]  # no partial file left


def test_a_failed_download_leaves_the_target_as_it_was(files: SandboxFiles, tmp_path: Path) -> None:
    target = tmp_path / "kept.txt"
    target.write_bytes(b"old")
    target.chmod(0o640)
    with pytest.raises(FileNotFoundError):
        download_file(files, "/tmp/no/such/file", target)
    files.write_bytes("/tmp/transfer/big", b"x" * 100)
    with pytest.raises(ValueError, match="max_bytes"):
        download_file(files, "/tmp/transfer/big", target, max_bytes=99)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]
    assert download_file(files, "/tmp/transfer/big", target, max_bytes=100) == 100
    assert target.read_bytes() == b"x" * 100
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the replaced file's mode is kept


def test_bad_local_files_fail_before_any_request(
    sandbox_config: SandboxConfig, tmp_path: Path, lizard_counters: LocalServer
) -> None:
    files = SandboxFiles(Session(sandbox_config))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(FileNotFoundError):
        upload_file(files, tmp_path / "missing", "/tmp/x")
    with pytest.raises(IsADirectoryError):
        upload_file(files, tmp_path, "/tmp/x")
    with pytest.raises(OSError, match="not a regular file"):
        upload_file(files, fifo, "/tmp/x")  # would block in open()
    with pytest.raises(IsADirectoryError):
        download_file(files, "/tmp/x", tmp_path)
    with pytest.raises(ValueError, match="absolute"):
        upload_file(files, fifo, "relative")
    with pytest.raises(TypeError):
        download_file(files, "/tmp/x", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_bytes"):
        download_file(files, "/tmp/x", tmp_path / "y", max_bytes=-1)
    assert lizard_counters.counters()["total"] == 0


async def test_the_async_transfers(afiles: SandboxFiles, tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"async bytes")
    assert await aupload_file(afiles, tmp_path / "a", "/tmp/async/a") == 11
    assert await adownload_file(afiles, "/tmp/async/a", tmp_path / "b") == 11
    assert (tmp_path / "b").read_bytes() == b"async bytes"
