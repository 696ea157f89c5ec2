"""``lizard_core.archives``: a directory packed to the host and unpacked, against lizard-local."""

from __future__ import annotations

import gzip
import io
import tarfile
import tempfile
import tracemalloc
from typing import Any

import pytest

from lizard_core.archives import apack_directory, aunpack_archive, check_archive
from lizard_core.commands import arun_command
from lizard_core.errors import ArchiveCommandError, OutputLimitError, UnsafeArchiveError
from lizard_core.files import SandboxFiles


def _tar(add: Any) -> io.BytesIO:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:

        def member(name: str, **fields: object) -> None:
            info = tarfile.TarInfo(name)
            for key, value in fields.items():
                setattr(info, key, value)
            data = b"x" if info.isreg() else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add(member)
    archive.seek(0)
    return archive


async def test_pack_is_relative_skips_excludes_and_unpacks_elsewhere(
    module_session: Any, scratch: str
) -> None:
    files = SandboxFiles(module_session)
    await files.awrite_bytes(f"{scratch}/src/keep/deep.txt", b"kept")
    await files.awrite_bytes(f"{scratch}/src/skip/me.txt", b"skipped")
    await arun_command(module_session, ["ln", "-s", "/etc", f"{scratch}/src/link-out"])
    packed = await apack_directory(module_session, f"{scratch}/src", exclude=["skip"])
    with tarfile.open(fileobj=packed) as tar:
        names = set(tar.getnames())
    assert "./keep/deep.txt" in names
    assert "./link-out" in names  # a symlink out stays a link
    assert not any("skip" in name for name in names)
    assert not any(name.startswith("/") for name in names)
    packed.seek(0)
    await aunpack_archive(module_session, f"{scratch}/dst", packed)
    assert await files.aread_bytes(f"{scratch}/dst/keep/deep.txt") == b"kept"
    leftovers = await arun_command(
        module_session, "ls /tmp | grep lizard-archive || true", shell=True
    )
    assert leftovers.stdout == b""


async def test_an_archive_past_max_bytes_is_an_output_limit_error_and_nothing_is_left(
    module_session: Any, scratch: str
) -> None:
    # The sandbox decides the archive's size: 3 MiB of random bytes against a 1 MiB limit.
    await arun_command(
        module_session,
        f"mkdir -p {scratch}/big && head -c 3145728 /dev/urandom > {scratch}/big/blob",
        shell=True,
    )
    with pytest.raises(OutputLimitError, match="max_bytes") as caught:
        await apack_directory(module_session, f"{scratch}/big", max_bytes=1024 * 1024)
    assert caught.value.limit == 1024 * 1024
    leftovers = await arun_command(
        module_session, "ls /tmp | grep lizard-archive || true", shell=True
    )
    assert leftovers.stdout == b""
    packed = await apack_directory(module_session, f"{scratch}/big", max_bytes=4 * 1024 * 1024)
    with tarfile.open(fileobj=packed) as tar:
        assert "./blob" in tar.getnames()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
async def test_a_bad_max_bytes_is_refused(module_session: Any, bad: Any) -> None:
    with pytest.raises(TypeError if not isinstance(bad, int) or bad is True else ValueError):
        await apack_directory(module_session, "/tmp", max_bytes=bad)


async def test_a_missing_directory_is_an_archive_command_error(module_session: Any) -> None:
    with pytest.raises(ArchiveCommandError) as caught:
        await apack_directory(module_session, "/no/such/dir")
    assert caught.value.exit_code != 0


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("dotdot", "parent directory reference"),
        ("absolute", "absolute path"),
        ("under-symlink", "under a symlink"),
        ("dot-symlink", "a symlink in place of the directory itself"),
        ("hardlink", "hard link"),
        ("device", "device, FIFO or other special file"),
        ("many", "too many members"),
        ("garbage", "not a readable tar"),
    ],
)
async def test_a_hostile_tar_is_refused_before_anything_is_unpacked(
    module_session: Any, scratch: str, kind: str, reason: str
) -> None:
    def add(member: Any) -> None:
        if kind == "dotdot":
            member("a/../../escaped.txt")
        elif kind == "absolute":
            member("/tmp/escaped.txt")
        elif kind == "under-symlink":
            member("inner", type=tarfile.SYMTYPE, linkname="..")
            member("./inner/escaped.txt")
        elif kind == "dot-symlink":
            member(".", type=tarfile.SYMTYPE, linkname="/tmp")
            member("./escaped.txt")
        elif kind == "hardlink":
            member("escaped-hard", type=tarfile.LNKTYPE, linkname="/etc/passwd")
        elif kind == "device":
            member("escaped-dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        elif kind == "many":
            for index in range(4):
                member(f"m/{index}")

    data = io.BytesIO(b"not a tar at all" * 100) if kind == "garbage" else _tar(add)
    with pytest.raises(UnsafeArchiveError) as caught:
        await aunpack_archive(module_session, scratch, data, max_members=3)
    assert caught.value.reason.startswith(reason)
    found = await arun_command(module_session, ["ls", "-A", scratch])
    assert found.exit_code != 0  # not even the directory was made


def _pax_bomb(claimed: int) -> tempfile.TemporaryFile[bytes]:
    """A pax header that claims ``claimed`` bytes of records (sparse on disk)."""
    spool = tempfile.TemporaryFile()  # noqa: SIM115  # returned
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, claimed
    spool.write(header.tobuf(format=tarfile.USTAR_FORMAT))
    spool.seek(512 + claimed - 1)
    spool.write(b"\0" + b"\0" * 1024)
    spool.seek(0)
    return spool


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: _pax_bomb(64 * 1024 * 1024), "a member's headers pass"),
        (lambda: _tar(lambda member: member("a/" * 2100 + "f")), "name over"),
        (lambda: io.BytesIO(gzip.compress(_tar(lambda m: m("ok")).read())), "not a readable"),
        (
            lambda: _tar(
                lambda member: (
                    member("d/link", type=tarfile.SYMTYPE, linkname="/etc"),
                    member("d/other"),
                    member("d/link/passwd"),
                )
            ),
            "under a symlink",
        ),
    ],
    ids=["pax-bomb", "long-name", "gzip", "symlink-then-file"],
)
def test_what_a_header_claims_never_sizes_the_hosts_memory(make: Any, reason: str) -> None:
    archive = make()
    tracemalloc.start()
    try:
        with pytest.raises(UnsafeArchiveError) as caught:
            check_archive(archive)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.reason.startswith(reason)
    assert peak < 4 * 1024 * 1024


def test_checking_keeps_no_header_of_the_members() -> None:
    with tempfile.TemporaryFile() as archive:
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for index in range(20_000):
                tar.addfile(tarfile.TarInfo(f"d/{index:08d}-{'x' * 80}"))
        archive.seek(0)
        tracemalloc.start()
        try:
            check_archive(archive)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 2 * 1024 * 1024  # kept, the headers took about 1 KiB each: 20 MiB


def test_check_archive_rewinds_a_safe_tar() -> None:
    archive = _tar(lambda member: member("ok/file.txt"))
    archive.read(10)
    archive.seek(0)
    check_archive(archive)
    assert archive.tell() == 0
