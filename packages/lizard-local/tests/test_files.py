"""File operations through the SDK: exact bytes, errors, listing, stat, move, delete, safety."""

from __future__ import annotations

import asyncio
import base64
import os
import time

import httpx
import pytest
from lizard import Sandbox
from lizard.errors import LizardError, NotFoundError

from lizard_local import LocalServer
from lizard_local import app as app_module


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


# --- safety: the host's files are out of reach ---------------------------------------------------


def test_namespace_file_api_cannot_change_host_files(
    sandbox: Sandbox, lizard_local: LocalServer, host_canary: str
):
    if lizard_local.isolation != "namespace":
        pytest.skip("namespace mode only")
    with pytest.raises(LizardError, match="Read-only file system") as info:
        sandbox.fs.write("/usr/sandbox-was-here", "x")
    assert info.value.status_code == 400
    assert not os.path.exists("/usr/sandbox-was-here")
    venv_cfg = "/opt/lizard-local/templates/base/pyvenv.cfg"
    with pytest.raises(LizardError, match="Read-only file system"):
        sandbox.fs.remove(venv_cfg)
    with pytest.raises(LizardError, match="Read-only file system"):
        sandbox.fs.move(venv_cfg, "/tmp/stolen")
    # Through links, absolute or relative, to the host's directories: still read-only.
    sandbox.process.exec_("ln -s /usr /workspace/abs && ln -s ../opt/lizard-local /workspace/rel")
    with pytest.raises(LizardError, match="Read-only file system"):
        sandbox.fs.write("/workspace/abs/sandbox-was-here", "x")
    with pytest.raises(LizardError, match="Read-only file system"):
        sandbox.fs.remove("/workspace/rel/templates/base/pyvenv.cfg")
    sandbox.fs.remove("/workspace/abs")  # the link itself is the sandbox's
    # A host file outside what the sandbox is given is not there at all.
    canary = f"{host_canary}/canary"
    with pytest.raises(LizardError) as missing:
        sandbox.fs.read_bytes(canary)
    assert missing.value.status_code == 404
    with open(canary) as f:
        assert f.read() == "host"
    assert not os.path.exists("/usr/sandbox-was-here")
    assert sandbox.fs.read_bytes(venv_cfg).startswith(b"home = ")


def test_links_to_slash_lead_to_the_sandbox_root_not_the_hosts(
    sandbox: Sandbox, lizard_local: LocalServer, tmp_path
):
    if lizard_local.isolation != "namespace":
        pytest.skip("namespace mode only")
    canary = tmp_path / "canary"  # under the host's /tmp, which the sandbox cannot see
    canary.write_text("host")
    sandbox.process.exec_("ln -s / /workspace/root && ln -s .. /workspace/up")
    inside = f"/workspace/root{canary}"
    with pytest.raises(NotFoundError):
        sandbox.fs.read(inside)
    sandbox.fs.write(f"/workspace/up/../..{canary}", "sandbox")  # ".." stops at the root
    assert sandbox.fs.read(str(canary)) == "sandbox"
    sandbox.fs.remove(f"/workspace/root{canary.parent}")
    assert canary.read_text() == "host"


def test_special_files_are_refused_without_blocking(sandbox: Sandbox):
    sandbox.process.exec_("mkfifo /tmp/fifo")
    for call in (lambda: sandbox.fs.read("/tmp/fifo"), lambda: sandbox.fs.write("/tmp/fifo", "x")):
        with pytest.raises(LizardError, match="regular file"):
            call()


def test_special_file_reads_block_until_the_client_gives_up(
    sandbox: Sandbox, lizard_local: LocalServer, api: httpx.Client
):
    sandbox.process.exec_("mkfifo /tmp/fifo && printf data > /tmp/file")
    url = f"/api/sandboxes/{sandbox.sandbox_id}/files"
    assert lizard_local.configure(special_file_reads="block")["special_file_reads"] == "block"
    try:
        for path in ("/tmp/fifo", "/dev/zero"):
            started = time.monotonic()
            with pytest.raises(httpx.ReadTimeout):
                api.get(url, params={"path": path}, timeout=httpx.Timeout(30, read=1))
            assert time.monotonic() - started >= 0.9
        # Only special files block: files, directories and missing paths answer as before.
        assert api.get(url, params={"path": "/tmp/file"}).content == b"data"
        assert api.get(url, params={"path": "/tmp"}).json()["code"] == "IS_A_DIRECTORY"
        assert api.get(url, params={"path": "/tmp/none"}).status_code == 404
    finally:
        lizard_local.configure(special_file_reads="reject")
    started = time.monotonic()
    res = api.get(url, params={"path": "/tmp/fifo"})
    assert (res.status_code, res.json()["code"]) == (400, "NOT_A_FILE")
    assert time.monotonic() - started < 5


def test_special_file_reads_can_stream_without_a_length(
    sandbox: Sandbox, lizard_local: LocalServer, api: httpx.Client
):
    url = f"/api/sandboxes/{sandbox.sandbox_id}/files"
    lizard_local.configure(special_file_reads="stream")
    try:
        with api.stream("GET", url, params={"path": "/dev/zero"}) as res:
            assert res.status_code == 200
            assert "content-length" not in res.headers
            received = 0
            for piece in res.iter_bytes():
                assert piece == bytes(len(piece))
                received += len(piece)
                if received > 1024 * 1024:
                    break
        assert received > 1024 * 1024
        # Regular files keep their length.
        assert api.get(url, params={"path": "/etc/hostname"}).headers["content-length"]
    finally:
        lizard_local.configure(special_file_reads="reject")


async def test_a_blocked_read_ends_when_the_client_leaves_or_at_its_bound():
    messages: asyncio.Queue[dict[str, str]] = asyncio.Queue()

    async def receive() -> dict[str, str]:
        return await messages.get()

    started = time.monotonic()
    await app_module._until_disconnect(receive, 0.3)  # the client stays: the bound ends it
    assert 0.25 < time.monotonic() - started < 5
    waiter = asyncio.ensure_future(app_module._until_disconnect(receive, 60))
    await messages.put({"type": "http.request"})
    await asyncio.sleep(0.1)
    assert not waiter.done()
    await messages.put({"type": "http.disconnect"})
    await asyncio.wait_for(waiter, 5)


def test_move_across_mounts_keeps_trees_links_and_modes(sandbox: Sandbox):
    sandbox.process.exec_(
        "mkdir -p /tmp/t/sub && printf data > /tmp/t/sub/f && chmod 0751 /tmp/t/sub/f "
        "&& ln -s sub/f /tmp/t/link && mkfifo /tmp/t/p && touch -d 2001-01-01 /tmp/t/sub/f"
    )
    sandbox.fs.write("/workspace/dest/keep", "old")  # a non-empty directory is not replaced
    with pytest.raises(LizardError, match="400"):
        sandbox.fs.move("/tmp/t", "/workspace/dest")
    sandbox.fs.move("/tmp/t", "/workspace/moved")
    listing = sandbox.process.exec_("cd /workspace/moved && stat -c '%n|%a|%F|%Y' sub/f link p")
    rows = [line.split("|") for line in listing.stdout.splitlines()]
    assert rows[0] == ["sub/f", "751", "regular file", "978307200"]
    assert (rows[1][0], rows[1][2]) == ("link", "symbolic link")
    assert (rows[2][0], rows[2][2]) == ("p", "fifo")
    assert sandbox.fs.read("/workspace/moved/link") == "data"
    assert sandbox.process.exec_("test -e /tmp/t").exit_code == 1
    assert [e.name for e in sandbox.fs.list("/workspace")] == ["dest", "moved"]


def test_host_mode_delete_and_move_stay_in_the_sandbox_dirs(host_sandbox: Sandbox, tmp_path):
    sb = host_sandbox
    home = sb.process.exec_("echo $HOME").stdout
    canary = tmp_path / "canary"  # a host file outside the sandbox's own directories
    canary.write_text("host")
    sb.fs.write(f"{home}/mine.txt", "mine")
    sb.process.exec_(f"ln -s {tmp_path} {home}/link")
    for call in (
        lambda: sb.fs.remove(str(canary)),
        lambda: sb.fs.remove(f"{home}/link/canary"),  # through a link to the outside
        lambda: sb.fs.remove(str(tmp_path)),
        lambda: sb.fs.remove(home),  # the directory itself is not "inside" it
        lambda: sb.fs.remove("/tmp"),
        lambda: sb.fs.move(str(canary), f"{home}/stolen"),
        lambda: sb.fs.move(f"{home}/mine.txt", f"{tmp_path}/planted"),
        lambda: sb.fs.move(f"{home}/mine.txt", f"{home}/link/planted"),
    ):
        with pytest.raises(LizardError, match="own directories") as info:
            call()
        assert info.value.status_code == 400
    assert canary.read_text() == "host"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canary"]
    sb.fs.move(f"{home}/mine.txt", f"{home}/sub/moved.txt")
    sb.fs.remove(f"{home}/link")  # the link itself, not its target
    sb.fs.remove(f"{home}/sub")
    assert canary.read_text() == "host"
    assert sb.process.exec_(f"ls -A {home}").stdout == ""
