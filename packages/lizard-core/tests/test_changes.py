"""``DirectoryWatch`` against lizard-local: new and changed regular files, one request a look."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lizard_core.changes import DirectoryWatch
from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.files import SandboxFiles
from lizard_core.session import Session
from lizard_local import LocalServer

EXEC = "POST /api/sandboxes/{id}/exec"


@pytest.fixture
def files(sandbox_config: SandboxConfig) -> Iterator[SandboxFiles]:
    with Session(sandbox_config) as session:
        yield SandboxFiles(session)


def test_bad_arguments_are_refused(files: SandboxFiles) -> None:
    with pytest.raises(TypeError):
        DirectoryWatch(object(), "/tmp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="absolute"):
        DirectoryWatch(files, "relative")
    with pytest.raises(TypeError):
        DirectoryWatch(files, b"/tmp")  # type: ignore[arg-type]


def test_new_and_changed_files_are_reported_once(
    files: SandboxFiles, lizard_counters: LocalServer
) -> None:
    watch = DirectoryWatch(files, "/tmp/watched")
    watch.mark()  # the directory does not exist yet: empty
    files.write_bytes("/tmp/watched/old.txt", b"old")
    files.make_dir("/tmp/watched/sub")
    files.write_bytes("/tmp/watched/sub/deep.txt", b"not directly in the directory")
    run_command(files.session, ["ln", "-s", "old.txt", "/tmp/watched/link"])
    assert [e.name for e in watch.changed()] == ["old.txt"]
    assert watch.changed() == []  # reported once
    files.write_bytes("/tmp/watched/old.txt", b"changed")
    files.write_bytes("/tmp/watched/new.bin", b"\x00")
    lizard_counters.reset_counters()
    changed = watch.changed()
    assert [(e.name, e.size) for e in changed] == [("new.bin", 1), ("old.txt", 7)]
    assert lizard_counters.counters()["routes"] == {EXEC: 1}
    files.remove("/tmp/watched/new.bin")
    assert watch.changed() == []  # a removal is no change


def test_mark_resets_the_baseline(files: SandboxFiles) -> None:
    watch = DirectoryWatch(files, "/tmp/marked")
    files.write_bytes("/tmp/marked/input.csv", b"a,b\n")
    watch.mark()
    assert watch.changed() == []


async def test_the_async_faces_agree(files: SandboxFiles) -> None:
    watch = DirectoryWatch(files, "/tmp/async-watched")
    await watch.amark()
    await files.awrite_bytes("/tmp/async-watched/a.txt", b"a")
    assert [e.path for e in await watch.achanged()] == ["/tmp/async-watched/a.txt"]
    assert await watch.achanged() == []


def test_a_file_in_the_way_is_not_a_directory(files: SandboxFiles) -> None:
    files.write_bytes("/tmp/plain-file", b"x")
    with pytest.raises(NotADirectoryError):
        DirectoryWatch(files, "/tmp/plain-file").changed()
