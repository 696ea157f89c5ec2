"""Fork, snapshots, volumes and exposed ports, driven through the real lizard-sdk."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest
from lizard import Sandbox, Volume
from lizard.errors import ConflictError, LizardError, NotFoundError

from lizard_local import LocalServer
from lizard_local.lifecycle_routes import FORK_NOTE


@pytest.fixture
def volume(lizard_local: LocalServer) -> Iterator[str]:
    name = f"vol-{time.monotonic_ns()}"
    Volume.get_or_create(lizard_local.project_id, name, size_gb=1)
    yield name
    for info in Volume.list(lizard_local.project_id):
        if info.name == name and info.attached_to is None:
            Volume.remove(lizard_local.project_id, name)


def test_snapshot_restore_list_and_delete(new_sandbox: Callable[..., Sandbox], lizard_local):
    source = new_sandbox(size="small")
    source.fs.write("/home/user/data.txt", "prepared")
    source.process.exec_("mkdir -p /opt/tool && echo 1 > /opt/tool/v && chmod 0750 /opt/tool")
    snap = source.snapshot("prepared")
    assert snap["status"] == "ready"
    assert snap["sourceSandboxId"] == source.sandbox_id
    assert snap["sourceVolume"] is False
    assert source.process.exec_("echo still").stdout == "still"  # the source keeps running
    source.fs.write("/home/user/data.txt", "changed after")
    restored = Sandbox.restore(snap["id"])
    try:
        assert restored.fs.read("/home/user/data.txt") == "prepared"
        assert restored.process.exec_("stat -c %a /opt/tool; cat /opt/tool/v").stdout == "750\n1"
        assert restored.get_info().size == "small"  # the source's size
        ids = [s["id"] for s in Sandbox.snapshots(lizard_local.project_id)]
        assert snap["id"] in ids
        assert snap["id"] in [s["id"] for s in Sandbox.my_snapshots()]
        assert Sandbox.get_snapshot(snap["id"])["name"] == "prepared"
    finally:
        restored.kill()
    Sandbox.delete_snapshot(snap["id"])
    with pytest.raises(NotFoundError):
        Sandbox.get_snapshot(snap["id"])
    with pytest.raises(NotFoundError):
        Sandbox.restore(snap["id"])


def test_snapshot_restores_only_in_its_project(sandbox: Sandbox, api: httpx.Client):
    snap = sandbox.snapshot("scoped")
    res = api.post("/api/sandboxes", json={"snapshotId": snap["id"], "projectId": "proj_other"})
    assert res.status_code == 403
    assert res.json()["code"] == "SNAPSHOT_SCOPE"
    Sandbox.delete_snapshot(snap["id"])


def test_fork_copies_files_and_says_processes_are_not_cloned(sandbox: Sandbox, api: httpx.Client):
    sandbox.fs.write("/tmp/state.txt", "at fork")
    sandbox.process.exec_("sleep 300 >/dev/null 2>&1 &")
    forks = sandbox.fork(count=2)
    try:
        assert [f.ok for f in forks] == [True, True]
        ids = {f.sandbox.sandbox_id for f in forks if f.sandbox}
        assert len(ids) == 2
        assert sandbox.sandbox_id not in ids
        for f in forks:
            assert f.sandbox is not None
            assert f.sandbox.fs.read("/tmp/state.txt") == "at fork"
            assert "sleep 300" not in f.sandbox.process.exec_("ps -eo args").stdout
        forks[0].sandbox.fs.write("/tmp/state.txt", "diverged")  # type: ignore[union-attr]
        assert sandbox.fs.read("/tmp/state.txt") == "at fork"
    finally:
        for f in forks:
            if f.sandbox:
                f.sandbox.kill()
    raw = api.post(f"/api/sandboxes/{sandbox.sandbox_id}/fork", json={"count": 1}).json()
    assert raw[0]["processesCloned"] is False
    assert raw[0]["note"] == FORK_NOTE
    Sandbox(raw[0]["sandbox"]["sandboxId"]).kill()
    for bad in (0, 101, "2"):
        res = api.post(f"/api/sandboxes/{sandbox.sandbox_id}/fork", json={"count": bad})
        assert res.status_code == 400


def test_volume_lifecycle_one_sandbox_at_a_time_and_no_fork(
    new_sandbox: Callable[..., Sandbox], volume: str, lizard_local: LocalServer
):
    pid = lizard_local.project_id
    first = new_sandbox(volume_name=volume)
    first.process.exec_("echo kept > /workspace/file.txt")
    info = Volume.get(pid, volume).get_info(pid)
    assert info.attached_to == first.sandbox_id
    assert info.size_gb == 1
    with pytest.raises(ConflictError):
        new_sandbox(volume_name=volume)  # attached to one sandbox at a time
    with pytest.raises(ConflictError, match="volume"):
        first.fork()
    with pytest.raises(ConflictError):
        Volume.remove(pid, volume)  # not while attached
    first.kill()
    second = new_sandbox(volume_name=volume)
    assert second.fs.read("/workspace/file.txt") == "kept\n"  # it outlives its sandbox
    second.kill()
    assert Volume.get_or_create(pid, volume, size_gb=9).volume_id == info.id  # get, not create
    with pytest.raises(ConflictError):
        Volume.create(pid, volume)
    assert Volume.resize(pid, volume, 3).size_gb == 3
    with pytest.raises(LizardError, match="shrink"):
        Volume.resize(pid, volume, 2)
    with pytest.raises(LizardError):
        Volume.create(pid, "Not A Slug")


def test_snapshot_of_a_volume_sandbox_leaves_the_volume_out(
    new_sandbox: Callable[..., Sandbox], volume: str
):
    sb = new_sandbox(volume_name=volume)
    sb.process.exec_("echo v > /workspace/on-volume; echo r > /root/on-root")
    snap = sb.snapshot("with volume")
    assert snap["sourceVolume"] is True
    restored = Sandbox.restore(snap["id"])
    try:
        assert restored.process.exec_("cat /root/on-root; ls /workspace").stdout == "r"
    finally:
        restored.kill()
        Sandbox.delete_snapshot(snap["id"])


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the sandbox"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_exposed_port_checks_the_token(sandbox: Sandbox):
    # A sandbox with internet shares the host's network: a server on the host's loopback stands
    # in for one the sandbox started, at a port nobody else holds.
    server = HTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        exposed = sandbox.expose_port(port)
        base = f"http://{exposed.hostname}"
        assert httpx.get(base + "/").status_code == 401
        assert httpx.get(base + "/", headers={"X-Lizard-Access-Token": "wrong"}).status_code == 401
        ok = httpx.get(base + "/", headers={"X-Lizard-Access-Token": exposed.access_token})
        assert ok.status_code == 200
        assert ok.text == "hello from the sandbox"
        by_url = httpx.get(exposed.url)
        assert by_url.text == "hello from the sandbox"
        assert by_url.cookies.get("lizard_token") == exposed.access_token
        sandbox.unexpose(port)
        with pytest.raises(httpx.ConnectError):
            httpx.get(base + "/", headers={"X-Lizard-Access-Token": exposed.access_token})
    finally:
        server.shutdown()


def test_exposed_port_reaches_a_server_in_the_sandbox(sandbox: Sandbox):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sandbox.fs.write("/tmp/www/index.html", "served from the sandbox")
    sandbox.process.exec_(
        f"cd /tmp/www && python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &"
    )
    exposed = sandbox.expose_port(port)
    deadline = time.monotonic() + 10
    while (res := httpx.get(exposed.url)).status_code == 502 and time.monotonic() < deadline:
        time.sleep(0.05)  # the server is still starting
    assert res.status_code == 200
    assert res.text == "served from the sandbox"


def test_paused_sandbox_refuses_fork_and_its_resume_boots_fresh(sandbox: Sandbox):
    sandbox.process.exec_("sleep 300 >/dev/null 2>&1 &")
    sandbox.fs.write("/root/kept", "yes")
    sandbox.pause()
    assert sandbox.get_info().status == "paused"
    with pytest.raises(ConflictError):
        sandbox.fork()
    snap = sandbox.snapshot("of a paused one")  # files are all a snapshot holds
    sandbox.resume()
    sandbox.wait_for_status("running")
    assert "sleep 300" not in sandbox.process.exec_("ps -eo args").stdout
    assert sandbox.fs.read("/root/kept") == "yes"
    Sandbox.delete_snapshot(snap["id"])


def test_a_paused_sandbox_is_killed_cleanly(lizard_local: LocalServer):
    sb = Sandbox.create("base", project_id=lizard_local.project_id)
    sb.process.exec_("sleep 300 >/dev/null 2>&1 &")
    sb.pause()
    assert sb.kill() is True
    assert sb.sandbox_id not in lizard_local.sandboxes()
    with pytest.raises(NotFoundError):
        sb.get_info()
    assert sb.kill() is False
