"""Copies of a sandbox's files (snapshot, fork): never out of its root, whatever it swaps."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from lizard_local import file_copies
from lizard_local.file_copies import copy_files


def _tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    source = tmp_path / "sandbox"
    (source / "rootfs" / "tmp" / "d").mkdir(parents=True)
    (source / "rootfs" / "tmp" / "d" / "mine").write_text("sandbox file")
    outside = tmp_path / "host-only"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    target = tmp_path / "copy"
    target.mkdir()
    return source, outside, target


def _every_file(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text()
        for p in root.rglob("*")
        if stat.S_ISREG(os.lstat(p).st_mode)
    }


def test_links_are_copied_as_links_never_followed(tmp_path: Path) -> None:
    source, outside, target = _tree(tmp_path)
    (source / "rootfs" / "tmp" / "to-host").symlink_to(outside)
    (source / "rootfs" / "tmp" / "to-secret").symlink_to(outside / "secret")
    copy_files(source, target, namespace=True)
    assert os.readlink(target / "rootfs" / "tmp" / "to-host") == str(outside)
    assert "host secret" not in _every_file(target).values()


def test_a_directory_swapped_for_a_link_while_copied_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process in the sandbox replaces /tmp/d with a link to a host directory between the
    # copy's look at /tmp/d (a directory) and its listing of it.
    source, outside, target = _tree(tmp_path)
    swapped = source / "rootfs" / "tmp" / "d"
    real_scandir = os.scandir

    def names(arg: Any) -> str:
        return os.readlink(f"/proc/self/fd/{arg}") if isinstance(arg, int) else str(arg)

    def racing_scandir(arg: Any = ".") -> Any:
        if names(arg) == str(swapped) and not swapped.is_symlink():
            swapped.rename(swapped.with_name("d-moved"))
            swapped.symlink_to(outside)
        return real_scandir(arg)

    monkeypatch.setattr(file_copies.os, "scandir", racing_scandir)
    copy_files(source, target, namespace=True)
    assert "host secret" not in _every_file(target).values()


def test_a_fifo_in_place_of_a_file_does_not_hang_the_copy(tmp_path: Path) -> None:
    source, _, target = _tree(tmp_path)
    os.mkfifo(source / "rootfs" / "tmp" / "pipe")
    copy_files(source, target, namespace=True)  # made anew, never opened
    assert stat.S_ISFIFO(os.lstat(target / "rootfs" / "tmp" / "pipe").st_mode)
    assert _every_file(target) == {"rootfs/tmp/d/mine": "sandbox file"}


def test_files_nested_past_the_bound_are_a_clear_conflict(tmp_path: Path) -> None:
    from lizard_local.http import ApiError

    source, _, target = _tree(tmp_path)
    deep = source / "rootfs" / "tmp"
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:  # relative to descriptors: the whole path would pass PATH_MAX
        for _ in range(file_copies.MAX_DEPTH + 5):
            os.mkdir("n", dir_fd=fd)
            inner = os.open("n", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    with pytest.raises(ApiError) as caught:
        copy_files(source, target, namespace=True)
    assert caught.value.status == 409
