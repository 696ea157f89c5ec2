"""LocalServer: a separate process, its addresses, TLS, and a clean stop."""

from __future__ import annotations

import os

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
