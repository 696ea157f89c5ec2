"""Exposed ports (``lizard_core.ports``) against lizard-local, which checks the token."""

from __future__ import annotations

import logging
import socket
import time

import httpx
import pytest

from lizard_core._redact import redact
from lizard_core.commands import run_command
from lizard_core.config import SandboxConfig
from lizard_core.ports import ExposedPort, aexpose_port, expose_port, unexpose_port
from lizard_core.session import Session
from lizard_local import LocalServer


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_server_in_the_sandbox_is_reached_with_the_token_which_is_never_logged(
    sandbox_config: SandboxConfig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = _free_port()
    with Session(sandbox_config) as session:
        run_command(session, "mkdir -p /tmp/www && echo hi > /tmp/www/index.html", shell=True)
        run_command(
            session,
            f"cd /tmp/www && python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &",
            shell=True,
        )
        exposed = expose_port(session, port)
        assert exposed.token not in repr(exposed)
        assert exposed.token not in redact(f"opening {exposed.url}")  # registered secret
        base = f"http://{exposed.hostname}/"
        deadline = time.monotonic() + 10
        while (res := httpx.get(base, headers=exposed.headers)).status_code == 502:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert res.status_code == 200
        assert res.text == "hi\n"
        assert httpx.get(base).status_code == 401
        unexpose_port(session, port)
        with pytest.raises(httpx.ConnectError):
            httpx.get(base, headers=exposed.headers)
    assert exposed.token not in caplog.text


async def test_async_expose(sandbox_config: SandboxConfig) -> None:
    async with Session(sandbox_config) as session:
        exposed = await aexpose_port(session, 8080)
        assert exposed.port == 8080
        assert exposed.token


@pytest.mark.parametrize(
    ("port", "error"), [(0, ValueError), (70000, ValueError), ("80", TypeError)]
)
def test_bad_ports_and_offline_sandboxes_raise_before_any_request(
    sandbox_config: SandboxConfig, lizard_counters: LocalServer, port: object, error: type
) -> None:
    lizard_counters.reset_counters()
    with pytest.raises(error):
        expose_port(Session(sandbox_config), port)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="internet"):
        expose_port(Session(sandbox_config.replace(internet_access=False)), 8080)
    assert lizard_counters.counters()["total"] == 0


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://p-8080.sbx.example/?lizard_token=t", ("p-8080.sbx.example", 443, True)),
        ("http://127.0.0.1:41234/?lizard_token=t", ("127.0.0.1", 41234, False)),
        ("http://h.example/", ("h.example", 80, False)),
    ],
)
def test_the_origin_of_an_exposed_port_is_its_urls(url: str, origin: tuple[str, int, bool]) -> None:
    assert ExposedPort(8080, "h", url=url, token="t").origin == origin


def test_an_exposed_port_url_without_a_host_has_no_origin() -> None:
    with pytest.raises(ValueError, match="no hostname"):
        _ = ExposedPort(8080, "h", url="/relative", token="t").origin
