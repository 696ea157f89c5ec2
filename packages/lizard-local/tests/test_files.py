"""File operations through the SDK: exact bytes, errors, listing, stat, move, delete."""

from __future__ import annotations

import base64

import httpx
import pytest
from lizard import Sandbox
from lizard.errors import LizardError, NotFoundError

from lizard_local import LocalServer


def test_text_write_creates_parents_and_overwrites(sandbox: Sandbox):
    sandbox.fs.write("/workspace/a/b/c.txt", "héllo\n")
    sandbox.fs.write("/workspace/a/b/c.txt", "second")
    assert sandbox.fs.read("/workspace/a/b/c.txt") == "second"
    assert sandbox.process.exec_("cat /workspace/a/b/c.txt").stdout == "second"
    info = sandbox.fs.stat("/workspace/a/b/c.txt")
    assert (info.type, info.size, info.mode, info.permissions) == ("file", 6, 0o644, "-rw-r--r--")


def test_all_byte_values_round_trip(sandbox: Sandbox):
    data = bytes(range(256)) * 64
    sandbox.fs.write("/tmp/all.bin", data)
    assert sandbox.fs.read_bytes("/tmp/all.bin") == data
    assert (
        sandbox.process.exec_("md5sum < /tmp/all.bin").stdout.split()[0]
        == __import__("hashlib").md5(data).hexdigest()
    )


def test_large_file_round_trip(sandbox: Sandbox):
    data = bytes(range(256)) * 8192  # 2 MiB
    sandbox.fs.write("/tmp/big.bin", data)
    assert sandbox.fs.read_bytes("/tmp/big.bin") == data


def test_files_written_by_commands_are_readable(sandbox: Sandbox):
    sandbox.process.exec_("printf 'x\\0y' > /root/cmd.bin")
    assert sandbox.fs.read_bytes("/root/cmd.bin") == b"x\x00y"


def test_directory_errors(sandbox: Sandbox, api: httpx.Client):
    sandbox.fs.make_dir("/workspace/d")
    with pytest.raises(LizardError, match="400"):
        sandbox.fs.read("/workspace/d")
    with pytest.raises(LizardError, match="400"):
        sandbox.fs.write("/workspace/d", "x")
    sandbox.fs.write("/workspace/f", "x")
    with pytest.raises(LizardError, match="400"):
        sandbox.fs.list("/workspace/f")
    with pytest.raises(LizardError, match="400"):
        sandbox.fs.write("/workspace/f/inner", "x")
    res = api.post(
        f"/api/sandboxes/{sandbox.sandbox_id}/files",
        json={"path": "/workspace/z", "content": "x", "encoding": "rot13"},
    )
    assert res.status_code == 400


def test_list_and_stat(sandbox: Sandbox):
    sandbox.fs.write("/workspace/l/b.txt", "bb")
    sandbox.fs.make_dir("/workspace/l/a")
    sandbox.process.exec_("ln -s b.txt /workspace/l/c")
    entries = sandbox.fs.list("/workspace/l")
    assert [(e.name, e.path, e.type) for e in entries] == [
        ("a", "/workspace/l/a", "dir"),
        ("b.txt", "/workspace/l/b.txt", "file"),
        ("c", "/workspace/l/c", "symlink"),
    ]
    assert entries[2].symlink_target == "b.txt"
    assert entries[1].size == 2
    assert entries[1].mod_time is not None
    assert entries[1].mod_time > 1_600_000_000_000
    assert sandbox.fs.stat("/workspace/l/c").type == "symlink"
    assert sandbox.fs.stat("/workspace/l").type == "dir"
    assert sandbox.fs.read("/workspace/l/c") == "bb"
    with pytest.raises(NotFoundError):
        sandbox.fs.stat("/workspace/none")
    with pytest.raises(NotFoundError):
        sandbox.fs.list("/workspace/none")


def test_symlinks_resolve_inside_the_sandbox(sandbox: Sandbox, lizard_local: LocalServer):
    sandbox.fs.write("/tmp/target.txt", "inside")
    sandbox.process.exec_("ln -s /tmp/target.txt /workspace/abs-link")
    assert sandbox.fs.read("/workspace/abs-link") == "inside"
    sandbox.fs.write("/workspace/abs-link", "through")
    assert sandbox.process.exec_("cat /tmp/target.txt").stdout == "through"


def test_move_and_delete(sandbox: Sandbox):
    sandbox.fs.write("/tmp/m/src.txt", "moved")
    sandbox.fs.move("/tmp/m/src.txt", "/workspace/deep/dst.txt")  # across private mounts
    assert sandbox.fs.read("/workspace/deep/dst.txt") == "moved"
    with pytest.raises(NotFoundError):
        sandbox.fs.stat("/tmp/m/src.txt")
    with pytest.raises(NotFoundError):
        sandbox.fs.move("/tmp/m/src.txt", "/tmp/x")
    sandbox.fs.remove("/workspace/deep")
    with pytest.raises(NotFoundError):
        sandbox.fs.stat("/workspace/deep")
    with pytest.raises(NotFoundError):
        sandbox.fs.remove("/workspace/deep")


def test_base64_write_matches_the_sdk_fixture(sandbox: Sandbox, api: httpx.Client):
    res = api.post(
        f"/api/sandboxes/{sandbox.sandbox_id}/files",
        json={
            "path": "/tmp/fx",
            "content": base64.b64encode(bytes([255, 0, 128])).decode(),
            "encoding": "base64",
        },
    )
    assert res.status_code in (200, 201)
    raw = api.get(f"/api/sandboxes/{sandbox.sandbox_id}/files", params={"path": "/tmp/fx"})
    assert raw.content == bytes([255, 0, 128])
    assert raw.headers["content-type"].startswith("text/plain")
