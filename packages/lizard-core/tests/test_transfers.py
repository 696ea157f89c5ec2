"""``lizard_core.transfers``: one outcome per file, in order; sandbox failures raised."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from lizard_core.config import SandboxConfig
from lizard_core.errors import CredentialsError, SandboxGoneError
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_core.transfers import Transfer, aread_each, awrite_each, read_each, write_each
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


async def test_a_stage_is_the_users_alone_and_removed_after(module_session: Any) -> None:
    from lizard_core.commands import arun_command
    from lizard_core.transfers import astage_for_user

    async with astage_for_user(module_session, "user") as stage:
        shown = await arun_command(module_session, ["stat", "-c", "%U %a", stage])
        assert shown.stdout.split() == [b"user", b"600"]
        folder = await arun_command(module_session, ["stat", "-c", "%a", stage.rsplit("/", 1)[0]])
        assert folder.stdout.strip() == b"711"  # others may not list or add
        written = await arun_command(
            module_session, ["sh", "-c", f"echo mine > {stage}"], user="user"
        )
        assert written.exit_code == 0
    gone = await arun_command(module_session, ["ls", stage.rsplit("/", 1)[0]])
    assert gone.exit_code != 0
    with pytest.raises(PermissionError):
        async with astage_for_user(module_session, "no-such-user-xyz"):
            pass
    with pytest.raises(ValueError, match="user name"):
        async with astage_for_user(module_session, "-rf"):
            pass
