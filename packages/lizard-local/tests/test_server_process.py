"""LocalServer: a separate process, its addresses, TLS, a clean stop, a key kept out of /proc."""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

import httpx
import pytest
from lizard import Sandbox

from lizard_local import LocalServer, LocalServerError


def test_arguments_are_validated_before_anything_starts():
    with pytest.raises(ValueError, match="port"):
        LocalServer(port=70000)
    with pytest.raises(ValueError, match="latency"):
        LocalServer(latency_ms=-1)
    with pytest.raises(ValueError, match="isolation"):
        LocalServer(isolation="vm")
    with pytest.raises(LocalServerError, match="not started"):
        _ = LocalServer().url


def test_session_server_addresses(lizard_local: LocalServer):
    assert lizard_local.url.startswith("http://127.0.0.1:")
    assert os.environ["LIZARD_API_URL"] == lizard_local.url
    assert os.environ["LIZARD_API_KEY"] == lizard_local.api_key
    assert os.environ["LIZARD_PROJECT_ID"] == lizard_local.project_id == "proj_local"
    assert lizard_local.running
    assert lizard_local.ca_file is None


def test_tls_server_with_sdk(monkeypatch: pytest.MonkeyPatch):
    with LocalServer(tls=True, isolation="host", latency_ms=1) as server:
        assert server.url.startswith("https://127.0.0.1:")
        assert server.ca_file is not None
        assert server.env["SSL_CERT_FILE"] == server.ca_file
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.url + "/api/projects", verify=True, trust_env=False)
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        sb = Sandbox.create("base", project_id=server.project_id)
        try:
            assert sb.process.exec_("echo secure").stdout == "secure"
        finally:
            sb.kill()
        assert server.counters()["routes"]["POST /api/sandboxes"] == 1
    assert not server.running
    assert server.processes() == []


def test_stop_kills_live_sandboxes_and_is_idempotent():
    server = LocalServer(isolation="host").start()
    kw = {"api_key": server.api_key, "api_url": server.url, "project_id": "proj_local"}
    sb = Sandbox.create("base", **kw)  # type: ignore[arg-type]
    sb.process.exec_("setsid sleep 94 >/dev/null 2>&1 < /dev/null &")
    assert server.processes()
    server.stop()
    server.stop()
    assert not server.running
    assert server.processes() == []


def test_fixed_port_and_key():
    probe = LocalServer(isolation="host", api_key="fixed-key").start()
    port = int(probe.url.rsplit(":", 1)[1])
    probe.stop()
    with LocalServer(port=port, isolation="host", api_key="fixed-key") as server:
        assert server.url == f"http://127.0.0.1:{port}"
        assert server.api_key == "fixed-key"
        assert httpx.get(
            server.url + "/api/projects", headers={"X-API-Key": "fixed-key"}
        ).is_success


# Runs in a sandbox: which /proc/<pid>/cmdline and /proc/<pid>/environ it can read hold the key.
# The key arrives reversed, so the probe's own argv does not hold it; the two sentinels (one in
# its argv, one in its environment) prove that the scan finds what it looks for.
KEY_PROBE = r"""
import json, os, sys
key, sentinel, env_sentinel = sys.argv[1][::-1].encode(), sys.argv[2].encode(), b"PROBE_ENV="
found, readable, seen = [], 0, set()
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    for part in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as f:
                data = f.read()
        except OSError:
            continue
        readable += 1
        if key in data:
            found.append(f"{pid}/{part}")
        for needle in (sentinel, env_sentinel + sentinel):
            if needle in data:
                seen.add(f"{part}:{needle.decode()}")
print(json.dumps({"found": found, "readable": readable, "seen": sorted(seen)}))
"""


def key_sightings(sandbox: Sandbox, key: str) -> dict[str, Any]:
    sentinel = "probe-" + secrets.token_hex(8)
    r = sandbox.process.exec_(
        ["python3", "-c", KEY_PROBE, key[::-1], sentinel], envs={"PROBE_ENV": sentinel}
    )
    assert r.exit_code == 0, r.stderr
    result: dict[str, Any] = json.loads(r.stdout)
    assert f"cmdline:{sentinel}" in result["seen"]
    assert f"environ:PROBE_ENV={sentinel}" in result["seen"]
    return result


def test_the_key_is_in_no_proc_file_a_sandbox_can_read(
    new_sandbox, lizard_local: LocalServer, host_sandbox: Sandbox, host_server: LocalServer
):
    # Host mode runs commands as host processes (here as root): they read every process's
    # cmdline and environ, the servers' included.
    for sandbox, server in ((new_sandbox(), lizard_local), (host_sandbox, host_server)):
        seen = key_sightings(sandbox, server.api_key)
        assert seen["found"] == [], (server.isolation, seen)
    assert seen["readable"] > 10  # host mode: the host's processes, not only the sandbox's


def test_the_server_process_has_the_key_in_neither_argv_nor_environment(
    host_server: LocalServer, lizard_local: LocalServer
):
    proc = host_server._proc
    assert proc is not None
    for part in ("cmdline", "environ"):
        with open(f"/proc/{proc.pid}/{part}", "rb") as f:
            data = f.read()
        assert host_server.api_key.encode() not in data
        assert lizard_local.api_key.encode() not in data  # this process's LIZARD_API_KEY
    assert (
        httpx.get(host_server.url + "/api/projects", headers={"X-API-Key": "wrong"}).status_code
        == 401
    )
