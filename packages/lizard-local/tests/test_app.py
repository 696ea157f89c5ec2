"""The API as the real lizard-sdk drives it: the acceptance checks and the error paths."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime
from importlib.metadata import version

import httpx
import pytest
from lizard import Lizard, Sandbox
from lizard.errors import (
    AuthenticationError,
    ConflictError,
    LizardError,
    NotFoundError,
)

from lizard_local import LocalServer

#: lizard-sdk 0.1.82 has no ``internet_access`` (create argument and SandboxInfo field).
SDK_MAJOR = int(version("lizard-sdk").split(".")[0])


def test_create_with_project_reference_envs_and_metadata(lizard_local: LocalServer):
    sb = Lizard(project="local").create("base", envs={"A": "1"}, metadata={"k": "v"})
    try:
        info = sb.get_info()
        assert info.metadata == {"k": "v"}
        assert info.status == "running"
        assert info.template == "base"
        end = datetime.strptime(info.end_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        ahead = (end - datetime.now(UTC)).total_seconds()
        assert 290 < ahead <= 300
        assert sb.process.exec_("echo $A; exit 3") == type(sb.process.exec_("true"))(
            stdout="1", stderr="", exit_code=3
        )
    finally:
        assert sb.kill() is True


def test_record_fields_and_lists(new_sandbox, lizard_local: LocalServer):
    sb = new_sandbox(size="nano", region="eu-west-1")
    info = sb.get_info()
    assert (info.size, info.cpus, info.memory_mb, info.price_per_hour) == ("nano", 1, 1024, 0.00405)
    assert info.region == "eu-west-1"
    if SDK_MAJOR >= 1:
        assert info.internet_access is True
    assert info.started_at.endswith("Z")
    assert sb.sandbox_id in [s.sandbox_id for s in Sandbox.list()]
    project_list = Sandbox.list(project_id=lizard_local.project_id)
    assert sb.sandbox_id in [s.sandbox_id for s in project_list]
    assert Sandbox.list(project_id="proj_other") == []
    assert Sandbox.connect(sb.sandbox_id).sandbox_id == sb.sandbox_id


def test_zero_timeout_means_no_deadline(new_sandbox):
    sb = new_sandbox(timeout_ms=0)
    assert sb.get_info().end_at == ""


def test_argv_envs_and_missing_program(sandbox: Sandbox):
    assert sandbox.process.exec_(["sh", "-c", "echo $B"], envs={"B": "2"}).stdout == "2"
    missing = sandbox.process.exec_(["nonexistent"])
    assert missing.exit_code == 127
    assert missing.stderr == "nonexistent: not found"


def test_command_timeout_gives_124_within_about_a_second(sandbox: Sandbox):
    start = time.monotonic()
    result = sandbox.process.exec_("sleep 5", timeout_ms=1000)
    elapsed = time.monotonic() - start
    assert result.exit_code == 124
    assert "timed out" in result.stderr
    assert elapsed < 3  # killed at 1 s, not after the 5 s sleep


def test_streaming_lines(sandbox: Sandbox):
    lines: list[str] = []
    result = sandbox.process.exec_("printf 'a\\n\\nb\\ntail'", on_stdout=lines.append)
    assert lines == ["a", "", "b", "tail"]
    assert result.stdout == "a\n\nb\ntail"


def test_pid_event_then_kill_ends_the_command(sandbox: Sandbox):
    pids: list[int] = []
    got_pid = threading.Event()
    outcome: list[int] = []

    def on_pid(pid: int) -> None:
        pids.append(pid)
        got_pid.set()

    def run() -> None:
        outcome.append(
            sandbox.process.exec_("sleep 30", on_pid=on_pid, timeout_ms=20_000).exit_code
        )

    worker = threading.Thread(target=run)
    worker.start()
    assert got_pid.wait(10)
    assert isinstance(pids[0], int)
    assert [p.pid for p in sandbox.process.list()] == pids
    sandbox.process.kill(pids[0])
    worker.join(10)
    assert outcome == [143]  # 128 + SIGTERM
    assert sandbox.process.list() == []


def test_kill_signal_reaches_the_whole_tree(sandbox: Sandbox):
    pids: list[int] = []
    done: list[int] = []
    got = threading.Event()
    worker = threading.Thread(
        target=lambda: done.append(
            sandbox.process.exec_(
                "sh -c 'sleep 31; echo survived' ; echo parent-survived",
                on_pid=lambda p: (pids.append(p), got.set()),
                timeout_ms=20_000,
            ).exit_code
        )
    )
    worker.start()
    assert got.wait(10)
    time.sleep(0.2)  # let the inner shell start
    sandbox.process.kill(pids[0], "SIGKILL")
    worker.join(10)
    assert done == [137]
    assert "sleep 31" not in sandbox.process.exec_("ps ax -o args").stdout


def test_binary_write_and_read(sandbox: Sandbox):
    sandbox.fs.write("/tmp/b.bin", bytes([0, 255, 128]))
    assert sandbox.fs.read_bytes("/tmp/b.bin") == b"\x00\xff\x80"


def test_reading_a_missing_file_is_not_found(sandbox: Sandbox):
    with pytest.raises(NotFoundError):
        sandbox.fs.read("/tmp/missing")


def test_kill_twice_then_connect(lizard_local: LocalServer):
    sb = Sandbox.create("base", project_id=lizard_local.project_id)
    assert sb.kill() is True
    assert sb.kill() is False
    with pytest.raises(NotFoundError):
        Sandbox.connect(sb.sandbox_id)
    with pytest.raises(NotFoundError):
        sb.process.exec_("true")
    assert sb.sandbox_id not in lizard_local.sandboxes()


def test_sandbox_expires_at_its_deadline(lizard_local: LocalServer):
    sb = Sandbox.create("base", project_id=lizard_local.project_id, timeout_ms=2000)
    start = time.monotonic()
    sb.process.exec_("setsid sleep 60 >/dev/null 2>&1 < /dev/null &")
    while time.monotonic() - start < 3:
        try:
            sb.get_info()
        except NotFoundError:
            break
        time.sleep(0.1)
    assert time.monotonic() - start >= 1.9
    with pytest.raises(NotFoundError):
        sb.get_info()
    assert sb.kill() is False


def test_set_timeout_moves_the_deadline(lizard_local: LocalServer):
    sb = Sandbox.create("base", project_id=lizard_local.project_id, timeout_ms=1000)
    try:
        sb.set_timeout(60_000)
        time.sleep(1.2)
        assert sb.get_info().status == "running"
        with pytest.raises(LizardError, match="400"):
            sb.set_timeout(10)
    finally:
        sb.kill()


def test_pause_and_resume(sandbox: Sandbox, api: httpx.Client):
    assert sandbox.pause(memory=False) is True
    sandbox.wait_for_status("paused")
    with pytest.raises(ConflictError):
        sandbox.process.exec_("true")
    with pytest.raises(ConflictError):
        sandbox.fs.read("/tmp/x")
    assert sandbox.resume() is True
    sandbox.wait_for_status("running")
    assert sandbox.process.exec_("echo back").stdout == "back"
    # lizard-sdk 0.1.82 sends {"memory": false} with pause.
    res = api.post(f"/api/sandboxes/{sandbox.sandbox_id}/pause", json={"memory": False})
    assert res.status_code == 200
    assert res.json()["status"] == "paused"
    assert sandbox.resume() is True


def test_pause_ends_processes_keeps_files_and_freezes_the_lifetime(lizard_local: LocalServer):
    sb = Sandbox.create("base", project_id=lizard_local.project_id, timeout_ms=1500)
    try:
        sb.process.exec_(
            "(while true; do date +%s%N >> /tmp/ticks; sleep 0.05; done) >/dev/null 2>&1 &"
        )
        sb.fs.write("/home/user/kept.txt", "kept")
        time.sleep(0.2)
        sb.pause()
        sb.wait_for_status("paused")
        time.sleep(1.6)  # longer than the lifetime: a paused sandbox does not expire
        sb.resume()
        sb.wait_for_status("running")  # still there: the lifetime did not run while paused
        sb.set_timeout(60_000)  # the rest of the test needs more than what was left
        before = sb.process.exec_("cat /tmp/ticks").stdout.split()
        time.sleep(0.3)
        after = sb.process.exec_("cat /tmp/ticks").stdout.split()
        assert len(before) > 1
        assert after == before  # the loop ended with the pause: a resume boots fresh
        assert sb.fs.read("/home/user/kept.txt") == "kept"
        gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(int(t) for t in after)]
        assert max(gaps) < 1  # nothing ticked across the pause
    finally:
        sb.kill()


def test_expose(sandbox: Sandbox, offline_sandbox: Sandbox):
    exposed = sandbox.expose_port(8123)
    assert exposed.hostname.startswith("127.0.0.1:")
    assert exposed.url == f"http://{exposed.hostname}/?lizard_token={exposed.access_token}"
    assert exposed.access_token
    assert sandbox.expose_port(8123) == exposed  # the same while exposed
    with pytest.raises(ConflictError):
        offline_sandbox.expose_port(8123)


@pytest.mark.skipif(SDK_MAJOR < 1, reason="internet_access arrived in lizard-sdk 1.0")
def test_internet_access_false_is_echoed(new_sandbox):
    offline = new_sandbox(internet_access=False)  # 1.0 deletes the sandbox unless echoed
    assert offline.get_info().internet_access is False


def test_not_implemented_endpoints(sandbox: Sandbox, api: httpx.Client):
    sid = sandbox.sandbox_id
    for method, path in [
        ("POST", f"/api/sandboxes/{sid}/files/watch"),
        ("GET", f"/api/sandboxes/{sid}/logs"),
        ("GET", f"/api/sandboxes/{sid}/schedules"),
    ]:
        res = api.request(method, path)
        assert res.status_code == 501, path
        assert res.json()["code"] == "NOT_IMPLEMENTED"
    desktop = api.post(f"/api/sandboxes/{sid}/desktop")
    assert desktop.status_code == 400
    assert desktop.json()["code"] == "DESKTOP_NOT_SUPPORTED"


def test_bearer_auth_and_duplicate_slashes(lizard_local: LocalServer):
    res = httpx.get(
        lizard_local.url + "//api/projects",
        headers={"Authorization": f"Bearer {lizard_local.api_key}"},
    )
    assert res.status_code == 200
    assert res.json()[0]["id"] == "proj_local"


def test_missing_or_wrong_key_is_rejected(lizard_local: LocalServer):
    with pytest.raises(AuthenticationError):
        Sandbox.create("base", project_id="proj_local", api_key="wrong")
    res = httpx.get(lizard_local.url + "/api/sandboxes")
    assert res.status_code == 401
    assert res.json() == {"error": "Missing API key", "code": "UNAUTHORIZED"}


def test_bad_requests_get_json_errors_and_the_server_keeps_serving(
    sandbox: Sandbox, api: httpx.Client, lizard_local: LocalServer
):
    sid = sandbox.sandbox_id
    bad = [
        api.post("/api/sandboxes", content=b"{not json"),
        api.post("/api/sandboxes", json=["a list"]),
        api.post("/api/sandboxes", json={"template": "nope"}),
        api.post("/api/sandboxes", json={"timeoutMs": -1}),
        api.post("/api/sandboxes", json={"metadata": {"k": 1}}),
        api.post("/api/sandboxes", json={"allowedHosts": ["pypi.org"]}),
        api.post(f"/api/sandboxes/{sid}/exec", json={"cmd": []}),
        api.post(f"/api/sandboxes/{sid}/exec", json={"cmd": [1, 2]}),
        api.post(f"/api/sandboxes/{sid}/exec", json={}),
        api.post(f"/api/sandboxes/{sid}/exec", json={"cmd": "true", "workdir": "rel"}),
        api.post(f"/api/sandboxes/{sid}/exec", json={"cmd": "true", "user": "nobody-here"}),
        api.post(f"/api/sandboxes/{sid}/files", json={"path": "rel/x", "content": ""}),
        api.post(
            f"/api/sandboxes/{sid}/files",
            json={"path": "/x", "content": "%%", "encoding": "base64"},
        ),
        api.get(f"/api/sandboxes/{sid}/files", params={"path": "relative"}),
        api.post(f"/api/sandboxes/{sid}/timeout", json={"timeoutMs": "soon"}),
        api.post(f"/api/sandboxes/{sid}/processes/signal", json={"pid": 1, "signal": "SIGFOO"}),
    ]
    for res in bad:
        assert res.status_code == 400, res.text
        assert isinstance(res.json()["error"], str)
    assert api.get("/api/sandboxes/sbx_nothere").status_code == 404
    assert api.post("/api/sandboxes/sbx_nothere/exec", json={"cmd": "true"}).status_code == 404
    assert api.put("/api/sandboxes").status_code == 405
    assert api.get("/api/unknown/route").status_code == 404
    # The SDK maps them to its exceptions.
    with pytest.raises(LizardError, match="400"):
        sandbox.process.exec_([])
    with pytest.raises(LizardError, match="400"):
        sandbox.fs.write("relative.txt", "x")
    with pytest.raises(LizardError, match="400"):
        Sandbox.create("no-such-template", project_id="proj_local")
    with pytest.raises(NotFoundError):
        Sandbox.connect("sbx_nothere")
    # Oversized bodies: 413 before anything is written.
    lizard_local.configure(max_body_bytes=1024)
    try:
        with pytest.raises(LizardError, match="413"):
            sandbox.fs.write("/tmp/big", "x" * 4096)
    finally:
        lizard_local.configure(max_body_bytes=100 * 1024 * 1024)
    assert sandbox.process.exec_("echo still-serving").stdout == "still-serving"


def test_unknown_pid_signal_is_not_found(sandbox: Sandbox):
    with pytest.raises(NotFoundError):
        sandbox.process.kill(999_999)


def test_whoami_and_projects(api: httpx.Client):
    assert api.get("/api/auth/me").status_code == 200
    projects = api.get("/api/projects").json()
    assert projects == [
        {"id": "proj_local", "slug": "local", "name": "local", "workspaceId": "ws_local"}
    ]


def test_unknown_project_reference_fails_in_the_sdk(lizard_local: LocalServer):
    with pytest.raises(LizardError, match="not found"):
        Lizard(project="elsewhere").create("base")
