"""``lizard_core.archives``: a directory packed to the host and unpacked, against lizard-local."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest

from lizard_core.archives import apack_directory, aunpack_archive, check_archive
from lizard_core.commands import arun_command
from lizard_core.errors import ArchiveCommandError, UnsafeArchiveError
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


def test_check_archive_rewinds_a_safe_tar() -> None:
    archive = _tar(lambda member: member("ok/file.txt"))
    archive.read(10)
    archive.seek(0)
    check_archive(archive)
    assert archive.tell() == 0
