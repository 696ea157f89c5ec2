"""Paths opened inside a root directory: links and ".." never lead out, with or without openat2."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from lizard_local import in_root


@pytest.fixture(params=["openat2", "by hand"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "by hand":
        monkeypatch.setattr(in_root, "_have_openat2", False)
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """``tmp_path/root`` (the root) and, beside it, ``outside/secret``: never reachable."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "secret").write_text("inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("outside")
    os.symlink("/etc", root / "abs")  # absolute: the root's /etc
    os.symlink("../../outside", root / "etc" / "up")  # climbs past the root: stops there
    os.symlink(str(tmp_path / "outside"), root / "hostpath")  # the host's path: not inside
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    yield root, fd
    os.close(fd)


def read(fd: int, path: str) -> str:
    f = in_root.open_in(fd, path, os.O_RDONLY)
    try:
        return os.read(f, 100).decode()
    finally:
        os.close(f)


def test_links_and_dotdot_resolve_inside_the_root(mode: str, tree: tuple[Path, int]):
    _, fd = tree
    assert read(fd, "/abs/secret") == "inside"
    assert read(fd, "/../../../etc/secret") == "inside"
    with pytest.raises(FileNotFoundError):
        read(fd, "/etc/up/secret")  # = /outside/secret inside the root: absent
    with pytest.raises(FileNotFoundError):
        read(fd, "/hostpath/secret")


def test_creating_through_a_link_lands_inside(mode: str, tree: tuple[Path, int]):
    root, fd = tree
    os.close(in_root.open_in(fd, "/abs/new", os.O_WRONLY | os.O_CREAT, 0o600))
    assert (root / "etc" / "new").exists()


def test_open_parent_names_the_last_entry_without_following_it(mode: str, tree: tuple[Path, int]):
    root, fd = tree
    parent, name = in_root.open_parent(fd, "/abs")
    try:
        assert name == "abs"
        os.unlink(name, dir_fd=parent)  # the link goes, its target stays
    finally:
        os.close(parent)
    assert (root / "etc" / "secret").exists()
    for bad in ("/", "/etc/..", "/."):
        with pytest.raises(ValueError, match=re.escape(bad)):
            in_root.open_parent(fd, bad)


def test_errors_carry_the_path(mode: str, tree: tuple[Path, int]):
    _, fd = tree
    with pytest.raises(NotADirectoryError) as info:
        in_root.open_in(fd, "/etc/secret/x", os.O_RDONLY)
    assert info.value.errno == errno.ENOTDIR
    assert info.value.filename == "/etc/secret/x"
