"""Removing the server's own trees: links are not followed, mount points stop the removal."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lizard_local.host_cleanup import mount_points_under, remove_tree


def test_removes_a_tree_but_not_what_links_point_to(tmp_path: Path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file").write_text("x")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    os.symlink(keep, tree / "sub" / "link")
    os.symlink(keep, tmp_path / "toplink")
    assert remove_tree(tree) is True
    assert remove_tree(tmp_path / "toplink") is True  # the link, not the directory
    assert remove_tree(tmp_path / "missing") is True
    assert not tree.exists()
    assert (keep / "file").read_text() == "x"


def test_mount_points_are_found_by_real_path():
    assert "/proc" in mount_points_under("/proc")
    assert mount_points_under("/proc/self/no-such-dir") == []


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare"
)
def test_a_tree_with_a_mount_point_inside_is_left_alone(tmp_path: Path):
    # In a private mount namespace, so that nothing is mounted on the host even if this fails.
    script = textwrap.dedent(
        f"""
        import os, subprocess
        from lizard_local.host_cleanup import remove_tree
        tree = {str(tmp_path / "tree")!r}
        os.makedirs(tree + "/mnt")
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", tree + "/mnt"], check=True)
        open(tree + "/mnt/precious", "w").close()
        print(remove_tree(tree), os.path.exists(tree + "/mnt/precious"))
        """
    )
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["False", "True"]
